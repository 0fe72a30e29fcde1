// The FMA peak loop of the avx2 variant (peak.h): vfmadd231ps on 12 ymm chains.
#include <immintrin.h>

#include "peak/peak.h"

#define CH 12

static float loop(int64_t iters, double *flops) {
    __m256 acc[CH];
    for (int j = 0; j < CH; j++) acc[j] = _mm256_set1_ps((float)j * 0.125f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++) {
        // Unrolled, so that the chains live in registers (GCC keeps a rolled loop's array in memory).
#pragma GCC unroll 32
        for (int j = 0; j < CH; j++) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
    }
    __m256 s = acc[0];
    for (int j = 1; j < CH; j++) s = _mm256_add_ps(s, acc[j]);
    float out[8];
    _mm256_storeu_ps(out, s);
    *flops = 2.0 * 8.0 * CH * (double)iters;
    return out[0] + out[7];
}

const fma_peak_fn bench_fma_peak_avx2 = loop;
