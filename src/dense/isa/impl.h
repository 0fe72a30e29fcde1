// What every dense kernel variant shares, included by generic.c, avx2.c and avx512.c (so compiled
// with each variant's target flags; everything here is static). The variant defines, before
// including this file:
//
//   static void tile(const tile_args *t);   one register tile: t->mr x t->nr outputs, one k slice
//   static void geom(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g);
//   EMBER__DENSE_COLSUM_W                   the column chunk ember_colsum keeps in registers
//
// and this file gives the block loop (the BLIS nest of src/dense/internal.h), the scalar
// epilogue and the column sums, and defines the variant's table with EMBER__DENSE_KERNELS.
#ifndef EMBER_DENSE_ISA_IMPL_H
#define EMBER_DENSE_ISA_IMPL_H

#include <math.h>
#include <stddef.h>

#include "dense/internal.h"

// One micro-kernel call: rows [0, mr) x columns [0, nr) of a tile over one k slice of kb steps.
//   a    A at (the tile's first row, the slice's first k): A(r,k) = ta ? a[k*lda + r] : a[r*lda + k]
//        (NULL when kb = 0)
//   b    the packed slice: row k at b + k*ldb (ldb = the panel width g->nr; 64-byte aligned rows
//        when g->nr is a multiple of 16), columns past nr zero
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

static void tile(const tile_args *t);
static void geom(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g);

static void block(const ember__gemm_op *op, const ember__gemm_geom *g, int64_t m0, int64_t mb, int64_t n0,
                  int64_t nb, float *part) {
    const int64_t K = op->K, nr = g->nr, mr = g->mr;
    tile_args t = {.lda = op->lda, .ta = op->ta, .ldb = nr, .ldp = g->nc, .ldc = op->ldc,
                   .relu = op->relu, .accumulate = op->accumulate};
    // K = 0 still runs one (empty) slice: the epilogue of +0.
    int64_t pc = 0;
    do {
        const int64_t kb = K - pc < g->kc ? K - pc : g->kc;
        t.kb = kb;
        t.first = pc == 0;
        t.last = pc + kb >= K;
        for (int64_t j = 0; j < nb; j += nr) {
            const int64_t n = n0 + j;
            t.nr = (int)(nb - j < nr ? nb - j : nr);
            t.b = op->Bp + (n / nr) * K * nr + pc * nr;
            t.bias = op->bias ? op->bias + n : NULL;
            for (int64_t i = 0; i < mb; i += mr) {
                const int64_t m = m0 + i;
                t.mr = (int)(mb - i < mr ? mb - i : mr);
                t.a = kb == 0 ? NULL : op->ta ? op->A + pc * op->lda + m : op->A + m * op->lda + pc;
                t.c = op->C + m * op->ldc + n;
                t.p = part ? part + i * g->nc + j : NULL;
                tile(&t);
            }
        }
        pc += kb;
    } while (pc < K);
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

#define EMBER__DENSE_KERNELS(suffix, isa_value) \
    const ember__dense_kernels ember__dense_kernels_##suffix = {isa_value, geom, block, colsum};

#endif
