// Pooled forward (docs/semantics.md §2): a random row gather per bag, the memory-bound kernel. The
// gather loops are the collection's kernel variant (tbe/isa/); this file splits the work.
//
// Threads take contiguous ranges of bags (balanced by ids + bags) and every output element is
// summed in bag order by one thread, so the result does not depend on the thread count.
// Within a range the kernel walks one feature at a time: the feature's ids are one contiguous
// run of `values`, so the row `ember__prefetch_ids` ids ahead is prefetched across bag
// boundaries (a bag of L = 20 ids is shorter than the prefetch pipeline; prefetching only
// inside a bag would leave its first rows unprefetched).
#include <string.h>

#include "tbe/isa/isa.h"
#include "tbe/rowmap.h"

ember_status ember__ebc_check_forward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname, int64_t *oor) {
    *oor = 0;
    EMBER_TRY(ember__kjt_validate(ebc->ctx, fn, kjt, ebc->F, ebc->feature_rows, (const char *const *)ebc->feature_names,
                                  ebc->bounds, oor));
    EMBER_CHECK(ebc->ctx, buf != NULL || ember_ebc_output_size(ebc, kjt) == 0, EMBER_ERR_INVALID_ARG, "%s: %s is NULL",
                fn, bufname);
    if (*oor > 0 && ebc->bounds == EMBER_BOUNDS_CLAMP)
        ember__log(ebc->ctx, EMBER_LOG_WARN, "%s: %lld ids outside their tables were clamped", fn, (long long)*oor);
    return EMBER_OK;
}

const int64_t *ember__ebc_offsets(ember_ebc *ebc, const ember_kjt *kjt) {
    if (kjt->offsets) return kjt->offsets;
    int64_t *o = ember__ws_get(ebc, 0, sizeof(int64_t) * ((size_t)kjt->num_features * (size_t)kjt->batch_size + 1));
    if (o) ember__kjt_offsets(kjt, o);
    return o;
}

// Bags [i0, i1) (feature-major numbering), one feature at a time.
static void pool_range(const ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int64_t i0, int64_t i1,
                       int resolve_ids, float *out) {
    const int32_t B = kjt->batch_size;
    for (int64_t i = i0; i < i1;) {
        const int32_t f = (int32_t)(i / B), b = (int32_t)(i % B);
        const int64_t end = (int64_t)(f + 1) * B < i1 ? (int64_t)(f + 1) * B : i1;
        const ember__table *tb = &ebc->tables[ebc->feature_table[f]];
        float *o = out + (size_t)b * (size_t)ebc->out_dim + (size_t)ebc->feature_col[f];
        const ember__bag_run r = {ebc->slab + tb->weight_offset, tb->row_bytes, tb->cfg.dim, tb->cfg.dtype,
                                  tb->cfg.pooling == EMBER_POOL_MEAN, kjt->values, kjt->weights, off + i, end - i,
                                  off[end], ember__prefetch_ids(tb->row_bytes), o, (size_t)ebc->out_dim,
                                  tb->cfg.rows, ebc->kbounds, resolve_ids};
        ebc->kern->pool_run(&r);
        i = end;
    }
}

static void sequence_forward(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, float *out) {
    const int32_t B = kjt->batch_size, D = ebc->out_dim;
    const int64_t nbags = (int64_t)ebc->F * B;
#pragma omp parallel for schedule(dynamic, 64) num_threads(ember__threads(ebc->ctx))
    for (int64_t i = 0; i < nbags; i++) {
        const ember__table *tb = &ebc->tables[ebc->feature_table[i / B]];
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            float *o = out + j * D;
            int64_t r = ember__resolve_id(kjt->values[j], tb->cfg.rows, ebc->kbounds);
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
}

// The pooling of a validated KJT with offsets `off`; resolve: some ids need the bounds mode.
static void forward_off(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int resolve, float *out) {
    if (ebc->sequence) {
        sequence_forward(ebc, kjt, off, out);
        return;
    }
    const int64_t nbags = (int64_t)ebc->F * kjt->batch_size;
    const int nt = ember__threads(ebc->ctx), nc = ember__chunks(nt);
    // Chunks of bags balanced by ids plus a bag's fixed cost (zeroing and storing its output row).
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int c = 0; c < nc; c++)
        pool_range(ebc, kjt, off, ember__split(off, nbags, 8, c, nc), ember__split(off, nbags, 8, c + 1, nc), resolve,
                   out);
}

// Translates the ids of mapped tables first (rowmap.h); the kernels then resolve -1 as absent.
static ember_status forward_mapped(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int resolve, float *out) {
    if (!ebc->mapped) {
        forward_off(ebc, kjt, off, resolve, out);
        return EMBER_OK;
    }
    EMBER_TRY(ember__ebc_map(ebc, kjt, off, EMBER__MAP_FORWARD));
    forward_off(ebc, &ebc->mkjt, off, 1, out);
    return EMBER_OK;
}

ember_status ember__ebc_forward_unchecked(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    return forward_mapped(ebc, kjt, kjt->offsets, 0, out);
}

ember_status ember_ebc_forward(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    int64_t oor;
    EMBER_TRY(ember__ebc_check_forward(ebc, "ember_ebc_forward", kjt, out, "out", &oor));
    const int64_t *off = ember__ebc_offsets(ebc, kjt);
    if (!off) return EMBER_ERR_NOMEM;
    return forward_mapped(ebc, kjt, off, oor > 0, out);
}
