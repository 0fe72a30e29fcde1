// The dtypes' conversions (the traits are public: ember/dtype.h, src/core/dtype.c): fp32 <->
// fp16/bf16 with round to nearest even, stochastic rounding (its random bits from ember/rng.h, the
// library's one generator), and whole rows between fp32 and a storage dtype.
#ifndef EMBER_CORE_DTYPE_H
#define EMBER_CORE_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ember/dtype.h"
#include "ember/rng.h"

// The inline conversions below are EMBER_HD (ember/rng.h): the cuda backend's kernels call these
// same functions, so both backends round alike.

// n values between fp32 and storage dtype dt (a store rounds to nearest even), in host memory.
// Both do nothing for a dtype that is not a storage dtype.
void ember__load_row(ember_dtype dt, const void *src, float *dst, int32_t n);
void ember__store_row(ember_dtype dt, void *dst, const float *src, int32_t n);

// The index of the first NaN or infinite value among n values of dtype dt at src, or -1 (also
// for a dtype that holds no floats); its value as fp32 in *value.
int64_t ember__first_nonfinite(ember_dtype dt, const void *src, int64_t n, float *value);

static inline EMBER_HD uint32_t ember__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline EMBER_HD float ember__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline EMBER_HD float ember__bf16_to_f32(uint16_t h) { return ember__bits_f32((uint32_t)h << 16); }

static inline EMBER_HD uint16_t ember__f32_to_bf16(float f) {
    uint32_t u = ember__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                          // nearest even
    return (uint16_t)(u >> 16);
}

// bf16 stochastic rounding: add 16 random bits below the kept mantissa, then truncate. The
// result is the upper or lower neighbour with probability proportional to proximity, so the
// rounding is unbiased in expectation.
static inline EMBER_HD uint16_t ember__f32_to_bf16_sr(float f, uint32_t rnd) {
    uint32_t u = ember__f32_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return ember__f32_to_bf16(f);
    uint32_t r = u + (rnd & 0xffffu);
    if ((r & 0x7f800000u) == 0x7f800000u) return ember__f32_to_bf16(f); // would overflow to inf
    return (uint16_t)(r >> 16);
}

// OCP fp8 (the wire's fp8_e4m3 and fp8_e5m2), e5m2 = 0 for E4M3 (bias 7, 3 mantissa bits, largest
// finite 448, no infinity: S.1111.111 is NaN) and 1 for E5M2 (bias 15, 2 mantissa bits, largest
// finite 57344, infinities and NaNs as fp16's). Round to nearest even, subnormals kept (E4M3's
// step 2^-9, E5M2's 2^-16). A finite value that rounds beyond the largest finite becomes the
// format's NaN (E4M3) or infinity (E5M2): ember__fp8_overflowed tells it from a non-finite input.
// NaN gives the format's NaN; an infinity gives E5M2's infinity, E4M3's NaN.
static inline EMBER_HD float ember__pow2f(int k) { return ember__bits_f32((uint32_t)(127 + k) << 23); } // normal k only

static inline EMBER_HD uint8_t ember__f32_to_fp8(float f, int e5m2) {
    const uint32_t u = ember__f32_bits(f), a = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, shift = 23 - mb;
    const uint32_t over = e5m2 ? 0x7cu : 0x7fu; // infinity, or E4M3's NaN
    if (a >= 0x7f800000u) return (uint8_t)(sign | (a > 0x7f800000u ? (e5m2 ? 0x7eu : 0x7fu) : over));
    if (a < (uint32_t)(128 - bias) << 23) {
        // Below the smallest normal 2^(1 - bias): adding 2^(1 - bias - mb + 23), whose ulp is the
        // subnormal step, rounds a to a whole number of steps (to nearest even, in hardware).
        const float magic = ember__pow2f(24 - bias - mb);
        return (uint8_t)(sign | (ember__f32_bits(ember__bits_f32(a) + magic) - ember__f32_bits(magic)));
    }
    const uint32_t r = a + (1u << (shift - 1)) - 1u + ((a >> shift) & 1u); // nearest even at bit `shift`
    const uint32_t code = (r >> shift) - ((uint32_t)(127 - bias) << mb);   // rebiased exponent, mantissa
    return (uint8_t)(sign | (code >= over ? over : code));
}

static inline EMBER_HD float ember__fp8_to_f32(uint8_t h, int e5m2) {
    const int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const unsigned field = (h & 0x7fu) >> mb, mant = h & ((1u << mb) - 1u);
    float v;
    if (e5m2 && field == 31u) v = mant ? NAN : INFINITY;
    else if (!e5m2 && field == 15u && mant == 7u) v = NAN;
    else if (field == 0u) v = (float)mant * ember__pow2f(1 - bias - mb);
    else v = (float)(mant | 1u << mb) * ember__pow2f((int)field - bias - mb);
    return h & 0x80u ? -v : v;
}

// 1 when finite f became a non-finite code h (it overflowed the format).
static inline EMBER_HD int ember__fp8_overflowed(float f, uint8_t h, int e5m2) {
    const unsigned c = h & 0x7fu;
    return (ember__f32_bits(f) & 0x7f800000u) != 0x7f800000u && (e5m2 ? c >= 0x7cu : c == 0x7fu);
}

static inline EMBER_HD float ember__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        // zero or subnormal: man * 2^-24
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    // Inf, or NaN quieted with its payload kept: what F16C's vcvtph2ps gives, so every kernel
    // variant converts NaN bits alike.
    if (exp == 31) return ember__bits_f32(sign | 0x7f800000u | (man ? 0x400000u : 0u) | (man << 13));
    return ember__bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline EMBER_HD uint16_t ember__f32_to_f16(float f) {
    uint32_t u = ember__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    // NaN: quieted, the payload's top 10 bits kept (vcvtps2ph's result, bit for bit).
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
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

// fp16 stochastic rounding: unbiased in expectation, with a form every kernel variant computes
// bit for bit (integer adds and exact float steps).
//   fp16 normal range [2^-14, 65504): add 13 random bits below the kept mantissa and truncate,
//     as bf16 does: the result rounds up with probability (dropped bits) / 2^13;
//   fp16 subnormal range (steps of 2^-24): x = |f| * 2^24 (exact), round up when 24 random bits
//     scaled to [0, 1) fall below frac(x) (exact);
//   NaN, inf and |f| >= 65504: round to nearest (no stochastic overflow to inf).
static inline EMBER_HD uint16_t ember__f32_to_f16_sr(float f, uint32_t rnd) {
    const uint32_t u = ember__f32_bits(f), a = u & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (!(ember__bits_f32(a) < 65504.0f)) return ember__f32_to_f16(f);
    if (a >= 0x38800000u) return (uint16_t)(sign | (((a + (rnd & 0x1fffu)) >> 13) - (112u << 10)));
    const float x = ember__bits_f32(a) * 0x1p24f;
    const uint32_t t = (uint32_t)x;
    const float frac = x - (float)t;
    return (uint16_t)(sign | (t + ((float)(rnd >> 8) * 0x1p-24f < frac)));
}

// Random bits for stochastic rounding of column d of a row: murmur3's 32-bit finaliser of the
// row's key (ember__sr_row_key) and the column. 32-bit multiplies, so a vector of columns costs
// a few instructions per element on every variant.
static inline EMBER_HD uint32_t ember__sr_hash(uint32_t row_key, uint32_t d) {
    uint32_t h = row_key ^ (d * 0x9e3779b9u);
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

// The stochastic-rounding key of one row update: a function of (seed, table, step, row) only,
// so the rounding does not depend on threads or on the order rows are updated in.
static inline EMBER_HD uint32_t ember__sr_row_key(uint64_t step_key, int64_t row) {
    return (uint32_t)(ember_splitmix64(step_key ^ ember_splitmix64((uint64_t)row)) >> 32);
}

// Uniform in [0, 1) with 24 random bits of x.
static inline float ember__u01(uint64_t x) { return (float)(x >> 40) * 0x1p-24f; }

#endif
