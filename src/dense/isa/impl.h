// What every dense kernel variant shares, included by generic.c, avx2.c and avx512.c (so compiled
// with each variant's target flags; everything here is static). The variant defines, before
// including this file:
//
//   static void tile(const tile_args *t);   one register tile: t->mr x t->nr outputs, one k slice
//   static void geom(...), pack_b(...), gemv(...), rank1(...), vecmat(...), dot_fwd(...), dot_bwd(...)
//                                           the table's entries
//                                           (src/dense/internal.h)
//   static inline void copy_short(float *d, const float *s, int n)   n <= mr floats (packing A)
//   EMBER__DENSE_COLSUM_W                   the column chunk ember_colsum keeps in registers
//
// and this file gives the block loop (the BLIS nest of src/dense/internal.h), the portable
// packing, matrix-vector product and scalar epilogue a variant may use, and the column sums, and
// defines the variant's table with EMBER__DENSE_KERNELS.
#ifndef EMBER_DENSE_ISA_IMPL_H
#define EMBER_DENSE_ISA_IMPL_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "dense/internal.h"

// One micro-kernel call: rows [0, mr) x columns [0, nr) of a tile over one k slice of kb steps.
//   a    A at (the tile's first row, the slice's first k): A(r,k) = ta ? a[k*lda + r] : a[r*lda + k]
//        (NULL when kb = 0)
//   b    B at (the slice's first k, the tile's first column), row k at b + k*ldb: the packed
//        slice (ldb = the panel width g->nr, 64-byte aligned rows when g->nr is a multiple of 16,
//        columns past nr zero), or B itself when bdirect (then nr is a multiple of 16)
//   p    the partial sums of the tile in the thread's scratch, row stride ldp (a multiple of 16
//        floats, 64-byte aligned): read unless `first`, written unless `last`; full vectors
//        (columns up to nr rounded up to the vector width) may be read and written there
//   c    C at the tile (row stride ldc): written (and read for accumulate) after the last slice,
//        columns [0, nr) only
//   bias the bias at the tile's first column, or NULL
typedef struct tile_args {
    int64_t kb;
    const float *a;
    int64_t lda;
    int ta;
    const float *b;
    int64_t ldb;
    int bdirect;
    float *p;
    int64_t ldp;
    float *c;
    int64_t ldc;
    const float *bias;
    int first, last, relu, accumulate;
    int mr, nr;
} tile_args;

// The epilogue of one element (include/ember/dense.h, in its order).
static inline float epilogue1(float s, const float *c, const float *bias, int relu) {
    if (c) s = *c + s;
    if (bias) s = s + *bias;
    if (relu) s = s <= 0.0f ? 0.0f : s;
    return s;
}

static inline void copy_short(float *d, const float *s, int n);
static void tile(const tile_args *t);
static void geom(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g);
static void pack_b(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, int64_t nr, int64_t p, float *dst);
static void gemv(const ember__gemm_op *op, int64_t m0, int64_t mb);
static void rank1(const ember__gemm_op *op, int64_t m0, int64_t mb);
static void vecmat(const ember__gemm_op *op, int64_t n0, int64_t nb);
static void dot_fwd(int64_t R, int64_t D, const float *T, float *z, float *tt);
static void dot_bwd(int64_t R, int64_t D, const float *T, const float *gz, const int32_t *idx, float *d0, float *rest);

// Rows [m0, m0 + mb) x k [pc, pc + kb) of A into ap, tile by tile (tile i/mr at ap + i*kb): rows
// of kb (lda kb) for an untransposed A, [kb][mr] (lda mr) for a transposed one. Contiguous
// copies: the micro-kernel then reads A from one short stream, whatever lda (a row stride of a
// multiple of 4 KiB would put every row, or every k of a transposed A, in the same L1 set).
static void pack_a(const ember__gemm_op *op, int64_t m0, int64_t mb, int64_t pc, int64_t kb, int64_t mr, float *ap) {
    if (!op->ta) {
        for (int64_t i = 0; i < mb; i++) {
            // Row i is row i % mr of tile i / mr, at ap + (i / mr) * mr * kb.
            float *d = ap + (i / mr) * mr * kb + (i % mr) * kb;
            memcpy(d, op->A + (m0 + i) * op->lda + pc, sizeof(float) * (size_t)kb);
        }
        return;
    }
    // One k at a time across every tile: each row of A is read once, contiguously.
    // The rows are lda apart (often a multiple of 4 KiB: a page each, which the hardware
    // prefetchers do not follow), so each row is prefetched 8 rows ahead.
    for (int64_t k = 0; k < kb; k++) {
        const float *src = op->A + (pc + k) * op->lda + m0;
        if (k + 8 < kb)
            for (int64_t i = 0; i < mb; i += 16) __builtin_prefetch(src + 8 * op->lda + i, 0, 3);
        for (int64_t i = 0; i < mb; i += mr) copy_short(ap + i * kb + k * mr, src + i, (int)(mb - i < mr ? mb - i : mr));
    }
}

static void block(const ember__gemm_op *op, const ember__gemm_geom *g, int64_t m0, int64_t mb, int64_t n0,
                  int64_t nb, float *part, float *ap) {
    const int64_t K = op->K, nr = g->nr, mr = g->mr;
    tile_args t = {.ta = op->ta, .ldb = op->bdirect ? op->ldb : nr, .bdirect = op->bdirect, .ldp = g->nc,
                   .ldc = op->ldc, .relu = op->relu, .accumulate = op->accumulate};
    // A is packed when the block has more than one panel of columns to reuse it over, unless its
    // rows are already the packed layout (untransposed, row stride K: one slice, rows of kb floats
    // back to back, as a layer's [B][K] input with K <= kc is).
    const int pack = ap != NULL && nb > nr && (op->ta || op->lda != K || K > g->kc);
    // K = 0 still runs one (empty) slice: the epilogue of +0.
    int64_t pc = 0;
    do {
        const int64_t kb = K - pc < g->kc ? K - pc : g->kc;
        t.kb = kb;
        t.first = pc == 0;
        t.last = pc + kb >= K;
        if (pack && kb > 0) pack_a(op, m0, mb, pc, kb, mr, ap);
        t.lda = pack ? (op->ta ? mr : kb) : op->lda;
        for (int64_t j = 0; j < nb; j += nr) {
            const int64_t n = n0 + j;
            t.nr = (int)(nb - j < nr ? nb - j : nr);
            if (op->bdirect) t.b = kb > 0 ? op->B + pc * op->ldb + n : NULL;
            else t.b = op->Bp + (n / nr) * K * nr + pc * nr;
            t.bias = op->bias ? op->bias + n : NULL;
            for (int64_t i = 0; i < mb; i += mr) {
                const int64_t m = m0 + i;
                t.mr = (int)(mb - i < mr ? mb - i : mr);
                if (kb == 0) t.a = NULL;
                else if (pack) t.a = ap + i * kb;
                else t.a = op->ta ? op->A + pc * op->lda + m : op->A + m * op->lda + pc;
                t.c = op->C + m * op->ldc + n;
                t.p = part ? part + i * g->nc + j : NULL;
                tile(&t);
            }
        }
        pc += kb;
    } while (pc < K);
}

// Panel p of op(B) [K][N] into dst + p*K*nr as [K][nr], columns past N zero (plain copies).
static inline void pack_b_portable(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, int64_t nr, int64_t p,
                                   float *dst) {
    const int64_t n0 = p * nr, w = N - n0 < nr ? N - n0 : nr;
    float *d = dst + p * K * nr;
    if (!tb) {
        for (int64_t k = 0; k < K; k++) {
            memcpy(d + k * nr, B + k * ldb + n0, sizeof(float) * (size_t)w);
            if (w < nr) memset(d + k * nr + w, 0, sizeof(float) * (size_t)(nr - w));
        }
        return;
    }
    // B(k, n) = B[n*ldb + k]: read each column's k run contiguously, 8 columns at a time.
    for (int64_t j0 = 0; j0 < w; j0 += 8) {
        const int64_t j1 = w - j0 < 8 ? w : j0 + 8;
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = j0; j < j1; j++) d[k * nr + j] = B[(n0 + j) * ldb + k];
    }
    if (w < nr)
        for (int64_t k = 0; k < K; k++) memset(d + k * nr + w, 0, sizeof(float) * (size_t)(nr - w));
}

// B(k, 0) of a one-column B.
static inline const float *gemv_b(const ember__gemm_op *op, int64_t *stride) {
    *stride = op->tb ? 1 : op->ldb;
    return op->B;
}

// N = 1, one chain per row in plain C (fmaf), then the epilogue.
static inline void gemv_portable(const ember__gemm_op *op, int64_t m0, int64_t mb) {
    int64_t bs;
    const float *b = gemv_b(op, &bs);
    for (int64_t m = m0; m < m0 + mb; m++) {
        float s = 0.0f;
        for (int64_t k = 0; k < op->K; k++) {
            const float a = op->ta ? op->A[k * op->lda + m] : op->A[m * op->lda + k];
            s = fmaf(a, b[k * bs], s);
        }
        float *c = op->C + m * op->ldc;
        *c = epilogue1(s, op->accumulate ? c : NULL, op->bias, op->relu);
    }
}

// K = 1: columns of B's one row a rank-1 kernel handles at a time.
#define RANK1_CHUNK 512

// B(0, n) for n in [n0, n0 + w) as a contiguous run: B itself when untransposed, else copied
// into buf (w <= RANK1_CHUNK).
static inline const float *rank1_row_b(const ember__gemm_op *op, int64_t n0, int64_t w, float *buf) {
    if (!op->tb) return op->B + n0;
    for (int64_t j = 0; j < w; j++) buf[j] = op->B[(n0 + j) * op->ldb];
    return buf;
}

// A(m, 0) of a one-column A: its stride over m.
static inline int64_t rank1_sa(const ember__gemm_op *op) { return op->ta ? 1 : op->lda; }

// K = 1 in plain C: each element the one-step chain fmaf(A(m,0), B(0,n), +0) (not the bare
// product: the chain from +0 turns an exact -0 into +0), then the epilogue.
static inline void rank1_portable(const ember__gemm_op *op, int64_t m0, int64_t mb) {
    float buf[RANK1_CHUNK];
    for (int64_t n0 = 0; n0 < op->N; n0 += RANK1_CHUNK) {
        const int64_t w = op->N - n0 < RANK1_CHUNK ? op->N - n0 : RANK1_CHUNK;
        const float *b = rank1_row_b(op, n0, w, buf);
        for (int64_t m = m0; m < m0 + mb; m++) {
            const float a = op->A[m * rank1_sa(op)];
            float *c = op->C + m * op->ldc + n0;
            for (int64_t j = 0; j < w; j++)
                c[j] = epilogue1(fmaf(a, b[j], 0.0f), op->accumulate ? c + j : NULL,
                                 op->bias ? op->bias + n0 + j : NULL, op->relu);
        }
    }
}

// A(0, k) of a one-row A: its stride over k.
static inline int64_t vecmat_sa(const ember__gemm_op *op) { return op->ta ? op->lda : 1; }

// M = 1 in plain C: each column's chain fmaf over k in order from +0, then the epilogue.
static inline void vecmat_portable(const ember__gemm_op *op, int64_t n0, int64_t nb) {
    const int64_t sa = vecmat_sa(op);
    for (int64_t n = n0; n < n0 + nb; n++) {
        float s = 0.0f;
        for (int64_t k = 0; k < op->K; k++) s = fmaf(op->A[k * sa], op->B[k * op->ldb + n], s);
        op->C[n] = epilogue1(s, op->accumulate ? op->C + n : NULL, op->bias ? op->bias + n : NULL, op->relu);
    }
}

// Column sums over [n0, n1): chunks of EMBER__DENSE_COLSUM_W columns summed down every row in a
// local array (registers after vectorisation), each column's adds in row order.
static void colsum(int64_t M, int64_t n0, int64_t n1, const float *A, int64_t lda, float *out, int accumulate) {
    enum { W = EMBER__DENSE_COLSUM_W };
    for (int64_t n = n0; n < n1; n += W) {
        const int64_t w = n1 - n < W ? n1 - n : W;
        float s[W];
        for (int64_t j = 0; j < W; j++) s[j] = accumulate && j < w ? out[n + j] : 0.0f;
        if (w == W) {
            for (int64_t i = 0; i < M; i++) {
                const float *a = A + i * lda + n;
                for (int64_t j = 0; j < W; j++) s[j] = s[j] + a[j];
            }
        } else {
            for (int64_t i = 0; i < M; i++) {
                const float *a = A + i * lda + n;
                for (int64_t j = 0; j < w; j++) s[j] = s[j] + a[j];
            }
        }
        for (int64_t j = 0; j < w; j++) out[n + j] = s[j];
    }
}

// The dot interaction's kernels in plain C (fmaf), the reference chains (internal.h).
static inline void dot_fwd_portable(int64_t R, int64_t D, const float *T, float *z) {
    int64_t p = 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = i + 1; j < R; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < D; k++) s = fmaf(T[i * D + k], T[j * D + k], s);
            z[p++] = s;
        }
}

static inline void dot_bwd_portable(int64_t R, int64_t D, const float *T, const float *gz, const int32_t *idx,
                                    float *d0, float *rest) {
    for (int64_t i = 0; i < R; i++) {
        float *dst = i == 0 ? d0 : rest + (i - 1) * D;
        for (int64_t d = 0; d < D; d++) {
            float s = 0.0f;
            for (int64_t j = 0; j < R; j++) s = fmaf(gz[idx[i * R + j]], T[j * D + d], s);
            dst[d] = s;
        }
    }
}

// Row i of a group of 8 (rows past the last repeat it: computed, never stored), for the vector
// variants' fixed 8-row register tiles.
static inline int64_t dot_row(int64_t R, int64_t i0, int r) { return i0 + r < R ? i0 + r : R - 1; }

#define EMBER__DENSE_KERNELS(suffix, isa_value) \
    const ember__dense_kernels ember__dense_kernels_##suffix = {isa_value, geom,   pack_b,  block,  gemv, rank1, \
                                                                vecmat,    colsum, dot_fwd, dot_bwd};

#endif
