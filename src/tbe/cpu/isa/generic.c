// The generic kernel variant: the portable loops of impl.h for the target's baseline instruction
// set (x86-64: SSE2), and the only variant on other architectures. The reference the wider
// variants are compared against bit for bit.
#include "tbe/cpu/isa/impl.h"

static int no_fused(const ember__table *tb) {
    (void)tb;
    return 0;
}

static void pool_run(const ember__bag_run *r) { pool_run_portable(r); }

static void reduce_segment(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k, int32_t D,
                           float *g) {
    reduce_segment_portable(ebc, s, grad_out, k, D, g);
}

static void update_segments(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k0,
                            int64_t k1, float *g, float *w) {
    update_segments_impl(ebc, s, grad_out, k0, k1, g, w, reduce_segment, no_fused, NULL);
}

EMBER__TBE_KERNELS(generic, EMBER_ISA_GENERIC)
