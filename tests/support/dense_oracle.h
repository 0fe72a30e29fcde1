// The naive oracle of the dense products (include/ember/dense.h), sharing no code with
// src/dense/: plain loops over the definition, one element at a time.
//   dense_oracle_gemm    the exact bits: one fmaf chain per element in k order, then the
//                        epilogue (accumulate, bias, relu) in the documented order
//   dense_oracle_gemm64  the same product in double precision (for the error bound), and the
//                        bound itself: the fp32 chain's worst-case error against it
//   dense_oracle_colsum  the column sums in row order
#ifndef EMBER_TEST_DENSE_ORACLE_H
#define EMBER_TEST_DENSE_ORACLE_H

#include <stdint.h>

// op(A) [M][K] x op(B) [K][N] into C (row stride ldc), as ember_gemm with the epilogue given
// by bias ([N] or NULL), relu and accumulate.
void dense_oracle_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                       int64_t ldb, float *C, int64_t ldc, const float *bias, int relu, int accumulate);

// ref[m*N + n]: the element in double (products and sums exact to double rounding, the epilogue
// on the double value; c0 is C before the call, read for accumulate). bound[m*N + n]: a bound on
// |fp32 result - ref| for the fp32 chain: (K + 2) * 2^-24 * (sum_k |a b| + |c0| + |bias|), plus
// one double rounding's worth.
void dense_oracle_gemm64(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, const float *c0, int64_t ldc, const float *bias, int relu,
                         int accumulate, double *ref, double *bound);

// out[n] = (accumulate ? out[n] : +0) + A[0][n] + A[1][n] + ... in row order (plain adds).
void dense_oracle_colsum(int64_t M, int64_t N, const float *A, int64_t lda, float *out, int accumulate);

#endif
