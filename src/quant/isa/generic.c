// The generic quantized pooling variant: portable C, one element at a time. The reference the
// wider variants are compared against bit for bit.
#define VW 1
#include "quant/isa/impl.h"

static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float inv, float *out) {
    (void)b, (void)d0, (void)nv, (void)inv, (void)out;
    return 0;
}

EMBER__QUANT_KERNELS(generic, EMBER_ISA_GENERIC)
