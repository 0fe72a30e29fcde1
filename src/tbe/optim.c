// Fused optimizer row updates (DESIGN.md §1.5). Each touched row gets exactly one update with
// its coalesced gradient g; the arithmetic is fp32 on an fp32 copy of the row.
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
#include <math.h>

#include "tbe/internal.h"

// `sumsq` >= 0 gives the row's sum of squared (L2-adjusted) gradients over the whole global row
// for the row-wise optimizers, when the row is split over column shards
// (ember__ebc_row_sumsq on each piece, summed); the per-row mean then divides by the global dim.
// A negative `sumsq` means: this piece is the whole row, compute it here.
void ember__optim_row(const ember__table *t, int64_t row, float *restrict w, float *restrict g, float sumsq);

// Mean over the (global) row of the squared gradient, for the row-wise optimizers.
static float row_mean_sq(const ember__table *t, const float *g, float sumsq) {
    if (sumsq >= 0.0f) return sumsq / (float)t->origin.global_dim;
    float ss = 0.0f;
    for (int32_t d = 0; d < t->cfg.dim; d++) ss += g[d] * g[d];
    return ss / (float)t->cfg.dim;
}

void ember__optim_row(const ember__table *t, int64_t row, float *restrict w, float *restrict g, float sumsq) {
    const ember_optim_config *o = &t->cfg.optim;
    const int32_t D = t->cfg.dim;
    const float lr = o->lr, wd = o->weight_decay, eps = o->eps;
    const int decoupled = o->weight_decay_mode == EMBER_WD_DECOUPLED && wd != 0.0f;
    if (o->weight_decay_mode == EMBER_WD_L2 && wd != 0.0f) {
        for (int32_t d = 0; d < D; d++) g[d] += wd * w[d];
    }
    switch (o->kind) {
    case EMBER_OPT_SGD:
        for (int32_t d = 0; d < D; d++) w[d] -= lr * (g[d] + (decoupled ? wd * w[d] : 0.0f));
        break;
    case EMBER_OPT_ADAGRAD: {
        float *m1 = t->m1 + (size_t)row * (size_t)D;
        for (int32_t d = 0; d < D; d++) {
            m1[d] += g[d] * g[d];
            w[d] -= lr * (g[d] / (sqrtf(m1[d]) + eps) + (decoupled ? wd * w[d] : 0.0f));
        }
        break;
    }
    case EMBER_OPT_ROWWISE_ADAGRAD: {
        float *m1 = t->m1 + row;
        *m1 += row_mean_sq(t, g, sumsq);
        const float mult = lr / (sqrtf(*m1) + eps);
        for (int32_t d = 0; d < D; d++) w[d] -= mult * g[d] + (decoupled ? lr * wd * w[d] : 0.0f);
        break;
    }
    case EMBER_OPT_ADAM:
    case EMBER_OPT_PARTIAL_ROWWISE_ADAM:
    case EMBER_OPT_LAMB: {
        const float b1 = o->beta1, b2 = o->beta2;
        const float c1 = 1.0f - powf(b1, (float)t->step), c2 = 1.0f - powf(b2, (float)t->step);
        float *m1 = t->m1 + (size_t)row * (size_t)D;
        float *m2;
        float v_row = 0.0f;
        if (o->kind == EMBER_OPT_PARTIAL_ROWWISE_ADAM) {
            m2 = t->m2 + row;
            *m2 = b2 * *m2 + (1.0f - b2) * row_mean_sq(t, g, sumsq);
            v_row = sqrtf(*m2 / c2) + eps;
        } else {
            m2 = t->m2 + (size_t)row * (size_t)D;
        }
        // r overwrites g: the update direction per element.
        for (int32_t d = 0; d < D; d++) {
            m1[d] = b1 * m1[d] + (1.0f - b1) * g[d];
            float den;
            if (o->kind == EMBER_OPT_PARTIAL_ROWWISE_ADAM) {
                den = v_row;
            } else {
                m2[d] = b2 * m2[d] + (1.0f - b2) * g[d] * g[d];
                den = sqrtf(m2[d] / c2) + eps;
            }
            g[d] = (m1[d] / c1) / den + (decoupled ? wd * w[d] : 0.0f);
        }
        float scale = lr;
        if (o->kind == EMBER_OPT_LAMB) {
            float wn = 0.0f, rn = 0.0f;
            for (int32_t d = 0; d < D; d++) {
                wn += w[d] * w[d];
                rn += g[d] * g[d];
            }
            if (wn > 0.0f && rn > 0.0f) scale = lr * sqrtf(wn) / sqrtf(rn);
        }
        for (int32_t d = 0; d < D; d++) w[d] -= scale * g[d];
        break;
    }
    }
}
