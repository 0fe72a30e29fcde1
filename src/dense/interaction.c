// ember_dot_interaction_*: DLRM's pairwise dot interaction as batched products (ember/dense.h).
// The Gram matrix of a sample is tiny (27 x 27 x 16 for the default model) and there are
// thousands of them: ember_gemm_batched runs whole samples per thread. T is gathered once per
// forward (the dense vector and the embeddings are separate arrays) and serves the backward.
#include <stdint.h>
#include <string.h>

#include "dense/internal.h"

// Below this many samples the gathers run on one thread (a parallel region costs microseconds).
#define MIN_PARALLEL_SAMPLES 256

int64_t ember_dot_interaction_width(int32_t num_sparse, int32_t dim) {
    if (num_sparse < 0 || dim < 0) return -1;
    return (int64_t)dim + ((int64_t)num_sparse + 1) * (int64_t)num_sparse / 2;
}

static ember_status check(ember_ctx *ctx, const char *fn, int64_t batch, int32_t F, int32_t D, const void *const *p,
                          const char *const *names, int n) {
    EMBER_CHECK(ctx, batch >= 0, EMBER_ERR_INVALID_ARG, "%s: batch is %lld: must be >= 0", fn, (long long)batch);
    EMBER_CHECK(ctx, F >= 1 && D >= 1, EMBER_ERR_INVALID_ARG, "%s: num_sparse %d, dim %d: each must be >= 1", fn,
                (int)F, (int)D);
    // The largest array, [batch][F+1][max(D, F+1)] floats, must fit the address space.
    const uint64_t per = ((uint64_t)F + 1) * (uint64_t)(D > F + 1 ? D : F + 1) * sizeof(float);
    EMBER_CHECK(ctx, batch == 0 || (uint64_t)batch <= (SIZE_MAX / 2) / per, EMBER_ERR_INVALID_ARG,
                "%s: batch %lld of %d x %d spans more than the address space", fn, (long long)batch, (int)F + 1,
                (int)D);
    for (int i = 0; i < n && batch > 0; i++) {
        EMBER_CHECK(ctx, p[i] != NULL, EMBER_ERR_INVALID_ARG, "%s: %s is NULL with batch %lld", fn, names[i],
                    (long long)batch);
        EMBER_CHECK(ctx, ((uintptr_t)p[i] & (sizeof(float) - 1)) == 0, EMBER_ERR_INVALID_ARG,
                    "%s: %s (%p) is not aligned to 4 bytes (a float array)", fn, names[i], p[i]);
    }
    return EMBER_OK;
}

static int gather_threads(ember_ctx *ctx, int64_t batch) {
    return batch >= MIN_PARALLEL_SAMPLES ? ember__threads(ctx) : 1;
}

ember_status ember_dot_interaction_forward(ember_ctx *ctx, int64_t batch, int32_t num_sparse, int32_t dim,
                                           const float *dense, const float *emb, float *out, float *t, float *z) {
    static const char fn[] = "ember_dot_interaction_forward";
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const void *p[] = {dense, emb, out, t, z};
    static const char *const names[] = {"dense", "emb", "out", "t", "z"};
    EMBER_TRY(check(ctx, fn, batch, num_sparse, dim, p, names, 5));
    const int64_t F = num_sparse, D = dim, R = F + 1, FD = F * D, RD = R * D, RR = R * R;
    const int64_t width = ember_dot_interaction_width(num_sparse, dim);
    int nt = gather_threads(ctx, batch);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t b = 0; b < batch; b++) {
        memcpy(t + b * RD, dense + b * D, sizeof(float) * (size_t)D);
        memcpy(t + b * RD + D, emb + b * FD, sizeof(float) * (size_t)FD);
    }
    // Z_b = T_b T_b^T.
    EMBER_TRY(ember_gemm_batched(ctx, EMBER_NO_TRANS, EMBER_TRANS, R, R, D, t, D, RD, t, D, RD, z, R, RR, batch, NULL));
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t b = 0; b < batch; b++) {
        const float *zb = z + b * RR;
        float *o = out + b * width;
        memcpy(o, dense + b * D, sizeof(float) * (size_t)D);
        int64_t k = D;
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = i + 1; j < R; j++) o[k++] = zb[i * R + j];
    }
    return EMBER_OK;
}

ember_status ember_dot_interaction_backward(ember_ctx *ctx, int64_t batch, int32_t num_sparse, int32_t dim,
                                            const float *t, const float *dout, float *ddense, float *demb, float *s) {
    static const char fn[] = "ember_dot_interaction_backward";
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const void *p[] = {t, dout, ddense, demb, s};
    static const char *const names[] = {"t", "dout", "ddense", "demb", "s"};
    EMBER_TRY(check(ctx, fn, batch, num_sparse, dim, p, names, 5));
    const int64_t F = num_sparse, D = dim, R = F + 1, FD = F * D, RD = R * D, RR = R * R;
    const int64_t width = ember_dot_interaction_width(num_sparse, dim);
    // z_ij = <T_i, T_j> (i < j) gives dT_i += g_ij T_j and dT_j += g_ij T_i: dT = S T with
    // S_ij = S_ji = g_ij and a zero diagonal. The dense vector is also copied to the output, so
    // its gradient starts as that slice of dout.
    int nt = gather_threads(ctx, batch);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t b = 0; b < batch; b++) {
        const float *g = dout + b * width;
        float *sb = s + b * RR;
        memcpy(ddense + b * D, g, sizeof(float) * (size_t)D);
        int64_t k = D;
        for (int64_t i = 0; i < R; i++) {
            sb[i * R + i] = 0.0f;
            for (int64_t j = i + 1; j < R; j++, k++) sb[i * R + j] = sb[j * R + i] = g[k];
        }
    }
    // Rows 1..F of S T are the embeddings' gradients; row 0 adds to the dense vector's.
    const ember_gemm_epilogue add = {.accumulate = 1};
    EMBER_TRY(ember_gemm_batched(ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, F, D, R, s + R, R, RR, t, D, RD, demb, D, FD,
                                 batch, NULL));
    EMBER_TRY(ember_gemm_batched(ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, 1, D, R, s, R, RR, t, D, RD, ddense, D, D, batch,
                                 &add));
    return EMBER_OK;
}
