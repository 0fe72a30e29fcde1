// ember_dot_interaction_*: DLRM's pairwise dot interaction (ember/dense.h). The Gram matrix of a
// sample is tiny (27 x 27 x 16 for the default model) and there are thousands of them: the
// context's kernel variant runs whole samples (src/dense/isa/: dot_fwd, dot_bwd), the threads
// split the batch, so the bits depend on neither. T is gathered once per forward (the dense
// vector and the embeddings are separate arrays) and serves the backward.
#include <stdint.h>
#include <string.h>

#include "dense/internal.h"

// Below this many samples a call runs on one thread (a parallel region costs microseconds).
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

static int sample_threads(ember_ctx *ctx, int64_t batch) {
    return batch >= MIN_PARALLEL_SAMPLES ? ember__threads(ctx) : 1;
}

// Per-thread scratch of `floats` floats each, every slice 64-byte aligned: returns the first
// slice (the others `*stride` floats apart) and in *base the block to free; NULL with the
// message on failure.
static float *thread_scratch(ember_ctx *ctx, const char *fn, int nt, int64_t floats, int64_t *stride, float **base) {
    const int64_t per = (floats + 15) / 16 * 16;
    size_t bytes = 0;
    if (!ember__mul_size((size_t)per, (size_t)nt, &bytes) || !ember__mul_size(bytes, sizeof(float), &bytes) ||
        bytes > SIZE_MAX - 64) {
        ember__error(ctx, EMBER_ERR_NOMEM, "%s: scratch of %d x %lld floats overflows the address space", fn, nt,
                     (long long)per);
        return NULL;
    }
    *base = ember__xalloc(ctx, bytes + 64, fn);
    if (!*base) return NULL;
    *stride = per;
    return (float *)(((uintptr_t)*base + 63) & ~(uintptr_t)63);
}

ember_status ember_dot_interaction_forward(ember_ctx *ctx, int64_t batch, int32_t num_sparse, int32_t dim,
                                           const float *dense, const float *emb, float *out, float *t) {
    static const char fn[] = "ember_dot_interaction_forward";
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const void *p[] = {dense, emb, out, t};
    static const char *const names[] = {"dense", "emb", "out", "t"};
    EMBER_TRY(check(ctx, fn, batch, num_sparse, dim, p, names, 4));
    if (batch == 0) return EMBER_OK;
    const int64_t F = num_sparse, D = dim, R = F + 1, FD = F * D, RD = R * D;
    const int64_t width = ember_dot_interaction_width(num_sparse, dim);
    const ember__dense_kernels *kern = ember__dense_kernels_for(ctx->isa);
    EMBER_ASSERT(kern != NULL);
    int nt = sample_threads(ctx, batch);
    int64_t stride = 0;
    float *base = NULL, *tt = thread_scratch(ctx, fn, nt, D * ember__dot_padded(R), &stride, &base);
    if (!tt) return EMBER_ERR_NOMEM;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *mine = tt + (size_t)ember__thread_id() * (size_t)stride;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < batch; b++) {
            float *tb = t + b * RD, *o = out + b * width;
            memcpy(tb, dense + b * D, sizeof(float) * (size_t)D);
            memcpy(tb + D, emb + b * FD, sizeof(float) * (size_t)FD);
            memcpy(o, dense + b * D, sizeof(float) * (size_t)D);
            kern->dot_fwd(R, D, tb, o + D, mine);
        }
    }
    ember__free(ctx, base);
    return EMBER_OK;
}

ember_status ember_dot_interaction_backward(ember_ctx *ctx, int64_t batch, int32_t num_sparse, int32_t dim,
                                            const float *t, const float *dout, float *ddense, float *demb) {
    static const char fn[] = "ember_dot_interaction_backward";
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const void *p[] = {t, dout, ddense, demb};
    static const char *const names[] = {"t", "dout", "ddense", "demb"};
    EMBER_TRY(check(ctx, fn, batch, num_sparse, dim, p, names, 4));
    if (batch == 0) return EMBER_OK;
    const int64_t F = num_sparse, D = dim, R = F + 1, FD = F * D, RD = R * D, npairs = R * F / 2;
    const int64_t width = ember_dot_interaction_width(num_sparse, dim);
    EMBER_CHECK(ctx, npairs < INT32_MAX, EMBER_ERR_INVALID_ARG, "%s: num_sparse %d: %lld pairs, more than int32 indexes",
                fn, (int)num_sparse, (long long)npairs);
    const ember__dense_kernels *kern = ember__dense_kernels_for(ctx->isa);
    EMBER_ASSERT(kern != NULL);
    // z_ij = <T_i, T_j> (i < j) gives dT_i += g_ij T_j and dT_j += g_ij T_i: dT = S T with
    // S_ij = S_ji = g_ij and a zero diagonal. Each sample's gradients gz = [0, g_pairs...] and
    // idx (shared) naming S_ij's place in them. The dense vector is also copied to the output,
    // so its gradient is that slice of dout plus row 0 of S T.
    int32_t *idx = ember__xalloc(ctx, sizeof(int32_t) * (size_t)(R * R), fn);
    if (!idx) return EMBER_ERR_NOMEM;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < R; j++)
            idx[i * R + j] = i == j ? 0 : (int32_t)(1 + (i < j ? ember__dot_pair(R, i, j) : ember__dot_pair(R, j, i)));
    int nt = sample_threads(ctx, batch);
    int64_t stride = 0;
    float *base = NULL, *scratch = thread_scratch(ctx, fn, nt, 1 + npairs + D, &stride, &base);
    if (!scratch) {
        ember__free(ctx, idx);
        return EMBER_ERR_NOMEM;
    }
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *gz = scratch + (size_t)ember__thread_id() * (size_t)stride, *d0 = gz + 1 + npairs;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < batch; b++) {
            const float *g = dout + b * width;
            gz[0] = 0.0f;
            memcpy(gz + 1, g + D, sizeof(float) * (size_t)npairs);
            kern->dot_bwd(R, D, t + b * RD, gz, idx, d0, demb + b * FD);
            float *dd = ddense + b * D;
            for (int64_t d = 0; d < D; d++) dd[d] = g[d] + d0[d];
        }
    }
    ember__free(ctx, base);
    ember__free(ctx, idx);
    return EMBER_OK;
}
