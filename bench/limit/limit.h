// The gather limit of `ember bench tbe`: the fastest plain loop we know for "read these rows in
// this order and sum them per bag" (software prefetch, OpenMP over bags like the kernel, sums in
// registers), reading the collection's own slab. One copy per kernel variant (generic.c, avx2.c,
// avx512.c, each compiled with that variant's target flags, sharing impl.h), so every variant is
// measured against a limit written for the same instructions: a limit slower than a peer's kernel
// would be no limit.
#ifndef EMBER_BENCH_LIMIT_H
#define EMBER_BENCH_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "ember/core.h"
#include "ember/ebc.h"
#include "tbe_bench.h"

// What the limit loop reads: the collection's own rows (the same slab and pages as the kernel).
typedef struct gather_in {
    const tbe_bench_shape *s;
    ember_dtype dtype;
    const unsigned char *base[64]; // table t's first row
    size_t row_bytes;
    const int64_t *values;
    float *out; // [B, T*D]
} gather_in;

// A configuration of the limit loop: prefetch distance in ids, prefetch into L1 (hint 0) or L2
// (hint 1), sums in memory (regs 0) or in registers (regs 1). Calibrated per case.
typedef struct limit_cfg {
    int pd, hint, regs;
} limit_cfg;

typedef void (*gather_limit_fn)(const gather_in *g, limit_cfg lc, int threads);

// The fastest of the limit loop's 12 configurations on g at this thread count (bench/limit/dispatch.c).
limit_cfg bench_limit_calibrate(gather_limit_fn gather, const gather_in *g, int threads);

// The limit loop for a kernel variant (the generic one where the bench was built without it).
gather_limit_fn bench_gather_limit(ember_isa isa);
extern const gather_limit_fn bench_gather_limit_generic, bench_gather_limit_avx2, bench_gather_limit_avx512;

#endif
