// MLPerf's synthetic multi-hot materialisation as a pure function (multihot.h).
#include <stddef.h>

#include "multihot.h"

#include "ember/rng.h"

#define MULTIHOT_SEED 0x6d756c7469686f74ull // "multihot": fixed, as MLPerf's per-table seeds

const char *multihot_dist_name(int d) {
    return d == MULTIHOT_UNIFORM ? "uniform" : d == MULTIHOT_PARETO ? "pareto" : NULL;
}

void multihot_bag(multihot_dist d, int32_t f, int64_t rows, int64_t x, int32_t k, int64_t *out) {
    out[0] = x;
    ember_rng r = ember_rng_at(MULTIHOT_SEED, (uint64_t)f, (uint64_t)x);
    for (int32_t j = 1; j < k; j++) {
        const double u = ember_rng_uniform(&r);
        int64_t v;
        if (d == MULTIHOT_PARETO) {
            const double w = 1.0 / (1.0 - u), w4 = (w * w) * (w * w) - 1.0; // (1 - u)^-4 - 1 >= 0
            v = (int64_t)(w4 < 0x1p62 ? w4 : 0x1p62) % rows;
        } else {
            v = (int64_t)(u * (double)rows);
            if (v >= rows) v = rows - 1; // u * rows rounded up to rows
        }
        out[j] = v;
    }
}
