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

#endif
