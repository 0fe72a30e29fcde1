// A table's configuration: the names of its enums, its checks, what its ids are (id space) and
// the tensors and bytes it has, all without a collection.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tbe/backend.h"
#include "tbe/rowmap.h"

EMBER__ENUM_NAMES(ember_pooling, ember_pooling, "sum", "mean", "none")
EMBER__ENUM_NAMES(ember_init_kind, ember_init_kind, "zeros", "uniform", "normal")
EMBER__ENUM_NAMES(ember_weight_decay_mode, ember_weight_decay_mode, "none", "l2", "decoupled")
EMBER__ENUM_NAMES(ember_evict_policy, ember_evict_policy, "lru", "lfu", "ttl")
EMBER__ENUM_NAMES(ember_id_space, ember_id_space, "rows", "hashed")
EMBER__ENUM_NAMES(ember_backend, ember_backend, "cpu", "cuda")

const ember__backend_ops *ember__backend(ember_backend kind) {
    if (kind == EMBER_BACKEND_CPU) return &ember__backend_cpu;
#ifdef EMBER_WITH_CUDA
    if (kind == EMBER_BACKEND_CUDA) return &ember__backend_cuda;
#endif
    return NULL;
}

int ember_backend_supported(ember_backend b, char *why, size_t why_len) {
    char tmp[8];
    if (!why || why_len == 0) {
        why = tmp;
        why_len = sizeof tmp;
    }
    why[0] = 0;
    if (b < 0 || b >= EMBER_BACKEND_COUNT) {
        snprintf(why, why_len, "unknown backend %d", (int)b);
        return 0;
    }
    if (!ember__backend(b)) {
        snprintf(why, why_len, "the %s backend is not in this build", ember_backend_name(b));
        return 0;
    }
#ifdef EMBER_WITH_CUDA
    if (b == EMBER_BACKEND_CUDA) return ember__cuda_usable(why, why_len);
#endif
    return 1;
}

ember_id_space ember_table_id_space(const ember_table_config *t) {
    const ember__rowmap_kind *k = t ? ember__rowmap_kind_of(t) : NULL;
    return k ? k->ids : EMBER_IDS_ROWS;
}

ember_status ember__ebc_check_config(ember_ctx *ctx, const char *fn, const ember_ebc_config *cfg) {
    EMBER_CHECK(ctx, cfg != NULL, EMBER_ERR_INVALID_ARG, "%s: config is NULL", fn);
    EMBER_CHECK(ctx, cfg->num_tables >= 1 && cfg->tables, EMBER_ERR_INVALID_ARG, "%s: %d tables", fn,
                (int)cfg->num_tables);
    EMBER_CHECK(ctx, cfg->num_features >= 1 && cfg->features, EMBER_ERR_INVALID_ARG, "%s: %d features", fn,
                (int)cfg->num_features);
    EMBER_CHECK(ctx, cfg->bounds >= 0 && cfg->bounds < EMBER_BOUNDS_COUNT, EMBER_ERR_INVALID_ARG,
                "%s: unknown bounds mode %d", fn, (int)cfg->bounds);
    EMBER_CHECK(ctx, cfg->max_batch_size >= 0 && cfg->max_nnz >= 0, EMBER_ERR_INVALID_ARG,
                "%s: negative workspace hint", fn);
    EMBER_CHECK(ctx, cfg->backend >= 0 && cfg->backend < EMBER_BACKEND_COUNT, EMBER_ERR_INVALID_ARG,
                "%s: unknown backend %d", fn, (int)cfg->backend);
    EMBER_CHECK(ctx, ember__backend(cfg->backend) != NULL, EMBER_ERR_UNSUPPORTED,
                "%s: the %s backend is not in this build", fn, ember_backend_name(cfg->backend));
    int n_none = 0;
    for (int32_t t = 0; t < cfg->num_tables; t++) {
        const ember_table_config *tc = &cfg->tables[t];
        const char *nm = tc->name ? tc->name : "(null)";
        EMBER_CHECK(ctx, tc->name && tc->name[0], EMBER_ERR_INVALID_ARG, "%s: table %d has no name", fn, (int)t);
        EMBER_CHECK(ctx, tc->rows >= 1, EMBER_ERR_INVALID_ARG, "%s: table '%s': rows %lld < 1", fn, nm,
                    (long long)tc->rows);
        EMBER_CHECK(ctx, tc->dim >= 1, EMBER_ERR_INVALID_ARG, "%s: table '%s': dim %d < 1", fn, nm, (int)tc->dim);
        EMBER_CHECK(ctx, tc->pooling >= 0 && tc->pooling < EMBER_POOL_COUNT, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': unknown pooling %d", fn, nm, (int)tc->pooling);
        EMBER_CHECK(ctx, ember_dtype_is_storage(tc->dtype), EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': dtype %s (%d) cannot store weights (fp32, fp16 or bf16)", fn, nm,
                    ember_dtype_name(tc->dtype), (int)tc->dtype);
        EMBER_CHECK(ctx, tc->init.kind >= 0 && tc->init.kind < EMBER_INIT_COUNT,
                    EMBER_ERR_INVALID_ARG, "%s: table '%s': unknown init %d", fn, nm, (int)tc->init.kind);
        EMBER_CHECK(ctx, tc->init.kind != EMBER_INIT_UNIFORM || (isfinite(tc->init.a) && isfinite(tc->init.b) &&
                                                                 tc->init.a <= tc->init.b),
                    EMBER_ERR_INVALID_ARG, "%s: table '%s': uniform bounds [%g, %g]", fn, nm, (double)tc->init.a,
                    (double)tc->init.b);
        EMBER_CHECK(ctx, tc->init.kind != EMBER_INIT_NORMAL || (isfinite(tc->init.std) && tc->init.std >= 0),
                    EMBER_ERR_INVALID_ARG, "%s: table '%s': normal std %g", fn, nm, (double)tc->init.std);
        EMBER_TRY(ember__optim_check(ctx, fn, nm, &tc->optim));
        EMBER_CHECK(ctx, tc->cache_rows >= 0, EMBER_ERR_INVALID_ARG, "%s: table '%s': cache_rows %lld < 0", fn, nm,
                    (long long)tc->cache_rows);
        EMBER_CHECK(ctx, tc->cache_policy == EMBER_EVICT_LRU || tc->cache_policy == EMBER_EVICT_LFU,
                    EMBER_ERR_INVALID_ARG, "%s: table '%s': cache policy %s (lru or lfu)", fn, nm,
                    ember_evict_policy_name(tc->cache_policy));
        EMBER_CHECK(ctx, !tc->hash.enabled || tc->cache_rows == 0, EMBER_ERR_UNSUPPORTED,
                    "%s: table '%s': a hashed table cannot also be tiered (cache_rows %lld)", fn, nm,
                    (long long)tc->cache_rows);
        EMBER_CHECK(ctx, cfg->backend == EMBER_BACKEND_CPU || !(tc->hash.enabled || tc->cache_rows > 0),
                    EMBER_ERR_UNSUPPORTED, "%s: table '%s': %s tables live on the cpu backend only (backend %s)", fn,
                    nm, tc->hash.enabled ? "hashed" : "tiered", ember_backend_name(cfg->backend));
        EMBER_CHECK(ctx, !(tc->hash.enabled || tc->cache_rows > 0) || !tc->stochastic_rounding, EMBER_ERR_UNSUPPORTED,
                    "%s: table '%s': stochastic rounding is not available on %s tables", fn, nm,
                    tc->hash.enabled ? "hashed" : "tiered");
        if (tc->hash.enabled) {
            // A bucket of one row cannot hold two ids: every collision would evict (and the
            // routing splits tables by whole buckets of at least two rows).
            EMBER_CHECK(ctx, tc->hash.bucket_rows == 0 || tc->hash.bucket_rows >= 2, EMBER_ERR_INVALID_ARG,
                        "%s: table '%s': hash bucket_rows %d (0 for %d, or at least 2)", fn, nm,
                        (int)tc->hash.bucket_rows, EMBER_HASH_BUCKET_ROWS);
            const int64_t br = ember__hash_bucket_rows(&tc->hash);
            EMBER_CHECK(ctx, tc->rows % br == 0, EMBER_ERR_INVALID_ARG,
                        "%s: table '%s': bucket_rows %d does not divide rows %lld", fn, nm, (int)br,
                        (long long)tc->rows);
            EMBER_CHECK(ctx, tc->hash.policy >= 0 && tc->hash.policy < EMBER_EVICT_COUNT, EMBER_ERR_INVALID_ARG,
                        "%s: table '%s': unknown eviction policy %d", fn, nm, (int)tc->hash.policy);
            EMBER_CHECK(ctx, tc->hash.policy != EMBER_EVICT_TTL || tc->hash.ttl_steps >= 1, EMBER_ERR_INVALID_ARG,
                        "%s: table '%s': ttl_steps %lld < 1", fn, nm, (long long)tc->hash.ttl_steps);
        }
        for (int32_t u = 0; u < t; u++) {
            EMBER_CHECK(ctx, strcmp(cfg->tables[u].name, tc->name) != 0, EMBER_ERR_INVALID_ARG,
                        "%s: table name '%s' used twice", fn, nm);
        }
        if (tc->pooling == EMBER_POOL_NONE) n_none++;
    }
    EMBER_CHECK(ctx, n_none == 0 || n_none == cfg->num_tables, EMBER_ERR_INVALID_ARG,
                "%s: %d of %d tables have pooling NONE: a collection is all-NONE or has none", fn, n_none,
                (int)cfg->num_tables);
    for (int32_t f = 0; f < cfg->num_features; f++) {
        const ember_feature_config *fc = &cfg->features[f];
        EMBER_CHECK(ctx, fc->name && fc->name[0], EMBER_ERR_INVALID_ARG, "%s: feature %d has no name", fn, (int)f);
        EMBER_CHECK(ctx, fc->table >= 0 && fc->table < cfg->num_tables, EMBER_ERR_INVALID_ARG,
                    "%s: feature '%s' reads table %d, outside [0, %d)", fn, fc->name, (int)fc->table,
                    (int)cfg->num_tables);
        if (n_none) {
            EMBER_CHECK(ctx, cfg->tables[fc->table].dim == cfg->tables[cfg->features[0].table].dim,
                        EMBER_ERR_INVALID_ARG, "%s: pooling NONE needs one dim: feature '%s' has %d, feature '%s' %d",
                        fn, fc->name, (int)cfg->tables[fc->table].dim, cfg->features[0].name,
                        (int)cfg->tables[cfg->features[0].table].dim);
        }
    }
    return EMBER_OK;
}


int32_t ember_table_tensors(const ember_table_config *t, ember_tensor_info out[EMBER_MAX_TENSORS]) {
    const ember__optim_desc *d = t ? ember__optim(t->optim.kind) : NULL;
    if (!d || !out) return 0;
    out[0] = (ember_tensor_info){"weight", t->rows, t->dim, t->dtype};
    for (int32_t i = 0; i < d->info.num_states; i++)
        out[1 + i] = (ember_tensor_info){d->info.state_names[i], t->rows, d->info.state_per_row[i] ? 1 : t->dim,
                                         EMBER_DTYPE_F32};
    const int32_t n = 1 + d->info.num_states;
    const ember__rowmap_kind *k = ember__rowmap_kind_of(t); // and the tensors its row map adds
    return n + (k && k->tensors ? k->tensors(t, out + n) : 0);
}

void ember_table_config_bytes(const ember_table_config *t, size_t *weight_bytes, size_t *state_bytes) {
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int32_t n = ember_table_tensors(t, ti);
    // In memory: a tiered table's cache, not its rows.
    const int64_t rows = t && t->cache_rows > 0 && t->cache_rows < t->rows ? t->cache_rows : t ? t->rows : 0;
    size_t wb = 0, sb = 0;
    for (int32_t i = 0; i < n; i++) {
        const size_t bytes = (size_t)rows * (size_t)ti[i].cols * ember_dtype_size(ti[i].dtype);
        if (i == 0) wb = bytes;
        else sb += bytes;
    }
    if (weight_bytes) *weight_bytes = wb;
    if (state_bytes) *state_bytes = sb;
}

