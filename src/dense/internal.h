// The dense layer (include/ember/dense.h): the front end (gemm.c: checks, packing, blocks,
// threads) and the kernel variants it calls (isa/: one file per instruction set, the shared
// block loop in isa/impl.h, the table picked in isa/dispatch.c).
//
// How a product is cut (BLIS's loop nest, K never split between threads):
//   - B is packed once per product into panels of nr columns, panel j at Bp + j*K*nr laid out
//     [K][nr] (the column tail of the last panel zero-filled), so a micro-kernel loads one
//     aligned vector row of B per k whatever tb is. An untransposed B feeding few rows of C is
//     read in place instead (the copy would cost more than it saves); N = 1 (a matrix-vector
//     product) has a path of its own, one vector lane per row of C, and so have K = 1 (a rank-1
//     product: one multiply-add an element, where a tile's set-up would cost more than it) and
//     M = 1 with B untransposed (one row of C: B's rows streamed once, all its columns' chains
//     in flight).
//   - C is cut into blocks of mc rows x nc columns (nc a multiple of nr); the block sizes are a
//     function of the shape and the variant only, never of the thread count. A thread runs
//     whole blocks.
//   - Inside a block, k runs in slices of kc (the packed B slice kc x nr stays in L1 while the
//     block's rows stream past it; a product of at most one tile of rows is not sliced: its B
//     streams past once whatever kc), each slice over the nr-wide panels, each panel over the
//     mr-row tiles: one register-blocked micro-kernel call per (slice, panel, tile). When the
//     block has several panels, its rows of A for the slice are first copied into the thread's
//     scratch, tile by tile (contiguous, whatever lda).
//   - A slice that is not the last leaves its tile's partial sums in the thread's scratch
//     [mc][nc]; the next slice loads them back into the same accumulators and goes on. The
//     chain of each element is thus the same chain of fused multiply-adds, in the same order,
//     however K is sliced: kc changes speed, never bits. The epilogue runs after the last slice.
#ifndef EMBER_DENSE_INTERNAL_H
#define EMBER_DENSE_INTERNAL_H

#include <stdint.h>

#include "core/internal.h"
#include "ember/dense.h"

// The register tile and cache blocks a variant picks for one product shape (never a function
// of the thread count).
typedef struct ember__gemm_geom {
    int32_t mr, nr;         // micro-tile rows, packed panel width (a multiple of the vector width)
    int64_t kc, mc, nc;     // k slice, block rows, block columns (nc a multiple of nr)
} ember__gemm_geom;

// One product as the kernels see it.
typedef struct ember__gemm_op {
    int ta, tb;              // 0: A(m,k) = A[m*lda + k]; 1: A(m,k) = A[k*lda + m]; B likewise
    int64_t M, N, K;
    const float *A;
    int64_t lda;
    const float *B;          // as given (read in place when bdirect, and by gemv)
    int64_t ldb;
    int bdirect;             // B is read in place (tb = 0, few rows of C): no packing
    const float *Bp;         // packed B (see above), unless bdirect
    float *C;
    int64_t ldc;
    const float *bias;       // [N] or NULL
    int relu, accumulate;
} ember__gemm_op;

typedef struct ember__dense_kernels {
    ember_isa isa;
    // The geometry for op(A) [M][K] x op(B) [K][N] with A transposed or not.
    void (*geom)(int64_t M, int64_t N, int64_t K, int ta, ember__gemm_geom *g);
    // Panel p of op(B) [K][N] (nr columns) into dst + p*K*nr, [K][nr], columns past N zero.
    void (*pack_b)(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, int64_t nr, int64_t p, float *dst);
    // Rows [m0, m0 + mb) x columns [n0, n0 + nb) of C (n0 a multiple of g->nc, nb <= g->nc,
    // mb <= g->mc), every k slice. The thread's scratch, 64-byte aligned: part, g->mc x g->nc
    // floats for the partial sums (NULL when K <= g->kc); ap, ceil(g->mc / g->mr) * g->mr *
    // min(K, g->kc) floats for the packed rows of A (NULL: A is read in place).
    void (*block)(const ember__gemm_op *op, const ember__gemm_geom *g, int64_t m0, int64_t mb, int64_t n0,
                  int64_t nb, float *part, float *ap);
    // N = 1 (a matrix-vector product): rows [m0, m0 + mb) of C, B read in place, no scratch.
    void (*gemv)(const ember__gemm_op *op, int64_t m0, int64_t mb);
    // K = 1, N > 1 (a rank-1 product: the last layer's input gradient): rows [m0, m0 + mb) of C,
    // A and B read in place, no scratch.
    void (*rank1)(const ember__gemm_op *op, int64_t m0, int64_t mb);
    // M = 1, N > 1, K > 1, B untransposed (a weight gradient with one output row): columns
    // [n0, n0 + nb) of C's one row, each element its chain over k in order, B's rows read in
    // place (8 vectors of columns at a time: the chains in flight the FMA latency needs).
    void (*vecmat)(const ember__gemm_op *op, int64_t n0, int64_t nb);
    // out[n] for n in [n0, n1): the column sums of ember_colsum.
    void (*colsum)(int64_t M, int64_t n0, int64_t n1, const float *A, int64_t lda, float *out, int accumulate);
    // The dot interaction of one sample (src/dense/interaction.c), T [R][D] row-major, R >= 1:
    // dot_fwd writes z[p] = <T_i, T_j> for the pairs i < j in row-major order, each one fused
    // multiply-add chain over d = 0..D-1 from +0; tt is scratch of D * ember__dot_padded(R)
    // floats, 64-byte aligned. dot_bwd writes dT_i = sum_j S_ij T_j for every row i (row 0 to
    // d0, rows 1..R-1 to rest [R-1][D]), each element one chain over j = 0..R-1 from +0 with
    // S_ij = gz[idx[i*R + j]] (idx[i*R + i] pointing at a zero: the diagonal is in the chain,
    // as in the product S T it replaces).
    void (*dot_fwd)(int64_t R, int64_t D, const float *T, float *z, float *tt);
    void (*dot_bwd)(int64_t R, int64_t D, const float *T, const float *gz, const int32_t *idx, float *d0,
                    float *rest);
} ember__dense_kernels;

// R rounded up to 16: the row length of dot_fwd's transposed T (whole vectors for every variant).
static inline int64_t ember__dot_padded(int64_t R) { return (R + 15) / 16 * 16; }

// Index of the pair (i, j), i < j < R, in the row-major order of the upper triangle.
static inline int64_t ember__dot_pair(int64_t R, int64_t i, int64_t j) {
    return i * (R - 1) - i * (i - 1) / 2 + (j - i - 1);
}

// The table of a variant this build holds (GENERIC always exists); NULL otherwise.
const ember__dense_kernels *ember__dense_kernels_for(ember_isa isa);

extern const ember__dense_kernels ember__dense_kernels_generic;
extern const ember__dense_kernels ember__dense_kernels_avx2;
extern const ember__dense_kernels ember__dense_kernels_avx512;

#endif
