// fp32 <-> fp16/bf16 conversions (round to nearest even), stochastic rounding and the
// counter-based random numbers used for initialisation and rounding.
#ifndef EMBER_TBE_DTYPE_H
#define EMBER_TBE_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t ember__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float ember__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float ember__bf16_to_f32(uint16_t h) { return ember__bits_f32((uint32_t)h << 16); }

static inline uint16_t ember__f32_to_bf16(float f) {
    uint32_t u = ember__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                          // nearest even
    return (uint16_t)(u >> 16);
}

// bf16 stochastic rounding: add 16 random bits below the kept mantissa, then truncate. The
// result is the upper or lower neighbour with probability proportional to proximity, so the
// rounding is unbiased in expectation.
static inline uint16_t ember__f32_to_bf16_sr(float f, uint32_t rnd) {
    uint32_t u = ember__f32_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return ember__f32_to_bf16(f);
    uint32_t r = u + (rnd & 0xffffu);
    if ((r & 0x7f800000u) == 0x7f800000u) return ember__f32_to_bf16(f); // would overflow to inf
    return (uint16_t)(r >> 16);
}

static inline float ember__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        // zero or subnormal: man * 2^-24
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return ember__bits_f32(sign | 0x7f800000u | (man << 13));
    return ember__bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t ember__f32_to_f16(float f) {
    uint32_t u = ember__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   // NaN
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to inf (>= 65520)
    if (a < 0x38800000u) {
        // subnormal or zero in fp16: value / 2^-24 rounded to nearest even integer
        float v = ember__bits_f32(a) * 0x1p24f;
        float r = nearbyintf(v);
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t m = a + 0xfffu + ((a >> 13) & 1u); // nearest even at bit 13
    return (uint16_t)(sign | (uint16_t)(((m >> 13) - (112u << 10)) & 0x7fffu));
}

// fp16 stochastic rounding: the magnitude lies between its truncation t and the next fp16 t+1;
// round up with probability (|f| - t) / (t+1 - t), so the rounding is unbiased in expectation.
static inline uint16_t ember__f32_to_f16_sr(float f, uint32_t rnd) {
    uint32_t u = ember__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (!(a < 65504.0f)) return ember__f32_to_f16(f); // NaN, inf, or at the top of the range
    uint16_t t;
    if (a < 0x1p-14f) t = (uint16_t)(a * 0x1p24f); // subnormal range: truncate a / 2^-24
    else t = (uint16_t)(((ember__f32_bits(a) >> 13) - (112u << 10)) & 0x7fffu);
    float lo = ember__f16_to_f32(t), hi = ember__f16_to_f32((uint16_t)(t + 1));
    if (a == lo) return (uint16_t)(sign | t);
    float p_up = (a - lo) / (hi - lo);
    float r = (float)(rnd >> 8) * 0x1p-24f;
    return (uint16_t)(sign | (r < p_up ? t + 1 : t));
}

// SplitMix64 finaliser: a counter-based generator, so the value for (seed, table, row, col)
// does not depend on the order or thread in which it is drawn.
static inline uint64_t ember__mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t ember__hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

// Uniform in [0, 1) with 24 random bits.
static inline float ember__u01(uint64_t x) { return (float)(x >> 40) * 0x1p-24f; }

#endif
