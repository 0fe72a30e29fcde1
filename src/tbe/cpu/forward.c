// The cpu backend's pooled forward (docs/semantics.md §2): a random row gather per bag, the
// memory-bound kernel. The gather loops are the collection's kernel variant (isa/); this file
// splits the work.
//
// Threads take contiguous ranges of bags (balanced by ids + bags) and every output element is
// summed in bag order by one thread, so the result does not depend on the thread count.
// Within a range the kernel walks one feature at a time: the feature's ids are one contiguous
// run of `values`, so the row `ember__prefetch_ids` ids ahead is prefetched across bag
// boundaries (a bag of L = 20 ids is shorter than the prefetch pipeline; prefetching only
// inside a bag would leave its first rows unprefetched).
#include <string.h>

#include "tbe/cpu/isa/isa.h"

// Bags [i0, i1) (feature-major numbering), one feature at a time.
static void pool_range(const ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int64_t i0, int64_t i1,
                       int resolve_ids, float *out) {
    const int32_t B = kjt->batch_size;
    for (int64_t i = i0; i < i1;) {
        const int32_t f = (int32_t)(i / B), b = (int32_t)(i % B);
        const int64_t end = (int64_t)(f + 1) * B < i1 ? (int64_t)(f + 1) * B : i1;
        const ember__table *tb = &ebc->tables[ebc->feature_table[f]];
        float *o = out + (size_t)b * (size_t)ebc->out_dim + (size_t)ebc->feature_col[f];
        const ember__bag_run r = {tb->w, tb->row_bytes, tb->cfg.dim, tb->cfg.dtype,
                                  tb->cfg.pooling == EMBER_POOL_MEAN, kjt->values, kjt->weights, off + i, end - i,
                                  off[end], ember__prefetch_ids(tb->row_bytes), o, (size_t)ebc->out_dim,
                                  tb->cfg.rows, ebc->kbounds, resolve_ids};
        ember__cpu_kern(ebc)->pool_run(&r);
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
            ember__load_row(tb->cfg.dtype, ember__row_ptr(tb, r), o, D);
            if (kjt->weights) {
                const float w = kjt->weights[j];
                for (int32_t d = 0; d < D; d++) o[d] *= w;
            }
        }
    }
}

// The pooling of a validated KJT with offsets `off`; resolve: some ids need the bounds mode.
ember_status ember__cpu_forward(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int resolve, float *out) {
    if (ebc->sequence) {
        sequence_forward(ebc, kjt, off, out);
        return EMBER_OK;
    }
    const int64_t nbags = (int64_t)ebc->F * kjt->batch_size;
    const int nt = ember__threads(ebc->ctx), nc = ember__chunks(nt);
    // Chunks of bags balanced by ids plus a bag's fixed cost (zeroing and storing its output row).
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int c = 0; c < nc; c++)
        pool_range(ebc, kjt, off, ember__split(off, nbags, 8, c, nc), ember__split(off, nbags, 8, c + 1, nc), resolve,
                   out);
    return EMBER_OK;
}

