// The AVX-512 dense variant (F, BW, VL, DQ target flags): register tiles of up to 12 rows x 16
// columns or 8 rows x 64, one zmm accumulator per 16 outputs of a row. Each k step broadcasts
// A(r,k) and runs vfmadd231ps against the packed row of B: lane j of accumulator (r, v) is exactly
// the chain of output (r, 16v + j), so the bits are the generic variant's fmaf chains. Column
// tails use masked loads and stores (the packed B and the scratch are padded, C is never touched
// past its row width).
#include <immintrin.h>

#define EMBER__DENSE_COLSUM_W 64
#include "dense/isa/impl.h"

#define VW 16

// Register tiles by output width: up to 16 columns up to 12 x 16, the rows shared evenly between
// the tiles (at least 8 chains in flight, the FMA latency times its two ports, where M allows: a
// 27-row product is 3 tiles of 9, not 8 + 8 + 8 + 3, whose last tile would take as long as a
// full one), up to 32 8 x 32, up to 48 8 x 48, wider 6 x 64 (24 accumulators, 4 B vectors and a
// broadcast of the 32 registers). Measured on a Xeon (Sapphire Rapids class): 6 x 64 beat 8 x 48
// and 12/14 x 32 on the wide products; kc 128 beat 96, 160 and 192.
static void geom(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g) {
    (void)K, (void)ta;
    int32_t mr, nr;
    if (N <= 16) {
        const int64_t tiles = M > 12 ? (M + 11) / 12 : 1;
        mr = M < 1 ? 8 : (int32_t)((M + tiles - 1) / tiles);
        nr = 16;
    } else if (N <= 32) mr = 8, nr = 32;
    else if (N <= 48) mr = 8, nr = 48;
    else mr = 6, nr = 64;
    // The packed k slice (kc x nr floats) fills about two thirds of a 48 KiB L1; the block (120
    // rows x 512 columns) keeps its partial sums and packed rows of A in L2.
    const int64_t kc = 32768 / (4 * nr) / 8 * 8, mc = 120 / mr * mr, nc = 512;
    *g = (ember__gemm_geom){.mr = mr, .nr = nr, .kc = kc, .mc = mc, .nc = (nc / nr) * nr};
}

static inline __attribute__((always_inline)) __mmask16 tail_mask(int n) {
    return n >= VW ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

// n <= 16 floats under a mask: one load and one store.
static inline void copy_short(float *d, const float *s, int n) {
    const __mmask16 m = tail_mask(n);
    _mm512_mask_storeu_ps(d, m, _mm512_maskz_loadu_ps(m, s));
}

static inline __attribute__((always_inline)) void tile_fixed(const tile_args *t, const int MR, const int NV,
                                                             const int TA) {
    __m512 acc[12][4];
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
            for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + VW * v);
            for (int r = 0; r < MR; r++) {
                const __m512 av = _mm512_set1_ps(a[r]);
                for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
            }
            a += lda;
            b += ldb;
        }
    } else if (kb > 0) {
        const float *ar[12];
        for (int r = 0; r < MR; r++) ar[r] = t->a + r * lda;
        for (int64_t k = 0; k < kb; k++) {
            __m512 bv[4];
            for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + VW * v);
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
            if (mk == (__mmask16)0xffff) _mm512_storeu_ps(c, s);
            else _mm512_mask_storeu_ps(c, mk, s);
        }
    }
}

// ---- packing and the matrix-vector product ------------------------------------------------------

// The 16 rows of a 16 x 16 block as named registers (an array of 16 zmm is kept in memory by
// GCC, and every transpose stage would go through it).
#define R16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

// Transposes r0..r15 in place (row i lane j -> row j lane i): unpack within 128-bit lanes, then
// 4-float and 128-bit lane shuffles. r_{4g+c} after the second stage holds, in 128-bit lane L,
// rows 4g..4g+3 of column 4L + c.
#define TRANSPOSE16()                                                                                     \
    do {                                                                                                  \
        __m512 t0 = _mm512_unpacklo_ps(r0, r1), t1 = _mm512_unpackhi_ps(r0, r1);                          \
        __m512 t2 = _mm512_unpacklo_ps(r2, r3), t3 = _mm512_unpackhi_ps(r2, r3);                          \
        __m512 t4 = _mm512_unpacklo_ps(r4, r5), t5 = _mm512_unpackhi_ps(r4, r5);                          \
        __m512 t6 = _mm512_unpacklo_ps(r6, r7), t7 = _mm512_unpackhi_ps(r6, r7);                          \
        __m512 t8 = _mm512_unpacklo_ps(r8, r9), t9 = _mm512_unpackhi_ps(r8, r9);                          \
        __m512 t10 = _mm512_unpacklo_ps(r10, r11), t11 = _mm512_unpackhi_ps(r10, r11);                    \
        __m512 t12 = _mm512_unpacklo_ps(r12, r13), t13 = _mm512_unpackhi_ps(r12, r13);                    \
        __m512 t14 = _mm512_unpacklo_ps(r14, r15), t15 = _mm512_unpackhi_ps(r14, r15);                    \
        r0 = _mm512_shuffle_ps(t0, t2, 0x44), r1 = _mm512_shuffle_ps(t0, t2, 0xee);                       \
        r2 = _mm512_shuffle_ps(t1, t3, 0x44), r3 = _mm512_shuffle_ps(t1, t3, 0xee);                       \
        r4 = _mm512_shuffle_ps(t4, t6, 0x44), r5 = _mm512_shuffle_ps(t4, t6, 0xee);                       \
        r6 = _mm512_shuffle_ps(t5, t7, 0x44), r7 = _mm512_shuffle_ps(t5, t7, 0xee);                       \
        r8 = _mm512_shuffle_ps(t8, t10, 0x44), r9 = _mm512_shuffle_ps(t8, t10, 0xee);                     \
        r10 = _mm512_shuffle_ps(t9, t11, 0x44), r11 = _mm512_shuffle_ps(t9, t11, 0xee);                   \
        r12 = _mm512_shuffle_ps(t12, t14, 0x44), r13 = _mm512_shuffle_ps(t12, t14, 0xee);                 \
        r14 = _mm512_shuffle_ps(t13, t15, 0x44), r15 = _mm512_shuffle_ps(t13, t15, 0xee);                 \
        t0 = _mm512_shuffle_f32x4(r0, r4, 0x88), t4 = _mm512_shuffle_f32x4(r0, r4, 0xdd);                 \
        t1 = _mm512_shuffle_f32x4(r1, r5, 0x88), t5 = _mm512_shuffle_f32x4(r1, r5, 0xdd);                 \
        t2 = _mm512_shuffle_f32x4(r2, r6, 0x88), t6 = _mm512_shuffle_f32x4(r2, r6, 0xdd);                 \
        t3 = _mm512_shuffle_f32x4(r3, r7, 0x88), t7 = _mm512_shuffle_f32x4(r3, r7, 0xdd);                 \
        t8 = _mm512_shuffle_f32x4(r8, r12, 0x88), t12 = _mm512_shuffle_f32x4(r8, r12, 0xdd);              \
        t9 = _mm512_shuffle_f32x4(r9, r13, 0x88), t13 = _mm512_shuffle_f32x4(r9, r13, 0xdd);              \
        t10 = _mm512_shuffle_f32x4(r10, r14, 0x88), t14 = _mm512_shuffle_f32x4(r10, r14, 0xdd);           \
        t11 = _mm512_shuffle_f32x4(r11, r15, 0x88), t15 = _mm512_shuffle_f32x4(r11, r15, 0xdd);           \
        r0 = _mm512_shuffle_f32x4(t0, t8, 0x88), r8 = _mm512_shuffle_f32x4(t0, t8, 0xdd);                 \
        r1 = _mm512_shuffle_f32x4(t1, t9, 0x88), r9 = _mm512_shuffle_f32x4(t1, t9, 0xdd);                 \
        r2 = _mm512_shuffle_f32x4(t2, t10, 0x88), r10 = _mm512_shuffle_f32x4(t2, t10, 0xdd);              \
        r3 = _mm512_shuffle_f32x4(t3, t11, 0x88), r11 = _mm512_shuffle_f32x4(t3, t11, 0xdd);              \
        r4 = _mm512_shuffle_f32x4(t4, t12, 0x88), r12 = _mm512_shuffle_f32x4(t4, t12, 0xdd);              \
        r5 = _mm512_shuffle_f32x4(t5, t13, 0x88), r13 = _mm512_shuffle_f32x4(t5, t13, 0xdd);              \
        r6 = _mm512_shuffle_f32x4(t6, t14, 0x88), r14 = _mm512_shuffle_f32x4(t6, t14, 0xdd);              \
        r7 = _mm512_shuffle_f32x4(t7, t15, 0x88), r15 = _mm512_shuffle_f32x4(t7, t15, 0xdd);              \
    } while (0)

// Panel p of op(B): an untransposed B row by row under the column mask (the zero tail comes
// with the masked load); a transposed one 16 columns x 16 k at a time through transpose16.
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
                _mm512_store_ps(d + k * nr + j, _mm512_maskz_loadu_ps(tail_mask((int)(w - j)),
                                                                      B + k * ldb + n0 + j));
        return;
    }
    for (int64_t j = 0; j < nr; j += VW) {
        const int64_t cols = w - j < 0 ? 0 : w - j < VW ? w - j : VW;
        const float *src = B + (n0 + j) * ldb;
        for (int64_t k0 = 0; k0 < K; k0 += VW) {
            const int kt = (int)(K - k0 < VW ? K - k0 : VW);
            const __mmask16 km = tail_mask(kt);
            float *o = d + k0 * nr + j;
#define LOAD(c) __m512 r##c = c < cols ? _mm512_maskz_loadu_ps(km, src + c * ldb + k0) : _mm512_setzero_ps();
            R16(LOAD)
#undef LOAD
            TRANSPOSE16();
#define STORE(i) if (i < kt) _mm512_store_ps(o + i * nr, r##i);
            R16(STORE)
#undef STORE
        }
    }
}

// The epilogue of up to 16 rows of a one-column C (strided: scalar).
static inline void gemv_store(const ember__gemm_op *op, int64_t m, int rows, __m512 acc) {
    float s[VW];
    _mm512_storeu_ps(s, acc);
    for (int r = 0; r < rows; r++) {
        float *c = op->C + (m + r) * op->ldc;
        *c = epilogue1(s[r], op->accumulate ? c : NULL, op->bias, op->relu);
    }
}

// N = 1: 16 rows of C per vector, lane i the chain of row m + i over k in order. A transposed A
// gives 16 rows' values at one k as one load (4 vectors, 64 rows, at once to hide the FMA
// latency); an untransposed one is read 16 rows x 16 k and turned with transpose16 (whose
// shuffles then overlap the chain). The epilogue is scalar (C is a strided column).
static void gemv(const ember__gemm_op *op, int64_t m0, int64_t mb) {
    int64_t bs;
    const float *b = gemv_b(op, &bs);
    const int64_t K = op->K, lda = op->lda;
    int64_t i = 0;
    if (op->ta) {
        for (; i + 4 * VW <= mb; i += 4 * VW) {
            const float *a = op->A + m0 + i;
            __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            for (int64_t k = 0; k < K; k++, a += lda) {
                const __m512 bk = _mm512_set1_ps(b[k * bs]);
                c0 = _mm512_fmadd_ps(_mm512_loadu_ps(a), bk, c0);
                c1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + VW), bk, c1);
                c2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + 2 * VW), bk, c2);
                c3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + 3 * VW), bk, c3);
            }
            gemv_store(op, m0 + i, VW, c0);
            gemv_store(op, m0 + i + VW, VW, c1);
            gemv_store(op, m0 + i + 2 * VW, VW, c2);
            gemv_store(op, m0 + i + 3 * VW, VW, c3);
        }
        for (; i < mb; i += VW) {
            const int rows = (int)(mb - i < VW ? mb - i : VW);
            const __mmask16 rm = tail_mask(rows);
            __m512 c0 = _mm512_setzero_ps();
            for (int64_t k = 0; k < K; k++)
                c0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(rm, op->A + k * lda + m0 + i), _mm512_set1_ps(b[k * bs]), c0);
            gemv_store(op, m0 + i, rows, c0);
        }
        return;
    }
    for (; i < mb; i += VW) {
        const int rows = (int)(mb - i < VW ? mb - i : VW);
        const float *a = op->A + (m0 + i) * lda;
        __m512 c0 = _mm512_setzero_ps();
        for (int64_t k0 = 0; k0 < K; k0 += VW) {
            const int kt = (int)(K - k0 < VW ? K - k0 : VW);
            const __mmask16 km = tail_mask(kt);
            const float *bk = b + k0 * bs;
#define LOAD(c) __m512 r##c = c < rows ? _mm512_maskz_loadu_ps(km, a + c * lda + k0) : _mm512_setzero_ps();
            R16(LOAD)
#undef LOAD
            TRANSPOSE16();
#define FMA(j) if (j < kt) c0 = _mm512_fmadd_ps(r##j, _mm512_set1_ps(bk[j * bs]), c0);
            R16(FMA)
#undef FMA
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
TILE_FNS(9, 1)
TILE_FNS(10, 1)
TILE_FNS(11, 1)
TILE_FNS(12, 1)
TILE_FNS(1, 2)
TILE_FNS(2, 2)
TILE_FNS(3, 2)
TILE_FNS(4, 2)
TILE_FNS(5, 2)
TILE_FNS(6, 2)
TILE_FNS(7, 2)
TILE_FNS(8, 2)
TILE_FNS(1, 3)
TILE_FNS(2, 3)
TILE_FNS(3, 3)
TILE_FNS(4, 3)
TILE_FNS(5, 3)
TILE_FNS(6, 3)
TILE_FNS(7, 3)
TILE_FNS(8, 3)
TILE_FNS(1, 4)
TILE_FNS(2, 4)
TILE_FNS(3, 4)
TILE_FNS(4, 4)
TILE_FNS(5, 4)
TILE_FNS(6, 4)

// [ta][vectors - 1][rows - 1]; NULL where the pair is not a tile of this variant.
static const tile_fn TILES[2][4][12] = {
    {
        {tile_1_1_0, tile_2_1_0, tile_3_1_0, tile_4_1_0, tile_5_1_0, tile_6_1_0, tile_7_1_0, tile_8_1_0,
         tile_9_1_0, tile_10_1_0, tile_11_1_0, tile_12_1_0},
        {tile_1_2_0, tile_2_2_0, tile_3_2_0, tile_4_2_0, tile_5_2_0, tile_6_2_0, tile_7_2_0, tile_8_2_0},
        {tile_1_3_0, tile_2_3_0, tile_3_3_0, tile_4_3_0, tile_5_3_0, tile_6_3_0, tile_7_3_0, tile_8_3_0},
        {tile_1_4_0, tile_2_4_0, tile_3_4_0, tile_4_4_0, tile_5_4_0, tile_6_4_0},
    },
    {
        {tile_1_1_1, tile_2_1_1, tile_3_1_1, tile_4_1_1, tile_5_1_1, tile_6_1_1, tile_7_1_1, tile_8_1_1,
         tile_9_1_1, tile_10_1_1, tile_11_1_1, tile_12_1_1},
        {tile_1_2_1, tile_2_2_1, tile_3_2_1, tile_4_2_1, tile_5_2_1, tile_6_2_1, tile_7_2_1, tile_8_2_1},
        {tile_1_3_1, tile_2_3_1, tile_3_3_1, tile_4_3_1, tile_5_3_1, tile_6_3_1, tile_7_3_1, tile_8_3_1},
        {tile_1_4_1, tile_2_4_1, tile_3_4_1, tile_4_4_1, tile_5_4_1, tile_6_4_1},
    },
};

static void tile(const tile_args *t) {
    const int nv = (t->nr + VW - 1) / VW;
    TILES[t->ta][nv - 1][t->mr - 1](t);
}

// The shared kernels' vectors (dense/isa/vec.h): 16 lanes, tails under a mask, the stored run
// of pairs compressed to the low lanes.
typedef __m512 dvec;
static inline __attribute__((always_inline)) dvec dv_zero(void) { return _mm512_setzero_ps(); }
static inline __attribute__((always_inline)) dvec dv_load(const float *p) { return _mm512_load_ps(p); }
static inline __attribute__((always_inline)) dvec dv_bcast(float x) { return _mm512_set1_ps(x); }
static inline __attribute__((always_inline)) dvec dv_fma(dvec a, dvec b, dvec c) { return _mm512_fmadd_ps(a, b, c); }
static inline __attribute__((always_inline)) dvec dv_add(dvec a, dvec b) { return _mm512_add_ps(a, b); }
static inline __attribute__((always_inline)) dvec dv_relu(dvec s) {
    const dvec zero = _mm512_setzero_ps();
    return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, zero, _CMP_LE_OQ), zero);
}
// Whole vectors without a mask: a masked store is several times slower on AMD's AVX-512.
static inline __attribute__((always_inline)) dvec dv_load_n(const float *p, int n) {
    return n >= VW ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(tail_mask(n), p);
}
static inline __attribute__((always_inline)) void dv_store_n(float *p, int n, dvec v) {
    if (n >= VW) _mm512_storeu_ps(p, v);
    else _mm512_mask_storeu_ps(p, tail_mask(n), v);
}
static inline __attribute__((always_inline)) void dv_store_lanes(float *dst, dvec v, int lo, int hi) {
    const __mmask16 keep = (__mmask16)(tail_mask(hi) & ~tail_mask(lo));
    _mm512_mask_storeu_ps(dst, tail_mask(hi - lo), _mm512_maskz_compress_ps(keep, v));
}
#include "dense/isa/vec.h"

EMBER__DENSE_KERNELS(avx512, EMBER_ISA_AVX512)
