#include "dense_oracle.h"

#include <math.h>
#include <stddef.h>

static float a_at(int ta, const float *A, int64_t lda, int64_t m, int64_t k) {
    return ta ? A[k * lda + m] : A[m * lda + k];
}

static float b_at(int tb, const float *B, int64_t ldb, int64_t k, int64_t n) {
    return tb ? B[n * ldb + k] : B[k * ldb + n];
}

void dense_oracle_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                       int64_t ldb, float *C, int64_t ldc, const float *bias, int relu, int accumulate) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s = fmaf(a_at(ta, A, lda, m, k), b_at(tb, B, ldb, k, n), s);
            if (accumulate) s = C[m * ldc + n] + s;
            if (bias) s = s + bias[n];
            if (relu) s = s <= 0.0f ? 0.0f : s;
            C[m * ldc + n] = s;
        }
}

void dense_oracle_gemm64(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, const float *c0, int64_t ldc, const float *bias, int relu,
                         int accumulate, double *ref, double *bound) {
    const double u = ldexp(1.0, -24);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                const double p = (double)a_at(ta, A, lda, m, k) * (double)b_at(tb, B, ldb, k, n);
                s += p;
                mag += fabs(p);
            }
            if (accumulate) s += (double)c0[m * ldc + n], mag += fabs((double)c0[m * ldc + n]);
            if (bias) s += (double)bias[n], mag += fabs((double)bias[n]);
            // relu is 1-Lipschitz: the bound before it holds after it.
            if (relu) s = s <= 0.0 ? 0.0 : s;
            ref[m * N + n] = s;
            bound[m * N + n] = (double)(K + 2) * u * mag * 1.0001 + 1e-300;
        }
}

void dense_oracle_colsum(int64_t M, int64_t N, const float *A, int64_t lda, float *out, int accumulate) {
    for (int64_t n = 0; n < N; n++) {
        float s = accumulate ? out[n] : 0.0f;
        for (int64_t m = 0; m < M; m++) s = s + A[m * lda + n];
        out[n] = s;
    }
}
