// Maps a context's kernel variant to its dense table. Which tables exist is decided by CMake
// (EMBER_HAVE_ISA_*), as for the embedding kernels (src/tbe/cpu/isa/dispatch.c).
#include "dense/internal.h"

const ember__dense_kernels *ember__dense_kernels_for(ember_isa isa) {
    switch (isa) {
    case EMBER_ISA_GENERIC: return &ember__dense_kernels_generic;
#ifdef EMBER_HAVE_ISA_AVX2
    case EMBER_ISA_AVX2: return &ember__dense_kernels_avx2;
#endif
#ifdef EMBER_HAVE_ISA_AVX512
    case EMBER_ISA_AVX512: return &ember__dense_kernels_avx512;
#endif
    default: return NULL;
    }
}
