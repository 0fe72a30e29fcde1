// naive_dlrm.h — the DLRM test oracle: plain loops in double precision, written independently of
// apps/ember (it shares only the documented layouts: a layer's weights [out, in] row-major then
// its bias, layer after layer; the interaction's output order).
#ifndef EMBER_TEST_NAIVE_DLRM_H
#define EMBER_TEST_NAIVE_DLRM_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

// MLP in -> sizes[0] -> ... -> sizes[n-1], ReLU after each layer (after the last iff relu_last),
// parameters read from `params`. y [B, sizes[n-1]]. When dy is not NULL also the backward:
// dparams (same layout as params) and dx [B, in] (dx may be NULL).
void naive_mlp(int32_t in, const int32_t *sizes, int32_t n, bool relu_last, const float *params, int32_t batch,
               const double *x, double *y, const double *dy, double *dparams, double *dx);

// DLRM interaction: out [B, D + (F+1)F/2]; with dout, ddense [B, D] and demb [B, F*D].
void naive_interaction(int32_t batch, int32_t num_sparse, int32_t dim, const double *dense, const double *emb,
                       double *out, const double *dout, double *ddense, double *demb);

// DCN-v2 low-rank cross net over x0 [B, N]: per layer l, with V_l [r, N], W_l [N, r], b_l [N]
// read from `params` in that order, layer after layer, x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l;
// y [B, N] = x_L. When dy is not NULL also the backward: dparams (same layout, overwritten) and
// dx0 [B, N].
void naive_cross(int32_t batch, int32_t width, int32_t num_layers, int32_t rank, const float *params,
                 const double *x0, double *y, const double *dy, double *dparams, double *dx0);

// BCE of one logit, and its derivative sigmoid(z) - y.
double naive_bce(double z, double y);
double naive_bce_grad(double z, double y);

// AUC by counting every (positive, negative) pair: 1 if the positive scores higher, 1/2 on a tie.
double naive_auc(int64_t n, const float *score, const float *label);

// One optimizer step on w [n] with gradient g [n] at 1-based step t (torch.optim formulas).
// kind: 0 SGD, 1 Adagrad, 2 Adam. m1, m2: state [n] (zeroed before the first step).
void naive_dense_step(int kind, double lr, double eps, double beta1, double beta2, int64_t t, int64_t n, double *w,
                      const double *g, double *m1, double *m2);

// A replicated EmbeddingBagCollection (every rank holds every table; SUM pooling; SGD, Adagrad,
// row-wise Adagrad, Adam): backward gathers every rank's (row, gradient) pairs, sums duplicates,
// scales by 1/W under GRAD_MEAN, and applies one update per touched row on every rank. Tables
// start uniform in the config's bounds from a generator of its own. The plan is ignored: this
// is data parallelism for every table, the reference the sharded schemes must equal (and 2D: the
// group size is ignored too).
ember_status naive_backend_create(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                                  ember_grad_convention conv, int32_t group_size, dlrm_backend *out);

#endif
