// Fused optimizer row updates (DESIGN.md §1.5). Each touched row gets exactly one update with
// its coalesced gradient g; the arithmetic is fp32 on an fp32 copy of the row (the stored row
// itself for fp32 tables).
//
//   weight decay  L2:        g <- g + wd * w              (before the optimizer, torch's weight_decay)
//                 DECOUPLED: w <- w - lr * wd * w          (beside the update, AdamW style)
//   SGD                w <- w - lr * g
//   ADAGRAD            m1 <- m1 + g^2;  w <- w - lr * g / (sqrt(m1) + eps)          (torch Adagrad)
//   ROWWISE_ADAGRAD    m1 <- m1 + mean_d(g^2);  w <- w - lr * g / (sqrt(m1) + eps) (FBGEMM)
//   ADAM               m1 <- b1 m1 + (1-b1) g;  m2 <- b2 m2 + (1-b2) g^2
//                      w <- w - lr * (m1 / c1) / (sqrt(m2 / c2) + eps),  c_i = 1 - b_i^step
//   PARTIAL_ROWWISE_ADAM  as ADAM with m2 per row fed by mean_d(g^2)                (FBGEMM)
//   LAMB               r = (m1 / c1) / (sqrt(m2 / c2) + eps) [+ wd * w when DECOUPLED]
//                      w <- w - lr * (||w|| / ||r||) * r   (trust ratio 1 if either norm is 0)
// `step` is the table's backward count including the current one (global step, as torch's
// SparseAdam counts optimizer steps).
//
// Speed: the element loops are written so the compiler vectorises them (restrict pointers,
// branches hoisted out of the loops; the library builds with -fno-math-errno so sqrtf becomes
// vsqrtps). Row reductions (sum of g^2, norms) accumulate in 16 lanes (element d into lane
// d % 16) and finish with ember__sum16's fixed tree: vectorisable without reassociation flags,
// and the same bits on every path and thread count.
#include <math.h>

#include "tbe/kernels.h"

// sum_d a[d] * b[d] in the 16-lane order.
static float dot16(const float *restrict a, const float *restrict b, int32_t D) {
    float lane[16] = {0};
    int32_t d = 0;
    for (; d + 16 <= D; d += 16)
        for (int k = 0; k < 16; k++) lane[k] += a[d + k] * b[d + k];
    for (int k = 0; d + k < D; k++) lane[k] += a[d + k] * b[d + k];
    return ember__sum16(lane);
}

void ember__optim_prepare(const ember__table *t, ember__optim_step *st) {
    const ember_optim_config *o = &t->cfg.optim;
    st->c1 = 1.0f - powf(o->beta1, (float)t->step);
    st->c2 = 1.0f - powf(o->beta2, (float)t->step);
    st->row_sumsq = -1.0f;
}

// Mean over the (global) row of the squared gradient, for the row-wise optimizers.
static float row_mean_sq(const ember__table *t, const ember__optim_step *st, const float *g) {
    if (st->row_sumsq >= 0.0f) return st->row_sumsq / (float)t->origin.global_dim;
    return dot16(g, g, t->cfg.dim) / (float)t->cfg.dim;
}

void ember__optim_row(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                      float *restrict g) {
    const ember_optim_config *o = &t->cfg.optim;
    const int32_t D = t->cfg.dim;
    const float lr = o->lr, wd = o->weight_decay, eps = o->eps;
    const int decoupled = o->weight_decay_mode == EMBER_WD_DECOUPLED && wd != 0.0f;
    if (o->weight_decay_mode == EMBER_WD_L2 && wd != 0.0f) {
        for (int32_t d = 0; d < D; d++) g[d] += wd * w[d];
    }
    switch (o->kind) {
    case EMBER_OPT_SGD:
        if (decoupled) {
            for (int32_t d = 0; d < D; d++) w[d] -= lr * (g[d] + wd * w[d]);
        } else {
            for (int32_t d = 0; d < D; d++) w[d] -= lr * g[d];
        }
        break;
    case EMBER_OPT_ADAGRAD: {
        float *restrict m1 = t->m1 + (size_t)row * (size_t)D;
        for (int32_t d = 0; d < D; d++) m1[d] += g[d] * g[d];
        if (decoupled) {
            for (int32_t d = 0; d < D; d++) w[d] -= lr * (g[d] / (sqrtf(m1[d]) + eps) + wd * w[d]);
        } else {
            for (int32_t d = 0; d < D; d++) w[d] -= lr * (g[d] / (sqrtf(m1[d]) + eps));
        }
        break;
    }
    case EMBER_OPT_ROWWISE_ADAGRAD: {
        float *m1 = t->m1 + row;
        *m1 += row_mean_sq(t, st, g);
        const float mult = lr / (sqrtf(*m1) + eps);
        if (decoupled) {
            for (int32_t d = 0; d < D; d++) w[d] -= mult * g[d] + lr * wd * w[d];
        } else {
            for (int32_t d = 0; d < D; d++) w[d] -= mult * g[d];
        }
        break;
    }
    case EMBER_OPT_ADAM:
    case EMBER_OPT_LAMB: {
        const float b1 = o->beta1, b2 = o->beta2, c1 = st->c1, c2 = st->c2;
        float *restrict m1 = t->m1 + (size_t)row * (size_t)D;
        float *restrict m2 = t->m2 + (size_t)row * (size_t)D;
        // r overwrites g: the update direction per element.
        for (int32_t d = 0; d < D; d++) {
            m1[d] = b1 * m1[d] + (1.0f - b1) * g[d];
            m2[d] = b2 * m2[d] + (1.0f - b2) * g[d] * g[d];
            g[d] = (m1[d] / c1) / (sqrtf(m2[d] / c2) + eps);
        }
        if (decoupled)
            for (int32_t d = 0; d < D; d++) g[d] += wd * w[d];
        float scale = lr;
        if (o->kind == EMBER_OPT_LAMB) {
            const float wn = dot16(w, w, D), rn = dot16(g, g, D);
            if (wn > 0.0f && rn > 0.0f) scale = lr * sqrtf(wn) / sqrtf(rn);
        }
        for (int32_t d = 0; d < D; d++) w[d] -= scale * g[d];
        break;
    }
    case EMBER_OPT_PARTIAL_ROWWISE_ADAM: {
        const float b1 = o->beta1, b2 = o->beta2, c1 = st->c1, c2 = st->c2;
        float *restrict m1 = t->m1 + (size_t)row * (size_t)D;
        float *m2 = t->m2 + row;
        *m2 = b2 * *m2 + (1.0f - b2) * row_mean_sq(t, st, g);
        const float den = sqrtf(*m2 / c2) + eps;
        for (int32_t d = 0; d < D; d++) {
            m1[d] = b1 * m1[d] + (1.0f - b1) * g[d];
            g[d] = (m1[d] / c1) / den;
        }
        if (decoupled)
            for (int32_t d = 0; d < D; d++) g[d] += wd * w[d];
        for (int32_t d = 0; d < D; d++) w[d] -= lr * g[d];
        break;
    }
    }
}
