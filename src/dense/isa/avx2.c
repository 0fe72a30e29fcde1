// The AVX2 dense variant (AVX2 + FMA target flags): register tiles of up to 8 rows x 24 columns,
// one ymm accumulator per 8 outputs of a row, vfmadd231ps against the packed row of B: lane j of
// accumulator (r, v) is exactly the chain of output (r, 8v + j), so the bits are the generic
// variant's fmaf chains. Column tails use vmaskmovps (C is never touched past its row width).
#include <immintrin.h>

#define EMBER__DENSE_COLSUM_W 32
#include "dense/isa/impl.h"

#define VW 8

// Register tiles by output width (16 ymm registers): up to 8 columns 8 x 8 (8 chains in flight:
// the FMA latency times its two ports), up to 24 4 x 24, wider 6 x 16 (12 accumulators).
static void geom(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g) {
    (void)M, (void)K, (void)ta;
    int32_t mr, nr;
    if (N <= 8) mr = 8, nr = 8;
    else if (N > 16 && N <= 24) mr = 4, nr = 24;
    else mr = 6, nr = 16;
    const int64_t kc = 16384 / (4 * nr);
    *g = (ember__gemm_geom){.mr = mr, .nr = nr, .kc = kc, .mc = 96, .nc = (384 / nr) * nr};
}

static inline __attribute__((always_inline)) __m256i tail_mask(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

static inline __attribute__((always_inline)) void tile_fixed(const tile_args *t, const int MR, const int NV,
                                                             const int TA) {
    __m256 acc[8][3];
    if (t->first) {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
    } else {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_load_ps(t->p + r * t->ldp + VW * v);
    }
    const int64_t kb = t->kb, lda = t->lda, ldb = t->ldb;
    const float *b = t->b;
    if (kb > 0 && TA) {
        const float *a = t->a;
        for (int64_t k = 0; k < kb; k++) {
            __m256 bv[3];
            for (int v = 0; v < NV; v++) bv[v] = _mm256_load_ps(b + VW * v);
            for (int r = 0; r < MR; r++) {
                const __m256 av = _mm256_broadcast_ss(a + r);
                for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
            }
            a += lda;
            b += ldb;
        }
    } else if (kb > 0) {
        const float *ar[8];
        for (int r = 0; r < MR; r++) ar[r] = t->a + r * lda;
        for (int64_t k = 0; k < kb; k++) {
            __m256 bv[3];
            for (int v = 0; v < NV; v++) bv[v] = _mm256_load_ps(b + VW * v);
            for (int r = 0; r < MR; r++) {
                const __m256 av = _mm256_broadcast_ss(ar[r] + k);
                for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
            }
            b += ldb;
        }
    }
    if (!t->last) {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) _mm256_store_ps(t->p + r * t->ldp + VW * v, acc[r][v]);
        return;
    }
    const __m256 zero = _mm256_setzero_ps();
    for (int v = 0; v < NV; v++) {
        const int rest = t->nr - VW * v;
        const __m256i mk = tail_mask(rest);
        const __m256 bias = t->bias ? _mm256_maskload_ps(t->bias + VW * v, mk) : zero;
        for (int r = 0; r < MR; r++) {
            float *c = t->c + r * t->ldc + VW * v;
            __m256 s = acc[r][v];
            if (t->accumulate) s = _mm256_add_ps(_mm256_maskload_ps(c, mk), s);
            if (t->bias) s = _mm256_add_ps(s, bias);
            if (t->relu) s = _mm256_blendv_ps(s, zero, _mm256_cmp_ps(s, zero, _CMP_LE_OQ));
            if (rest >= VW) _mm256_storeu_ps(c, s);
            else _mm256_maskstore_ps(c, mk, s);
        }
    }
}

#define TILE_ROWS(NV, TA)                                  \
    switch (t->mr) {                                       \
    case 1: tile_fixed(t, 1, NV, TA); break;               \
    case 2: tile_fixed(t, 2, NV, TA); break;               \
    case 3: tile_fixed(t, 3, NV, TA); break;               \
    case 4: tile_fixed(t, 4, NV, TA); break;               \
    case 5: if (NV < 3) tile_fixed(t, 5, NV, TA); break;   \
    case 6: if (NV < 3) tile_fixed(t, 6, NV, TA); break;   \
    case 7: if (NV < 2) tile_fixed(t, 7, NV, TA); break;   \
    default: if (NV < 2) tile_fixed(t, 8, NV, TA); break;  \
    }

static void tile(const tile_args *t) {
    const int nv = (t->nr + VW - 1) / VW;
    if (t->ta) {
        switch (nv) {
        case 1: TILE_ROWS(1, 1) break;
        case 2: TILE_ROWS(2, 1) break;
        default: TILE_ROWS(3, 1) break;
        }
    } else {
        switch (nv) {
        case 1: TILE_ROWS(1, 0) break;
        case 2: TILE_ROWS(2, 0) break;
        default: TILE_ROWS(3, 0) break;
        }
    }
}

EMBER__DENSE_KERNELS(avx2, EMBER_ISA_AVX2)
