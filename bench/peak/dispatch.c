// Picks the FMA peak loop of a kernel variant (peak.h) and measures it on a number of threads.
#include "peak/peak.h"

#include "report.h"

fma_peak_fn bench_fma_peak(ember_isa isa) {
    switch (isa) {
#ifdef EMBER_HAVE_ISA_AVX2
    case EMBER_ISA_AVX2: return bench_fma_peak_avx2;
#endif
#ifdef EMBER_HAVE_ISA_AVX512
    case EMBER_ISA_AVX512: return bench_fma_peak_avx512;
#endif
    default: return bench_fma_peak_generic;
    }
}

double bench_fma_peak_gflops(ember_isa isa, int threads) {
    const fma_peak_fn fn = bench_fma_peak(isa);
    // Size the loop to about 20 ms on one thread, then keep the best of 5 runs on `threads`.
    int64_t iters = 1 << 16;
    double flops = 0.0;
    volatile float sink = 0.0f;
    for (;;) {
        const double t0 = bench_now_ms();
        sink += fn(iters, &flops);
        const double ms = bench_now_ms() - t0;
        if (ms > 5.0 || iters > ((int64_t)1 << 40)) {
            iters = (int64_t)((double)iters * 20.0 / (ms > 0.01 ? ms : 0.01)) + 1;
            break;
        }
        iters *= 4;
    }
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        double t_max = 0.0, total = 0.0;
        float s = 0.0f;
#pragma omp parallel num_threads(threads) reduction(max : t_max) reduction(+ : total, s)
        {
            double f = 0.0;
            const double t0 = bench_now_ms();
            s += fn(iters, &f);
            t_max = bench_now_ms() - t0;
            total = f;
        }
        sink += s;
        const double gf = total / (t_max * 1e6);
        best = gf > best ? gf : best;
    }
    (void)sink;
    return best;
}
