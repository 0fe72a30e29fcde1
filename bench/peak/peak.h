// The FMA peak of `ember bench dense`: the multiply-add rate of one core (or of `threads` cores
// at once) running the instruction the dense kernels of a variant run, with enough independent
// chains to hide its latency and nothing else in the loop (no loads). One copy per kernel
// variant, each compiled with that variant's target flags (generic.c, avx2.c, avx512.c):
//   generic  C's fmaf on 8 scalar chains (a library call where the target has no FMA instruction)
//   avx2     vfmadd231ps on 12 ymm chains (8 lanes)
//   avx512   vfmadd231ps on 24 zmm chains (16 lanes)
#ifndef EMBER_BENCH_PEAK_H
#define EMBER_BENCH_PEAK_H

#include <stdint.h>

#include "ember/core.h"

// Runs `iters` steps of the loop and returns a value that depends on every chain (so the loop is
// kept); *flops receives the floating-point operations done (2 per lane-FMA).
typedef float (*fma_peak_fn)(int64_t iters, double *flops);

// The loop of a kernel variant (the generic one where the bench was built without it).
fma_peak_fn bench_fma_peak(ember_isa isa);
extern const fma_peak_fn bench_fma_peak_generic, bench_fma_peak_avx2, bench_fma_peak_avx512;

// GFLOP/s of the variant's loop on `threads` threads at once (each running the loop; the best of
// a few tries of about 20 ms).
double bench_fma_peak_gflops(ember_isa isa, int threads);

#endif
