// Fused optimizer row updates (docs/semantics.md §4). Each touched row gets exactly one update with
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
//   PARTIAL_ROWWISE_LAMB  as LAMB with m2 per row fed by mean_d(g^2)                 (FBGEMM)
//   LARS_SGD           local = eta ||w|| / (||g|| + wd ||w||)  (1 if ||w|| or ||g|| is 0)
//                      m1 <- momentum m1 + lr local (g + wd w);  w <- w - m1       (FBGEMM)
//                      (its weight decay is part of the formula: mode L2 as written,
//                      DECOUPLED applies w <- w - lr wd w beside it instead)
// `step` is the table's backward count including the current one (global step, as torch's
// SparseAdam counts optimizer steps).
//
// The row updates themselves are optim_row (cpu/optim_rows.h), compiled into every kernel variant
// of the cpu backend (and fused into registers for SGD, row-wise Adagrad and Adam in cpu/isa/avx2.c
// and avx512.c).
// Speed: the element loops are written so the compiler vectorises them (restrict pointers,
// branches hoisted out of the loops; the library builds with -fno-math-errno so sqrtf becomes
// vsqrtps). Row reductions (sum of g^2, norms) accumulate in 16 lanes (element d into lane
// d % 16) and finish with ember__sum16's fixed tree: vectorisable without reassociation flags,
// and the same bits on every path and thread count.
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "tbe/internal.h"

// The descriptor table: one row per optimizer. Everything else asks here (ember_optim_info for
// the public side; rowwise_sumsq, l2_in_update, adagrad_init and fused for the library).
#define M1 "momentum1"
#define M2 "momentum2"
static const ember__optim_desc DESCS[EMBER_OPT_COUNT] = {
    //                      name                      n  states      per-row  cw step  sumsq l2in adagrad fused
    [EMBER_OPT_SGD] = {{"sgd", 0, {NULL, NULL}, {0, 0}, 1, 0}, 0, 0, 0, EMBER__FUSED_SGD},
    [EMBER_OPT_ADAGRAD] = {{"adagrad", 1, {M1, NULL}, {0, 0}, 1, 0}, 0, 0, 1, EMBER__FUSED_NONE},
    [EMBER_OPT_ROWWISE_ADAGRAD] = {{"rowwise_adagrad", 1, {M1, NULL}, {1, 0}, 1, 0}, 1, 0, 1,
                                   EMBER__FUSED_ROWWISE_ADAGRAD},
    [EMBER_OPT_ADAM] = {{"adam", 2, {M1, M2}, {0, 0}, 1, 1}, 0, 0, 0, EMBER__FUSED_ADAM},
    [EMBER_OPT_PARTIAL_ROWWISE_ADAM] = {{"partial_rowwise_adam", 2, {M1, M2}, {0, 1}, 1, 1}, 1, 0, 0,
                                        EMBER__FUSED_NONE},
    // The trust ratios need whole-row norms: not split by columns.
    [EMBER_OPT_LAMB] = {{"lamb", 2, {M1, M2}, {0, 0}, 0, 1}, 0, 0, 0, EMBER__FUSED_NONE},
    [EMBER_OPT_PARTIAL_ROWWISE_LAMB] = {{"partial_rowwise_lamb", 2, {M1, M2}, {0, 1}, 0, 1}, 1, 0, 0,
                                        EMBER__FUSED_NONE},
    [EMBER_OPT_LARS_SGD] = {{"lars_sgd", 1, {M1, NULL}, {0, 0}, 0, 0}, 0, 1, 0, EMBER__FUSED_NONE},
};
#undef M1
#undef M2

const ember__optim_desc *ember__optim(ember_optim_kind kind) {
    return (int)kind >= 0 && (int)kind < EMBER_OPT_COUNT ? &DESCS[kind] : NULL;
}

// The hyperparameters every optimizer reads, then those only some read (LARS: momentum, eta).
ember_status ember__optim_check(ember_ctx *ctx, const char *fn, const char *nm, const ember_optim_config *o) {
    EMBER_CHECK(ctx, ember__optim(o->kind) != NULL, EMBER_ERR_INVALID_ARG, "%s: table '%s': unknown optimizer %d",
                fn, nm, (int)o->kind);
    EMBER_CHECK(ctx, isfinite(o->lr) && o->lr >= 0, EMBER_ERR_INVALID_ARG, "%s: table '%s': learning rate %g", fn,
                nm, (double)o->lr);
    EMBER_CHECK(ctx, isfinite(o->eps) && o->eps >= 0, EMBER_ERR_INVALID_ARG, "%s: table '%s': eps %g", fn, nm,
                (double)o->eps);
    EMBER_CHECK(ctx, o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1, EMBER_ERR_INVALID_ARG,
                "%s: table '%s': betas (%g, %g) outside [0, 1)", fn, nm, (double)o->beta1, (double)o->beta2);
    EMBER_CHECK(ctx, isfinite(o->weight_decay) && o->weight_decay >= 0, EMBER_ERR_INVALID_ARG,
                "%s: table '%s': weight decay %g", fn, nm, (double)o->weight_decay);
    EMBER_CHECK(ctx, o->weight_decay_mode >= EMBER_WD_NONE && o->weight_decay_mode <= EMBER_WD_DECOUPLED,
                EMBER_ERR_INVALID_ARG, "%s: table '%s': unknown weight decay mode %d", fn, nm,
                (int)o->weight_decay_mode);
    EMBER_CHECK(ctx, isfinite(o->initial_accumulator) && o->initial_accumulator >= 0, EMBER_ERR_INVALID_ARG,
                "%s: table '%s': initial accumulator %g", fn, nm, (double)o->initial_accumulator);
    EMBER_CHECK(ctx,
                o->kind != EMBER_OPT_LARS_SGD || (isfinite(o->momentum) && o->momentum >= 0 && o->momentum < 1 &&
                                                  isfinite(o->eta) && o->eta > 0),
                EMBER_ERR_INVALID_ARG, "%s: table '%s': LARS momentum %g (in [0, 1)) or eta %g (> 0)", fn, nm,
                (double)o->momentum, (double)o->eta);
    return EMBER_OK;
}

ember_status ember_optim_info_get(ember_optim_kind kind, ember_optim_info *info) {
    const ember__optim_desc *d = ember__optim(kind);
    if (!d || !info) return EMBER_ERR_INVALID_ARG;
    *info = d->info;
    return EMBER_OK;
}

const char *ember_optim_name(ember_optim_kind kind) {
    const ember__optim_desc *d = ember__optim(kind);
    return d ? d->info.name : "unknown";
}

ember_status ember_optim_parse(const char *name, ember_optim_kind *out) {
    if (!name || !out) return EMBER_ERR_INVALID_ARG;
    for (int k = 0; k < EMBER_OPT_COUNT; k++) {
        if (strcmp(name, DESCS[k].info.name) == 0) {
            *out = (ember_optim_kind)k;
            return EMBER_OK;
        }
    }
    return EMBER_ERR_INVALID_ARG;
}

void ember__optim_prepare(const ember__table *t, uint64_t seed, ember__optim_step *st) {
    const ember_optim_config *o = &t->cfg.optim;
    st->c1 = 1.0f - powf(o->beta1, (float)t->step);
    st->c2 = 1.0f - powf(o->beta2, (float)t->step);
    st->row_sumsq = -1.0f;
    st->sr_key = ember_splitmix64(seed ^ t->name_hash ^ ember_splitmix64((uint64_t)t->step));
}
