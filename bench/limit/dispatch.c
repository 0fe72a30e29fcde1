// Picks the limit loop written for the variant the kernels run (limit.h).
#include "limit/limit.h"
#include "report.h"

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

// Picks the limit loop's variant for this shape/dtype/dist/threads: the fastest of 12, each the
// median of 3 runs. Rounds go over all candidates (not each candidate's runs back to back), so
// that a change in the machine's load hits every candidate alike.
limit_cfg bench_limit_calibrate(gather_limit_fn gather, const gather_in *g, int threads) {
    enum { NC = 12, ROUNDS = 3 };
    static const int dist[] = {8, 16, 32};
    limit_cfg c[NC];
    double v[NC][ROUNDS];
    for (int k = 0; k < NC; k++) {
        c[k] = (limit_cfg){dist[k / 4], (k / 2) % 2, k % 2};
        gather(g, c[k], threads);
    }
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < NC; k++) {
            const double t0 = bench_now_ms();
            gather(g, c[k], threads);
            v[k][r] = bench_now_ms() - t0;
        }
    }
    int best = 0;
    for (int k = 1; k < NC; k++)
        if (bench_median(v[k], ROUNDS) < bench_median(v[best], ROUNDS)) best = k;
    return c[best];
}
