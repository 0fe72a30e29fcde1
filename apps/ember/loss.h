// loss.h — binary cross-entropy on logits and the exact ROC AUC.
#ifndef EMBER_APP_LOSS_H
#define EMBER_APP_LOSS_H

#include <stdint.h>

// BCE with logits (torch.nn.BCEWithLogitsLoss, reduction "sum"), computed stably as
//   l_i = max(z_i, 0) - z_i y_i + log(1 + exp(-|z_i|)).
// Returns sum_i l_i (double). When dlogit is not NULL it receives scale * dl_i/dz_i
// = scale * (sigmoid(z_i) - y_i); the model passes scale = 1/B for a mean over B samples.
// Runs on the caller's OpenMP threads; the sum is taken over fixed chunks of samples added in
// order, so it has the same bits for any thread count.
double bce_with_logits(int32_t n, const float *logit, const float *label, float scale, float *dlogit);

// One (score, label) pair, the scratch unit of auc_exact.
typedef struct auc_pair {
    float score;
    float label;
} auc_pair;

// Exact ROC AUC: the probability that a random positive scores above a random negative, ties
// counting one half (the Mann-Whitney rank statistic with mid-ranks, as sklearn's
// roc_auc_score). O(n log n) with scratch [n]. Labels are 0 or 1 (> 0.5 is positive).
// Returns NaN when there is no positive or no negative, or a score is not finite.
double auc_exact(int64_t n, const float *score, const float *label, auc_pair *scratch);

#endif
