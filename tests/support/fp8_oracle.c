#include "fp8_oracle.h"

#include <math.h>

static int mant_bits(int e5m2) { return e5m2 ? 2 : 3; }
static int bias_of(int e5m2) { return e5m2 ? 15 : 7; }

double fp8_oracle_value(unsigned h, int e5m2) {
    const int mb = mant_bits(e5m2), bias = bias_of(e5m2);
    const unsigned e = (h >> mb) & (e5m2 ? 31u : 15u), m = h & ((1u << mb) - 1u);
    const double sign = (h & 0x80u) ? -1.0 : 1.0;
    if (e5m2 && e == 31u) return m ? NAN : sign * INFINITY;
    if (!e5m2 && e == 15u && m == 7u) return NAN;
    if (e == 0u) return sign * ldexp((double)m, 1 - bias - mb);
    return sign * ldexp(1.0 + (double)m / (double)(1u << mb), (int)e - bias);
}

double fp8_oracle_round(double x, int e5m2, int *overflow) {
    double best = 0, bestd = INFINITY;
    int best_even = 1;
    const double a = fabs(x);
    for (unsigned h = 0; h < 0x80u; h++) {
        const double v = fp8_oracle_value(h, e5m2);
        if (isnan(v) || isinf(v)) continue;
        const double d = fabs(a - v);
        const int even = (h & 1u) == 0;
        if (d < bestd || (d == bestd && even && !best_even)) best = v, bestd = d, best_even = even;
    }
    // The first value past the largest finite: E4M3 1.111b x 2^8 = 480 (mantissa odd) after 448,
    // E5M2 2^16 = 65536 (mantissa even) after 57344. x is nearer it beyond their midpoint.
    const double top = e5m2 ? 57344.0 : 448.0, past = e5m2 ? 65536.0 : 480.0, mid = (top + past) / 2;
    *overflow = a > mid || (a == mid && e5m2);
    return x < 0 || (x == 0 && signbit(x)) ? -best : best;
}
