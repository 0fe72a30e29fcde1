// The AVX-512 quantized pooling variant (F, BW, VL, DQ target flags): the loops of
// quant/isa/vector.h over zmm registers, up to 8 accumulators (128 columns) per pass over a bag's
// ids. int8 values widened with vpmovzxbd, converted and scaled (one fused multiply-add each); int4
// nibbles (even and odd elements apart, or interleaved into element order) and int2 fields (shifted
// out of a broadcast word lane by lane) index a table of the row's level values, each computed with
// the same fused multiply-add; fp16 rows and the fp16 scale and bias widened with vcvtph2ps (exact):
// the generic variant's operations (quant/isa/impl.h), so its bits.
#include <immintrin.h>

#define VW 16
#include "quant/isa/impl.h"

typedef __m512 vf;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline void v_store(float *p, vf x) { _mm512_storeu_ps(p, x); }

// The row's level values for INT4 (lane q = fmaf(scale, q, bias), q = 0..15) and INT2 (lane i the
// value of level i & 3: vpermps reads an index's low 4 bits, so a 2-bit field needs no mask): each
// element's own operation, done once per level instead of once per element.
static inline __attribute__((always_inline)) vf v_levels(ember_qtype t, vf scale, vf bias) {
    if (t == EMBER_QTYPE_INT4)
        return v_fma(scale, _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), bias);
    if (t == EMBER_QTYPE_INT2)
        return v_fma(scale, _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3), bias);
    return v_zero();
}

static inline __attribute__((always_inline)) vf v_values(ember_qtype t, const unsigned char *row, int32_t d, vf scale,
                                                         vf bias, vf levels) {
    switch (t) {
    case EMBER_QTYPE_FP32: return _mm512_loadu_ps(row + 4 * (size_t)d);
    case EMBER_QTYPE_FP16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)d)));
    case EMBER_QTYPE_INT8:
        return v_fma(scale, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + d)))), bias);
    case EMBER_QTYPE_INT4: { // 8 bytes, low nibble first: element i's nibble in lane i
        const __m128i b8 = _mm_loadl_epi64((const __m128i *)(row + d / 2)), m = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(b8, m), hi = _mm_and_si128(_mm_srli_epi16(b8, 4), m);
        return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), levels);
    }
    default: { // INT2: one 32-bit word, element i at bit 2i, shifted down to lane i's low bits
        int32_t u;
        memcpy(&u, row + d / 4, 4);
        const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        return _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi32(u), sh), levels);
    }
    }
}

static inline void v_scale_bias16(const unsigned char *p, vf *scale, vf *bias) {
    int32_t u;
    memcpy(&u, p, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(u)); // lane 0 scale, lane 1 bias
    *scale = _mm512_broadcastss_ps(f);
    *bias = _mm512_broadcastss_ps(_mm_movehdup_ps(f));
}

// 16 bytes in 16 lanes: the even elements' values looked up by the low nibbles, the odd ones' by the
// high nibbles (vpermps reads the low 4 bits of each lane's index: no mask).
static inline void v_int4_pairs(const unsigned char *p, vf scale, vf bias, vf levels, vf *even, vf *odd) {
    (void)scale, (void)bias;
    const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    *even = _mm512_permutexvar_ps(x, levels);
    *odd = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), levels);
}

static inline void v_store_pairs(float *out, vf even, vf odd) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(even, lo, odd));
    _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(even, hi, odd));
}

#include "quant/isa/vector.h"

EMBER__QUANT_KERNELS(avx512, EMBER_ISA_AVX512)
