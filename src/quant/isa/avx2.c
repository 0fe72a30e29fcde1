// The AVX2 quantized pooling variant (AVX2 + F16C target flags): up to 8 ymm accumulators
// (64 columns) per pass over a bag's ids; int8 values widened with vpmovzxbd, int4 nibbles split
// and interleaved back into element order, int2 fields shifted out of a broadcast word lane by
// lane, fp16 rows and the fp16 scale and bias widened with vcvtph2ps (exact), then one fused
// multiply-add per element: the same IEEE operations as the generic variant (quant/isa/impl.h), so
// the same bits.
#include <immintrin.h>

#define VW 8
#include "quant/isa/impl.h"

// 8 elements of a row from element d (d a multiple of 8) as fp32, before scale and bias for the
// integer types.
static inline __attribute__((always_inline)) __m256 load8(ember_qtype t, const unsigned char *row, int32_t d) {
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

static inline __attribute__((always_inline)) void pool_fixed(const ember__qbag *b, int32_t d0, float inv, float *out,
                                                             const int NV, const ember_qtype T, const int W) {
    __m256 acc[8];
    for (int v = 0; v < NV; v++) acc[v] = _mm256_setzero_ps();
    const int quant = T >= EMBER_QTYPE_INT8;
    // Where the scale and bias sit: INT8 fp32 after D bytes; INT4/INT2 fp16 after the packed bytes.
    const size_t sb = T == EMBER_QTYPE_INT8 ? (size_t)b->D
                      : T == EMBER_QTYPE_INT4 ? ((size_t)b->D + 1) / 2
                                              : ((size_t)b->D + 3) / 4;
    const int64_t pd = prefetch_ids(b->rb);
    for (int64_t j = 0; j < b->n; j++) {
        if (d0 == 0) prefetch_ahead(b, j, pd);
        const int64_t r = b->rows[j];
        if (r < 0) continue;
        const unsigned char *row = b->base + (size_t)r * b->rb;
        __m256 scale = _mm256_setzero_ps(), bias = scale;
        if (T == EMBER_QTYPE_INT8) {
            float f[2];
            memcpy(f, row + sb, 8);
            scale = _mm256_set1_ps(f[0]);
            bias = _mm256_set1_ps(f[1]);
        } else if (quant) {
            int32_t u;
            memcpy(&u, row + sb, 4);
            const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(u)); // lane 0 scale, lane 1 bias
            scale = _mm256_broadcastss_ps(f);
            bias = _mm256_broadcastss_ps(_mm_movehdup_ps(f));
        }
        const __m256 wj = _mm256_set1_ps(W ? b->weights[j] : 1.0f);
        for (int v = 0; v < NV; v++) {
            __m256 x = load8(T, row, d0 + VW * v);
            if (quant) x = _mm256_fmadd_ps(scale, x, bias);
            if (W) x = _mm256_mul_ps(wj, x);
            acc[v] = _mm256_add_ps(acc[v], x);
        }
    }
    if (inv != 0.0f)
        for (int v = 0; v < NV; v++) acc[v] = _mm256_mul_ps(acc[v], _mm256_set1_ps(inv));
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(out + VW * v, acc[v]);
}

// INT4 in groups of 16 elements (8 bytes): one widening load gives 8 bytes in 8 lanes, whose low
// nibbles are the group's even elements and high nibbles its odd ones. Even and odd elements are
// summed in accumulators of their own (each element still sums its ids in order, with the same
// operations: the same bits) and interleaved back once per bag.
static inline __attribute__((always_inline)) void pool_int4_pairs(const ember__qbag *b, int32_t d0, float inv,
                                                                  float *out, const int NP, const int W) {
    __m256 ev[4], od[4];
    for (int v = 0; v < NP; v++) ev[v] = od[v] = _mm256_setzero_ps();
    const size_t sb = ((size_t)b->D + 1) / 2;
    const int64_t pd = prefetch_ids(b->rb);
    const __m256i m = _mm256_set1_epi32(15);
    for (int64_t j = 0; j < b->n; j++) {
        if (d0 == 0) prefetch_ahead(b, j, pd);
        const int64_t r = b->rows[j];
        if (r < 0) continue;
        const unsigned char *row = b->base + (size_t)r * b->rb;
        int32_t u;
        memcpy(&u, row + sb, 4);
        const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(u));
        const __m256 scale = _mm256_broadcastss_ps(f), bias = _mm256_broadcastss_ps(_mm_movehdup_ps(f));
        const __m256 wj = _mm256_set1_ps(W ? b->weights[j] : 1.0f);
        for (int v = 0; v < NP; v++) {
            const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + d0 / 2 + 8 * v)));
            __m256 lo = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(_mm256_and_si256(x, m)), bias);
            __m256 hi = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 4)), bias);
            if (W) lo = _mm256_mul_ps(wj, lo), hi = _mm256_mul_ps(wj, hi);
            ev[v] = _mm256_add_ps(ev[v], lo);
            od[v] = _mm256_add_ps(od[v], hi);
        }
    }
    for (int v = 0; v < NP; v++) {
        if (inv != 0.0f) ev[v] = _mm256_mul_ps(ev[v], _mm256_set1_ps(inv)), od[v] = _mm256_mul_ps(od[v], _mm256_set1_ps(inv));
        // ev = e0 e2 e4 e6 | e8 .. e14, od = e1 e3 e5 e7 | e9 .. e15
        const __m256 a = _mm256_unpacklo_ps(ev[v], od[v]), c = _mm256_unpackhi_ps(ev[v], od[v]);
        _mm256_storeu_ps(out + 16 * v, _mm256_permute2f128_ps(a, c, 0x20));
        _mm256_storeu_ps(out + 16 * v + 8, _mm256_permute2f128_ps(a, c, 0x31));
    }
}

#define POOL_PAIRS(W)                                              \
    switch (nv / 2) {                                              \
    case 1: pool_int4_pairs(b, d0, inv, out, 1, W); return 1;      \
    case 2: pool_int4_pairs(b, d0, inv, out, 2, W); return 1;      \
    case 3: pool_int4_pairs(b, d0, inv, out, 3, W); return 1;      \
    default: pool_int4_pairs(b, d0, inv, out, 4, W); return 1;     \
    }

#define POOL_NV(T, W)                                       \
    switch (nv) {                                           \
    case 1: pool_fixed(b, d0, inv, out, 1, T, W); return 1;      \
    case 2: pool_fixed(b, d0, inv, out, 2, T, W); return 1;      \
    case 3: pool_fixed(b, d0, inv, out, 3, T, W); return 1;      \
    case 4: pool_fixed(b, d0, inv, out, 4, T, W); return 1;      \
    case 5: pool_fixed(b, d0, inv, out, 5, T, W); return 1;      \
    case 6: pool_fixed(b, d0, inv, out, 6, T, W); return 1;      \
    case 7: pool_fixed(b, d0, inv, out, 7, T, W); return 1;      \
    default: pool_fixed(b, d0, inv, out, 8, T, W); return 1;     \
    }
#define POOL_T(T)                   \
    if (b->weights) POOL_NV(T, 1)   \
    else POOL_NV(T, 0)

static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float inv, float *out) {
    switch (b->qtype) {
    case EMBER_QTYPE_FP32: POOL_T(EMBER_QTYPE_FP32)
    case EMBER_QTYPE_FP16: POOL_T(EMBER_QTYPE_FP16)
    case EMBER_QTYPE_INT8: POOL_T(EMBER_QTYPE_INT8)
    case EMBER_QTYPE_INT4:
        if (nv % 2 == 0) {
            if (b->weights) POOL_PAIRS(1)
            else POOL_PAIRS(0)
        }
        POOL_T(EMBER_QTYPE_INT4)
    case EMBER_QTYPE_INT2: POOL_T(EMBER_QTYPE_INT2)
    }
    return 0;
}

EMBER__QUANT_KERNELS(avx2, EMBER_ISA_AVX2)
