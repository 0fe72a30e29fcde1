// Evaluation of `ember train` (eval.h): the eval set's forward pass, loss and exact AUC.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "appctx.h"
#include "digest.h"
#include "eval.h"
#include "loss.h"

void eval_init(evaluator *E, ember_comm *comm, bool with_planted, int64_t cap_hint) {
    memset(E, 0, sizeof *E);
    E->comm = comm;
    E->with_planted = with_planted;
    E->cap_hint = cap_hint > 0 ? cap_hint : 1;
    E->planted_auc = NAN;
    E->digest = DIGEST_SEED;
}

void eval_free(evaluator *E) {
    if (E->comm) ember_ctx_free(ember_comm_ctx(E->comm), E->outputs);
    E->outputs = NULL;
    E->num = E->cap = 0;
}

static ember_status append_outputs(evaluator *E, const float *logits, const dlrm_batch *b) {
    ember_ctx *ctx = ember_comm_ctx(E->comm);
    if (E->num + b->size > E->cap) {
        int64_t cap = E->cap ? 2 * E->cap : E->cap_hint;
        if (cap < E->num + b->size) cap = E->num + b->size;
        eval_triple *p = app_alloc(ctx, sizeof(eval_triple) * (size_t)cap, "eval outputs");
        if (!p) return EMBER_ERR_NOMEM;
        if (E->num) memcpy(p, E->outputs, sizeof(eval_triple) * (size_t)E->num);
        ember_ctx_free(ctx, E->outputs);
        E->outputs = p;
        E->cap = cap;
    }
    for (int32_t i = 0; i < b->size; i++) {
        E->outputs[E->num++] = (eval_triple){logits[i], b->labels[i], b->planted[i]};
    }
    return EMBER_OK;
}

// Gathers the eval outputs on rank 0, which computes the exact AUC of the model (and, the first
// time, of the planted model); every rank returns them. Collective.
static ember_status gather_auc(evaluator *E, double *auc) {
    ember_ctx *ctx = ember_comm_ctx(E->comm);
    const int32_t rank = ember_comm_rank(E->comm), world = ember_comm_size(E->comm);
    int64_t *counts = NULL;
    eval_triple *all = NULL;
    float *score = NULL, *label = NULL;
    auc_pair *pairs = NULL;
    int64_t total = 0;
    counts = app_alloc(ctx, sizeof(int64_t) * (size_t)world, "eval counts");
    ember_status st = ember_comm_agree(E->comm, counts ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st == EMBER_OK) st = ember_comm_allgather_i64(E->comm, E->num, counts);
    if (st == EMBER_OK && rank == 0) {
        for (int32_t r = 0; r < world; r++) total += counts[r];
        if (total > INT32_MAX) st = ember_ctx_set_error(ctx, EMBER_ERR_UNSUPPORTED, "%lld eval samples: more than 2^31",
                                                        (long long)total);
        if (st == EMBER_OK) {
            size_t t = (size_t)(total > 0 ? total : 1);
            all = app_alloc(ctx, sizeof(eval_triple) * t, "gathered eval outputs");
            score = app_alloc(ctx, sizeof(float) * 2 * t, "eval scores");
            pairs = app_alloc(ctx, sizeof(auc_pair) * t, "auc scratch");
            if (!all || !score || !pairs) st = EMBER_ERR_NOMEM;
            else label = score + t;
        }
    }
    st = ember_comm_agree(E->comm, st);
    if (st == EMBER_OK) st = ember_comm_gatherv(E->comm, E->outputs, E->num, all, counts, sizeof(eval_triple), 0);
    double result[2] = {NAN, E->planted_auc};
    if (st == EMBER_OK && rank == 0) {
        E->digest = digest_fold(E->digest, all, sizeof(eval_triple) * (size_t)total);
        for (int64_t i = 0; i < total; i++) {
            score[i] = all[i].logit;
            label[i] = all[i].label;
        }
        result[0] = auc_exact(total, score, label, pairs);
        if (isnan(result[1]) && E->with_planted) {
            for (int64_t i = 0; i < total; i++) score[i] = all[i].planted;
            result[1] = auc_exact(total, score, label, pairs);
        }
    }
    if (st == EMBER_OK) st = ember_comm_bcast(E->comm, result, sizeof result, 0);
    *auc = result[0];
    E->planted_auc = result[1];
    ember_ctx_free(ctx, counts);
    ember_ctx_free(ctx, all);
    ember_ctx_free(ctx, score);
    ember_ctx_free(ctx, pairs);
    return st;
}

ember_status eval_open_predictions(evaluator *E, const char *prefix) {
    ember_ctx *ctx = ember_comm_ctx(E->comm);
    char path[4096];
    static const char *const ext[3] = {"inputs", "probs", "labels"};
    FILE **f[3] = {&E->inputs, &E->probs, &E->labels};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s.%s", prefix, ext[i]);
        if (!(*f[i] = fopen(path, "wb"))) {
            const int err = errno;
            eval_close_predictions(E);
            return ember_ctx_set_error(ctx, EMBER_ERR_IO, "--predictions: cannot create '%s': %s", path, strerror(err));
        }
    }
    const uint32_t zero = 0;
    fwrite("EMB1", 1, 4, E->inputs);
    fwrite(&zero, sizeof zero, 1, E->inputs); // the count, written at the end
    E->dumped = 0;
    return EMBER_OK;
}

ember_status eval_close_predictions(evaluator *E) {
    bool ok = true;
    if (E->inputs) {
        const uint32_t n = (uint32_t)E->dumped;
        ok = fseek(E->inputs, 4, SEEK_SET) == 0 && fwrite(&n, sizeof n, 1, E->inputs) == 1 && !ferror(E->inputs);
        ok = fclose(E->inputs) == 0 && ok;
    }
    FILE *more[2] = {E->probs, E->labels};
    for (int i = 0; i < 2; i++)
        if (more[i]) ok = !ferror(more[i]) && fclose(more[i]) == 0 && ok;
    const bool had = E->inputs || E->probs || E->labels;
    E->inputs = E->probs = E->labels = NULL;
    if (had && !ok) return ember_ctx_set_error(ember_comm_ctx(E->comm), EMBER_ERR_IO, "--predictions: a write failed");
    return EMBER_OK;
}

// Batch b's samples and their probabilities into the --predictions files.
static void dump_predictions(evaluator *E, const dlrm_batch *b, const float *logits) {
    for (int32_t i = 0; i < b->size; i++) {
        fwrite(b->dense + (size_t)i * (size_t)b->num_dense, sizeof(float), (size_t)b->num_dense, E->inputs);
        fwrite(b->ids + (size_t)i * (size_t)b->num_sparse, sizeof(int64_t), (size_t)b->num_sparse, E->inputs);
        const float p = (float)(1.0 / (1.0 + exp(-(double)logits[i])));
        fwrite(&p, sizeof p, 1, E->probs);
        fwrite(b->labels + i, sizeof(float), 1, E->labels);
    }
    E->dumped += b->size;
}

ember_status eval_run(evaluator *E, source *s, dlrm_model *m, dlrm_batch *b, int64_t *sizes, double *loss,
                      double *auc) {
    APP_TRY(ember_comm_agree(E->comm, source_rewind(s)));
    E->num = 0;
    double sums[2] = {0.0, 0.0}; // loss, samples
    for (;;) {
        fetched what;
        int64_t global;
        APP_TRY(source_fetch(E->comm, s, b, sizes, &what, &global));
        if (what == FETCH_END) break;
        if (what == FETCH_SKIP) continue;
        const float *logits;
        APP_TRY(dlrm_forward(m, b, &logits));
        if (E->inputs) dump_predictions(E, b, logits);
        sums[0] += bce_with_logits(b->size, logits, b->labels, 0.0f, NULL);
        sums[1] += b->size;
        APP_TRY(ember_comm_agree(E->comm, append_outputs(E, logits, b)));
    }
    APP_TRY(ember_comm_allreduce_sum_f64(E->comm, sums, 2));
    // The same sums on every rank: every rank takes this exit together. (train_run checks the
    // eval data before training; a file that lost its lines since fails here, not with NaN.)
    APP_CHECK(ember_comm_ctx(E->comm), sums[1] > 0.0, EMBER_ERR_FORMAT,
              "the eval data has no usable sample: no loss or AUC to report");
    *loss = sums[0] / sums[1];
    return gather_auc(E, auc);
}
