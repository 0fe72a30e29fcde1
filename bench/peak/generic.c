// The FMA peak loop of the generic variant (peak.h): fmaf on 8 scalar chains.
#include <math.h>

#include "peak/peak.h"

static float loop(int64_t iters, double *flops) {
    float acc[8];
    for (int j = 0; j < 8; j++) acc[j] = (float)j * 0.125f;
    const float a = 0.999999f, b = 1e-7f;
    for (int64_t i = 0; i < iters; i++) {
        // Unrolled, so that the chains live in registers (GCC keeps a rolled loop's array in memory).
#pragma GCC unroll 32
        for (int j = 0; j < 8; j++) acc[j] = fmaf(acc[j], a, b);
    }
    float s = 0.0f;
    for (int j = 0; j < 8; j++) s += acc[j];
    *flops = 2.0 * 8.0 * (double)iters;
    return s;
}

const fma_peak_fn bench_fma_peak_generic = loop;
