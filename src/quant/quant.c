// The quantized inference collection (include/ember/quant.h): row formats and FBGEMM's
// quantization rule, the collection's rows and remaps, and the forward's checks, id resolution
// and threads. The pooling arithmetic is the context's kernel variant (src/quant/isa/).
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "ember/rng.h"
#include "kjt/internal.h"
#include "quant/internal.h"

EMBER__ENUM_NAMES(ember_qtype, ember_qtype, "fp32", "fp16", "int8", "int4", "int2")
EMBER__ENUM_NAMES(ember_qremap_kind, ember_qremap_kind, "none", "array", "hash")

// ---- rows ------------------------------------------------------------------------------------

// Elements per byte of the packed types (1 otherwise).
static int per_byte(ember_qtype t) { return t == EMBER_QTYPE_INT4 ? 2 : t == EMBER_QTYPE_INT2 ? 4 : 1; }

size_t ember_qtype_row_bytes(ember_qtype t, int32_t dim) {
    if (dim < 1) return 0;
    const size_t D = (size_t)dim;
    switch (t) {
    case EMBER_QTYPE_FP32: return 4 * D;
    case EMBER_QTYPE_FP16: return 2 * D;
    case EMBER_QTYPE_INT8: return D + 8;
    case EMBER_QTYPE_INT4:
    case EMBER_QTYPE_INT2: return (D + (size_t)per_byte(t) - 1) / (size_t)per_byte(t) + 4;
    }
    return 0;
}

static int known_qtype(ember_qtype t) { return (unsigned)t < EMBER_QTYPE_COUNT; }

// q = clamp(lrintf(x), 0, qmax), the default rounding mode being to nearest even.
static unsigned quant_level(float x, int qmax) {
    const long q = lrintf(x);
    return (unsigned)(q < 0 ? 0 : q > qmax ? qmax : q);
}

void ember__quantize_row(ember_qtype t, int32_t D, const float *x, unsigned char *dst) {
    if (t == EMBER_QTYPE_FP32) {
        memcpy(dst, x, 4 * (size_t)D);
        return;
    }
    if (t == EMBER_QTYPE_FP16) {
        for (int32_t d = 0; d < D; d++) {
            const uint16_t h = ember__f32_to_f16(x[d]);
            memcpy(dst + 2 * (size_t)d, &h, 2);
        }
        return;
    }
    float lo = x[0], hi = x[0];
    for (int32_t d = 1; d < D; d++) {
        lo = x[d] < lo ? x[d] : lo;
        hi = x[d] > hi ? x[d] : hi;
    }
    if (t == EMBER_QTYPE_INT8) {
        const float range = hi - lo, scale = range / 255.0f, inv = 255.0f / (range + 1e-8f);
        for (int32_t d = 0; d < D; d++) dst[d] = (unsigned char)quant_level((x[d] - lo) * inv, 255);
        memcpy(dst + D, &scale, 4);
        memcpy(dst + D + 4, &lo, 4);
        return;
    }
    const int bits = t == EMBER_QTYPE_INT4 ? 4 : 2, per = per_byte(t), qmax = (1 << bits) - 1;
    const uint16_t bias16 = ember__f32_to_f16(lo);
    lo = ember__f16_to_f32(bias16);
    const float range = hi - lo;
    float scale = ember__f16_to_f32(ember__f32_to_f16(range == 0.0f ? 1.0f : range / (float)qmax));
    if (scale == 0.0f) scale = 1.0f;
    float inv = 1.0f / scale;
    if (isinf(inv)) scale = 1.0f, inv = 1.0f;
    const size_t nb = ((size_t)D + (size_t)per - 1) / (size_t)per;
    memset(dst, 0, nb);
    for (int32_t d = 0; d < D; d++)
        dst[d / per] |= (unsigned char)(quant_level((x[d] - lo) * inv, qmax) << (bits * (d % per)));
    const uint16_t scale16 = ember__f32_to_f16(scale);
    memcpy(dst + nb, &scale16, 2);
    memcpy(dst + nb + 2, &bias16, 2);
}

void ember__dequantize_row(ember_qtype t, int32_t D, const unsigned char *row, float *x) {
    float scale = 0.0f, bias = 0.0f;
    const int per = per_byte(t), bits = 8 / per;
    const size_t nb = ((size_t)D + (size_t)per - 1) / (size_t)per;
    if (t == EMBER_QTYPE_INT8) {
        memcpy(&scale, row + D, 4);
        memcpy(&bias, row + D + 4, 4);
    } else if (t != EMBER_QTYPE_FP32 && t != EMBER_QTYPE_FP16) {
        uint16_t s, b;
        memcpy(&s, row + nb, 2);
        memcpy(&b, row + nb + 2, 2);
        scale = ember__f16_to_f32(s);
        bias = ember__f16_to_f32(b);
    }
    for (int32_t d = 0; d < D; d++) {
        switch (t) {
        case EMBER_QTYPE_FP32: memcpy(&x[d], row + 4 * (size_t)d, 4); break;
        case EMBER_QTYPE_FP16: {
            uint16_t h;
            memcpy(&h, row + 2 * (size_t)d, 2);
            x[d] = ember__f16_to_f32(h);
            break;
        }
        default: {
            const unsigned q = (row[d / per] >> (bits * (d % per))) & ((1u << bits) - 1u);
            x[d] = fmaf(scale, (float)q, bias);
        }
        }
    }
}

static ember_status check_rows_args(ember_ctx *ctx, const char *fn, ember_qtype t, int32_t dim, int64_t n,
                                    const void *src, const void *dst) {
    EMBER_CHECK(ctx, known_qtype(t), EMBER_ERR_INVALID_ARG, "%s: unknown quantized type %d", fn, (int)t);
    EMBER_CHECK(ctx, dim >= 1, EMBER_ERR_INVALID_ARG, "%s: dim is %d: must be >= 1", fn, (int)dim);
    EMBER_CHECK(ctx, n >= 0, EMBER_ERR_INVALID_ARG, "%s: n is %lld: must be >= 0", fn, (long long)n);
    EMBER_CHECK(ctx, n == 0 || (src && dst), EMBER_ERR_INVALID_ARG, "%s: %s is NULL", fn, src ? "dst" : "src");
    return EMBER_OK;
}

// The first NaN or infinity of n rows of dim floats, named; EMBER_OK when there is none.
static ember_status check_finite(ember_ctx *ctx, const char *fn, const char *what, int64_t first_row, int32_t dim,
                                 int64_t n, const float *src) {
    for (int64_t r = 0; r < n; r++)
        for (int32_t d = 0; d < dim; d++) {
            const float v = src[r * dim + d];
            EMBER_CHECK(ctx, isfinite(v), EMBER_ERR_NUMERIC, "%s: %s row %lld column %d is %g: cannot quantize it", fn,
                        what, (long long)(first_row + r), (int)d, (double)v);
        }
    return EMBER_OK;
}

ember_status ember_quantize_rows(ember_ctx *ctx, ember_qtype t, int32_t dim, int64_t n, const float *src, void *dst) {
    static const char fn[] = "ember_quantize_rows";
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_rows_args(ctx, fn, t, dim, n, src, dst));
    EMBER_TRY(check_finite(ctx, fn, "src", 0, dim, n, src));
    const size_t rb = ember_qtype_row_bytes(t, dim);
    for (int64_t r = 0; r < n; r++) ember__quantize_row(t, dim, src + r * dim, (unsigned char *)dst + (size_t)r * rb);
    return EMBER_OK;
}

ember_status ember_dequantize_rows(ember_ctx *ctx, ember_qtype t, int32_t dim, int64_t n, const void *src,
                                   float *dst) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_rows_args(ctx, "ember_dequantize_rows", t, dim, n, src, dst));
    const size_t rb = ember_qtype_row_bytes(t, dim);
    for (int64_t r = 0; r < n; r++) ember__dequantize_row(t, dim, (const unsigned char *)src + (size_t)r * rb, dst + r * dim);
    return EMBER_OK;
}

// ---- the collection --------------------------------------------------------------------------

static void remap_free(ember_ctx *ctx, ember__qremap *m) {
    ember__free(ctx, m->row_of);
    ember__free(ctx, m->slot_id);
    ember__free(ctx, m->slot_row);
    memset(m, 0, sizeof *m);
}

void ember_qebc_destroy(ember_qebc *q) {
    if (!q) return;
    ember_ctx *ctx = q->ctx;
    for (int32_t t = 0; q->tables && t < q->T; t++) {
        ember__free(ctx, (void *)q->tables[t].cfg.name);
        ember__free_slab(ctx, q->tables[t].rows);
        remap_free(ctx, &q->tables[t].map);
    }
    for (int32_t f = 0; q->feature_names && f < q->F; f++) ember__free(ctx, q->feature_names[f]);
    ember__free(ctx, q->feature_names);
    ember__free(ctx, q->feature_table);
    ember__free(ctx, q->out_off);
    ember__free(ctx, q->tables);
    ember__free(ctx, q);
}

static ember_status check_config(ember_ctx *ctx, const ember_qebc_config *cfg) {
    static const char fn[] = "ember_qebc_create";
    EMBER_CHECK(ctx, cfg != NULL, EMBER_ERR_INVALID_ARG, "%s: cfg is NULL", fn);
    EMBER_CHECK(ctx, cfg->num_tables >= 1 && cfg->tables, EMBER_ERR_INVALID_ARG, "%s: %d tables: need at least one",
                fn, (int)cfg->num_tables);
    EMBER_CHECK(ctx, cfg->num_features >= 1 && cfg->features, EMBER_ERR_INVALID_ARG,
                "%s: %d features: need at least one", fn, (int)cfg->num_features);
    EMBER_CHECK(ctx, (unsigned)cfg->bounds < EMBER_BOUNDS_COUNT, EMBER_ERR_INVALID_ARG, "%s: unknown bounds mode %d",
                fn, (int)cfg->bounds);
    EMBER_CHECK(ctx, cfg->output_dtype == EMBER_DTYPE_F32 || cfg->output_dtype == EMBER_DTYPE_F16,
                EMBER_ERR_INVALID_ARG, "%s: output dtype %s: must be fp32 or fp16", fn,
                ember_dtype_name(cfg->output_dtype));
    for (int32_t t = 0; t < cfg->num_tables; t++) {
        const ember_qtable_config *c = &cfg->tables[t];
        EMBER_CHECK(ctx, c->name && c->name[0], EMBER_ERR_INVALID_ARG, "%s: table %d has no name", fn, (int)t);
        EMBER_CHECK(ctx, c->rows >= 1, EMBER_ERR_INVALID_ARG, "%s: table '%s': rows is %lld: must be >= 1", fn,
                    c->name, (long long)c->rows);
        EMBER_CHECK(ctx, c->dim >= 1, EMBER_ERR_INVALID_ARG, "%s: table '%s': dim is %d: must be >= 1", fn, c->name,
                    (int)c->dim);
        EMBER_CHECK(ctx, known_qtype(c->qtype), EMBER_ERR_INVALID_ARG, "%s: table '%s': unknown quantized type %d", fn,
                    c->name, (int)c->qtype);
        EMBER_CHECK(ctx, c->pooling == EMBER_POOL_SUM || c->pooling == EMBER_POOL_MEAN, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': pooling %s: must be sum or mean", fn, c->name, ember_pooling_name(c->pooling));
        EMBER_CHECK(ctx, c->num_embeddings >= 0, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': num_embeddings is %lld: must be >= 0", fn, c->name, (long long)c->num_embeddings);
        for (int32_t u = 0; u < t; u++)
            EMBER_CHECK(ctx, strcmp(cfg->tables[u].name, c->name) != 0, EMBER_ERR_INVALID_ARG,
                        "%s: tables %d and %d are both named '%s'", fn, (int)u, (int)t, c->name);
    }
    int64_t out_dim = 0;
    for (int32_t f = 0; f < cfg->num_features; f++) {
        const ember_feature_config *c = &cfg->features[f];
        EMBER_CHECK(ctx, c->name && c->name[0], EMBER_ERR_INVALID_ARG, "%s: feature %d has no name", fn, (int)f);
        EMBER_CHECK(ctx, c->table >= 0 && c->table < cfg->num_tables, EMBER_ERR_INVALID_ARG,
                    "%s: feature '%s' reads table %d: there are %d", fn, c->name, (int)c->table, (int)cfg->num_tables);
        for (int32_t u = 0; u < f; u++)
            EMBER_CHECK(ctx, strcmp(cfg->features[u].name, c->name) != 0, EMBER_ERR_INVALID_ARG,
                        "%s: features %d and %d are both named '%s'", fn, (int)u, (int)f, c->name);
        out_dim += cfg->tables[c->table].dim;
    }
    EMBER_CHECK(ctx, out_dim <= INT32_MAX, EMBER_ERR_INVALID_ARG, "%s: the output row has %lld columns: too many", fn,
                (long long)out_dim);
    return EMBER_OK;
}

ember_status ember_qebc_create(ember_ctx *ctx, const ember_qebc_config *cfg, ember_qebc **out) {
    static const char fn[] = "ember_qebc_create";
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, out != NULL, EMBER_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    EMBER_TRY(check_config(ctx, cfg));
    ember_qebc *q = ember__calloc(ctx, sizeof *q);
    if (!q) return ember__error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate the collection", fn);
    q->ctx = ctx;
    q->kern = ember__quant_kernels_for(ctx->isa);
    EMBER_ASSERT(q->kern != NULL);
    q->bounds = cfg->bounds;
    q->out_dtype = cfg->output_dtype;
    q->tables = ember__calloc(ctx, sizeof(ember__qtable) * (size_t)cfg->num_tables);
    q->feature_table = ember__calloc(ctx, sizeof(int32_t) * (size_t)cfg->num_features);
    q->feature_names = ember__calloc(ctx, sizeof(char *) * (size_t)cfg->num_features);
    q->out_off = ember__calloc(ctx, sizeof(int32_t) * (size_t)cfg->num_features);
    ember_status st = EMBER_ERR_NOMEM;
    if (!q->tables || !q->feature_table || !q->feature_names || !q->out_off) goto nomem;
    q->T = cfg->num_tables;
    q->F = cfg->num_features;
    for (int32_t t = 0; t < q->T; t++) {
        ember__qtable *tb = &q->tables[t];
        tb->cfg = cfg->tables[t];
        tb->cfg.name = NULL;
        tb->rb = ember_qtype_row_bytes(tb->cfg.qtype, tb->cfg.dim);
        size_t bytes;
        if (!ember__mul_size(tb->rb, (size_t)tb->cfg.rows, &bytes)) {
            st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: table '%s': %lld rows of %zu bytes overflow", fn,
                              cfg->tables[t].name, (long long)tb->cfg.rows, tb->rb);
            goto fail;
        }
        if (!(tb->cfg.name = ember__strdup(ctx, cfg->tables[t].name))) goto nomem;
        if (!(tb->rows = ember__alloc_slab(ctx, bytes, "quantized table rows"))) {
            st = EMBER_ERR_NOMEM;
            goto fail;
        }
    }
    for (int32_t f = 0; f < q->F; f++) {
        q->feature_table[f] = cfg->features[f].table;
        q->out_off[f] = q->out_dim;
        q->out_dim += q->tables[q->feature_table[f]].cfg.dim;
        if (!(q->feature_names[f] = ember__strdup(ctx, cfg->features[f].name))) goto nomem;
    }
    *out = q;
    return EMBER_OK;
nomem:
    st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate the collection's tables", fn);
fail:
    ember_qebc_destroy(q);
    return st;
}

int32_t ember_qebc_num_tables(const ember_qebc *q) { return q ? q->T : 0; }
int32_t ember_qebc_num_features(const ember_qebc *q) { return q ? q->F : 0; }
int32_t ember_qebc_output_dim(const ember_qebc *q) { return q ? q->out_dim : 0; }

const ember_qtable_config *ember_qebc_table(const ember_qebc *q, int32_t t) {
    return q && t >= 0 && t < q->T ? &q->tables[t].cfg : NULL;
}

int32_t ember_qebc_table_index(const ember_qebc *q, const char *name) {
    for (int32_t t = 0; q && name && t < q->T; t++)
        if (strcmp(q->tables[t].cfg.name, name) == 0) return t;
    return -1;
}

static ember_status check_table(const ember_qebc *q, const char *fn, int32_t t) {
    EMBER_CHECK(q->ctx, t >= 0 && t < q->T, EMBER_ERR_INVALID_ARG, "%s: table %d: the collection has %d", fn, (int)t,
                (int)q->T);
    return EMBER_OK;
}

ember_status ember_qebc_table_bytes(const ember_qebc *q, int32_t t, size_t *rows_total, size_t *remap_bytes) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_table(q, "ember_qebc_table_bytes", t));
    if (rows_total) *rows_total = q->tables[t].rb * (size_t)q->tables[t].cfg.rows;
    if (remap_bytes) *remap_bytes = q->tables[t].map.bytes;
    return EMBER_OK;
}

static ember_status check_range(const ember_qebc *q, const char *fn, int32_t t, int64_t r0, int64_t r1,
                                const void *p) {
    EMBER_TRY(check_table(q, fn, t));
    const ember__qtable *tb = &q->tables[t];
    EMBER_CHECK(q->ctx, r0 >= 0 && r0 <= r1 && r1 <= tb->cfg.rows, EMBER_ERR_INVALID_ARG,
                "%s: table '%s': rows [%lld, %lld) outside [0, %lld)", fn, tb->cfg.name, (long long)r0, (long long)r1,
                (long long)tb->cfg.rows);
    EMBER_CHECK(q->ctx, p != NULL || r0 == r1, EMBER_ERR_INVALID_ARG, "%s: table '%s': the row buffer is NULL", fn,
                tb->cfg.name);
    return EMBER_OK;
}

ember_status ember_qebc_write_rows(ember_qebc *q, int32_t t, int64_t r0, int64_t r1, const void *src) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_range(q, "ember_qebc_write_rows", t, r0, r1, src));
    const ember__qtable *tb = &q->tables[t];
    if (r1 > r0) memcpy(tb->rows + (size_t)r0 * tb->rb, src, (size_t)(r1 - r0) * tb->rb);
    return EMBER_OK;
}

ember_status ember_qebc_read_rows(const ember_qebc *q, int32_t t, int64_t r0, int64_t r1, void *dst) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_range(q, "ember_qebc_read_rows", t, r0, r1, dst));
    const ember__qtable *tb = &q->tables[t];
    if (r1 > r0) memcpy(dst, tb->rows + (size_t)r0 * tb->rb, (size_t)(r1 - r0) * tb->rb);
    return EMBER_OK;
}

ember_status ember_qebc_rows_view(const ember_qebc *q, int32_t t, const void **data, size_t *row_bytes) {
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_table(q, "ember_qebc_rows_view", t));
    EMBER_CHECK(q->ctx, data != NULL, EMBER_ERR_INVALID_ARG, "ember_qebc_rows_view: data is NULL");
    *data = q->tables[t].rows;
    if (row_bytes) *row_bytes = q->tables[t].rb;
    return EMBER_OK;
}

ember_status ember_qebc_quantize_rows(ember_qebc *q, int32_t t, int64_t r0, int64_t r1, const float *src) {
    static const char fn[] = "ember_qebc_quantize_rows";
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_range(q, fn, t, r0, r1, src));
    const ember__qtable *tb = &q->tables[t];
    char what[128];
    snprintf(what, sizeof what, "table '%s'", tb->cfg.name);
    EMBER_TRY(check_finite(q->ctx, fn, what, r0, tb->cfg.dim, r1 - r0, src));
    for (int64_t r = r0; r < r1; r++)
        ember__quantize_row(tb->cfg.qtype, tb->cfg.dim, src + (r - r0) * tb->cfg.dim, tb->rows + (size_t)r * tb->rb);
    return EMBER_OK;
}

// ---- remaps ----------------------------------------------------------------------------------

static uint64_t hash_slot(int64_t id, uint64_t mask) { return ember_splitmix64((uint64_t)id) & mask; }

// The row of id in a HASH remap, or -1.
static int64_t hash_find(const ember__qremap *m, int64_t id) {
    for (uint64_t s = hash_slot(id, m->mask);; s = (s + 1) & m->mask) {
        if (m->slot_row[s] < 0) return -1;
        if (m->slot_id[s] == id) return m->slot_row[s];
    }
}

ember_status ember_qebc_set_remap(ember_qebc *q, int32_t t, ember_qremap_kind kind, int64_t n, const int64_t *ids,
                                  const int64_t *rows) {
    static const char fn[] = "ember_qebc_set_remap";
    if (!q) return EMBER_ERR_INVALID_ARG;
    ember_ctx *ctx = q->ctx;
    EMBER_TRY(check_table(q, fn, t));
    ember__qtable *tb = &q->tables[t];
    EMBER_CHECK(ctx, (unsigned)kind < EMBER_QREMAP_COUNT, EMBER_ERR_INVALID_ARG, "%s: table '%s': unknown remap kind %d",
                fn, tb->cfg.name, (int)kind);
    EMBER_CHECK(ctx, n >= 0 && (kind != EMBER_QREMAP_NONE || n == 0), EMBER_ERR_INVALID_ARG,
                "%s: table '%s': %lld ids for a %s remap", fn, tb->cfg.name, (long long)n, ember_qremap_kind_name(kind));
    EMBER_CHECK(ctx, n == 0 || (ids && rows), EMBER_ERR_INVALID_ARG, "%s: table '%s': ids or rows is NULL", fn,
                tb->cfg.name);
    EMBER_CHECK(ctx, kind != EMBER_QREMAP_ARRAY || tb->cfg.num_embeddings >= 1, EMBER_ERR_INVALID_ARG,
                "%s: table '%s': an array remap needs num_embeddings >= 1 in the table's configuration", fn,
                tb->cfg.name);
    for (int64_t i = 0; i < n; i++)
        EMBER_CHECK(ctx, rows[i] >= 0 && rows[i] < tb->cfg.rows, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': id %lld maps to row %lld, outside [0, %lld)", fn, tb->cfg.name, (long long)ids[i],
                    (long long)rows[i], (long long)tb->cfg.rows);
    ember__qremap m = {.kind = kind};
    if (kind == EMBER_QREMAP_ARRAY) {
        const int64_t E = tb->cfg.num_embeddings;
        EMBER_CHECK(ctx, tb->cfg.rows <= INT32_MAX, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': %lld rows do not fit an array remap's int32 rows: use a hash remap", fn,
                    tb->cfg.name, (long long)tb->cfg.rows);
        if (!ember__mul_size((size_t)E, sizeof(int32_t), &m.bytes) || !(m.row_of = ember__alloc(ctx, m.bytes)))
            return ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s': cannot allocate an array remap of %lld ids", fn,
                                tb->cfg.name, (long long)E);
        memset(m.row_of, 0xff, m.bytes); // -1
        for (int64_t i = 0; i < n; i++) {
            const int64_t id = ids[i];
            if (id < 0 || id >= E || m.row_of[id] >= 0) {
                remap_free(ctx, &m);
                EMBER_CHECK(ctx, id >= 0 && id < E, EMBER_ERR_INVALID_ARG,
                            "%s: table '%s': id %lld (entry %lld) outside the id space [0, %lld)", fn, tb->cfg.name,
                            (long long)id, (long long)i, (long long)E);
                return ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: table '%s': id %lld appears twice (entry %lld)", fn,
                                    tb->cfg.name, (long long)id, (long long)i);
            }
            m.row_of[id] = (int32_t)rows[i];
        }
    } else if (kind == EMBER_QREMAP_HASH) {
        uint64_t slots = 16;
        while (slots < 2 * (uint64_t)n) slots *= 2;
        m.mask = slots - 1;
        m.bytes = 2 * sizeof(int64_t) * slots;
        m.slot_id = ember__alloc(ctx, sizeof(int64_t) * slots);
        m.slot_row = ember__alloc(ctx, sizeof(int64_t) * slots);
        if (!m.slot_id || !m.slot_row) {
            remap_free(ctx, &m);
            return ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s': cannot allocate a hash remap of %llu slots", fn,
                                tb->cfg.name, (unsigned long long)slots);
        }
        memset(m.slot_row, 0xff, sizeof(int64_t) * slots);
        for (int64_t i = 0; i < n; i++) {
            uint64_t s = hash_slot(ids[i], m.mask);
            while (m.slot_row[s] >= 0 && m.slot_id[s] != ids[i]) s = (s + 1) & m.mask;
            if (m.slot_row[s] >= 0) {
                remap_free(ctx, &m);
                return ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: table '%s': id %lld appears twice (entry %lld)", fn,
                                    tb->cfg.name, (long long)ids[i], (long long)i);
            }
            m.slot_id[s] = ids[i];
            m.slot_row[s] = rows[i];
        }
    }
    remap_free(ctx, &tb->map);
    tb->map = m;
    return EMBER_OK;
}

int64_t ember__qebc_remap_pairs(const ember_qebc *q, int32_t t, int64_t *ids, int64_t *rows) {
    const ember__qremap *m = &q->tables[t].map;
    int64_t n = 0;
    if (m->kind == EMBER_QREMAP_ARRAY) {
        for (int64_t id = 0; id < q->tables[t].cfg.num_embeddings; id++)
            if (m->row_of[id] >= 0) {
                if (ids) ids[n] = id, rows[n] = m->row_of[id];
                n++;
            }
    } else if (m->kind == EMBER_QREMAP_HASH) {
        for (uint64_t s = 0; s <= m->mask; s++)
            if (m->slot_row[s] >= 0) {
                if (ids) ids[n] = m->slot_id[s], rows[n] = m->slot_row[s];
                n++;
            }
    }
    return n;
}

ember_status ember_qebc_get_remap(const ember_qebc *q, int32_t t, ember_qremap_kind *kind, int64_t *n, int64_t *ids,
                                  int64_t *rows, int64_t cap) {
    static const char fn[] = "ember_qebc_get_remap";
    if (!q) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(check_table(q, fn, t));
    const int64_t kept = ember__qebc_remap_pairs(q, t, NULL, NULL);
    if (kind) *kind = q->tables[t].map.kind;
    if (n) *n = kept;
    if (!ids && !rows) return EMBER_OK;
    EMBER_CHECK(q->ctx, ids && rows && cap >= kept, EMBER_ERR_INVALID_ARG,
                "%s: table '%s': %lld kept ids, room for %lld (or ids or rows NULL)", fn, q->tables[t].cfg.name,
                (long long)kept, (long long)cap);
    ember__qebc_remap_pairs(q, t, ids, rows);
    return EMBER_OK;
}

ember_qremap_kind ember_qebc_remap_kind(const ember_qebc *q, int32_t t) {
    return q && t >= 0 && t < q->T ? q->tables[t].map.kind : EMBER_QREMAP_NONE;
}

// ---- forward ---------------------------------------------------------------------------------

// The ids of feature f a bounds mode applies to: [0, num_embeddings) with an array remap, [0,
// rows) without one, none (-1: every id) with a hash remap.
static int64_t id_space(const ember__qtable *tb) {
    switch (tb->map.kind) {
    case EMBER_QREMAP_ARRAY: return tb->cfg.num_embeddings;
    case EMBER_QREMAP_HASH: return -1;
    default: return tb->cfg.rows;
    }
}

// The row of one id (validated under the bounds mode), or -1: pruned or skipped.
static int64_t resolve(const ember__qtable *tb, int64_t id, ember_bounds_mode bounds) {
    switch (tb->map.kind) {
    case EMBER_QREMAP_HASH: return hash_find(&tb->map, id);
    case EMBER_QREMAP_ARRAY: {
        const int64_t i = ember__resolve_id(id, tb->cfg.num_embeddings, bounds);
        return i < 0 ? -1 : tb->map.row_of[i];
    }
    default: return ember__resolve_id(id, tb->cfg.rows, bounds);
    }
}

ember_status ember_qebc_forward(const ember_qebc *q, const ember_kjt *kjt, void *out) {
    static const char fn[] = "ember_qebc_forward";
    if (!q) return EMBER_ERR_INVALID_ARG;
    ember_ctx *ctx = q->ctx;
    EMBER_CHECK(ctx, kjt != NULL, EMBER_ERR_INVALID_ARG, "%s: kjt is NULL", fn);
    EMBER_CHECK(ctx, !kjt->feature_batch_sizes && !kjt->inverse_indices, EMBER_ERR_UNSUPPORTED,
                "%s: per-feature batch sizes (VBE) are not served: expand the KJT", fn);
    int64_t space[256] = {0}, *spaces = space;
    if (q->F > 256 && !(spaces = ember__xalloc(ctx, sizeof(int64_t) * (size_t)q->F, "feature id spaces")))
        return EMBER_ERR_NOMEM;
    int resolve_all = 0; // some feature's ids are not rows as they stand
    for (int32_t f = 0; f < q->F; f++) {
        const ember__qtable *tb = &q->tables[q->feature_table[f]];
        spaces[f] = id_space(tb);
        resolve_all |= tb->map.kind != EMBER_QREMAP_NONE;
    }
    int64_t oor = 0;
    ember_status st = ember__kjt_validate(ctx, fn, kjt, q->F, spaces, (const char *const *)q->feature_names, q->bounds,
                                          &oor);
    if (spaces != space) ember__free(ctx, spaces);
    EMBER_TRY(st);
    const int64_t B = kjt->batch_size;
    EMBER_CHECK(ctx, out != NULL || B == 0, EMBER_ERR_INVALID_ARG, "%s: out is NULL", fn);
    if (oor > 0 && q->bounds == EMBER_BOUNDS_CLAMP)
        ember__log(ctx, EMBER_LOG_WARN, "%s: %lld ids outside their id spaces were clamped", fn, (long long)oor);
    resolve_all |= oor > 0;
    const int64_t nbags = (int64_t)q->F * B;
    if (nbags == 0) return EMBER_OK;

    // Offsets, and the rows of every id when any needs resolving (else the ids are the rows).
    size_t bytes = 0;
    const size_t rows_bytes = resolve_all ? sizeof(int64_t) * (size_t)kjt->nnz : 0;
    const size_t off_bytes = kjt->offsets ? 0 : sizeof(int64_t) * (size_t)(nbags + 1);
    const int nt0 = ember__threads(ctx);
    const size_t acc_bytes = sizeof(float) * (size_t)q->out_dim * (size_t)nt0;
    bytes = rows_bytes + off_bytes + (q->out_dtype == EMBER_DTYPE_F16 ? acc_bytes : 0);
    unsigned char *scratch = NULL;
    if (bytes > 0 && !(scratch = ember__xalloc(ctx, bytes, "the forward's scratch"))) return EMBER_ERR_NOMEM;
    int64_t *rows = resolve_all ? (int64_t *)(void *)scratch : NULL;
    int64_t *off = kjt->offsets ? NULL : (int64_t *)(void *)(scratch + rows_bytes);
    float *acc16 = q->out_dtype == EMBER_DTYPE_F16 ? (float *)(void *)(scratch + rows_bytes + off_bytes) : NULL;
    if (off) ember__kjt_offsets(kjt, off);
    const int64_t *offs = kjt->offsets ? kjt->offsets : off;
    const int64_t *row_ids = rows ? rows : kjt->values;
    // Threads: never more than the bags; a bag is one task. Ids are resolved first, all of them,
    // so that a bag's kernel may prefetch the rows of the bags after it.
    int nt = nt0;
    if (nbags < nt) nt = (int)nbags;
    if (rows) {
#pragma omp parallel for schedule(dynamic, 64) num_threads(nt) if (nt > 1)
        for (int64_t bag = 0; bag < nbags; bag++) {
            const ember__qtable *tb = &q->tables[q->feature_table[bag / B]];
            for (int64_t j = offs[bag]; j < offs[bag + 1]; j++) rows[j] = resolve(tb, kjt->values[j], q->bounds);
        }
    }
    const int f16 = acc16 != NULL;
#pragma omp parallel for schedule(dynamic, 64) num_threads(nt) if (nt > 1)
    for (int64_t bag = 0; bag < nbags; bag++) {
        const int32_t f = (int32_t)(bag / B);
        const int64_t b = bag % B;
        const ember__qtable *tb = &q->tables[q->feature_table[f]];
        const int64_t j0 = offs[bag], j1 = offs[bag + 1], jend = offs[(int64_t)(f + 1) * B];
        float *dst = f16 ? acc16 + (size_t)ember__thread_id() * (size_t)q->out_dim
                         : (float *)out + (size_t)b * (size_t)q->out_dim + (size_t)q->out_off[f];
        const ember__qbag qb = {.base = tb->rows, .rb = tb->rb, .D = tb->cfg.dim, .qtype = tb->cfg.qtype,
                                .mean = tb->cfg.pooling == EMBER_POOL_MEAN, .rows = row_ids + j0,
                                .weights = kjt->weights ? kjt->weights + j0 : NULL, .n = j1 - j0,
                                .pf_n = jend - j0, .out = dst};
        q->kern->pool_bag(&qb);
        if (f16) {
            uint16_t *o = (uint16_t *)out + (size_t)b * (size_t)q->out_dim + (size_t)q->out_off[f];
            for (int32_t d = 0; d < tb->cfg.dim; d++) o[d] = ember__f32_to_f16(dst[d]);
        }
    }
    ember__free(ctx, scratch);
    return EMBER_OK;
}
