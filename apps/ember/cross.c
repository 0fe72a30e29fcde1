// The low-rank cross network on ember_gemm (cross.h). Per layer two thin products forward
// ([B, N] x [N, r], then [B, r] x [r, N]) and four backward; the elementwise parts run on the
// caller's OpenMP threads, each element on its own, so any split gives the same bits.
#include <math.h>
#include <string.h>

#include "appctx.h"
#include "cross.h"
#include "ember/dense.h"
#include "ember/rng.h"

#define PAR_MIN 65536 // elements below which the elementwise loops stay on one thread

int64_t cross_num_params(int32_t width, int32_t num_layers, int32_t rank) {
    return (int64_t)num_layers * (2 * (int64_t)width * rank + width);
}

// Layer l's parameters (or gradients) in a slab laid out as cross.h says.
static float *layer_v(float *slab, const cross *c, int32_t l) {
    return slab + (size_t)l * (size_t)(2 * (int64_t)c->width * c->rank + c->width);
}
static float *layer_w(float *slab, const cross *c, int32_t l) {
    return layer_v(slab, c, l) + (size_t)c->rank * (size_t)c->width;
}
static float *layer_b(float *slab, const cross *c, int32_t l) {
    return layer_w(slab, c, l) + (size_t)c->width * (size_t)c->rank;
}
static float *x_at(const cross *c, int32_t l) { return c->x + (size_t)l * (size_t)c->max_batch * (size_t)c->width; }
static float *t_at(const cross *c, int32_t l) { return c->t + (size_t)l * (size_t)c->max_batch * (size_t)c->width; }
static float *u_at(const cross *c, int32_t l) { return c->u + (size_t)l * (size_t)c->max_batch * (size_t)c->rank; }

ember_status cross_create(ember_ctx *ctx, int32_t width, int32_t num_layers, int32_t rank, int32_t max_batch,
                          float *params, float *grads, cross *c) {
    memset(c, 0, sizeof *c);
    APP_CHECK(ctx, width >= 1 && num_layers >= 1 && rank >= 1 && max_batch >= 1, EMBER_ERR_INVALID_ARG,
              "cross net: width %d, %d layers, rank %d, batch %d", (int)width, (int)num_layers, (int)rank,
              (int)max_batch);
    c->ctx = ctx;
    c->width = width;
    c->num_layers = num_layers;
    c->rank = rank;
    c->max_batch = max_batch;
    c->params = params;
    c->grads = grads;
    const size_t BN = (size_t)max_batch * (size_t)width, BR = (size_t)max_batch * (size_t)rank;
    const size_t L = (size_t)num_layers;
    if (!(c->x = app_alloc(ctx, sizeof(float) * (L + 1) * BN, "cross net activations")) ||
        !(c->t = app_alloc(ctx, sizeof(float) * L * BN, "cross net products")) ||
        !(c->u = app_alloc(ctx, sizeof(float) * L * BR, "cross net projections")) ||
        !(c->g = app_alloc(ctx, sizeof(float) * BN, "cross net gradient")) ||
        !(c->dt = app_alloc(ctx, sizeof(float) * BN, "cross net gradient")) ||
        !(c->du = app_alloc(ctx, sizeof(float) * BR, "cross net gradient"))) {
        cross_destroy(c);
        return EMBER_ERR_NOMEM;
    }
    return EMBER_OK;
}

void cross_destroy(cross *c) {
    if (c->ctx) {
        void *bufs[] = {c->x, c->t, c->u, c->g, c->dt, c->du};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember_ctx_free(c->ctx, bufs[i]);
    }
    memset(c, 0, sizeof *c);
}

void cross_init_params(cross *c, uint64_t seed, uint64_t stream) {
    const double sd = sqrt(2.0 / ((double)c->width + (double)c->rank));
    const size_t n = (size_t)c->width * (size_t)c->rank;
    for (int32_t l = 0; l < c->num_layers; l++) {
        ember_rng r = ember_rng_at(seed, stream, (uint64_t)l);
        float *v = layer_v(c->params, c, l), *w = layer_w(c->params, c, l), *b = layer_b(c->params, c, l);
        for (size_t i = 0; i < n; i++) v[i] = (float)(sd * ember_rng_normal(&r));
        for (size_t i = 0; i < n; i++) w[i] = (float)(sd * ember_rng_normal(&r));
        for (int32_t i = 0; i < c->width; i++) b[i] = 0.0f;
    }
}

float *cross_input(cross *c) { return x_at(c, 0); }

ember_status cross_forward(cross *c, int32_t batch, const float **y) {
    APP_ASSERT(batch >= 0 && batch <= c->max_batch);
    const int32_t N = c->width, r = c->rank;
    const int64_t n = (int64_t)batch * N;
    const float *x0c = x_at(c, 0);
    for (int32_t l = 0; l < c->num_layers; l++) {
        const float *xl = x_at(c, l);
        float *u = u_at(c, l), *t = t_at(c, l), *next = x_at(c, l + 1);
        // u = x_l V^T ([B, N] x [N, r], V stored [r, N]); t = u W^T + b ([B, r] x [r, N], W stored [N, r]).
        APP_TRY(ember_gemm(c->ctx, EMBER_NO_TRANS, EMBER_TRANS, batch, r, N, xl, N, layer_v(c->params, c, l), N, u, r,
                           NULL));
        const ember_gemm_epilogue ep = {.bias = layer_b(c->params, c, l)};
        APP_TRY(ember_gemm(c->ctx, EMBER_NO_TRANS, EMBER_TRANS, batch, N, r, u, r, layer_w(c->params, c, l), r, t, N,
                           &ep));
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            const float p = x0c[i] * t[i];
            next[i] = p + xl[i];
        }
    }
    *y = x_at(c, c->num_layers);
    return EMBER_OK;
}

ember_status cross_backward(cross *c, int32_t batch, const float *dy, float *dx0) {
    APP_ASSERT(batch >= 0 && batch <= c->max_batch);
    const int32_t N = c->width, r = c->rank;
    const int64_t n = (int64_t)batch * N;
    const float *x0 = x_at(c, 0);
    float *g = c->g, *dt = c->dt, *du = c->du;
    if (n > 0) memcpy(g, dy, sizeof(float) * (size_t)n);
    // dx0 gathers x0's part in every layer's product, from the last layer down; g carries dL/dx_l.
    for (int64_t i = 0; i < n; i++) dx0[i] = 0.0f;
    for (int32_t l = c->num_layers - 1; l >= 0; l--) {
        const float *xl = x_at(c, l), *t = t_at(c, l), *u = u_at(c, l);
        // x_{l+1} = x0 * t + x_l: dt = g * x0, and x0 gets g * t.
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            dt[i] = g[i] * x0[i];
            const float p = g[i] * t[i];
            dx0[i] = dx0[i] + p;
        }
        // db = column sums of dt; dW = dt^T u ([N, B] x [B, r]); du = dt W ([B, N] x [N, r]);
        // dV = du^T x_l ([r, B] x [B, N]); dL/dx_l = g + du V ([B, r] x [r, N], accumulated into g).
        APP_TRY(ember_colsum(c->ctx, batch, N, dt, N, layer_b(c->grads, c, l), 0));
        APP_TRY(ember_gemm(c->ctx, EMBER_TRANS, EMBER_NO_TRANS, N, r, batch, dt, N, u, r, layer_w(c->grads, c, l), r,
                           NULL));
        APP_TRY(ember_gemm(c->ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, batch, r, N, dt, N, layer_w(c->params, c, l), r, du,
                           r, NULL));
        APP_TRY(ember_gemm(c->ctx, EMBER_TRANS, EMBER_NO_TRANS, r, N, batch, du, r, xl, N, layer_v(c->grads, c, l), N,
                           NULL));
        const ember_gemm_epilogue acc = {.accumulate = 1};
        APP_TRY(ember_gemm(c->ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, batch, N, r, du, r, layer_v(c->params, c, l), N, g,
                           N, &acc));
    }
    // x_0 is also the first layer's x_l: its gradient through the layers joins the products' part.
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx0[i] = g[i] + dx0[i];
    return EMBER_OK;
}
