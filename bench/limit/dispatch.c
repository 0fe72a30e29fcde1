// Picks the limit loop written for the variant the kernels run (limit.h).
#include "limit/limit.h"

gather_limit_fn bench_gather_limit(ember_isa isa) {
    switch (isa) {
#ifdef EMBER_HAVE_ISA_AVX2
    case EMBER_ISA_AVX2: return bench_gather_limit_avx2;
#endif
#ifdef EMBER_HAVE_ISA_AVX512
    case EMBER_ISA_AVX512: return bench_gather_limit_avx512;
#endif
    default: return bench_gather_limit_generic;
    }
}
