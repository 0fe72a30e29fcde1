// Pairwise dot interaction as batched products (interaction.h). The Gram matrix of a sample is
// tiny (27 x 27 x 16 for the default model) and there are thousands of them: ember_gemm_batched
// runs whole samples per thread. T is gathered once per forward (the dense vector and the
// embeddings are separate arrays) and serves both products of the backward.
#include <string.h>

#include "appctx.h"
#include "interaction.h"
#include "ember/dense.h"

int32_t interaction_out_dim(int32_t num_sparse, int32_t dim) { return dim + (num_sparse + 1) * num_sparse / 2; }

ember_status interaction_create(ember_ctx *ctx, int32_t num_sparse, int32_t dim, int32_t max_batch,
                                interaction *ia) {
    memset(ia, 0, sizeof *ia);
    APP_CHECK(ctx, num_sparse >= 1 && dim >= 1 && max_batch >= 1, EMBER_ERR_INVALID_ARG,
              "interaction: %d features of dim %d, batch %d", (int)num_sparse, (int)dim, (int)max_batch);
    const size_t rows = (size_t)num_sparse + 1, B = (size_t)max_batch;
    ia->ctx = ctx;
    ia->num_sparse = num_sparse;
    ia->dim = dim;
    ia->max_batch = max_batch;
    if (!(ia->t = app_alloc(ctx, sizeof(float) * B * rows * (size_t)dim, "interaction input")) ||
        !(ia->z = app_alloc(ctx, sizeof(float) * B * rows * rows, "interaction products"))) {
        interaction_destroy(ia);
        return EMBER_ERR_NOMEM;
    }
    return EMBER_OK;
}

void interaction_destroy(interaction *ia) {
    if (ia->ctx) {
        ember_ctx_free(ia->ctx, ia->t);
        ember_ctx_free(ia->ctx, ia->z);
    }
    memset(ia, 0, sizeof *ia);
}

ember_status interaction_forward(interaction *ia, int32_t batch, const float *dense, const float *emb, float *out) {
    APP_ASSERT(batch >= 0 && batch <= ia->max_batch);
    const int32_t F = ia->num_sparse, D = ia->dim, R = F + 1, width = interaction_out_dim(F, D);
    const size_t FD = (size_t)F * (size_t)D, RD = FD + (size_t)D, RR = (size_t)R * (size_t)R;
#pragma omp parallel for schedule(static) if (batch >= 256)
    for (int32_t b = 0; b < batch; b++) {
        float *t = ia->t + (size_t)b * RD;
        memcpy(t, dense + (size_t)b * (size_t)D, sizeof(float) * (size_t)D);
        memcpy(t + D, emb + (size_t)b * FD, sizeof(float) * FD);
    }
    // Z_b = T_b T_b^T.
    APP_TRY(ember_gemm_batched(ia->ctx, EMBER_NO_TRANS, EMBER_TRANS, R, R, D, ia->t, D, (int64_t)RD, ia->t, D,
                               (int64_t)RD, ia->z, R, (int64_t)RR, batch, NULL));
#pragma omp parallel for schedule(static) if (batch >= 256)
    for (int32_t b = 0; b < batch; b++) {
        const float *z = ia->z + (size_t)b * RR;
        float *o = out + (size_t)b * (size_t)width;
        memcpy(o, ia->t + (size_t)b * RD, sizeof(float) * (size_t)D);
        int32_t k = D;
        for (int32_t i = 0; i < R; i++)
            for (int32_t j = i + 1; j < R; j++) o[k++] = z[(size_t)i * (size_t)R + (size_t)j];
    }
    return EMBER_OK;
}

ember_status interaction_backward(interaction *ia, int32_t batch, const float *dout, float *ddense, float *demb) {
    APP_ASSERT(batch >= 0 && batch <= ia->max_batch);
    const int32_t F = ia->num_sparse, D = ia->dim, R = F + 1, width = interaction_out_dim(F, D);
    const size_t FD = (size_t)F * (size_t)D, RD = FD + (size_t)D, RR = (size_t)R * (size_t)R;
    // z_ij = <T_i, T_j> (i < j) gives dT_i += g_ij T_j and dT_j += g_ij T_i: dT = S T with
    // S_ij = S_ji = g_ij and a zero diagonal. The dense vector is also copied to the output, so
    // its gradient starts as that slice of dout.
#pragma omp parallel for schedule(static) if (batch >= 256)
    for (int32_t b = 0; b < batch; b++) {
        const float *g = dout + (size_t)b * (size_t)width;
        float *s = ia->z + (size_t)b * RR;
        memcpy(ddense + (size_t)b * (size_t)D, g, sizeof(float) * (size_t)D);
        int32_t k = D;
        for (int32_t i = 0; i < R; i++) {
            s[(size_t)i * (size_t)R + (size_t)i] = 0.0f;
            for (int32_t j = i + 1; j < R; j++, k++)
                s[(size_t)i * (size_t)R + (size_t)j] = s[(size_t)j * (size_t)R + (size_t)i] = g[k];
        }
    }
    // Rows 1..F of S T are the embeddings' gradients; row 0 adds to the dense vector's.
    const ember_gemm_epilogue add = {.accumulate = 1};
    APP_TRY(ember_gemm_batched(ia->ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, F, D, R, ia->z + R, R, (int64_t)RR, ia->t, D,
                               (int64_t)RD, demb, D, (int64_t)FD, batch, NULL));
    APP_TRY(ember_gemm_batched(ia->ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, 1, D, R, ia->z, R, (int64_t)RR, ia->t, D,
                               (int64_t)RD, ddense, D, D, batch, &add));
    return EMBER_OK;
}
