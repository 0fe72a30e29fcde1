// Dense optimizers (torch.optim.SGD, Adagrad, Adam without weight decay).
#include <math.h>
#include <string.h>

#include "appctx.h"
#include "dense_optim.h"

// Parameters below which one thread updates them all: a parallel region costs a few
// microseconds, about what one thread spends on 16k Adagrad updates. Each element's update is
// independent, so the result is the same either way.
#define DENSE_OPTIM_PARALLEL 16384

static const char *const names[DENSE_OPT_COUNT] = {"sgd", "adagrad", "adam"};

const char *dense_optim_name(dense_optim_kind kind) {
    return (unsigned)kind < DENSE_OPT_COUNT ? names[kind] : "unknown";
}

ember_status dense_optim_parse(const char *name, dense_optim_kind *out) {
    const int k = app_name_index(names, DENSE_OPT_COUNT, name);
    if (k < 0) return EMBER_ERR_INVALID_ARG;
    *out = (dense_optim_kind)k;
    return EMBER_OK;
}

ember_status dense_optim_create(ember_ctx *ctx, const dense_optim_config *cfg, int64_t n, dense_optim *o) {
    memset(o, 0, sizeof *o);
    dense_optim_config c = *cfg;
    APP_CHECK(ctx, c.kind == DENSE_OPT_SGD || c.kind == DENSE_OPT_ADAGRAD || c.kind == DENSE_OPT_ADAM,
              EMBER_ERR_INVALID_ARG, "dense optimizer: unknown kind %d", (int)c.kind);
    APP_CHECK(ctx, isfinite(c.lr) && c.lr > 0.0f, EMBER_ERR_INVALID_ARG, "dense optimizer: learning rate %g",
              (double)c.lr);
    if (c.eps == 0.0f) c.eps = c.kind == DENSE_OPT_ADAGRAD ? 1e-10f : 1e-8f;
    if (c.beta1 == 0.0f) c.beta1 = 0.9f;
    if (c.beta2 == 0.0f) c.beta2 = 0.999f;
    APP_CHECK(ctx, c.eps > 0.0f && c.beta1 > 0.0f && c.beta1 < 1.0f && c.beta2 > 0.0f && c.beta2 < 1.0f,
              EMBER_ERR_INVALID_ARG, "dense optimizer: eps %g, betas %g %g", (double)c.eps, (double)c.beta1,
              (double)c.beta2);
    APP_CHECK(ctx, n >= 0, EMBER_ERR_INVALID_ARG, "dense optimizer: %lld parameters", (long long)n);
    o->cfg = c;
    o->n = n;
    size_t bytes = sizeof(float) * (size_t)n;
    if (c.kind != DENSE_OPT_SGD) {
        o->m1 = app_calloc(ctx, bytes, "dense optimizer state");
        if (!o->m1) return EMBER_ERR_NOMEM;
    }
    if (c.kind == DENSE_OPT_ADAM) {
        o->m2 = app_calloc(ctx, bytes, "dense optimizer state");
        if (!o->m2) {
            dense_optim_destroy(ctx, o);
            return EMBER_ERR_NOMEM;
        }
    }
    return EMBER_OK;
}

void dense_optim_destroy(ember_ctx *ctx, dense_optim *o) {
    ember_ctx_free(ctx, o->m1);
    ember_ctx_free(ctx, o->m2);
    memset(o, 0, sizeof *o);
}

void dense_optim_step(dense_optim *o, float *params, const float *grads) {
    const int64_t n = o->n;
    const float lr = o->cfg.lr, eps = o->cfg.eps;
    o->step++;
    switch (o->cfg.kind) {
    case DENSE_OPT_SGD:
#pragma omp parallel for schedule(static) if (n >= DENSE_OPTIM_PARALLEL)
        for (int64_t i = 0; i < n; i++) params[i] -= lr * grads[i];
        break;
    case DENSE_OPT_ADAGRAD:
#pragma omp parallel for schedule(static) if (n >= DENSE_OPTIM_PARALLEL)
        for (int64_t i = 0; i < n; i++) {
            o->m1[i] += grads[i] * grads[i];
            params[i] -= lr * grads[i] / (sqrtf(o->m1[i]) + eps);
        }
        break;
    case DENSE_OPT_ADAM: {
        const float b1 = o->cfg.beta1, b2 = o->cfg.beta2;
        const double t = (double)o->step;
        const float step_size = (float)(lr / (1.0 - pow(b1, t)));
        const float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(b2, t)));
#pragma omp parallel for schedule(static) if (n >= DENSE_OPTIM_PARALLEL)
        for (int64_t i = 0; i < n; i++) {
            float g = grads[i];
            o->m1[i] = b1 * o->m1[i] + (1.0f - b1) * g;
            o->m2[i] = b2 * o->m2[i] + (1.0f - b2) * g * g;
            params[i] -= step_size * o->m1[i] / (sqrtf(o->m2[i]) * inv_sqrt_bc2 + eps);
        }
        break;
    }
    }
}
