// The FMA peak loop of the avx512 variant (peak.h): vfmadd231ps on 24 zmm chains.
#include <immintrin.h>

#include "peak/peak.h"

#define CH 24

static float loop(int64_t iters, double *flops) {
    __m512 acc[CH];
    for (int j = 0; j < CH; j++) acc[j] = _mm512_set1_ps((float)j * 0.125f);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++) {
        // Unrolled, so that the chains live in registers (GCC keeps a rolled loop's array in memory).
#pragma GCC unroll 32
        for (int j = 0; j < CH; j++) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    }
    __m512 s = acc[0];
    for (int j = 1; j < CH; j++) s = _mm512_add_ps(s, acc[j]);
    *flops = 2.0 * 16.0 * CH * (double)iters;
    return _mm512_reduce_add_ps(s);
}

const fma_peak_fn bench_fma_peak_avx512 = loop;
