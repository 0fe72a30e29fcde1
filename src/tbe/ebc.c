// EmbeddingBagCollection lifecycle, configuration checks, initialisation and the local state dict.
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "tbe/backend.h"
#include "tbe/rowmap.h"


void ember_ebc_destroy(ember_ebc *ebc) {
    if (!ebc) return;
    ember_ctx *ctx = ebc->ctx;
    if (ebc->tables)
        for (int32_t t = 0; t < ebc->T; t++) {
            if (ebc->tables[t].map) ebc->tables[t].map->ops->destroy(ctx, ebc->tables[t].map);
            if (ebc->tables[t].label != ebc->tables[t].name) ember__free(ctx, ebc->tables[t].label);
            ember__free(ctx, ebc->tables[t].name);
            ember__free(ctx, ebc->tables[t].dirty);
        }
    if (ebc->feature_names)
        for (int32_t f = 0; f < ebc->F; f++) ember__free(ctx, ebc->feature_names[f]);
    for (int i = 0; i < EMBER__WS_SLOTS; i++) ember__buf_free(ctx, &ebc->ws[i]);
    ember__buf_free(ctx, &ebc->vbe_len);
    ember__buf_free(ctx, &ebc->vbe_io);
    if (ebc->be) ebc->be->free(ebc);
    ember__free(ctx, ebc->tables);
    ember__free(ctx, ebc->feature_table);
    ember__free(ctx, ebc->feature_names);
    ember__free(ctx, ebc->feature_col);
    ember__free(ctx, ebc->feature_rows);
    ember__free(ctx, ebc);
}

ember_status ember__ebc_create_ex(ember_ctx *ctx, const ember_ebc_config *cfg, const ember__origin *origins,
                                  ember_ebc **out) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, out != NULL, EMBER_ERR_INVALID_ARG, "ember_ebc_create: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__ebc_check_config(ctx, "ember_ebc_create", cfg));
    ember_ebc *ebc = ember__xalloc(ctx, sizeof *ebc, "collection");
    if (!ebc) return EMBER_ERR_NOMEM;
    memset(ebc, 0, sizeof *ebc);
    ebc->ctx = ctx;
    ebc->backend = cfg->backend;
    ebc->T = cfg->num_tables;
    ebc->F = cfg->num_features;
    ebc->bounds = cfg->bounds;
    ebc->kbounds = cfg->bounds;
    ebc->training = true;
    ebc->seed = cfg->seed;
    ebc->sequence = cfg->tables[0].pooling == EMBER_POOL_NONE;
    ebc->tables = ember__calloc(ctx, sizeof(ember__table) * (size_t)ebc->T);
    ebc->feature_table = ember__calloc(ctx, sizeof(int32_t) * (size_t)ebc->F);
    ebc->feature_names = ember__calloc(ctx, sizeof(char *) * (size_t)ebc->F);
    ebc->feature_col = ember__calloc(ctx, sizeof(int32_t) * (size_t)ebc->F);
    ebc->feature_rows = ember__calloc(ctx, sizeof(int64_t) * (size_t)ebc->F);
    if (!ebc->tables || !ebc->feature_table || !ebc->feature_names || !ebc->feature_col || !ebc->feature_rows)
        goto nomem;
    int64_t key = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        tb->cfg = cfg->tables[t];
        tb->name = ember__strdup(ctx, cfg->tables[t].name);
        if (!tb->name) goto nomem;
        tb->cfg.name = tb->name;
        tb->label = tb->name;
        if (!(tb->dirty = ember__calloc(ctx, sizeof(uint64_t) * (size_t)((tb->cfg.rows + 63) / 64)))) goto nomem;
        tb->name_hash = ember_hash_str(tb->name);
        if (origins) {
            tb->origin = origins[t];
            if (tb->origin.global_name) {
                tb->name_hash = ember_hash_str(tb->origin.global_name);
                if (!(tb->label = ember__strdup(ctx, tb->origin.global_name))) goto nomem;
            }
            tb->origin.global_name = NULL; // borrowed: only needed here
        } else {
            tb->origin.global_rows = tb->cfg.rows;
            tb->origin.global_dim = tb->cfg.dim;
        }
        tb->slab_rows = tb->cfg.cache_rows > 0 && tb->cfg.cache_rows < tb->cfg.rows ? tb->cfg.cache_rows : tb->cfg.rows;
        tb->kind = ember__rowmap_kind_of(&tb->cfg);
        tb->ids = tb->kind ? tb->kind->ids : EMBER_IDS_ROWS;
        if (tb->kind) {
            ebc->mapped = true;
            ebc->kbounds = EMBER_BOUNDS_SKIP; // translated ids: rows or -1 (rowmap.h)
        }
        tb->key_base = key;
        key += tb->cfg.rows;
        tb->optim = ember__optim(tb->cfg.optim.kind);
        const ember_optim_info *oi = &tb->optim->info;
        tb->m1_cols = oi->num_states > 0 ? (oi->state_per_row[0] ? 1 : tb->cfg.dim) : 0;
        tb->m2_cols = oi->num_states > 1 ? (oi->state_per_row[1] ? 1 : tb->cfg.dim) : 0;
        tb->row_bytes = (size_t)tb->cfg.dim * ember_dtype_size(tb->cfg.dtype);
        if (tb->cfg.dim > ebc->max_dim) ebc->max_dim = tb->cfg.dim;
    }
    ebc->total_keys = key;
    int32_t col = 0;
    for (int32_t f = 0; f < ebc->F; f++) {
        const ember_feature_config *fc = &cfg->features[f];
        ebc->feature_table[f] = fc->table;
        ebc->feature_names[f] = ember__strdup(ctx, fc->name);
        if (!ebc->feature_names[f]) goto nomem;
        ebc->feature_rows[f] = ember__id_limit(ebc->tables[fc->table].ids, cfg->tables[fc->table].rows);
        ebc->feature_col[f] = ebc->sequence ? 0 : col;
        col += cfg->tables[fc->table].dim;
    }
    ebc->out_dim = ebc->sequence ? cfg->tables[cfg->features[0].table].dim : col;
    // The storage, then every row's initial values, through the backend.
    ebc->be = ember__backend(cfg->backend);
    EMBER_ASSERT(ebc->be != NULL); // ember__ebc_check_config refuses a backend this build lacks
    ember_status st = ebc->be->alloc(ebc); // NOMEM, or a backend's own (no GPU, a device error)
    for (int32_t t = 0; t < ebc->T && st == EMBER_OK; t++) st = ebc->be->init(ebc, &ebc->tables[t]);
    if (st != EMBER_OK) {
        ember_ebc_destroy(ebc);
        return st;
    }
    // Row maps, once the storage holds the initial values.
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        st = tb->kind ? tb->kind->create(ebc, tb, cfg, &tb->map) : EMBER_OK;
        if (st != EMBER_OK) {
            ember_ebc_destroy(ebc);
            return st;
        }
    }
    // Workspace from the hints.
    if (cfg->max_batch_size > 0 || cfg->max_nnz > 0) {
        int64_t nb = (int64_t)ebc->F * cfg->max_batch_size + 1;
        if (!ember__ws_get(ebc, 0, sizeof(int64_t) * (size_t)nb)) goto fail;
    }
    *out = ebc;
    return EMBER_OK;
nomem:
    ember__error(ctx, EMBER_ERR_NOMEM, "ember_ebc_create: out of memory");
fail:
    ember_ebc_destroy(ebc);
    return EMBER_ERR_NOMEM;
}

ember_status ember_ebc_create(ember_ctx *ctx, const ember_ebc_config *cfg, ember_ebc **out) {
    return ember__ebc_create_ex(ctx, cfg, NULL, out);
}

int32_t ember_ebc_num_tables(const ember_ebc *ebc) { return ebc ? ebc->T : 0; }
int32_t ember_ebc_num_features(const ember_ebc *ebc) { return ebc ? ebc->F : 0; }
int32_t ember_ebc_output_dim(const ember_ebc *ebc) { return ebc ? ebc->out_dim : 0; }

int64_t ember_ebc_output_size(const ember_ebc *ebc, const ember_kjt *kjt) {
    if (!ebc || !kjt) return 0;
    if (ember__kjt_is_vbe(kjt) && !ebc->sequence) return ember__vbe_output_size(kjt, ebc->feature_col, ebc->out_dim);
    return ebc->sequence ? kjt->nnz * ebc->out_dim : (int64_t)kjt->batch_size * ebc->out_dim;
}

const ember_table_config *ember_ebc_table(const ember_ebc *ebc, int32_t t) {
    if (!ebc || t < 0 || t >= ebc->T) return NULL;
    return &ebc->tables[t].cfg;
}

int32_t ember_ebc_table_index(const ember_ebc *ebc, const char *name) {
    if (!ebc || !name) return -1;
    for (int32_t t = 0; t < ebc->T; t++)
        if (strcmp(ebc->tables[t].name, name) == 0) return t;
    return -1;
}

static ember_status check_table(const ember_ebc *ebc, const char *fn, int32_t t) {
    EMBER_CHECK(ebc->ctx, t >= 0 && t < ebc->T, EMBER_ERR_INVALID_ARG, "%s: table %d outside [0, %d)", fn, (int)t,
                (int)ebc->T);
    return EMBER_OK;
}

ember_status ember_ebc_set_lr(ember_ebc *ebc, int32_t table, float lr) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ebc->ctx, isfinite(lr) && lr >= 0, EMBER_ERR_INVALID_ARG, "ember_ebc_set_lr: learning rate %g",
                (double)lr);
    if (table == -1) {
        for (int32_t t = 0; t < ebc->T; t++) ebc->tables[t].cfg.optim.lr = lr;
        return EMBER_OK;
    }
    EMBER_TRY(check_table(ebc, "ember_ebc_set_lr", table));
    ebc->tables[table].cfg.optim.lr = lr;
    return EMBER_OK;
}

int64_t ember_ebc_step(const ember_ebc *ebc, int32_t table) {
    if (!ebc || table < 0 || table >= ebc->T) return -1;
    return ebc->tables[table].step;
}

ember_status ember_ebc_set_step(ember_ebc *ebc, int32_t table, int64_t step) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_table(ebc, "ember_ebc_set_step", table));
    EMBER_CHECK(ebc->ctx, step >= 0, EMBER_ERR_INVALID_ARG, "ember_ebc_set_step: table '%s': negative step %lld",
                ebc->tables[table].name, (long long)step);
    ebc->tables[table].step = step;
    return EMBER_OK;
}

int32_t ember_ebc_num_tensors(const ember_ebc *ebc, int32_t table) {
    if (!ebc || table < 0 || table >= ebc->T) return 0;
    const ember__table *tb = &ebc->tables[table];
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    return ember_table_tensors(&tb->cfg, ti);
}

ember_status ember_ebc_tensor_info(const ember_ebc *ebc, int32_t table, int32_t tensor, ember_tensor_info *info) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_table(ebc, "ember_ebc_tensor_info", table));
    const ember__table *tb = &ebc->tables[table];
    EMBER_CHECK(ebc->ctx, info && tensor >= 0 && tensor < ember_ebc_num_tensors(ebc, table), EMBER_ERR_INVALID_ARG,
                "ember_ebc_tensor_info: table '%s' has no tensor %d", tb->name, (int)tensor);
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    ember_table_tensors(&tb->cfg, ti);
    *info = ti[tensor];
    return EMBER_OK;
}

// Resolves a tensor name to its index in ember_table_tensors' list (0 weight, then the
// optimizer's states, then the row map's tensors) and its info.
static ember_status find_tensor(const ember_ebc *ebc, const char *fn, int32_t table, const char *tensor,
                                int64_t row_begin, int64_t row_end, int *which, ember_tensor_info *info) {
    EMBER_TRY(check_table(ebc, fn, table));
    const ember__table *tb = &ebc->tables[table];
    EMBER_CHECK(ebc->ctx, tensor != NULL, EMBER_ERR_INVALID_ARG, "%s: tensor name is NULL", fn);
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int32_t n = ember_table_tensors(&tb->cfg, ti);
    *which = -1;
    for (int32_t i = 0; i < n && *which < 0; i++)
        if (strcmp(tensor, ti[i].name) == 0) *which = i;
    EMBER_CHECK(ebc->ctx, *which >= 0, EMBER_ERR_INVALID_ARG, "%s: table '%s' has no tensor '%s'", fn, tb->name,
                tensor);
    EMBER_CHECK(ebc->ctx, row_begin >= 0 && row_begin <= row_end && row_end <= tb->cfg.rows, EMBER_ERR_INVALID_ARG,
                "%s: table '%s': rows [%lld, %lld) outside [0, %lld)", fn, tb->name, (long long)row_begin,
                (long long)row_end, (long long)tb->cfg.rows);
    *info = ti[*which];
    return EMBER_OK;
}

// Whether tensor `which` of table tb can be moved in `dtype`: its own dtype, or fp32 for weights.
static int tensor_dtype_ok(int which, const ember_tensor_info *info, ember_dtype dtype) {
    return dtype == info->dtype || (which == 0 && dtype == EMBER_DTYPE_F32);
}

ember_status ember_ebc_read(const ember_ebc *ebc, int32_t table, const char *tensor, int64_t row_begin,
                            int64_t row_end, ember_dtype dtype, void *dst) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_ebc_read";
    int which;
    ember_tensor_info info;
    EMBER_TRY(find_tensor(ebc, fn, table, tensor, row_begin, row_end, &which, &info));
    const ember__table *tb = &ebc->tables[table];
    const int32_t nstates = 1 + tb->optim->info.num_states;
    EMBER_CHECK(ebc->ctx, dst != NULL || row_end == row_begin, EMBER_ERR_INVALID_ARG, "%s: dst is NULL", fn);
    EMBER_CHECK(ebc->ctx, tensor_dtype_ok(which, &info, dtype), EMBER_ERR_INVALID_ARG,
                "%s: table '%s' tensor '%s' cannot be read as %s", fn, tb->name, tensor, ember_dtype_name(dtype));
    if (which >= nstates) return tb->map->ops->read_extra(ebc, tb, which - nstates, row_begin, row_end, dst);
    if (tb->map && tb->map->ops->read) return tb->map->ops->read(ebc, tb, which, row_begin, row_end, dtype, dst);
    if (row_end == row_begin) return EMBER_OK;
    return ebc->be->read_rows(ebc, tb, which, row_begin, row_end - row_begin, dtype, dst);
}

static ember_status write_tensor(ember_ebc *ebc, int32_t table, const char *tensor, int64_t row_begin, int64_t row_end,
                                 ember_dtype dtype, const void *src, int finite_only) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_ebc_write";
    int which;
    ember_tensor_info info;
    EMBER_TRY(find_tensor(ebc, fn, table, tensor, row_begin, row_end, &which, &info));
    ember__table *tb = &ebc->tables[table];
    const int32_t nstates = 1 + tb->optim->info.num_states;
    EMBER_CHECK(ebc->ctx, src != NULL || row_end == row_begin, EMBER_ERR_INVALID_ARG, "%s: src is NULL", fn);
    EMBER_CHECK(ebc->ctx, tensor_dtype_ok(which, &info, dtype), EMBER_ERR_INVALID_ARG,
                "%s: table '%s' tensor '%s' cannot be written from %s", fn, tb->name, tensor, ember_dtype_name(dtype));
    if (which >= nstates) {
        EMBER_TRY(tb->map->ops->write_extra(ebc, tb, which - nstates, row_begin, row_end, src));
        ember__dirty_mark_range(tb, row_begin, row_end);
        return EMBER_OK;
    }
    float v = 0;
    const int64_t bad = finite_only ? ember__first_nonfinite(dtype, src, (row_end - row_begin) * info.cols, &v) : -1;
    EMBER_CHECK(ebc->ctx, bad < 0, EMBER_ERR_NUMERIC, "%s: table '%s' tensor '%s' row %lld column %d: %g", fn, tb->name,
                tensor, (long long)(row_begin + bad / info.cols), (int)(bad % info.cols), (double)v);
    if (tb->map && tb->map->ops->write) EMBER_TRY(tb->map->ops->write(ebc, tb, which, row_begin, row_end, dtype, src));
    else if (row_end > row_begin) EMBER_TRY(ebc->be->write_rows(ebc, tb, which, row_begin, row_end - row_begin, dtype, src));
    ember__dirty_mark_range(tb, row_begin, row_end);
    return EMBER_OK;
}

ember_status ember_ebc_write(ember_ebc *ebc, int32_t table, const char *tensor, int64_t row_begin, int64_t row_end,
                             ember_dtype dtype, const void *src) {
    return write_tensor(ebc, table, tensor, row_begin, row_end, dtype, src, 1);
}

ember_status ember__ebc_write_bits(ember_ebc *ebc, int32_t table, const char *tensor, int64_t row_begin, int64_t row_end,
                                   ember_dtype dtype, const void *src) {
    return write_tensor(ebc, table, tensor, row_begin, row_end, dtype, src, 0);
}

ember_status ember__ebc_convert_prepare(ember_ebc *ebc, ember__dtype_change *c) {
    c->prepared = NULL;
    for (int32_t t = 0; t < ebc->T; t++) {
        const ember__table *tb = &ebc->tables[t];
        EMBER_CHECK(ebc->ctx, ember__dtype_change_new(ebc, c, t) == tb->cfg.dtype || tb->slab_rows == tb->cfg.rows,
                    EMBER_ERR_UNSUPPORTED, "table '%s': a tiered table's dtype cannot be converted", tb->name);
    }
    return ebc->be->convert_prepare(ebc, c);
}

void ember__ebc_convert_commit(ember_ebc *ebc, ember__dtype_change *c) {
    for (int32_t t = 0; t < ebc->T; t++) // every stored bit of a converted table changes
        if (ember__dtype_change_new(ebc, c, t) != ebc->tables[t].cfg.dtype)
            ember__dirty_mark_range(&ebc->tables[t], 0, ebc->tables[t].cfg.rows);
    ebc->be->convert_commit(ebc, c);
}
void ember__ebc_convert_abort(ember_ebc *ebc, ember__dtype_change *c) { ebc->be->convert_abort(ebc, c); }

ember_status ember_ebc_convert_dtype(ember_ebc *ebc, int32_t table, ember_dtype dtype) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_ebc_convert_dtype";
    EMBER_TRY(check_table(ebc, fn, table));
    EMBER_CHECK(ebc->ctx, ember_dtype_is_storage(dtype), EMBER_ERR_INVALID_ARG,
                "%s: dtype %s (%d) cannot store weights", fn, ember_dtype_name(dtype), (int)dtype);
    ember__dtype_change c = {.table = table, .dtype = dtype};
    EMBER_TRY(ember__ebc_convert_prepare(ebc, &c));
    ember__ebc_convert_commit(ebc, &c);
    return EMBER_OK;
}

ember_status ember_ebc_weights_view(const ember_ebc *ebc, int32_t table, const void **data, size_t *row_stride) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_table(ebc, "ember_ebc_weights_view", table));
    EMBER_CHECK(ebc->ctx, data && row_stride, EMBER_ERR_INVALID_ARG, "ember_ebc_weights_view: NULL output");
    const ember__table *tb = &ebc->tables[table];
    EMBER_CHECK(ebc->ctx, !tb->map || !tb->map->ops->read, EMBER_ERR_UNSUPPORTED,
                "ember_ebc_weights_view: table '%s' is tiered: its rows are not in memory", tb->name);
    const void *rows = ebc->be->host_rows(ebc, tb);
    EMBER_CHECK(ebc->ctx, rows != NULL, EMBER_ERR_UNSUPPORTED,
                "ember_ebc_weights_view: table '%s': the %s backend's rows are not in host memory", tb->name,
                ember_backend_name(ebc->backend));
    *data = rows;
    *row_stride = tb->row_bytes;
    return EMBER_OK;
}

ember_status ember_ebc_table_bytes(const ember_ebc *ebc, int32_t table, size_t *weight_bytes, size_t *state_bytes) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_table(ebc, "ember_ebc_table_bytes", table));
    ember_table_config_bytes(&ebc->tables[table].cfg, weight_bytes, state_bytes);
    return EMBER_OK;
}
