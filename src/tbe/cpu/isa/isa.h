// The kernel table of the table-batched collection: the hot loops of forward and the fused
// backward, one table per instruction-set variant (ember_isa). Each variant is its own file
// (generic.c, avx2.c, avx512.c) compiled with its own target flags; the portable pieces they
// share are in impl.h. A collection takes its context's variant at creation (ember_ebc->kern):
// nothing outside src/tbe/isa/ knows which one runs.
//
// Every variant gives the same bits: the same IEEE operations in the same order (mul then add,
// never a fused multiply-add, the library builds with -ffp-contract=off; sums in bag/position
// order per column; row reductions in ember__sum16's 16-lane order), only wider. The tests run
// the kernel matrix under each variant the host has and compare them bit for bit.
#ifndef EMBER_TBE_ISA_H
#define EMBER_TBE_ISA_H

#include "tbe/cpu/kernels.h"

// One feature's run of bags for the pooled forward: bag k has ids values[off[k] .. off[k+1])
// and writes out[k * out_stride .. + D). Ids from off[0] up to pf_end may be prefetched.
typedef struct ember__bag_run {
    const unsigned char *base; // the table's row 0
    size_t rb;                 // row bytes
    int32_t D;
    ember_dtype dtype;
    int mean;
    const int64_t *values;
    const float *weights;      // NULL: unweighted
    const int64_t *off;        // [nb + 1], absolute positions in values
    int64_t nb;
    int64_t pf_end;
    int pd;                    // prefetch distance in ids
    float *out;
    size_t out_stride;
    int64_t rows;              // the table's rows, for resolve_ids
    ember_bounds_mode bounds;
    int resolve_ids;           // some id of the call is outside its table (CLAMP/SKIP)
} ember__bag_run;

// Gradient source of entry e: the dL/dy row it contributed to and its scale s_j = w_j * c_bag.
static inline const float *ember__entry_grad(const ember_ebc *ebc, const ember__segments *s, const float *grad_out,
                                             int64_t e, float *sc) {
    const int64_t it = s->item[e];
    const float *w = s->kjt->weights;
    switch (s->kind) {
    case EMBER__ITEM_BAG: *sc = s->bag_c[it]; return grad_out + s->bag_goff[it];
    case EMBER__ITEM_POS_POOLED: {
        const int64_t bag = s->bag_of[it];
        *sc = w[it] * s->bag_c[bag];
        return grad_out + s->bag_goff[bag];
    }
    case EMBER__ITEM_POS_SEQ: break;
    }
    *sc = w ? w[it] : 1.0f;
    return grad_out + (size_t)it * (size_t)ebc->out_dim;
}

// A row update costs a DRAM read-modify-write of the row; one more entry of a segment costs an
// L2 read of a dL/dy row. Segments are split over threads with this weight per segment.
#define EMBER__SEGMENT_COST 4

struct ember__tbe_kernels {
    ember_isa isa;
    // Pools every bag of the run into r->out.
    void (*pool_run)(const ember__bag_run *r);
    // Reduces and applies segments [k0, k1) (g, w: scratch rows of max_dim floats).
    void (*update_segments)(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k0,
                            int64_t k1, float *g, float *w);
    // g[0..D) = the coalesced gradient of segment k, summed in position order.
    void (*reduce_segment)(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k,
                           int32_t D, float *g);
    // One optimizer update of `row` of tb with gradient g (clobbered); w is scratch [D].
    void (*update_row)(const ember_ebc *ebc, const ember__table *tb, const ember__optim_step *st, int64_t row,
                       float *g, float *w);
};

// The table of a variant this build holds (EMBER_ISA_GENERIC always exists); NULL otherwise.
const ember__tbe_kernels *ember__tbe_kernels_for(ember_isa isa);

// Defines a variant's table from its static functions pool_run, update_segments, reduce_segment
// and update_row.
#define EMBER__TBE_KERNELS(suffix, isa_value)                                                            \
    const ember__tbe_kernels ember__tbe_kernels_##suffix = {isa_value, pool_run, update_segments,         \
                                                            reduce_segment, update_row};

extern const ember__tbe_kernels ember__tbe_kernels_generic;
extern const ember__tbe_kernels ember__tbe_kernels_avx2;
extern const ember__tbe_kernels ember__tbe_kernels_avx512;

#endif
