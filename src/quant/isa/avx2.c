// The AVX2 quantized pooling variant (AVX2 + FMA + F16C target flags): the loops of
// quant/isa/vector.h over ymm registers, up to 8 accumulators (64 columns) per pass over a bag's
// ids. int8 values widened with vpmovzxbd, int4 nibbles split (even and odd elements apart, or
// interleaved back into element order), int2 fields shifted out of a broadcast word lane by lane,
// fp16 rows and the fp16 scale and bias widened with vcvtph2ps (exact), then one fused multiply-add
// per element: the generic variant's operations (quant/isa/impl.h), so its bits.
#include <immintrin.h>

#define VW 8
#include "quant/isa/impl.h"

typedef __m256 vf;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline void v_store(float *p, vf x) { _mm256_storeu_ps(p, x); }

static inline __attribute__((always_inline)) vf v_load(ember_qtype t, const unsigned char *row, int32_t d) {
    switch (t) {
    case EMBER_QTYPE_FP32: return _mm256_loadu_ps((const float *)(const void *)(row + 4 * (size_t)d));
    case EMBER_QTYPE_FP16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)d)));
    case EMBER_QTYPE_INT8: return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + d))));
    case EMBER_QTYPE_INT4: { // 4 bytes, low nibble first
        int32_t u;
        memcpy(&u, row + d / 2, 4);
        const __m128i b4 = _mm_cvtsi32_si128(u), m = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(b4, m), hi = _mm_and_si128(_mm_srli_epi16(b4, 4), m);
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
    }
    default: { // INT2: 16 bits, element i at bit 2i
        uint16_t u;
        memcpy(&u, row + d / 4, 2);
        const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(u), sh), _mm256_set1_epi32(3)));
    }
    }
}

// A level table of 16 entries would need two 8-entry permutes and a blend: the values are
// computed instead, one conversion and one fused multiply-add each.
static inline vf v_levels(ember_qtype t, vf scale, vf bias) {
    (void)t, (void)scale, (void)bias;
    return v_zero();
}

static inline __attribute__((always_inline)) vf v_values(ember_qtype t, const unsigned char *row, int32_t d, vf scale,
                                                         vf bias, vf levels) {
    (void)levels;
    const vf x = v_load(t, row, d);
    return t >= EMBER_QTYPE_INT8 ? v_fma(scale, x, bias) : x;
}

static inline void v_scale_bias16(const unsigned char *p, vf *scale, vf *bias) {
    int32_t u;
    memcpy(&u, p, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(u)); // lane 0 scale, lane 1 bias
    *scale = _mm256_broadcastss_ps(f);
    *bias = _mm256_broadcastss_ps(_mm_movehdup_ps(f));
}

// 8 bytes in 8 lanes: low nibbles the even elements, high nibbles the odd ones, each converted and
// scaled (one fused multiply-add).
static inline void v_int4_pairs(const unsigned char *p, vf scale, vf bias, vf levels, vf *even, vf *odd) {
    (void)levels;
    const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    *even = v_fma(scale, _mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32(15))), bias);
    *odd = v_fma(scale, _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4)), bias);
}

// even = e0 e2 e4 e6 | e8 .. e14, odd = e1 e3 e5 e7 | e9 .. e15.
static inline void v_store_pairs(float *out, vf even, vf odd) {
    const __m256 a = _mm256_unpacklo_ps(even, odd), c = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(out, _mm256_permute2f128_ps(a, c, 0x20));
    _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(a, c, 0x31));
}

#include "quant/isa/vector.h"

EMBER__QUANT_KERNELS(avx2, EMBER_ISA_AVX2)
