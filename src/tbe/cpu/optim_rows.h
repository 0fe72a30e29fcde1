// The row update of every optimizer: one function each, and the table by kind (optim_row). The
// formulas are in optim.c's header comment; what each optimizer keeps is optim.c's descriptor
// table. Compiled into every kernel variant (included by isa/impl.h), so the element loops are
// vectorised at each variant's width; every function is static.
//
// Each takes w [dim] fp32 (the stored row itself for fp32 tables) and g [dim] the coalesced
// gradient, already L2-adjusted unless the optimizer applies weight decay itself (clobbered).
// Row reductions (sums of squares, norms) accumulate in 16 lanes and finish with ember__sum16's
// fixed tree: vectorisable without reassociation, the same bits on every variant.
#ifndef EMBER_TBE_OPTIM_ROWS_H
#define EMBER_TBE_OPTIM_ROWS_H

#include <math.h>

#include "tbe/cpu/kernels.h"

// sum_d a[d] * b[d] in the 16-lane order.
static float dot16(const float *restrict a, const float *restrict b, int32_t D) {
    float lane[16] = {0};
    int32_t d = 0;
    for (; d + 16 <= D; d += 16)
        for (int k = 0; k < 16; k++) lane[k] += a[d + k] * b[d + k];
    for (int k = 0; d + k < D; k++) lane[k] += a[d + k] * b[d + k];
    return ember__sum16(lane);
}

// Mean over the (global) row of the squared gradient, for the row-wise optimizers.
static float row_mean_sq(const ember__table *t, const ember__optim_step *st, const float *g) {
    if (st->row_sumsq >= 0.0f) return st->row_sumsq / (float)t->origin.global_dim;
    return dot16(g, g, t->cfg.dim) / (float)t->cfg.dim;
}

typedef void (*row_update_fn)(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                              float *restrict g, int decoupled);

static void update_sgd(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                       float *restrict g, int decoupled) {
    (void)st;
    (void)row;
    const float lr = t->cfg.optim.lr, wd = t->cfg.optim.weight_decay;
    const int32_t D = t->cfg.dim;
    if (decoupled) {
        for (int32_t d = 0; d < D; d++) w[d] -= lr * (g[d] + wd * w[d]);
    } else {
        for (int32_t d = 0; d < D; d++) w[d] -= lr * g[d];
    }
}

static void update_adagrad(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                           float *restrict g, int decoupled) {
    (void)st;
    const ember_optim_config *o = &t->cfg.optim;
    const float lr = o->lr, wd = o->weight_decay, eps = o->eps;
    const int32_t D = t->cfg.dim;
    float *restrict m1 = t->m1 + (size_t)row * (size_t)D;
    for (int32_t d = 0; d < D; d++) m1[d] += g[d] * g[d];
    if (decoupled) {
        for (int32_t d = 0; d < D; d++) w[d] -= lr * (g[d] / (sqrtf(m1[d]) + eps) + wd * w[d]);
    } else {
        for (int32_t d = 0; d < D; d++) w[d] -= lr * (g[d] / (sqrtf(m1[d]) + eps));
    }
}

static void update_rowwise_adagrad(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                                   float *restrict g, int decoupled) {
    const ember_optim_config *o = &t->cfg.optim;
    const float lr = o->lr, wd = o->weight_decay;
    const int32_t D = t->cfg.dim;
    float *m1 = t->m1 + row;
    *m1 += row_mean_sq(t, st, g);
    const float mult = lr / (sqrtf(*m1) + o->eps);
    if (decoupled) {
        for (int32_t d = 0; d < D; d++) w[d] -= mult * g[d] + lr * wd * w[d];
    } else {
        for (int32_t d = 0; d < D; d++) w[d] -= mult * g[d];
    }
}

// w <- w - scale * r, r = g (+ wd w when decoupled), LAMB's scale the trust ratio times lr.
static void apply_direction(const ember__table *t, float *restrict w, float *restrict r, int decoupled, int lamb) {
    const ember_optim_config *o = &t->cfg.optim;
    const int32_t D = t->cfg.dim;
    if (decoupled)
        for (int32_t d = 0; d < D; d++) r[d] += o->weight_decay * w[d];
    float scale = o->lr;
    if (lamb) {
        const float wn = dot16(w, w, D), rn = dot16(r, r, D);
        if (wn > 0.0f && rn > 0.0f) scale = o->lr * sqrtf(wn) / sqrtf(rn);
    }
    for (int32_t d = 0; d < D; d++) w[d] -= scale * r[d];
}

// Adam and LAMB: element-wise moments; the direction overwrites g.
static void adam_moments(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict g) {
    const ember_optim_config *o = &t->cfg.optim;
    const float b1 = o->beta1, b2 = o->beta2, c1 = st->c1, c2 = st->c2, eps = o->eps;
    const int32_t D = t->cfg.dim;
    float *restrict m1 = t->m1 + (size_t)row * (size_t)D;
    float *restrict m2 = t->m2 + (size_t)row * (size_t)D;
    for (int32_t d = 0; d < D; d++) {
        m1[d] = b1 * m1[d] + (1.0f - b1) * g[d];
        m2[d] = b2 * m2[d] + (1.0f - b2) * g[d] * g[d];
        g[d] = (m1[d] / c1) / (sqrtf(m2[d] / c2) + eps);
    }
}

// Partial row-wise Adam and LAMB: m1 element-wise, m2 one value per row fed by mean_d(g^2).
static void partial_rowwise_moments(const ember__table *t, const ember__optim_step *st, int64_t row,
                                    float *restrict g) {
    const ember_optim_config *o = &t->cfg.optim;
    const float b1 = o->beta1, b2 = o->beta2, c1 = st->c1, c2 = st->c2;
    const int32_t D = t->cfg.dim;
    float *restrict m1 = t->m1 + (size_t)row * (size_t)D;
    float *m2 = t->m2 + row;
    *m2 = b2 * *m2 + (1.0f - b2) * row_mean_sq(t, st, g);
    const float den = sqrtf(*m2 / c2) + o->eps;
    for (int32_t d = 0; d < D; d++) {
        m1[d] = b1 * m1[d] + (1.0f - b1) * g[d];
        g[d] = (m1[d] / c1) / den;
    }
}

static void update_adam(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                        float *restrict g, int decoupled) {
    adam_moments(t, st, row, g);
    apply_direction(t, w, g, decoupled, 0);
}

static void update_lamb(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                        float *restrict g, int decoupled) {
    adam_moments(t, st, row, g);
    apply_direction(t, w, g, decoupled, 1);
}

static void update_partial_rowwise_adam(const ember__table *t, const ember__optim_step *st, int64_t row,
                                        float *restrict w, float *restrict g, int decoupled) {
    partial_rowwise_moments(t, st, row, g);
    apply_direction(t, w, g, decoupled, 0);
}

static void update_partial_rowwise_lamb(const ember__table *t, const ember__optim_step *st, int64_t row,
                                        float *restrict w, float *restrict g, int decoupled) {
    partial_rowwise_moments(t, st, row, g);
    apply_direction(t, w, g, decoupled, 1);
}

// LARS-SGD (FBGEMM's LARS_SGD): a per-row rate from the weight and gradient norms, then SGD with
// momentum. Its weight decay (mode L2) is part of the formula; DECOUPLED decays beside it.
static void update_lars_sgd(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                            float *restrict g, int decoupled) {
    (void)st;
    const ember_optim_config *o = &t->cfg.optim;
    const int32_t D = t->cfg.dim;
    const float l2 = o->weight_decay_mode == EMBER_WD_L2 ? o->weight_decay : 0.0f;
    const float wn = sqrtf(dot16(w, w, D)), gn = sqrtf(dot16(g, g, D));
    const float local = wn > 0.0f && gn > 0.0f ? o->eta * wn / (gn + l2 * wn) : 1.0f;
    const float rate = o->lr * local, mom = o->momentum;
    float *restrict m1 = t->m1 + (size_t)row * (size_t)D;
    for (int32_t d = 0; d < D; d++) m1[d] = mom * m1[d] + rate * (g[d] + l2 * w[d]);
    if (decoupled) {
        for (int32_t d = 0; d < D; d++) w[d] -= m1[d] + o->lr * o->weight_decay * w[d];
    } else {
        for (int32_t d = 0; d < D; d++) w[d] -= m1[d];
    }
}

static const row_update_fn ROW_UPDATES[EMBER_OPT_COUNT] = {
    [EMBER_OPT_SGD] = update_sgd,
    [EMBER_OPT_ADAGRAD] = update_adagrad,
    [EMBER_OPT_ROWWISE_ADAGRAD] = update_rowwise_adagrad,
    [EMBER_OPT_ADAM] = update_adam,
    [EMBER_OPT_PARTIAL_ROWWISE_ADAM] = update_partial_rowwise_adam,
    [EMBER_OPT_LAMB] = update_lamb,
    [EMBER_OPT_PARTIAL_ROWWISE_LAMB] = update_partial_rowwise_lamb,
    [EMBER_OPT_LARS_SGD] = update_lars_sgd,
};

// One update of `row` of t: the generic L2 step (g += wd w, torch's weight_decay) unless the
// optimizer decays inside its own formula, then its row update.
static void optim_row(const ember__table *t, const ember__optim_step *st, int64_t row, float *restrict w,
                      float *restrict g) {
    const ember_optim_config *o = &t->cfg.optim;
    const int32_t D = t->cfg.dim;
    const float wd = o->weight_decay;
    if (o->weight_decay_mode == EMBER_WD_L2 && wd != 0.0f && !t->optim->l2_in_update) {
        for (int32_t d = 0; d < D; d++) g[d] += wd * w[d];
    }
    ROW_UPDATES[o->kind](t, st, row, w, g, o->weight_decay_mode == EMBER_WD_DECOUPLED && wd != 0.0f);
}

#endif
