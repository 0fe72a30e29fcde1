// dense_optim.h — optimizers for the dense parameter slab, with torch.optim's update rules.
//
//   SGD      w -= lr g
//   Adagrad  s += g^2;  w -= lr g / (sqrt(s) + eps)                       (torch: eps 1e-10)
//   Adam     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  t += 1
//            w -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)  (torch: eps 1e-8)
// Every rank applies the same update to the same allreduced gradient, so replicas stay equal.
#ifndef EMBER_APP_DENSE_OPTIM_H
#define EMBER_APP_DENSE_OPTIM_H

#include <stdint.h>

#include "ember/core.h"

typedef enum dense_optim_kind { DENSE_OPT_SGD = 0, DENSE_OPT_ADAGRAD = 1, DENSE_OPT_ADAM = 2 } dense_optim_kind;
#define DENSE_OPT_COUNT 3

typedef struct dense_optim_config {
    dense_optim_kind kind;
    float lr;
    float eps;          // 0: torch's default for the kind
    float beta1, beta2; // Adam; 0: 0.9 and 0.999
} dense_optim_config;

typedef struct dense_optim {
    dense_optim_config cfg; // defaults resolved
    int64_t n;
    int64_t step;
    float *m1; // [n] Adagrad's sum of squares or Adam's first moment (NULL for SGD)
    float *m2; // [n] Adam's second moment
} dense_optim;

// Resolves defaults, validates (lr > 0, finite; betas in [0, 1)) and allocates zeroed state.
ember_status dense_optim_create(ember_ctx *ctx, const dense_optim_config *cfg, int64_t n, dense_optim *o);
void dense_optim_destroy(ember_ctx *ctx, dense_optim *o);

// One update of params [n] with grads [n].
void dense_optim_step(dense_optim *o, float *params, const float *grads);

// "sgd", "adagrad", "adam" ("unknown" outside the enum); parse is its inverse: EMBER_OK and *out
// set, or EMBER_ERR_INVALID_ARG (*out unchanged).
const char *dense_optim_name(dense_optim_kind kind);
ember_status dense_optim_parse(const char *name, dense_optim_kind *out);

#endif
