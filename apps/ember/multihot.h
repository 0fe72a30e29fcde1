// multihot.h — MLPerf DLRM-DCNv2's synthetic multi-hot inputs (--multi_hot_sizes): each sample's
// one id x of feature f becomes a bag of k_f ids, x followed by k_f - 1 ids that depend on (f, x)
// alone, as MLPerf's reference materialises them from a fixed per-table lookup of k_f - 1 extra ids
// per row (drawn uniform over the table's rows, or Pareto with shape 0.25 modulo the rows). So the
// MLPerf shape trains without its 3.8 TB of multi-hot files.
//
// Here the lookup is a pure function rather than a stored table (MLPerf's is rows x (k - 1) ids, 40M
// rows x up to 100 for its largest table): extra j of row x of feature f is a draw of the library's
// counter-based generator at (MULTIHOT_SEED, f, x), the j-th in sequence. The same distribution as
// MLPerf's, not its numbers (those come from numpy's seeded generator); the same ids on every rank,
// world size, thread count and host (IEEE arithmetic only: no libm call).
//
//   uniform: floor(u * rows)              u uniform in [0, 1)
//   pareto:  floor((1 - u)^-4 - 1) mod rows   (numpy's pareto(a = 0.25): Lomax), capped at 2^62
#ifndef EMBER_APP_MULTIHOT_H
#define EMBER_APP_MULTIHOT_H

#include <stdint.h>

typedef enum multihot_dist {
    MULTIHOT_UNIFORM = 0,
    MULTIHOT_PARETO = 1,
} multihot_dist;
#define MULTIHOT_DIST_COUNT 2
#define MULTIHOT_MAX_HOT 1024 // ids per bag: MLPerf's largest is 100

// "uniform", "pareto" (NULL outside the enum).
const char *multihot_dist_name(int d);

// The bag of feature f's row x (0 <= x < rows): out[0] = x, out[1..k) its extra ids, each in
// [0, rows). k >= 1. Local; thread-safe.
void multihot_bag(multihot_dist d, int32_t f, int64_t rows, int64_t x, int32_t k, int64_t *out);

#endif
