// Fully connected layers on cblas_sgemm (OpenBLAS).
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "core/internal.h"
#include "mlp.h"
#include "rng.h"

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
    EMBER_CHECK(ctx, n >= 1 && in >= 1 && max_batch >= 1, EMBER_ERR_INVALID_ARG,
                "mlp: %d layers, input width %d, batch %d", (int)n, (int)in, (int)max_batch);
    m->layers = ember__xalloc(ctx, sizeof(mlp_layer) * (size_t)n, "mlp layers");
    if (!m->layers) return EMBER_ERR_NOMEM;
    memset(m->layers, 0, sizeof(mlp_layer) * (size_t)n);
    m->num_layers = n;
    m->in = in;
    m->max_batch = max_batch;
    int32_t width = in, widest = in;
    for (int32_t l = 0; l < n; l++) {
        mlp_layer *L = &m->layers[l];
        EMBER_CHECK(ctx, sizes[l] >= 1, EMBER_ERR_INVALID_ARG, "mlp: layer %d has size %d", (int)l, (int)sizes[l]);
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
        L->y = ember__xalloc(ctx, sizeof(float) * (size_t)max_batch * (size_t)L->out, "mlp activations");
        if (!L->y) {
            mlp_destroy(ctx, m);
            return EMBER_ERR_NOMEM;
        }
        width = L->out;
        if (width > widest) widest = width;
    }
    for (int i = 0; i < 2; i++) {
        m->scratch[i] = ember__xalloc(ctx, sizeof(float) * (size_t)max_batch * (size_t)widest, "mlp scratch");
        if (!m->scratch[i]) {
            mlp_destroy(ctx, m);
            return EMBER_ERR_NOMEM;
        }
    }
    return EMBER_OK;
}

void mlp_destroy(ember_ctx *ctx, mlp *m) {
    if (m->layers) {
        for (int32_t l = 0; l < m->num_layers; l++) ember__free(ctx, m->layers[l].y);
        ember__free(ctx, m->layers);
    }
    ember__free(ctx, m->scratch[0]);
    ember__free(ctx, m->scratch[1]);
    memset(m, 0, sizeof *m);
}

void mlp_init_params(mlp *m, uint64_t seed, uint64_t stream) {
    for (int32_t l = 0; l < m->num_layers; l++) {
        mlp_layer *L = &m->layers[l];
        double bound = 1.0 / sqrt((double)L->in);
        rng r = rng_at(seed, stream, (uint64_t)l);
        size_t nw = (size_t)L->out * (size_t)L->in;
        for (size_t i = 0; i < nw; i++) L->w[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
        for (int32_t i = 0; i < L->out; i++) L->b[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
    }
}

const float *mlp_forward(mlp *m, const float *x, int32_t batch) {
    EMBER_ASSERT(batch >= 0 && batch <= m->max_batch);
    const float *in = x;
    for (int32_t l = 0; l < m->num_layers; l++) {
        mlp_layer *L = &m->layers[l];
        size_t n = (size_t)batch * (size_t)L->out;
        // y = b (broadcast over rows), then y += x W^T.
        for (int32_t i = 0; i < batch; i++) memcpy(L->y + (size_t)i * (size_t)L->out, L->b, sizeof(float) * (size_t)L->out);
        if (batch > 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, L->out, L->in, 1.0f, in, L->in, L->w, L->in,
                        1.0f, L->y, L->out);
        }
        if (L->relu) {
            for (size_t i = 0; i < n; i++) L->y[i] = L->y[i] > 0.0f ? L->y[i] : 0.0f;
        }
        in = L->y;
    }
    return in;
}

void mlp_backward(mlp *m, const float *x, int32_t batch, const float *dy, float *dx) {
    EMBER_ASSERT(batch >= 0 && batch <= m->max_batch);
    // g is dL/d(output of layer l); it lives in the caller's dy or in scratch[cur].
    const float *g = dy;
    int cur = -1;
    for (int32_t l = m->num_layers - 1; l >= 0; l--) {
        mlp_layer *L = &m->layers[l];
        size_t n = (size_t)batch * (size_t)L->out;
        if (L->relu) {
            // Through the ReLU: dL/dz = dL/dy where y > 0 (torch's convention: 0 at z = 0).
            if (cur < 0) cur = 0;
            float *gz = m->scratch[cur];
            for (size_t i = 0; i < n; i++) gz[i] = L->y[i] > 0.0f ? g[i] : 0.0f;
            g = gz;
        }
        const float *in = l > 0 ? m->layers[l - 1].y : x;
        if (batch > 0) {
            // dW = g^T x  ([out, B] x [B, in]).
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L->out, L->in, batch, 1.0f, g, L->out, in, L->in,
                        0.0f, L->dw, L->in);
        } else {
            memset(L->dw, 0, sizeof(float) * (size_t)L->out * (size_t)L->in);
        }
        // db = column sums of g, in row order (deterministic).
        memset(L->db, 0, sizeof(float) * (size_t)L->out);
        for (int32_t i = 0; i < batch; i++) {
            const float *gi = g + (size_t)i * (size_t)L->out;
            for (int32_t j = 0; j < L->out; j++) L->db[j] += gi[j];
        }
        if (l == 0 && !dx) break;
        // dx = g W  ([B, out] x [out, in]) into the buffer g does not occupy.
        int next = cur == 0 ? 1 : 0;
        float *dst = l > 0 ? m->scratch[next] : dx;
        if (batch > 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, L->in, L->out, 1.0f, g, L->out, L->w, L->in,
                        0.0f, dst, L->in);
        }
        g = dst;
        cur = next;
    }
}
