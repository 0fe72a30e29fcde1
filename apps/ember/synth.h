// synth.h — the built-in synthetic click data set: Criteo's schema, Zipf-distributed ids, and
// labels drawn from a planted ground-truth model, so the best achievable AUC is known.
//
// Sample i of split s (0 train, 1 eval) is a pure function of (seed, s, i): any rank generates
// any sample without the others, so global batch g holds the same samples whatever the world
// size and rank r simply generates its contiguous share of it.
//
// The planted model (all of its parameters drawn from the seed):
//   dense feature j:  latent u_j ~ N(0, 1), observed x_j = log(1 + exp(mu_j + u_j))
//                     (non-negative and right-skewed, like Criteo's log(1 + count));
//   sparse feature f: rank k ~ Zipf(alpha) on {1..rows_f}, id = (a_f (k-1) + c_f) mod rows_f
//                     (a fixed permutation, so hot ids are spread over the table, as hashed ids);
//   logit z = bias + sum_j w_j u_j + sum_f e_f[id_f], with w a fixed random direction of norm
//             dense_scale and per-id random effects e_f[id] = scale_f (g_f[id] - center_f),
//             g_f[id] ~ N(0, 1), centred and scaled so that over feature f's Zipf traffic they
//             have mean 0 and deviation sigma_f, with random weights sum_f sigma_f^2 = sparse_scale^2
//             (so z has mean `bias` and deviation sqrt(dense_scale^2 + sparse_scale^2));
//   label  y ~ Bernoulli(sigmoid(z)).
// sigmoid(z) is the Bayes-optimal predictor, so the AUC of z on the eval set (the "planted AUC")
// is the best any model can reach there.
#ifndef EMBER_APP_SYNTH_H
#define EMBER_APP_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "ember/core.h"
#include "ember/rng.h"

// Zipf(alpha) on {1..n}: P(k) proportional to k^-alpha (alpha = 0: uniform). Sampled in O(1)
// expected time by rejection-inversion (Hoermann and Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996), which needs no table, so
// tables of any size cost nothing to set up.
typedef struct zipf {
    int64_t n;
    double alpha;
    double h_x1, h_n, s; // H(1.5) - 1, H(n + 0.5), and the squeeze bound
} zipf;

void zipf_init(zipf *z, int64_t n, double alpha);
int64_t zipf_draw(const zipf *z, ember_rng *r); // in [1, n]

typedef struct synth_config {
    uint64_t seed;
    int32_t num_dense;   // Dn (13 for Criteo's schema)
    int32_t num_sparse;  // F (26)
    const int64_t *rows; // [F] items of each feature; ids are drawn in [0, rows[f])
    // NULL: the ids are the items. Else each item is a 64-bit key (a fixed mix of the feature and
    // the item, as a raw categorical value), given as is with raw_keys (for collisionless hashed
    // tables) or modulo table_rows[f] (modulo hashing: items with equal remainders share a row).
    const int64_t *table_rows;
    bool raw_keys;
    double zipf_alpha;   // >= 0
    double dense_scale;  // standard deviation of the dense part of the planted logit
    double sparse_scale; // standard deviation of its per-id part (all features together)
    double bias;         // planted intercept
    // Requests: samples [k N, (k + 1) N) of a split are the N candidates of request k, which share
    // the ids of the features in user_features (bit f), drawn once per request; 0 or 1: none.
    int32_t request_size;
    uint64_t user_features;
} synth_config;
// Defaults: planted AUC about 0.8 and a click rate about 0.3 (see docs/dlrm.md).
#define SYNTH_DENSE_SCALE 1.0
#define SYNTH_SPARSE_SCALE 1.6
#define SYNTH_BIAS (-1.2)

typedef struct synth synth;

// Copies the configuration and draws the planted model; when the tables hold at most 2M ids in
// all, it keeps every id's effect (8 bytes each; the same values, computed once). Local.
ember_status synth_create(ember_ctx *ctx, const synth_config *cfg, synth **out);
void synth_destroy(ember_ctx *ctx, synth *s);

// Writes samples [first, first + n) of `split` into b (b->size = n <= b->capacity), including
// each sample's planted logit in b->planted.
void synth_fill(const synth *s, int split, int64_t first, int32_t n, dlrm_batch *b);

// The planted per-id effect e_f[id] and feature f's sigma_f (for tests and docs).
double synth_effect(const synth *s, int32_t feature, int64_t id);
double synth_sigma(const synth *s, int32_t feature);

#endif
