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

// n <= 8 floats under a mask: one load and one store.
static inline void copy_short(float *d, const float *s, int n) {
    const __m256i m = tail_mask(n);
    _mm256_maskstore_ps(d, m, _mm256_maskload_ps(s, m));
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
            for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(b + VW * v);
            for (int r = 0; r < MR; r++) {
                const __m256 av = _mm256_set1_ps(a[r]);
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
            for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(b + VW * v);
            for (int r = 0; r < MR; r++) {
                const __m256 av = _mm256_set1_ps(ar[r][k]);
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

// ---- packing and the matrix-vector product ------------------------------------------------------

// Transposes the 8 x 8 block r[0..7] in place: unpack within 128-bit lanes, 4-float shuffles,
// then 128-bit lane permutes.
static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

// Panel p of op(B): an untransposed B row by row under the column mask (the zero tail comes
// with the masked load); a transposed one 8 columns x 8 k at a time through transpose8.
static void pack_b(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, int64_t nr, int64_t p, float *dst) {
    const int64_t n0 = p * nr, w = N - n0 < nr ? N - n0 : nr;
    float *d = dst + p * K * nr;
    if (nr % VW) {
        pack_b_portable(tb, K, N, B, ldb, nr, p, dst);
        return;
    }
    if (!tb) {
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < nr; j += VW)
                _mm256_store_ps(d + k * nr + j, _mm256_maskload_ps(B + k * ldb + n0 + j, tail_mask((int)(w - j))));
        return;
    }
    for (int64_t j = 0; j < nr; j += VW) {
        const int64_t cols = w - j < 0 ? 0 : w - j < VW ? w - j : VW;
        for (int64_t k0 = 0; k0 < K; k0 += VW) {
            const int kt = (int)(K - k0 < VW ? K - k0 : VW);
            const __m256i km = tail_mask(kt);
            __m256 r[8];
            for (int c = 0; c < VW; c++)
                r[c] = c < cols ? _mm256_maskload_ps(B + (n0 + j + c) * ldb + k0, km) : _mm256_setzero_ps();
            transpose8(r);
            for (int i = 0; i < kt; i++) _mm256_store_ps(d + (k0 + i) * nr + j, r[i]);
        }
    }
}

// The epilogue of up to 8 rows of a one-column C (strided: scalar).
static inline void gemv_store(const ember__gemm_op *op, int64_t m, int rows, __m256 acc) {
    float s[VW];
    _mm256_storeu_ps(s, acc);
    for (int r = 0; r < rows; r++) {
        float *c = op->C + (m + r) * op->ldc;
        *c = epilogue1(s[r], op->accumulate ? c : NULL, op->bias, op->relu);
    }
}

// N = 1: 8 rows of C per vector, lane i the chain of row m + i over k in order. A transposed A
// gives 8 rows' values at one k as one load (4 vectors, 32 rows, at once); an untransposed one
// is read 8 rows x 8 k and turned with transpose8. The epilogue is scalar.
static void gemv(const ember__gemm_op *op, int64_t m0, int64_t mb) {
    int64_t bs;
    const float *b = gemv_b(op, &bs);
    const int64_t K = op->K, lda = op->lda;
    int64_t i = 0;
    if (op->ta) {
        for (; i + 4 * VW <= mb; i += 4 * VW) {
            const float *a = op->A + m0 + i;
            __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            for (int64_t k = 0; k < K; k++, a += lda) {
                const __m256 bk = _mm256_set1_ps(b[k * bs]);
                c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a), bk, c0);
                c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + VW), bk, c1);
                c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 2 * VW), bk, c2);
                c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 3 * VW), bk, c3);
            }
            gemv_store(op, m0 + i, VW, c0);
            gemv_store(op, m0 + i + VW, VW, c1);
            gemv_store(op, m0 + i + 2 * VW, VW, c2);
            gemv_store(op, m0 + i + 3 * VW, VW, c3);
        }
        for (; i < mb; i += VW) {
            const int rows = (int)(mb - i < VW ? mb - i : VW);
            const __m256i rm = tail_mask(rows);
            __m256 c0 = _mm256_setzero_ps();
            for (int64_t k = 0; k < K; k++)
                c0 = _mm256_fmadd_ps(_mm256_maskload_ps(op->A + k * lda + m0 + i, rm), _mm256_set1_ps(b[k * bs]), c0);
            gemv_store(op, m0 + i, rows, c0);
        }
        return;
    }
    for (; i < mb; i += VW) {
        const int rows = (int)(mb - i < VW ? mb - i : VW);
        const float *a = op->A + (m0 + i) * lda;
        __m256 c0 = _mm256_setzero_ps();
        for (int64_t k0 = 0; k0 < K; k0 += VW) {
            const int kt = (int)(K - k0 < VW ? K - k0 : VW);
            const __m256i km = tail_mask(kt);
            __m256 r[8];
            for (int c = 0; c < VW; c++) r[c] = c < rows ? _mm256_maskload_ps(a + c * lda + k0, km) : _mm256_setzero_ps();
            transpose8(r);
            for (int j = 0; j < kt; j++) c0 = _mm256_fmadd_ps(r[j], _mm256_set1_ps(b[(k0 + j) * bs]), c0);
        }
        gemv_store(op, m0 + i, rows, c0);
    }
}

// One function per (rows, vectors, A layout), each optimised on its own (one function holding
// every instantiation made GCC keep the accumulators in memory), picked from a table.
typedef void (*tile_fn)(const tile_args *t);
#define TILE_FN(MR, NV, TA) \
    static void tile_##MR##_##NV##_##TA(const tile_args *t) { tile_fixed(t, MR, NV, TA); }
#define TILE_FNS(MR, NV) TILE_FN(MR, NV, 0) TILE_FN(MR, NV, 1)
TILE_FNS(1, 1)
TILE_FNS(2, 1)
TILE_FNS(3, 1)
TILE_FNS(4, 1)
TILE_FNS(5, 1)
TILE_FNS(6, 1)
TILE_FNS(7, 1)
TILE_FNS(8, 1)
TILE_FNS(1, 2)
TILE_FNS(2, 2)
TILE_FNS(3, 2)
TILE_FNS(4, 2)
TILE_FNS(5, 2)
TILE_FNS(6, 2)
TILE_FNS(1, 3)
TILE_FNS(2, 3)
TILE_FNS(3, 3)
TILE_FNS(4, 3)

// [ta][vectors - 1][rows - 1]; NULL where the pair is not a tile of this variant.
static const tile_fn TILES[2][3][8] = {
    {
        {tile_1_1_0, tile_2_1_0, tile_3_1_0, tile_4_1_0, tile_5_1_0, tile_6_1_0, tile_7_1_0, tile_8_1_0},
        {tile_1_2_0, tile_2_2_0, tile_3_2_0, tile_4_2_0, tile_5_2_0, tile_6_2_0, NULL, NULL},
        {tile_1_3_0, tile_2_3_0, tile_3_3_0, tile_4_3_0, NULL, NULL, NULL, NULL},
    },
    {
        {tile_1_1_1, tile_2_1_1, tile_3_1_1, tile_4_1_1, tile_5_1_1, tile_6_1_1, tile_7_1_1, tile_8_1_1},
        {tile_1_2_1, tile_2_2_1, tile_3_2_1, tile_4_2_1, tile_5_2_1, tile_6_2_1, NULL, NULL},
        {tile_1_3_1, tile_2_3_1, tile_3_3_1, tile_4_3_1, NULL, NULL, NULL, NULL},
    },
};

static void tile(const tile_args *t) {
    const int nv = (t->nr + VW - 1) / VW;
    TILES[t->ta][nv - 1][t->mr - 1](t);
}

// The shared kernels' vectors (dense/isa/vec.h): 8 lanes, tails under vmaskmovps, the stored
// run of pairs one lane at a time.
typedef __m256 dvec;
static inline __attribute__((always_inline)) dvec dv_zero(void) { return _mm256_setzero_ps(); }
static inline __attribute__((always_inline)) dvec dv_load(const float *p) { return _mm256_load_ps(p); }
static inline __attribute__((always_inline)) dvec dv_bcast(float x) { return _mm256_set1_ps(x); }
static inline __attribute__((always_inline)) dvec dv_fma(dvec a, dvec b, dvec c) { return _mm256_fmadd_ps(a, b, c); }
static inline __attribute__((always_inline)) dvec dv_add(dvec a, dvec b) { return _mm256_add_ps(a, b); }
static inline __attribute__((always_inline)) dvec dv_relu(dvec s) {
    const dvec zero = _mm256_setzero_ps();
    return _mm256_blendv_ps(s, zero, _mm256_cmp_ps(s, zero, _CMP_LE_OQ));
}
// Whole vectors without a mask: vmaskmovps stores are microcoded on AMD.
static inline __attribute__((always_inline)) dvec dv_load_n(const float *p, int n) {
    return n >= VW ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(n));
}
static inline __attribute__((always_inline)) void dv_store_n(float *p, int n, dvec v) {
    if (n >= VW) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, tail_mask(n), v);
}
static inline __attribute__((always_inline)) void dv_store_lanes(float *dst, dvec v, int lo, int hi) {
    float lanes[VW] __attribute__((aligned(32)));
    _mm256_store_ps(lanes, v);
    for (int l = lo; l < hi; l++) dst[l - lo] = lanes[l];
}
#include "dense/isa/vec.h"

EMBER__DENSE_KERNELS(avx2, EMBER_ISA_AVX2)
