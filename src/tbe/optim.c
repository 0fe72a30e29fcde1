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
// The row updates themselves are optim_row in isa/impl.h, compiled into every kernel variant
// (and fused into registers for SGD, row-wise Adagrad and Adam in isa/avx2.c and isa/avx512.c).
// Speed: the element loops are written so the compiler vectorises them (restrict pointers,
// branches hoisted out of the loops; the library builds with -fno-math-errno so sqrtf becomes
// vsqrtps). Row reductions (sum of g^2, norms) accumulate in 16 lanes (element d into lane
// d % 16) and finish with ember__sum16's fixed tree: vectorisable without reassociation flags,
// and the same bits on every path and thread count.
#include <math.h>

#include "tbe/dtype.h"
#include "tbe/kernels.h"

void ember__optim_prepare(const ember__table *t, uint64_t seed, ember__optim_step *st) {
    const ember_optim_config *o = &t->cfg.optim;
    st->c1 = 1.0f - powf(o->beta1, (float)t->step);
    st->c2 = 1.0f - powf(o->beta2, (float)t->step);
    st->row_sumsq = -1.0f;
    st->sr_key = ember__mix64(seed ^ t->name_hash ^ ember__mix64((uint64_t)t->step));
}
