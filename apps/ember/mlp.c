// Fully connected layers on ember_gemm (ember/dense.h): one call per product, bias and ReLU in
// the forward's epilogue. The library cuts each product into blocks whose sizes never depend on
// the thread count and runs every output element as one fused multiply-add chain in k order, so
// the layers give the same bits for any thread count and kernel variant (the former OpenBLAS
// tiles gave other bits per OpenBLAS kernel family, i.e. per host).
#include <math.h>
#include <string.h>

#include "appctx.h"
#include "mlp.h"
#include "ember/dense.h"
#include "ember/rng.h"

int64_t mlp_num_params(int32_t in, const int32_t *sizes, int32_t n) {
    int64_t total = 0;
    for (int32_t l = 0; l < n; l++) {
        total += (int64_t)sizes[l] * in + sizes[l];
        in = sizes[l];
    }
    return total;
}

ember_status mlp_create(ember_ctx *ctx, int32_t in, const int32_t *sizes, int32_t n, bool relu_last,
                        int32_t max_batch, float *params, float *grads, mlp *m) {
    memset(m, 0, sizeof *m);
    APP_CHECK(ctx, n >= 1 && in >= 1 && max_batch >= 1, EMBER_ERR_INVALID_ARG,
              "mlp: %d layers, input width %d, batch %d", (int)n, (int)in, (int)max_batch);
    for (int32_t l = 0; l < n; l++)
        APP_CHECK(ctx, sizes[l] >= 1, EMBER_ERR_INVALID_ARG, "mlp: layer %d has size %d", (int)l, (int)sizes[l]);
    m->layers = app_alloc(ctx, sizeof(mlp_layer) * (size_t)n, "mlp layers");
    if (!m->layers) return EMBER_ERR_NOMEM;
    memset(m->layers, 0, sizeof(mlp_layer) * (size_t)n);
    m->ctx = ctx;
    m->num_layers = n;
    m->in = in;
    m->max_batch = max_batch;
    int32_t width = in, widest = in;
    for (int32_t l = 0; l < n; l++) {
        mlp_layer *L = &m->layers[l];
        L->in = width;
        L->out = sizes[l];
        L->relu = l < n - 1 || relu_last;
        L->w = params;
        L->dw = grads;
        params += (size_t)L->out * (size_t)L->in;
        grads += (size_t)L->out * (size_t)L->in;
        L->b = params;
        L->db = grads;
        params += L->out;
        grads += L->out;
        L->y = app_alloc(ctx, sizeof(float) * (size_t)max_batch * (size_t)L->out, "mlp activations");
        if (!L->y) {
            mlp_destroy(ctx, m);
            return EMBER_ERR_NOMEM;
        }
        width = L->out;
        if (width > widest) widest = width;
    }
    for (int i = 0; i < 2; i++) {
        m->scratch[i] = app_alloc(ctx, sizeof(float) * (size_t)max_batch * (size_t)widest, "mlp scratch");
        if (!m->scratch[i]) {
            mlp_destroy(ctx, m);
            return EMBER_ERR_NOMEM;
        }
    }
    return EMBER_OK;
}

void mlp_destroy(ember_ctx *ctx, mlp *m) {
    if (m->layers) {
        for (int32_t l = 0; l < m->num_layers; l++) ember_ctx_free(ctx, m->layers[l].y);
        ember_ctx_free(ctx, m->layers);
    }
    ember_ctx_free(ctx, m->scratch[0]);
    ember_ctx_free(ctx, m->scratch[1]);
    memset(m, 0, sizeof *m);
}

void mlp_init_params(mlp *m, uint64_t seed, uint64_t stream) {
    for (int32_t l = 0; l < m->num_layers; l++) {
        mlp_layer *L = &m->layers[l];
        double bound = 1.0 / sqrt((double)L->in);
        ember_rng r = ember_rng_at(seed, stream, (uint64_t)l);
        size_t nw = (size_t)L->out * (size_t)L->in;
        for (size_t i = 0; i < nw; i++) L->w[i] = (float)((2.0 * ember_rng_uniform(&r) - 1.0) * bound);
        for (int32_t i = 0; i < L->out; i++) L->b[i] = (float)((2.0 * ember_rng_uniform(&r) - 1.0) * bound);
    }
}

ember_status mlp_forward(mlp *m, const float *x, int32_t batch, const float **y) {
    APP_ASSERT(batch >= 0 && batch <= m->max_batch);
    const float *in = x;
    for (int32_t l = 0; l < m->num_layers; l++) {
        const mlp_layer *L = &m->layers[l];
        const ember_gemm_epilogue ep = {.bias = L->b, .relu = L->relu};
        // y = relu(x W^T + b): [B, in] x [in, out] with W stored [out, in].
        APP_TRY(ember_gemm(m->ctx, EMBER_NO_TRANS, EMBER_TRANS, batch, L->out, L->in, in, L->in, L->w, L->in, L->y,
                           L->out, &ep));
        in = L->y;
    }
    *y = m->layers[m->num_layers - 1].y;
    return EMBER_OK;
}

ember_status mlp_backward(mlp *m, const float *x, int32_t batch, const float *dy, float *dx) {
    APP_ASSERT(batch >= 0 && batch <= m->max_batch);
    // g is dL/d(output of layer l); it lives in the caller's dy or in scratch[cur].
    const float *g = dy;
    int cur = -1;
    for (int32_t l = m->num_layers - 1; l >= 0; l--) {
        const mlp_layer *L = &m->layers[l];
        if (L->relu) {
            // Through the ReLU: dL/dz = dL/dy where y > 0 (torch's convention: 0 at z = 0).
            if (cur < 0) cur = 0;
            float *gz = m->scratch[cur];
            const int64_t n = (int64_t)batch * L->out;
#pragma omp parallel for schedule(static) if (n >= 65536)
            for (int64_t i = 0; i < n; i++) gz[i] = L->y[i] > 0.0f ? g[i] : 0.0f;
            g = gz;
        }
        const float *in = l > 0 ? m->layers[l - 1].y : x;
        // dW = g^T x ([out, B] x [B, in]): the batch is the sum; db = column sums of g in row order.
        APP_TRY(ember_gemm(m->ctx, EMBER_TRANS, EMBER_NO_TRANS, L->out, L->in, batch, g, L->out, in, L->in, L->dw,
                           L->in, NULL));
        APP_TRY(ember_colsum(m->ctx, batch, L->out, g, L->out, L->db, 0));
        if (l == 0 && !dx) break;
        // dx = g W ([B, out] x [out, in]) into the buffer g does not occupy.
        const int next = cur == 0 ? 1 : 0;
        float *dst = l > 0 ? m->scratch[next] : dx;
        APP_TRY(ember_gemm(m->ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, batch, L->in, L->out, g, L->out, L->w, L->in, dst,
                           L->in, NULL));
        g = dst;
        cur = next;
    }
    return EMBER_OK;
}
