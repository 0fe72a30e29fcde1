// The AVX2 quantized pooling variant (AVX2 + F16C target flags): up to 4 ymm accumulators
// (32 columns) per pass over a bag's ids; int8 values widened with vpmovzxbd, int4 nibbles split
// and interleaved back into element order first, fp16 rows widened with vcvtph2ps (exact). The
// same IEEE operations per element as the generic variant (quant/isa/impl.h), so the same bits.
#include <immintrin.h>

#define VW 8
#include "quant/isa/impl.h"

// 8 elements of a row from element d (d a multiple of 8) as fp32, before scale and bias for
// the integer types.
static inline __attribute__((always_inline)) __m256 load8(ember_qtype t, const unsigned char *row, int32_t d) {
    switch (t) {
    case EMBER_QTYPE_FP32: return _mm256_loadu_ps((const float *)(const void *)(row + 4 * (size_t)d));
    case EMBER_QTYPE_FP16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)d)));
    case EMBER_QTYPE_INT8: return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + d))));
    default: { // INT4: 4 bytes, low nibble first
        int32_t u;
        memcpy(&u, row + d / 2, 4);
        const __m128i b4 = _mm_cvtsi32_si128(u), m = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(b4, m), hi = _mm_and_si128(_mm_srli_epi16(b4, 4), m);
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
    }
    }
}

static inline __attribute__((always_inline)) void pool_fixed(const ember__qbag *b, int32_t d0, float *out,
                                                             const int NV, const ember_qtype T, const int W) {
    __m256 acc[4];
    for (int v = 0; v < NV; v++) acc[v] = _mm256_setzero_ps();
    const int quant = T == EMBER_QTYPE_INT8 || T == EMBER_QTYPE_INT4;
    for (int64_t j = 0; j < b->n; j++) {
        if (d0 == 0 && j + QUANT_PREFETCH < b->n && b->rows[j + QUANT_PREFETCH] >= 0) {
            const char *p = (const char *)b->base + (size_t)b->rows[j + QUANT_PREFETCH] * b->rb;
            for (size_t o = 0; o < b->rb; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
        }
        const int64_t r = b->rows[j];
        if (r < 0) continue;
        const unsigned char *row = b->base + (size_t)r * b->rb;
        __m256 scale = _mm256_setzero_ps(), bias = scale;
        if (quant) {
            float s, bb;
            scale_bias(T, row, b->D, &s, &bb);
            scale = _mm256_set1_ps(s);
            bias = _mm256_set1_ps(bb);
        }
        const __m256 wj = _mm256_set1_ps(W ? b->weights[j] : 1.0f);
        for (int v = 0; v < NV; v++) {
            __m256 x = load8(T, row, d0 + VW * v);
            if (quant) x = _mm256_add_ps(_mm256_mul_ps(scale, x), bias);
            if (W) x = _mm256_mul_ps(wj, x);
            acc[v] = _mm256_add_ps(acc[v], x);
        }
    }
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(out + VW * v, acc[v]);
}

#define POOL_NV(T, W)                                       \
    switch (nv) {                                           \
    case 1: pool_fixed(b, d0, acc, 1, T, W); return 1;      \
    case 2: pool_fixed(b, d0, acc, 2, T, W); return 1;      \
    case 3: pool_fixed(b, d0, acc, 3, T, W); return 1;      \
    default: pool_fixed(b, d0, acc, 4, T, W); return 1;     \
    }
#define POOL_T(T)                   \
    if (b->weights) POOL_NV(T, 1)   \
    else POOL_NV(T, 0)

static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float *acc) {
    switch (b->qtype) {
    case EMBER_QTYPE_FP32: POOL_T(EMBER_QTYPE_FP32)
    case EMBER_QTYPE_FP16: POOL_T(EMBER_QTYPE_FP16)
    case EMBER_QTYPE_INT8: POOL_T(EMBER_QTYPE_INT8)
    case EMBER_QTYPE_INT4: POOL_T(EMBER_QTYPE_INT4)
    default: return 0;
    }
}

EMBER__QUANT_KERNELS(avx2, EMBER_ISA_AVX2)
