// floormod.h — v mod d, floored (never negative: numpy's %, TorchRec's `hashes`), for the 32-bit
// categorical values of TorchRec's day files, without a division per value: Lemire, Kaser and
// Kurz's "Faster remainder by direct computation" (2019) for d < 2^32, one 64-bit and one
// 128-bit multiply. Header-only.
#ifndef EMBER_APP_FLOORMOD_H
#define EMBER_APP_FLOORMOD_H

#include <stdint.h>

typedef struct floormod {
    uint64_t d;     // the divisor, >= 1
    uint64_t m;     // ceil(2^64 / d) for d < 2^32 (0 for d = 1: every remainder is 0)
    uint64_t two32; // 2^32 mod d
    int small;      // d < 2^32
} floormod;

static inline floormod floormod_of(int64_t d) {
    floormod f = {.d = (uint64_t)d, .small = (uint64_t)d < ((uint64_t)1 << 32)};
    if (f.small) {
        f.m = UINT64_MAX / f.d + 1;
        f.two32 = ((uint64_t)1 << 32) % f.d;
    }
    return f;
}

// v mod d in [0, d). Without a branch on v's sign: hashes are negative half the time, and a
// mispredicted branch per value cost more than the arithmetic.
static inline int64_t floormod32(int32_t v, const floormod *f) {
    const uint64_t neg = (uint64_t)0 - (uint64_t)(v < 0); // all ones for a negative v
    if (!f->small) return (int64_t)((uint64_t)(int64_t)v + (f->d & neg)); // |v| <= 2^31 < d
    const uint32_t u = (uint32_t)v; // v, or v + 2^32 when negative
    const uint64_t r = (uint64_t)(((unsigned __int128)(f->m * u) * f->d) >> 64); // u mod d
    const uint64_t wrapped = r + (f->d & ((uint64_t)0 - (uint64_t)(r < f->two32))) - f->two32; // (u - 2^32) mod d
    return (int64_t)(r ^ ((r ^ wrapped) & neg));
}

// A row's n values with a divisor each (a day file's 26 categorical columns): floormod32 of each,
// or, where every divisor is below 2^32 and `vec` allows (the context's kernel variant is AVX2 or
// above), four at a time in double precision (floormod.c): the quotient x * (1 / d) truncated is
// the true one or one off (relative error 2^-52 on a quotient below 2^31), every product and
// difference is an exact integer below 2^53, two corrections bring the remainder into [0, d).
// The same integers either way; about twice the rows/s where the per-value multiply-high chain of
// floormod32 was the day-file reader's hot loop.
#define FLOORMOD_ROW_MAX 64
typedef struct floormod_row {
    int n, vec;
    floormod f[FLOORMOD_ROW_MAX];
    double d[FLOORMOD_ROW_MAX], inv[FLOORMOD_ROW_MAX];
} floormod_row;

// divisors[0..n), each >= 1, n <= FLOORMOD_ROW_MAX; vec: the vector path may run.
void floormod_row_init(floormod_row *m, const int64_t *divisors, int n, int vec);
// out[i] = v[i] mod divisors[i], floored.
void floormod_row_apply(const floormod_row *m, const int32_t *v, int64_t *out);

#endif
