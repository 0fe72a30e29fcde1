// The AVX-512 dense variant (F, BW, VL, DQ target flags): register tiles of up to 8 rows x 64
// columns, one zmm accumulator per 16 outputs of a row. Each k step broadcasts A(r,k) and runs
// vfmadd231ps against the packed row of B: lane j of accumulator (r, v) is exactly the chain of
// output (r, 16v + j), so the bits are the generic variant's fmaf chains. Column tails use
// masked loads and stores (the packed B and the scratch are padded, C is never touched past
// its row width).
#include <immintrin.h>

#define EMBER__DENSE_COLSUM_W 64
#include "dense/isa/impl.h"

#define VW 16

// Register tiles by output width: up to 16 columns 8 x 16 (8 chains in flight: the FMA latency
// times its two ports), up to 32 8 x 32, up to 48 8 x 48, wider 6 x 64 (24 accumulators, 4 B
// vectors and a broadcast of the 32 registers).
static void geom(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g) {
    (void)M, (void)K, (void)ta;
    int32_t mr, nr;
    if (N <= 16) mr = 8, nr = 16;
    else if (N <= 32) mr = 8, nr = 32;
    else if (N <= 48) mr = 8, nr = 48;
    else mr = 6, nr = 64;
    // The packed k slice (kc x nr floats) fills about half of a 48 KiB L1.
    const int64_t kc = 24576 / (4 * nr);
    *g = (ember__gemm_geom){.mr = mr, .nr = nr, .kc = kc, .mc = 120, .nc = (512 / nr) * nr};
}

static inline __attribute__((always_inline)) __mmask16 tail_mask(int n) {
    return n >= VW ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

static inline __attribute__((always_inline)) void tile_fixed(const tile_args *t, const int MR, const int NV,
                                                             const int TA) {
    __m512 acc[8][4];
    if (t->first) {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    } else {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_load_ps(t->p + r * t->ldp + VW * v);
    }
    const int64_t kb = t->kb, lda = t->lda, ldb = t->ldb;
    const float *b = t->b;
    if (kb > 0 && TA) {
        const float *a = t->a;
        for (int64_t k = 0; k < kb; k++) {
            __m512 bv[4];
            for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(b + VW * v);
            for (int r = 0; r < MR; r++) {
                const __m512 av = _mm512_set1_ps(a[r]);
                for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
            }
            a += lda;
            b += ldb;
        }
    } else if (kb > 0) {
        const float *ar[8];
        for (int r = 0; r < MR; r++) ar[r] = t->a + r * lda;
        for (int64_t k = 0; k < kb; k++) {
            __m512 bv[4];
            for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(b + VW * v);
            for (int r = 0; r < MR; r++) {
                const __m512 av = _mm512_set1_ps(ar[r][k]);
                for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
            }
            b += ldb;
        }
    }
    if (!t->last) {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) _mm512_store_ps(t->p + r * t->ldp + VW * v, acc[r][v]);
        return;
    }
    const __m512 zero = _mm512_setzero_ps();
    for (int v = 0; v < NV; v++) {
        const __mmask16 mk = tail_mask(t->nr - VW * v);
        const __m512 bias = t->bias ? _mm512_maskz_loadu_ps(mk, t->bias + VW * v) : zero;
        for (int r = 0; r < MR; r++) {
            float *c = t->c + r * t->ldc + VW * v;
            __m512 s = acc[r][v];
            if (t->accumulate) s = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, c), s);
            if (t->bias) s = _mm512_add_ps(s, bias);
            if (t->relu) s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, zero, _CMP_LE_OQ), zero);
            _mm512_mask_storeu_ps(c, mk, s);
        }
    }
}

// One instantiation per (rows, vectors, A layout): the loops above unroll completely.
#define TILE_ROWS(NV, TA)                                  \
    switch (t->mr) {                                       \
    case 1: tile_fixed(t, 1, NV, TA); break;               \
    case 2: tile_fixed(t, 2, NV, TA); break;               \
    case 3: tile_fixed(t, 3, NV, TA); break;               \
    case 4: tile_fixed(t, 4, NV, TA); break;               \
    case 5: tile_fixed(t, 5, NV, TA); break;               \
    case 6: tile_fixed(t, 6, NV, TA); break;               \
    case 7: if (NV < 4) tile_fixed(t, 7, NV, TA); break;   \
    default: if (NV < 4) tile_fixed(t, 8, NV, TA); break;  \
    }

static void tile(const tile_args *t) {
    const int nv = (t->nr + VW - 1) / VW;
    if (t->ta) {
        switch (nv) {
        case 1: TILE_ROWS(1, 1) break;
        case 2: TILE_ROWS(2, 1) break;
        case 3: TILE_ROWS(3, 1) break;
        default: TILE_ROWS(4, 1) break;
        }
    } else {
        switch (nv) {
        case 1: TILE_ROWS(1, 0) break;
        case 2: TILE_ROWS(2, 0) break;
        case 3: TILE_ROWS(3, 0) break;
        default: TILE_ROWS(4, 0) break;
        }
    }
}

EMBER__DENSE_KERNELS(avx512, EMBER_ISA_AVX512)
