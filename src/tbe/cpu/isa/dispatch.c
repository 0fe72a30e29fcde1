// Maps a context's kernel variant to its table. Which tables exist is decided by CMake
// (EMBER_HAVE_ISA_*): a compiler without the target flags, or another architecture, builds the
// generic one only.
#include "tbe/cpu/isa/isa.h"

const ember__tbe_kernels *ember__tbe_kernels_for(ember_isa isa) {
    switch (isa) {
    case EMBER_ISA_GENERIC: return &ember__tbe_kernels_generic;
#ifdef EMBER_HAVE_ISA_AVX2
    case EMBER_ISA_AVX2: return &ember__tbe_kernels_avx2;
#endif
#ifdef EMBER_HAVE_ISA_AVX512
    case EMBER_ISA_AVX512: return &ember__tbe_kernels_avx512;
#endif
    default: return NULL;
    }
}
