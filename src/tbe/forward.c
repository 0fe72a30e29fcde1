// Pooled forward (DESIGN.md §1.2): a random row gather per bag, the memory-bound kernel.
// Bags are independent, so threads split them statically and every output element is summed
// in bag order by one thread: the result does not depend on the thread count.
#include <string.h>

#include "tbe/dtype.h"
#include "tbe/internal.h"

// Ids ahead of the current one whose rows are prefetched.
#define PREFETCH_DISTANCE 8

static inline void prefetch_row(const unsigned char *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 1);
}

// Resolves an id under the bounds mode: the row to read, or -1 to skip it.
static inline int64_t resolve(int64_t id, int64_t rows, ember_bounds_mode mode) {
    if (id >= 0 && id < rows) return id;
    if (mode == EMBER_BOUNDS_SKIP) return -1;
    return id < 0 ? 0 : rows - 1;
}

// acc[0..D) = sum of w_j * row(id_j) over the bag; returns the number of ids kept.
static int64_t pool_bag(const ember_ebc *ebc, const ember__table *tb, const int64_t *ids, const float *wts,
                        int64_t n, float *restrict acc) {
    const int32_t D = tb->cfg.dim;
    const int64_t rows = tb->cfg.rows;
    const unsigned char *base = ebc->slab + tb->weight_offset;
    const size_t rb = tb->row_bytes;
    memset(acc, 0, sizeof(float) * (size_t)D);
    int64_t kept = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j + PREFETCH_DISTANCE < n) {
            int64_t p = resolve(ids[j + PREFETCH_DISTANCE], rows, ebc->bounds);
            if (p >= 0) prefetch_row(base + (size_t)p * rb, rb);
        }
        int64_t r = resolve(ids[j], rows, ebc->bounds);
        if (r < 0) continue;
        kept++;
        const float w = wts ? wts[j] : 1.0f;
        const void *row = base + (size_t)r * rb;
        switch (tb->cfg.dtype) {
        case EMBER_DTYPE_F32: {
            const float *x = row;
            for (int32_t d = 0; d < D; d++) acc[d] += w * x[d];
            break;
        }
        case EMBER_DTYPE_BF16: {
            const uint16_t *x = row;
            for (int32_t d = 0; d < D; d++) acc[d] += w * ember__bf16_to_f32(x[d]);
            break;
        }
        case EMBER_DTYPE_F16: {
            const uint16_t *x = row;
            for (int32_t d = 0; d < D; d++) acc[d] += w * ember__f16_to_f32(x[d]);
            break;
        }
        }
    }
    return kept;
}

void ember__load_row(ember_dtype dt, const void *src, float *dst, int32_t n);

ember_status ember__ebc_check_forward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname);
ember_status ember__ebc_check_forward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname) {
    int64_t oor = 0;
    EMBER_TRY(ember__kjt_validate(ebc->ctx, fn, kjt, ebc->F, ebc->feature_rows, (const char *const *)ebc->feature_names,
                                  ebc->bounds, &oor));
    EMBER_CHECK(ebc->ctx, buf != NULL || ember_ebc_output_size(ebc, kjt) == 0, EMBER_ERR_INVALID_ARG, "%s: %s is NULL",
                fn, bufname);
    if (oor > 0 && ebc->bounds == EMBER_BOUNDS_CLAMP)
        ember__log(ebc->ctx, EMBER_LOG_WARN, "%s: %lld ids outside their tables were clamped", fn, (long long)oor);
    return EMBER_OK;
}

// Offsets of a validated KJT: its own, or computed into workspace slot 0.
const int64_t *ember__ebc_offsets(ember_ebc *ebc, const ember_kjt *kjt);
const int64_t *ember__ebc_offsets(ember_ebc *ebc, const ember_kjt *kjt) {
    if (kjt->offsets) return kjt->offsets;
    int64_t *o = ember__ws_get(ebc, 0, sizeof(int64_t) * ((size_t)kjt->num_features * (size_t)kjt->batch_size + 1));
    if (o) ember__kjt_offsets(kjt, o);
    return o;
}

ember_status ember_ebc_forward(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    EMBER_TRY(ember__ebc_check_forward(ebc, "ember_ebc_forward", kjt, out, "out"));
    const int64_t *off = ember__ebc_offsets(ebc, kjt);
    if (!off) return EMBER_ERR_NOMEM;
    const int32_t B = kjt->batch_size;
    const int64_t nbags = (int64_t)ebc->F * B;
    if (ebc->sequence) {
        const int32_t D = ebc->out_dim;
#pragma omp parallel for schedule(static) num_threads(ember__threads(ebc->ctx))
        for (int64_t i = 0; i < nbags; i++) {
            const ember__table *tb = &ebc->tables[ebc->feature_table[i / B]];
            for (int64_t j = off[i]; j < off[i + 1]; j++) {
                float *o = out + j * D;
                int64_t r = resolve(kjt->values[j], tb->cfg.rows, ebc->bounds);
                if (r < 0) {
                    memset(o, 0, sizeof(float) * (size_t)D);
                    continue;
                }
                ember__load_row(tb->cfg.dtype, ember__row_ptr(ebc, tb, r), o, D);
                if (kjt->weights) {
                    const float w = kjt->weights[j];
                    for (int32_t d = 0; d < D; d++) o[d] *= w;
                }
            }
        }
        return EMBER_OK;
    }
#pragma omp parallel for schedule(static) num_threads(ember__threads(ebc->ctx))
    for (int64_t i = 0; i < nbags; i++) {
        const int32_t f = (int32_t)(i / B), b = (int32_t)(i % B);
        const ember__table *tb = &ebc->tables[ebc->feature_table[f]];
        float *acc = out + (size_t)b * (size_t)ebc->out_dim + (size_t)ebc->feature_col[f];
        const int64_t n = off[i + 1] - off[i];
        int64_t kept = pool_bag(ebc, tb, kjt->values + off[i], kjt->weights ? kjt->weights + off[i] : NULL, n, acc);
        // MEAN divides by the number of ids, as FBGEMM does; an empty bag stays 0.
        if (tb->cfg.pooling == EMBER_POOL_MEAN && kept > 0) {
            const float inv = 1.0f / (float)kept;
            for (int32_t d = 0; d < tb->cfg.dim; d++) acc[d] *= inv;
        }
    }
    return EMBER_OK;
}
