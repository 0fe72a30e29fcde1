// ember/dense.h — dense matrix products for the dense part of a model (MLP layers, the DLRM dot
// interaction, their gradients): C = op(A) op(B) with a fused epilogue, column sums, and the dot
// interaction's forward and backward.
//
// The bits are the contract. Every output element is computed by one chain of fused
// multiply-adds over k in increasing order, never split, never reassociated:
//
//     s = +0.0f
//     for k = 0, 1, ..., K-1:  s = fmaf(A(m,k), B(k,n), s)      (one rounding per step)
//     if ep->accumulate:       s = C[m][n] + s
//     if ep->bias:             s = s + bias[n]
//     if ep->relu:             s = s <= 0 ? +0.0f : s            (a NaN stays NaN, -0 becomes +0)
//     C[m][n] = s
//
// so the result does not depend on the kernel variant (ember_isa: the generic one calls C's
// fmaf, the AVX2 and AVX-512 ones run the same chains in vector lanes, one output element per
// lane), on the thread count, on the tiling or on the compiler. K = 0 gives s = +0 followed by
// the epilogue. The only thing not promised is the sign and payload of a NaN result: every
// variant gives a NaN where another does, but which NaN depends on the instruction set.
//
// Layout: row-major, with leading dimensions in elements. With op() chosen by ember_transpose:
//     A(m,k) = ta == EMBER_NO_TRANS ? A[m*lda + k] : A[k*lda + m]      (A is [M][lda] or [K][lda])
//     B(k,n) = tb == EMBER_NO_TRANS ? B[k*ldb + n] : B[n*ldb + k]      (B is [K][ldb] or [N][ldb])
//     C[m][n] = C[m*ldc + n]                                           (C is [M][ldc])
// The arrays are read and written through float pointers: each must be aligned to 4 bytes (as
// every float array from malloc or numpy is). C must not overlap A, B or the bias.
//
// Threads: the context's kernel thread count (ember_ctx_set_num_threads). The output is cut
// into blocks whose sizes depend on M, N, K and the variant only, never on the thread count, and
// K is never split between threads, so every thread count gives the same bits. The calls are
// Local and thread-compatible (one context, one thread at a time), and may run inside a caller's
// OpenMP parallel region (they then run on the calling thread alone, as nested regions do).
//
// Performance notes and figures: docs/performance.md ("Dense kernels"); `ember bench dense`.
#ifndef EMBER_DENSE_H
#define EMBER_DENSE_H

#include <stdint.h>

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_transpose {
    EMBER_NO_TRANS = 0, // the operand as stored
    EMBER_TRANS = 1,    // its transpose
} ember_transpose;
#define EMBER_TRANSPOSE_COUNT 2

// What happens to each element after its multiply-add chain, in this order (see above):
// accumulate (add the previous C value), bias (add bias[n]), relu.
typedef struct ember_gemm_epilogue {
    const float *bias;  // [N], or NULL: no bias
    int32_t relu;       // non-zero: s <= 0 ? +0 : s (NaN kept)
    int32_t accumulate; // non-zero: C = C + product (C is read first); zero: C is only written
} ember_gemm_epilogue;
#define EMBER_GEMM_EPILOGUE_DEFAULT {.bias = NULL, .relu = 0, .accumulate = 0}

// C[M][N] = epilogue(op(A) op(B)), op(A) [M][K], op(B) [K][N], every element as the header
// comment says. ep may be NULL (EMBER_GEMM_EPILOGUE_DEFAULT: C = product).
// Sizes may be zero: M or N = 0 does nothing; K = 0 writes the epilogue of +0 (e.g. the bias).
// A, B (and ep->bias) may be NULL only when they hold no element: A when M or K is 0, B when
// K or N is 0; C only when M or N is 0.
// Leading dimensions: lda >= (ta ? M : K), ldb >= (tb ? K : N), ldc >= N, each at least 1
// (checked even for an empty operand, so a caller's layout bug shows on its smallest input).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (ctx NULL: no message; a NULL pointer with
// elements, a negative size, a leading dimension below its row width, a transpose that is
// neither value: the message names the argument and its value), EMBER_ERR_NOMEM (packing
// buffers, through the context's allocator). On error C is unchanged.
EMBER_API ember_status ember_gemm(ember_ctx *ctx, ember_transpose ta, ember_transpose tb, int64_t M, int64_t N,
                                  int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                                  int64_t ldc, const ember_gemm_epilogue *ep);

// `count` independent products of the same shape and epilogue: for i in [0, count),
//     ember_gemm(ctx, ta, tb, M, N, K, A + i*stride_a, lda, B + i*stride_b, ldb, C + i*stride_c, ldc, ep)
// with the same per-element bits. For the DLRM dot interaction: per sample Z = T T^T with
// T [F][D] (ta = NO_TRANS, tb = TRANS, M = N = F, K = D), and its gradient.
// Strides are in elements and may be 0 for A or B (one operand shared by every product; not for
// C unless count <= 1). The bias, if any, is shared. The C blocks must not overlap one another.
// Threads split the products (or, for few products, the blocks of each): same bits either way.
// Local. Returns as ember_gemm, plus EMBER_ERR_INVALID_ARG for a negative count or stride, or a
// zero stride_c with count > 1. count = 0 does nothing.
EMBER_API ember_status ember_gemm_batched(ember_ctx *ctx, ember_transpose ta, ember_transpose tb, int64_t M,
                                          int64_t N, int64_t K, const float *A, int64_t lda, int64_t stride_a,
                                          const float *B, int64_t ldb, int64_t stride_b, float *C, int64_t ldc,
                                          int64_t stride_c, int64_t count, const ember_gemm_epilogue *ep);

// Column sums of A [M][N] (row stride lda >= N): for every n,
//     s = accumulate ? out[n] : +0.0f;  then s = s + A[0][n], s = s + A[1][n], ... (rows in order)
//     out[n] = s
// (plain adds, no fused operation): the bias gradient of a layer. Same bits in every variant and
// thread count (threads split the columns). M = 0 writes out = (accumulate ? out : +0); N = 0
// does nothing. A may be NULL when M or N is 0, out when N is 0.
// Local. Returns EMBER_OK or EMBER_ERR_INVALID_ARG (as ember_gemm: named argument and value).
EMBER_API ember_status ember_colsum(ember_ctx *ctx, int64_t M, int64_t N, const float *A, int64_t lda, float *out,
                                    int32_t accumulate);

// ---- DLRM's pairwise dot interaction (TorchRec's InteractionArch) -------------------------------
//
// For sample b, stack the bottom-MLP output and the F pooled embeddings as the rows of
// T_b [F+1][D] (row 0 the dense vector, row 1+f feature f's embedding). The output is
//   out[b] = [ dense[b] (D values), <T_i, T_j> for 0 <= i < j <= F in row-major order ]
// i.e. the upper triangle of T_b T_b^T without its diagonal (torch.triu_indices(F+1, F+1, 1)),
// after the dense vector: ember_dot_interaction_width(F, D) = D + (F+1)F/2 values.
// Each value is one fused multiply-add chain in a fixed order, from +0: forward <T_i, T_j> over d
// in increasing order; backward dT_b = S_b T_b with S_b the symmetric [F+1][F+1] matrix of the
// triangle's gradients (zero diagonal, which is in the chain), dT_i = sum_j g_ij T_j over j =
// 0..F in increasing order; the dense row's gradient is dout's dense slice plus its row of S_b T_b.
// (These are the chains of ember_gemm_batched's products Z_b = T_b T_b^T and S_b T_b, which the
// kernels compute per sample without forming Z or S.) The same bits under every kernel variant
// and thread count. Arrays are row-major, contiguous, float-aligned; the caller owns every
// buffer (nothing is kept between calls but what `t` holds).

// D + (F+1)F/2, or -1 for a negative argument.
EMBER_API int64_t ember_dot_interaction_width(int32_t num_sparse, int32_t dim);

// dense [batch][dim], emb [batch][num_sparse * dim] (features in order: a collection's pooled
// output) -> out [batch][width]. Writes t [batch][num_sparse+1][dim] (T, which the backward
// takes). Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (ctx NULL: no message; batch < 0,
// num_sparse or dim < 1, a NULL or misaligned array with batch > 0: named with its value),
// EMBER_ERR_NOMEM (the threads' scratch: dim x (num_sparse+1) floats each).
EMBER_API ember_status ember_dot_interaction_forward(ember_ctx *ctx, int64_t batch, int32_t num_sparse, int32_t dim,
                                                     const float *dense, const float *emb, float *out, float *t);

// The backward: t as the forward wrote it, dout [batch][width] -> ddense [batch][dim],
// demb [batch][num_sparse * dim] (both overwritten). Local. Returns as the forward, and
// EMBER_ERR_INVALID_ARG for more than 2^31 - 1 pairs (num_sparse over 65535); EMBER_ERR_NOMEM
// also for the pairs' index ((num_sparse+1)^2 int32).
EMBER_API ember_status ember_dot_interaction_backward(ember_ctx *ctx, int64_t batch, int32_t num_sparse, int32_t dim,
                                                      const float *t, const float *dout, float *ddense, float *demb);

// "no_trans", "trans" ("unknown" outside the enum), and the inverse (EMBER_ERR_INVALID_ARG for
// anything else; "n"/"t" are not accepted).
EMBER_API const char *ember_transpose_name(ember_transpose t);
EMBER_API ember_status ember_transpose_parse(const char *name, ember_transpose *out);

#ifdef __cplusplus
}
#endif
#endif
