// The trainer's dot interaction (interaction.h): the buffers of the library's
// ember_dot_interaction_forward/backward (ember/dense.h) for the largest batch.
#include <string.h>

#include "appctx.h"
#include "interaction.h"
#include "ember/dense.h"

int32_t interaction_out_dim(int32_t num_sparse, int32_t dim) {
    return (int32_t)ember_dot_interaction_width(num_sparse, dim);
}

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
    if (!(ia->t = app_alloc(ctx, sizeof(float) * B * rows * (size_t)dim, "interaction input"))) {
        interaction_destroy(ia);
        return EMBER_ERR_NOMEM;
    }
    return EMBER_OK;
}

void interaction_destroy(interaction *ia) {
    if (ia->ctx) {
        ember_ctx_free(ia->ctx, ia->t);
    }
    memset(ia, 0, sizeof *ia);
}

ember_status interaction_forward(interaction *ia, int32_t batch, const float *dense, const float *emb, float *out) {
    APP_ASSERT(batch >= 0 && batch <= ia->max_batch);
    return ember_dot_interaction_forward(ia->ctx, batch, ia->num_sparse, ia->dim, dense, emb, out, ia->t);
}

ember_status interaction_backward(interaction *ia, int32_t batch, const float *dout, float *ddense, float *demb) {
    APP_ASSERT(batch >= 0 && batch <= ia->max_batch);
    return ember_dot_interaction_backward(ia->ctx, batch, ia->num_sparse, ia->dim, ia->t, dout, ddense, demb);
}
