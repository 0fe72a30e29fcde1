// eval.h — evaluation of `ember train`: a forward pass over the whole eval set, its mean BCE,
// and the exact AUC of the model (and of the planted model, on synthetic data) over the global
// eval set, gathered on rank 0.
#ifndef EMBER_APP_EVAL_H
#define EMBER_APP_EVAL_H

#include <stdbool.h>
#include <stdint.h>

#include "dlrm.h"
#include "ember/comm.h"
#include "source.h"

// One eval sample's outputs, gathered on rank 0 for the exact AUC.
typedef struct eval_triple {
    float logit, label, planted;
} eval_triple;

typedef struct evaluator {
    ember_comm *comm;
    bool with_planted;     // synthetic data: the planted model's AUC too, at the first evaluation
    int64_t cap_hint;      // samples the outputs buffer first holds
    eval_triple *outputs;  // [cap] this rank's outputs on the eval set
    int64_t num, cap;
    double planted_auc;    // NaN until known
    uint64_t digest;       // --digest: every evaluation's gathered outputs, in order (rank 0)
    // ember eval --predictions PREFIX (one process): every eval sample's model inputs as the body
    // of a binary POST /predict of ember serve ("EMB1", uint32 count, then per sample 13 float32
    // and 26 int64) into `inputs`, and its click probability (float32, the sigmoid of its logit in
    // double, as ember serve answers) into `probs`, its label (float32 0 or 1) into `labels`.
    // NULL: none.
    FILE *inputs, *probs, *labels;
    int64_t dumped;
} evaluator;

// An evaluator that allocates nothing yet.
void eval_init(evaluator *E, ember_comm *comm, bool with_planted, int64_t cap_hint);

// Forward over the whole eval source: *loss the mean BCE and *auc the exact AUC over the global
// eval set, on every rank. b and sizes[W] are the caller's batch and shares buffers. Collective.
ember_status eval_run(evaluator *E, source *s, dlrm_model *m, dlrm_batch *b, int64_t *sizes, double *loss,
                      double *auc);

// Opens PREFIX.inputs, PREFIX.probs and PREFIX.labels for the next eval_run, which writes them. Local. Returns
// EMBER_OK or EMBER_ERR_IO (naming the file). eval_close_predictions completes the inputs'
// header and closes them (EMBER_ERR_IO when a write failed).
ember_status eval_open_predictions(evaluator *E, const char *prefix);
ember_status eval_close_predictions(evaluator *E);

void eval_free(evaluator *E);

#endif
