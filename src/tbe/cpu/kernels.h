// Helpers of the cpu backend's loops (forward.c, backward.c and the kernel variants in isa/):
// prefetch, work splitting, the fixed-order lane reduction.
#ifndef EMBER_TBE_CPU_KERNELS_H
#define EMBER_TBE_CPU_KERNELS_H

#include "core/dtype.h"
#include "tbe/cpu/cpu.h"

// Sum of 16 lanes in a fixed tree order (pairs 8 apart, then 4, 2, 1): the one horizontal
// reduction used by every row reduction, vector or not.
static inline float ember__sum16(const float *lane) {
    float a[8];
    for (int k = 0; k < 8; k++) a[k] = lane[k] + lane[k + 8];
    for (int k = 0; k < 4; k++) a[k] = a[k] + a[k + 4];
    for (int k = 0; k < 2; k++) a[k] = a[k] + a[k + 2];
    return a[0] + a[1];
}

// Software prefetch of a whole row into L2. On these machines (Zen 4/5 VMs) a row gather is
// latency-bound: L1-targeted prefetches run out of L1 miss buffers at ~25 lines in flight,
// while L2-targeted ones (locality 1, prefetcht2) let more misses be outstanding: measured
// 9 GB/s with prefetcht0 and 12-14 GB/s with prefetcht2 for 512-byte rows.
// always_inline matters: GCC's IPA pure-const pass deems a function whose only effect is
// __builtin_prefetch "const" and deletes calls to it that were not inlined early.
#define EMBER__PREFETCH_FN static inline __attribute__((always_inline))
EMBER__PREFETCH_FN void ember__prefetch_row(const void *p, size_t bytes) {
    const unsigned char *c = p;
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 1);
}

// Prefetches what updating `row` of tb touches: the stored row and its optimizer state. A read
// prefetch suffices for the read-modify-write: a line no other core holds arrives exclusive.
EMBER__PREFETCH_FN void ember__prefetch_update(const ember__table *tb, int64_t row) {
    ember__prefetch_row(ember__row_ptr(tb, row), tb->row_bytes);
    if (tb->m1) ember__prefetch_row(tb->m1 + (size_t)row * (size_t)tb->m1_cols, sizeof(float) * (size_t)tb->m1_cols);
    if (tb->m2) ember__prefetch_row(tb->m2 + (size_t)row * (size_t)tb->m2_cols, sizeof(float) * (size_t)tb->m2_cols);
}

// How many ids ahead to prefetch: about 128 cache lines ahead, at least 4 and at most 32 rows
// (16 rows of 512 bytes, 32 of 256). The gather limit's calibration (bench/tbe_bench.c) picks
// 16 rows of 512 bytes on these machines; shorter distances leave misses serialised, longer
// ones gain nothing.
static inline int ember__prefetch_ids(size_t row_bytes) {
    size_t n = row_bytes ? (size_t)(128 * 64) / row_bytes : 32;
    return n < 4 ? 4 : n > 32 ? 32 : (int)n;
}

// Parallel loops split their work into this many contiguous, cost-balanced chunks per thread
// and hand them out dynamically. Which thread takes a chunk never changes a result (each bag or
// row is computed by one thread, in a fixed order), and when the machine is shared a thread that
// gets descheduled no longer holds up the others at the end of a static half.
#define EMBER__CHUNKS_PER_THREAD 8
static inline int ember__chunks(int threads) { return threads > 1 ? threads * EMBER__CHUNKS_PER_THREAD : 1; }

// Splits items [0, n) with cumulative cost prefix[i] + per_item * i (prefix non-decreasing,
// prefix[0] = 0) into `parts` contiguous ranges of about equal cost; returns the start of part
// `k` (k = parts gives n). The same split for the same inputs whatever the thread timing.
static inline int64_t ember__split(const int64_t *prefix, int64_t n, int64_t per_item, int k, int parts) {
    if (k <= 0) return 0;
    if (k >= parts) return n;
    const int64_t total = prefix[n] + per_item * n;
    const int64_t target = (int64_t)((double)total * k / parts);
    int64_t lo = 0, hi = n;
    while (lo < hi) { // smallest i with cost(i) >= target
        int64_t mid = lo + (hi - lo) / 2;
        if (prefix[mid] + per_item * mid >= target) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

#endif
