// Maps a context's kernel variant to its quantized pooling table (as src/dense/isa/dispatch.c).
#include "quant/internal.h"

const ember__quant_kernels *ember__quant_kernels_for(ember_isa isa) {
    switch (isa) {
    case EMBER_ISA_GENERIC: return &ember__quant_kernels_generic;
#ifdef EMBER_HAVE_ISA_AVX2
    case EMBER_ISA_AVX2: return &ember__quant_kernels_avx2;
#endif
#ifdef EMBER_HAVE_ISA_AVX512
    case EMBER_ISA_AVX512: return &ember__quant_kernels_avx512;
#endif
    default: return NULL;
    }
}
