// DLRM training under MPI: the model's gradients against the naive oracle, W = 1 against W = 2
// loss curves, learning on the synthetic set, Criteo end to end, the same bits for 1, 2 and 3
// threads per rank, bad input failing on every rank without a hang, and checkpoints: a run
// resumed from a checkpoint ends with the uninterrupted run's bits (same world size) or within
// fp32 round-off of them (another world size); the data loader thread (--prefetch_batches) gives
// the inline batches, errors and bits, and leaves no thread behind.
//
//   test_train --case NAME [--backend naive|sebc]
//
// The backend is the naive replicated collection of tests/support/dlrm (independent of the
// library) or the library's sharded collection (include/ember/shard.h).
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "dlrm.h"
#include "fail_alloc.h"
#include "interaction.h"
#include "mpi_assert.h"
#include "naive_dlrm.h"
#include "source.h"
#include "synth.h"
#include "train.h"
#include "trainstate.h"

static dlrm_backend_factory factory = naive_backend_create;

// A small configuration that trains in well under a second per run. Its tables cycle through
// every sharding scheme, so that on the sharded collection the W = 1 vs W = 2 comparisons cover
// dp, tw, cw, rw and twrw together (the naive collection ignores the plan).
static train_options small_options(void) {
    static const int64_t rows[DLRM_NUM_SPARSE] = {3,  40, 200, 7,  1000, 12, 60, 300, 5,  90,  2,   500, 30,
                                                  80, 10, 150, 4,  700,  25, 6,  400, 50, 100, 800, 20, 9};
    train_options o;
    train_options_default(&o);
    memcpy(o.rows, rows, sizeof rows);
    o.embedding_dim = 8;
    o.num_bottom = 2;
    o.bottom[0] = 16;
    o.bottom[1] = 8;
    o.num_top = 2;
    o.top[0] = 32;
    o.top[1] = 1;
    o.batch_size = 256;
    o.limit_train_batches = 24;
    o.limit_val_batches = 2;
    o.eval_interval = 0;
    o.learning_rate = 0.05f;
    o.seed = 7;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) o.sharding[f] = f % 5; // the order of ember_shard_scheme
    return o;
}

typedef struct session {
    ember_ctx *ctx;
    ember_comm *comm;
} session;

static session open_session(MPI_Comm mpi) {
    session s = {0};
    assert_int_equal(ember_ctx_create(NULL, &s.ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(s.ctx, mpi, &s.comm), EMBER_OK);
    return s;
}

static void close_session(session *s) {
    ember_comm_destroy(s->comm);
    assert_int_equal(ember_ctx_bytes_outstanding(s->ctx), 0);
    ember_ctx_destroy(s->ctx);
}

// Trains o on `mpi` and returns the global loss of every step in losses[steps].
static train_result train_on(MPI_Comm mpi, const train_options *o, double *losses, int64_t steps) {
    session s = open_session(mpi);
    train_result res = {.step_loss = losses, .step_loss_cap = steps};
    ember_status st = train_run(s.comm, o, factory, NULL, &res);
    if (st != EMBER_OK) fprintf(stderr, "train_run: %s\n", ember_ctx_errmsg(s.ctx));
    assert_int_equal(st, EMBER_OK);
    close_session(&s);
    return res;
}

// ---- The model's dense gradients against the oracle ----------------------------------------------

// One step of the model with the dot interaction or the cross net (CL layers of rank CR), one id
// per feature or multi-hot bags of 1 to 4 ids (multihot.h, the oracle's KJT built from its rule).
static void step_gradients_case(dlrm_interaction kind, bool multi_hot) {
    enum { B = 12, D = 4, F = DLRM_NUM_SPARSE, DN = DLRM_NUM_DENSE, CL = 2, CR = 3 };
    const bool dcn = kind == DLRM_INTERACTION_DCN;
    const int32_t IW = dcn ? (F + 1) * D : D + (F + 1) * F / 2;
    const int32_t bottom[] = {6, D}, top[] = {10, 5, 1};
    int32_t hot[F];
    for (int f = 0; f < F; f++) hot[f] = multi_hot ? 1 + f % 4 : 1;
    session s = open_session(MPI_COMM_SELF);
    train_options o = small_options();
    ember_table_config tables[F];
    ember_feature_config features[F];
    char names[F][16];
    for (int f = 0; f < F; f++) {
        snprintf(names[f], sizeof names[f], "t%d", f);
        ember_optim_config opt = EMBER_OPTIM_CONFIG_DEFAULT;
        tables[f] = (ember_table_config){.name = names[f], .rows = o.rows[f], .dim = D, .pooling = EMBER_POOL_SUM,
                                         .init = {.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f}, .optim = opt};
        features[f] = (ember_feature_config){.name = names[f], .table = f};
    }
    ember_ebc_config ec = {.tables = tables, .num_tables = F, .features = features, .num_features = F, .seed = 3};
    ember_table_plan plan[F];
    memset(plan, 0, sizeof plan);
    dlrm_backend be;
    assert_int_equal(factory(s.comm, &ec, plan, EMBER_GRAD_MEAN, 0, &be), EMBER_OK);
    dlrm_config mc = {.num_dense = DN, .num_sparse = F, .embedding_dim = D, .bottom_sizes = bottom, .num_bottom = 2,
                      .top_sizes = top, .num_top = 3, .interaction = kind, .dcn_num_layers = CL,
                      .dcn_low_rank_dim = CR, .hot_sizes = hot, .rows = o.rows, .hot_dist = MULTIHOT_PARETO,
                      .max_batch = 16, .seed = 5,
                      .optim = {.kind = DENSE_OPT_SGD, .lr = 0.1f}};
    dlrm_model *m;
    assert_int_equal(dlrm_create(s.ctx, &mc, &be, &m), EMBER_OK);
    synth_config sc = {.seed = 11, .num_dense = DN, .num_sparse = F, .rows = o.rows, .zipf_alpha = 1.0,
                       .dense_scale = SYNTH_DENSE_SCALE, .sparse_scale = SYNTH_SPARSE_SCALE, .bias = SYNTH_BIAS};
    synth *syn;
    assert_int_equal(synth_create(s.ctx, &sc, &syn), EMBER_OK);
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(s.ctx, 16, DN, F, &b), EMBER_OK);
    synth_fill(syn, 0, 0, B, &b);

    // The oracle's chain, from the parameters and embeddings before the step.
    const int64_t nc = dcn ? (int64_t)CL * (2 * IW * CR + IW) : 0;
    const int64_t np = dlrm_num_dense_params(m), nb = (DN * 6 + 6) + (6 * D + D), nt = nb + nc;
    const int32_t iw = (int32_t)dlrm_interaction_width(&mc);
    assert_int_equal(iw, IW);
    assert_int_equal(np, nt + (iw * 10 + 10) + (10 * 5 + 5) + (5 + 1));
    float *params = malloc(sizeof(float) * (size_t)np);
    memcpy(params, dlrm_dense_params(m), sizeof(float) * (size_t)np);
    if (dcn) { // the cross net starts with zero biases: give them values, so that the step tests them
        for (int64_t i = 0; i < nc; i++) {
            if ((i % (2 * IW * CR + IW)) >= 2 * IW * CR) params[nb + i] = (float)(0.01 * (i % 7) - 0.03);
        }
        memcpy(dlrm_dense_params(m), params, sizeof(float) * (size_t)np);
    }
    int64_t offsets[F * B + 1], values[4 * F * B], at = 0;
    for (int f = 0; f < F; f++) {
        for (int i = 0; i < B; i++) {
            offsets[f * B + i] = at;
            multihot_bag(MULTIHOT_PARETO, f, o.rows[f], b.ids[i * F + f], hot[f], values + at);
            at += hot[f];
        }
    }
    offsets[F * B] = at;
    ember_kjt kjt = {.num_features = F, .batch_size = B, .offsets = offsets, .values = values, .nnz = at};
    float emb_f[B * F * D];
    assert_int_equal(be.forward(be.impl, &kjt, emb_f), EMBER_OK);
    double x[B * DN], d[B * D], emb[B * F * D], z[B], dz[B], dd[B * D], demb[B * F * D];
    double *inter = malloc(sizeof(double) * B * IW), *dinter = malloc(sizeof(double) * B * IW);
    double *cat = malloc(sizeof(double) * B * IW), *dcat = malloc(sizeof(double) * B * IW);
    double *dp = calloc((size_t)np, sizeof(double));
    for (int i = 0; i < B * DN; i++) x[i] = b.dense[i];
    for (int i = 0; i < B * F * D; i++) emb[i] = emb_f[i];
    naive_mlp(DN, bottom, 2, true, params, B, x, d, NULL, NULL, NULL);
    if (dcn) { // per sample [d, e], then the cross net
        for (int i = 0; i < B; i++) {
            for (int c = 0; c < D; c++) cat[i * IW + c] = d[i * D + c];
            for (int c = 0; c < F * D; c++) cat[i * IW + D + c] = emb[i * F * D + c];
        }
        naive_cross(B, IW, CL, CR, params + nb, cat, inter, NULL, NULL, NULL);
    } else {
        naive_interaction(B, F, D, d, emb, inter, NULL, NULL, NULL);
    }
    naive_mlp(iw, top, 3, false, params + nt, B, inter, z, NULL, NULL, NULL);
    double loss = 0.0;
    for (int i = 0; i < B; i++) {
        loss += naive_bce(z[i], b.labels[i]);
        dz[i] = naive_bce_grad(z[i], b.labels[i]) / B; // the mean over the batch
    }
    naive_mlp(iw, top, 3, false, params + nt, B, inter, z, dz, dp + nt, dinter);
    if (dcn) {
        naive_cross(B, IW, CL, CR, params + nb, cat, inter, dinter, dp + nb, dcat);
        for (int i = 0; i < B; i++) {
            for (int c = 0; c < D; c++) dd[i * D + c] = dcat[i * IW + c];
            for (int c = 0; c < F * D; c++) demb[i * F * D + c] = dcat[i * IW + D + c];
        }
    } else {
        naive_interaction(B, F, D, d, emb, inter, dinter, dd, demb);
    }
    naive_mlp(DN, bottom, 2, true, params, B, x, d, dd, dp, NULL);

    const float *logits;
    assert_int_equal(dlrm_forward(m, &b, &logits), EMBER_OK);
    for (int i = 0; i < B; i++) assert_true(fabs(logits[i] - z[i]) <= 1e-4 * (1.0 + fabs(z[i])));
    double got_loss;
    assert_int_equal(dlrm_train_step(m, &b, 1.0f / B, &got_loss), EMBER_OK);
    assert_true(fabs(got_loss - loss) <= 1e-5 * loss);
    const float *g = dlrm_dense_grads(m);
    for (int64_t i = 0; i < np; i++) {
        if (fabs(g[i] - dp[i]) > 1e-4 * fabs(dp[i]) + 1e-6) {
            fail_msg("dense gradient %lld: got %.9g, oracle %.9g", (long long)i, (double)g[i], dp[i]);
        }
    }
    // The step applied SGD to the reduced gradient.
    for (int64_t i = 0; i < np; i++) {
        float want = params[i] - 0.1f * g[i];
        assert_true(fabsf(dlrm_dense_params(m)[i] - want) <= 1e-6f * (1.0f + fabsf(want)));
    }
    // The first step sized the workspaces; a steady-state step allocates nothing.
    size_t before = ember_ctx_bytes_outstanding(s.ctx);
    assert_int_equal(dlrm_train_step(m, &b, 1.0f / B, &got_loss), EMBER_OK);
    assert_int_equal(ember_ctx_bytes_outstanding(s.ctx), before);
    free(dp);
    free(params);
    free(inter);
    free(dinter);
    free(cat);
    free(dcat);
    dlrm_batch_destroy(s.ctx, &b);
    synth_destroy(s.ctx, syn);
    dlrm_destroy(m);
    be.destroy(be.impl);
    close_session(&s);
}

static void step_gradients_match_the_naive_chain(void **state) {
    (void)state;
    step_gradients_case(DLRM_INTERACTION_DOT, false);
    step_gradients_case(DLRM_INTERACTION_DCN, false);
    step_gradients_case(DLRM_INTERACTION_DCN, true);
}

// ---- W = 1 against W = 2 -------------------------------------------------------------------------

enum { CURVE_STEPS = 24 };

static void compare_curves(const char *what, const double *a, const double *b, int64_t n, double rtol) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double r = fabs(a[i] - b[i]) / fabs(a[i]);
        worst = r > worst ? r : worst;
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        printf("%s: %lld steps, loss %.6f -> %.6f, largest relative difference %.2e\n", what, (long long)n, a[0],
               a[n - 1], worst);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, worst <= rtol);
}

static void curves_w1_equal_w2(const train_options *o, const char *what) {
    double w1[CURVE_STEPS], w2[CURVE_STEPS];
    train_result r1 = train_on(MPI_COMM_SELF, o, w1, CURVE_STEPS);
    train_result r2 = train_on(MPI_COMM_WORLD, o, w2, CURVE_STEPS);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, r1.steps == CURVE_STEPS && r2.steps == CURVE_STEPS);
    compare_curves(what, w1, w2, CURVE_STEPS, 2e-5);
    // The curve moved: this compares training, not initial values.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, w1[CURVE_STEPS - 1] < w1[0] - 0.02);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, fabs(r1.eval_auc - r2.eval_auc) < 1e-3);
}

static void loss_curve_w1_equals_w2_grad_mean(void **state) {
    (void)state;
    train_options o = small_options();
    o.limit_train_batches = CURVE_STEPS;
    curves_w1_equal_w2(&o, "adagrad / rowwise_adagrad");
    o.dense_optimizer = DENSE_OPT_SGD;
    o.embedding_optimizer = EMBER_OPT_SGD;
    o.learning_rate = 0.5f;
    curves_w1_equal_w2(&o, "sgd / sgd");
    // An uneven split (257 = 129 + 128): the loss scale keeps the global mean exact.
    o.batch_size = 257;
    curves_w1_equal_w2(&o, "sgd / sgd, uneven shares");
    // DLRM-DCNv2: the cross net's gradients are data parallel as the MLPs'.
    o.interaction = DLRM_INTERACTION_DCN;
    o.dcn_num_layers = 2;
    o.dcn_low_rank_dim = 8;
    o.learning_rate = 0.2f;
    curves_w1_equal_w2(&o, "dcn, sgd / sgd, uneven shares");
    // MLPerf's multi-hot bags: drawn per sample, the same on any world size.
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) o.multi_hot[f] = 1 + f % 5;
    o.multi_hot_dist = MULTIHOT_PARETO;
    curves_w1_equal_w2(&o, "dcn, multi-hot, sgd / sgd, uneven shares");
}

static void grad_sum_doubles_the_sgd_step(void **state) {
    (void)state;
    // J = sum of 2 rank means = 2 x the global mean: SGD with GRAD_SUM at lr/2 on 2 ranks takes
    // the steps of GRAD_MEAN at lr on 1 rank, for dense and embedding parameters alike.
    train_options o = small_options();
    o.limit_train_batches = CURVE_STEPS;
    o.dense_optimizer = DENSE_OPT_SGD;
    o.embedding_optimizer = EMBER_OPT_SGD;
    o.learning_rate = 0.5f;
    double mean1[CURVE_STEPS], sum2[CURVE_STEPS];
    train_on(MPI_COMM_SELF, &o, mean1, CURVE_STEPS);
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    o.grad_convention = EMBER_GRAD_SUM;
    o.learning_rate = 0.5f / (float)world;
    train_on(MPI_COMM_WORLD, &o, sum2, CURVE_STEPS);
    compare_curves("grad sum at lr / W", mean1, sum2, CURVE_STEPS, 2e-5);
}

// ---- Learning ------------------------------------------------------------------------------------

static void learns_the_planted_model(void **state) {
    (void)state;
    train_options o = small_options();
    o.embedding_dim = 8;
    o.batch_size = 512;
    o.limit_train_batches = 150;
    o.limit_val_batches = 8;
    o.eval_interval = 50;
    train_result r = train_on(MPI_COMM_WORLD, &o, NULL, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) printf("eval AUC %.4f, planted %.4f, %.1f s\n", r.eval_auc, r.planted_auc, r.seconds);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, r.planted_auc >= 0.8);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, r.eval_auc >= 0.7);
}

// ---- Criteo end to end -----------------------------------------------------------------------------

static char dir[64];

// Rank 0 writes `lines` samples of the synthetic set as Criteo TSV (dense values rounded to
// counts, ids in hex) with malformed lines at the given (1-based) line numbers.
static void write_criteo(const char *path, int lines, const int *bad, int nbad) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        ember_ctx *ctx;
        assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
        train_options o = small_options();
        synth_config sc = {.seed = 3, .num_dense = DLRM_NUM_DENSE, .num_sparse = DLRM_NUM_SPARSE, .rows = o.rows,
                           .zipf_alpha = 1.05, .dense_scale = SYNTH_DENSE_SCALE,
                           .sparse_scale = SYNTH_SPARSE_SCALE, .bias = SYNTH_BIAS};
        synth *syn;
        dlrm_batch b;
        assert_int_equal(synth_create(ctx, &sc, &syn), EMBER_OK);
        assert_int_equal(dlrm_batch_create(ctx, lines, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
        synth_fill(syn, 0, 0, lines, &b);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        for (int i = 0, k = 0; i < lines; i++) {
            if (k < nbad && bad[k] == i + 1) {
                fputs("1\tnot\ta\tcriteo\tline\n", f);
                k++;
                continue;
            }
            fprintf(f, "%d", (int)b.labels[i]);
            for (int j = 0; j < DLRM_NUM_DENSE; j++) {
                long count = lround(expm1(b.dense[i * DLRM_NUM_DENSE + j]));
                if (j == 1 && i % 7 == 0) fputs("\t", f); // empty dense field
                else fprintf(f, "\t%ld", j == 2 && i % 5 == 0 ? -1 : count);
            }
            for (int c = 0; c < DLRM_NUM_SPARSE; c++) {
                if (c == 3 && i % 11 == 0) fputs("\t", f); // empty categorical field
                else fprintf(f, "\t%llx", (unsigned long long)b.ids[i * DLRM_NUM_SPARSE + c]);
            }
            fputc('\n', f);
        }
        fclose(f);
        dlrm_batch_destroy(ctx, &b);
        synth_destroy(ctx, syn);
        ember_ctx_destroy(ctx);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void trains_on_criteo_tsv_and_reports_malformed_lines(void **state) {
    (void)state;
    char path[128], report[128];
    snprintf(path, sizeof path, "%s/train.tsv", dir);
    snprintf(report, sizeof report, "%s/report.txt", dir);
    const int bad[] = {5, 1700, 2222};
    write_criteo(path, 6000, bad, 3);
    train_options o = small_options();
    o.dataset = TRAIN_CRITEO;
    o.data_path = path;
    o.batch_size = 200;
    o.limit_train_batches = 0;  // the whole file
    o.limit_val_batches = 5;    // held out: lines 1..1000
    o.epochs = 2;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    FILE *out = rank == 0 ? fopen(report, "w") : NULL;
    session s = open_session(MPI_COMM_WORLD);
    train_result r = {0};
    ember_status st = train_run(s.comm, &o, factory, out, &r);
    if (out) fclose(out);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, r.steps == 2 * 25); // 5000 lines after the hold-out, 25 batches a pass
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, isnan(r.planted_auc) && r.eval_auc > 0.6);
    bool reported = true;
    if (rank == 0) {
        char text[8192] = {0};
        FILE *f = fopen(report, "r");
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        reported = strstr(text, "skipped 2 malformed lines of") && strstr(text, "lines 1700, 2222") &&
                   strstr(text, "skipped 1 malformed line of") && strstr(text, "line 5 (line 5: 5 tab-separated");
        if (!reported) fprintf(stderr, "report:\n%s\n", text);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, reported);
    close_session(&s);
}

// ---- The last partial batch: trained and evaluated alike on any number of ranks -------------------

enum { TAIL_BATCH = 64, TAIL_TRAIN_LINES = 6 * TAIL_BATCH + 10, TAIL_EVAL_LINES = 1032, TAIL_EPOCHS = 2,
       TAIL_STEPS = 7 * TAIL_EPOCHS };

// W = 1, 2 and 3 train on a Criteo file whose last global batch holds 10 lines (of 64), and
// evaluate on one of 1032 lines (16 batches and 8 lines): the last batches leave rank 1 (W = 2)
// or ranks 1 and 2 (W = 3) without a sample. Every rank takes part in those steps with an empty
// share, and the loss scale W / G (train.h) keeps the objective the global batch's mean, so the
// three runs take the same steps on the same samples: the same losses and eval AUC to fp32
// round-off. Across world sizes the sums over ranks run in other orders (about 1e-7 relative a
// step, which Adagrad carries on). Measured (W = 2 and 3 against W = 1): losses within 6e-8
// relative on the sharded collection, 1e-6 on the naive one (its own sums), eval loss within
// 6e-7, the same AUC; bounds 1e-5 relative for the losses and 1e-4 absolute for the AUC (one
// of the ~220k positive-negative pairs swapping order moves it by 5e-6).
static void last_partial_batch_counts_on_any_world_size(void **state) {
    (void)state;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    assert_int_equal(world, 3);
    char train_path[128], eval_path[128];
    snprintf(train_path, sizeof train_path, "%s/tail_train.tsv", dir);
    snprintf(eval_path, sizeof eval_path, "%s/tail_eval.tsv", dir);
    const int bad[] = {100}; // a malformed line too: one sample short in its batch
    write_criteo(train_path, TAIL_TRAIN_LINES, bad, 1);
    write_criteo(eval_path, TAIL_EVAL_LINES, NULL, 0);
    train_options o = small_options();
    o.dataset = TRAIN_CRITEO;
    o.data_path = train_path;
    o.eval_data_path = eval_path;
    o.batch_size = TAIL_BATCH;
    o.limit_train_batches = 0;
    o.limit_val_batches = 0;
    o.epochs = TAIL_EPOCHS;
    MPI_Comm two;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
    double losses[3][TAIL_STEPS];
    train_result r[3];
    for (int w = 0; w < 3; w++) {
        for (int i = 0; i < TAIL_STEPS; i++) losses[w][i] = NAN;
    }
    if (rank == 0) r[0] = train_on(MPI_COMM_SELF, &o, losses[0], TAIL_STEPS);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank < 2) r[1] = train_on(two, &o, losses[1], TAIL_STEPS);
    MPI_Barrier(MPI_COMM_WORLD);
    r[2] = train_on(MPI_COMM_WORLD, &o, losses[2], TAIL_STEPS);
    bool ok = true;
    if (rank == 0) {
        for (int w = 0; w < 3; w++) {
            double loss = 0.0;
            for (int i = 0; i < TAIL_STEPS; i++) {
                const double d = fabs(losses[w][i] - losses[0][i]) / fabs(losses[0][i]);
                loss = d > loss || d != d ? d : loss;
            }
            const double auc = fabs(r[w].eval_auc - r[0].eval_auc);
            const double eval_loss = fabs(r[w].eval_loss - r[0].eval_loss) / r[0].eval_loss;
            const bool same = r[w].steps == TAIL_STEPS && loss <= 1e-5 && auc <= 1e-4 && eval_loss <= 1e-5 &&
                              r[w].eval_auc > 0.6;
            printf("W = %d: %lld steps (%d expected), losses within %.1e of W = 1, eval AUC %.6f (%.1e), "
                   "eval loss %.6f (%.1e): %s\n",
                   w + 1, (long long)r[w].steps, (int)TAIL_STEPS, loss, r[w].eval_auc, auc, r[w].eval_loss, eval_loss,
                   same ? "ok" : "DIFFERENT");
            ok = ok && same;
        }
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    if (two != MPI_COMM_NULL) MPI_Comm_free(&two);
}

// ---- Threads: the same bits for any thread count --------------------------------------------------

enum { THREAD_STEPS = 12 };

// Trains o on `mpi` with `threads` threads per rank: the app's loops take OpenMP's default team
// size, and the library's the context's, which follows it (ember_ctx_config.num_threads 0).
static train_result train_threads(MPI_Comm mpi, const train_options *o, int threads, double *losses) {
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    for (int i = 0; i < THREAD_STEPS; i++) losses[i] = NAN;
    return train_on(mpi, o, losses, THREAD_STEPS);
}

// Whether runs with 2 and 3 threads per rank gave the 1-thread run's loss curve and eval outputs
// bit for bit.
static bool same_bits_for_any_thread_count(const train_options *o, const char *what) {
    const int counts[] = {1, 2, 3};
    double curves[3][THREAD_STEPS];
    train_result r[3];
    bool same = true;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int k = 0; k < 3; k++) {
        r[k] = train_threads(MPI_COMM_WORLD, o, counts[k], curves[k]);
        if (k == 0) continue;
        bool curve = memcmp(curves[0], curves[k], sizeof curves[0]) == 0;
        bool eval = memcmp(&r[0].eval_loss, &r[k].eval_loss, sizeof(double)) == 0 &&
                    memcmp(&r[0].eval_auc, &r[k].eval_auc, sizeof(double)) == 0;
        if (rank == 0 && (!curve || !eval)) {
            for (int i = 0; i < THREAD_STEPS; i++) {
                if (memcmp(&curves[0][i], &curves[k][i], sizeof(double)) != 0) {
                    fprintf(stderr, "%s: step %d loss %.17g with 1 thread, %.17g with %d\n", what, i, curves[0][i],
                            curves[k][i], counts[k]);
                    break;
                }
            }
            if (!eval) fprintf(stderr, "%s: eval loss %.17g / AUC %.17g with 1 thread, %.17g / %.17g with %d\n", what,
                               r[0].eval_loss, r[0].eval_auc, r[k].eval_loss, r[k].eval_auc, counts[k]);
        }
        same = same && curve && eval && r[k].steps == r[0].steps;
    }
    if (rank == 0) {
        printf("%s: %lld steps, loss %.6f -> %.6f, eval AUC %.4f, %s for 1, 2 and 3 threads per rank\n", what,
               (long long)r[0].steps, curves[0][0], curves[0][r[0].steps - 1], r[0].eval_auc,
               same ? "the same bits" : "DIFFERENT");
    }
    return same && r[0].steps > 1;
}

static void threads_give_the_same_bits(void **state) {
    (void)state;
#ifdef _OPENMP
    const int keep = omp_get_max_threads();
#endif
    train_options o = small_options();
    // Rank shares of 650 or 1300 samples: several row tiles of the MLPs and a ragged last one,
    // loss chunks, several threads' worth of samples in every parallel loop. The top MLP's first
    // layer (8 + 351 inputs, 80 outputs) spans 2 x 6 tiles of its weight gradient.
    o.batch_size = 1300;
    o.top[0] = 80;
    o.limit_train_batches = THREAD_STEPS;
    o.limit_val_batches = 2;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, same_bits_for_any_thread_count(&o, "synthetic, adagrad"));
    o.dense_optimizer = DENSE_OPT_ADAM;
    o.embedding_optimizer = EMBER_OPT_ADAM;
    o.learning_rate = 0.01f;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, same_bits_for_any_thread_count(&o, "synthetic, adam"));
    // The cross net (width 27 x 8 = 216, rank 24): its elementwise loops above the size where
    // they run on the threads (650 x 216 elements), its products cut into several tiles.
    o.interaction = DLRM_INTERACTION_DCN;
    o.dcn_num_layers = 2;
    o.dcn_low_rank_dim = 24;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, same_bits_for_any_thread_count(&o, "synthetic, adam, dcn"));
    // Criteo lines parsed on the threads, malformed ones among them: 4 global batches after the
    // held-out one, two epochs.
    char path[128];
    snprintf(path, sizeof path, "%s/threads.tsv", dir);
    const int bad[] = {3, 1500, 2701, 5000};
    write_criteo(path, 6500, bad, 4);
    o = small_options();
    o.batch_size = 1300;
    o.dataset = TRAIN_CRITEO;
    o.data_path = path;
    o.limit_train_batches = 0;
    o.limit_val_batches = 1;
    o.epochs = 2;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, same_bits_for_any_thread_count(&o, "criteo"));
#ifdef _OPENMP
    omp_set_num_threads(keep);
#endif
}

// ---- Bad input: every rank fails the same way, nobody hangs ---------------------------------------

static void expect_failure(train_options *o, ember_status want, const char *text) {
    session s = open_session(MPI_COMM_WORLD);
    train_result r = {0};
    ember_status st = train_run(s.comm, o, factory, NULL, &r);
    const char *msg = ember_ctx_errmsg(s.ctx);
    bool ok = st == want && strstr(msg, text) != NULL;
    if (!ok) fprintf(stderr, "status %s, message '%s', expected %s and '%s'\n", ember_status_name(st), msg,
                     ember_status_name(want), text);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    close_session(&s);
}

static void bad_input_fails_on_every_rank(void **state) {
    (void)state;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    train_options o = small_options();
    // Shapes and sizes: the same verdict everywhere, before any training collective.
    o.bottom[1] = 5;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--dense_arch_layer_sizes ends with 5 but --embedding_dim is 8");
    o = small_options();
    o.top[1] = 2;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--over_arch_layer_sizes ends with 2");
    o = small_options();
    o.batch_size = world - 1;
    if (world > 1) expect_failure(&o, EMBER_ERR_INVALID_ARG, "smaller than the");
    o = small_options();
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) o.rows[f] = (int64_t)1 << 44;
    expect_failure(&o, EMBER_ERR_NOMEM, "GiB is available");
    // A file that one rank cannot open: every rank fails with that rank's reason.
    char path[128], missing[128];
    snprintf(path, sizeof path, "%s/fatal.tsv", dir);
    snprintf(missing, sizeof missing, "%s/missing.tsv", dir);
    const int bad[] = {7};
    write_criteo(path, 64, bad, 1);
    o = small_options();
    o.dataset = TRAIN_CRITEO;
    o.data_path = rank == world - 1 ? missing : path;
    o.batch_size = 8;
    o.limit_val_batches = 1;
    expect_failure(&o, EMBER_ERR_IO, "missing.tsv");
    // A malformed line in the last rank's share of a training batch, fatal: every rank stops there.
    o.data_path = path;
    o.malformed = CRITEO_FATAL;
    o.limit_val_batches = 0;
    o.eval_data_path = path;
    o.batch_size = 8; // line 7 is in the last rank's share of batch 0 (lines 1..8)
    char want[160];
    snprintf(want, sizeof want, "fatal.tsv' line 7: 5 tab-separated fields, expected 40 (rank %d)", world - 1);
    expect_failure(&o, EMBER_ERR_FORMAT, want);
    // --resume from a directory without a committed checkpoint; --save_dir on a backend that
    // cannot save (the naive collection).
    char empty[128];
    snprintf(empty, sizeof empty, "%s/no_checkpoints", dir);
    if (rank == 0) assert_int_equal(mkdir(empty, 0777), 0);
    MPI_Barrier(MPI_COMM_WORLD);
    o = small_options();
    o.resume = empty;
    expect_failure(&o, EMBER_ERR_IO, "no_checkpoints': no committed checkpoint");
    if (factory == naive_backend_create) {
        o = small_options();
        o.save_dir = empty;
        expect_failure(&o, EMBER_ERR_UNSUPPORTED, "--save_dir: this embedding backend cannot save checkpoints");
    }
}

// ---- Checkpoints: a resumed run ends with the uninterrupted run's numbers ----------------------

enum { RESUME_BATCHES = 5, RESUME_EPOCHS = 2, RESUME_STEPS = RESUME_BATCHES * RESUME_EPOCHS };
enum { DENSE_CAP = 1 << 16, TABLES_CAP = 1 << 18 }; // floats: small_options' model fits

// What a run ends with: the loss of every step, the dense parameters and optimizer state, every
// table's weights and optimizer state (train_result's buffers), its digests.
typedef struct end_state {
    double losses[RESUME_STEPS];
    float *dense, *tables;
    train_result res;
} end_state;

static void end_state_init(end_state *e) {
    memset(e, 0, sizeof *e);
    e->dense = malloc(sizeof(float) * DENSE_CAP);
    e->tables = malloc(sizeof(float) * TABLES_CAP);
    assert_non_null(e->dense);
    assert_non_null(e->tables);
}

static void end_state_free(end_state *e) {
    free(e->dense);
    free(e->tables);
}

// A small model that trains 2 epochs of 5 batches of 64 in a few milliseconds; embedding optimizer
// k of the library, the dense optimizers in turn.
static train_options resume_options(int32_t k) {
    train_options o = small_options();
    o.batch_size = 64;
    o.limit_train_batches = RESUME_BATCHES;
    o.epochs = RESUME_EPOCHS;
    o.limit_val_batches = 1;
    o.embedding_optimizer = (ember_optim_kind)k;
    o.dense_optimizer = (dense_optim_kind)(k % 3);
    // Optimizers of whole-row norms (LAMB, LARS) cannot split a table by columns: row-wise then.
    ember_optim_info info;
    assert_int_equal(ember_optim_info_get(o.embedding_optimizer, &info), EMBER_OK);
    for (int f = 0; f < DLRM_NUM_SPARSE && !info.column_wise; f++) {
        if (o.sharding[f] == EMBER_SHARD_COLUMN_WISE) o.sharding[f] = EMBER_SHARD_ROW_WISE;
    }
    return o;
}

// Trains o on `mpi` (every rank of it calls) into e. Losses not trained by this run stay NaN.
static void run_state(MPI_Comm mpi, const train_options *o, end_state *e) {
    for (int i = 0; i < RESUME_STEPS; i++) e->losses[i] = NAN;
    e->res = (train_result){.step_loss = e->losses, .step_loss_cap = RESUME_STEPS, .dense_state = e->dense,
                            .dense_state_cap = DENSE_CAP, .tables = e->tables, .tables_cap = TABLES_CAP};
    session s = open_session(mpi);
    ember_status st = train_run(s.comm, o, factory, NULL, &e->res);
    if (st != EMBER_OK) fprintf(stderr, "train_run: %s\n", ember_ctx_errmsg(s.ctx));
    assert_int_equal(st, EMBER_OK);
    assert_true(e->res.dense_state_len <= DENSE_CAP && e->res.tables_len <= TABLES_CAP);
    close_session(&s);
}

// Whether b (resumed at step `from`) ended with a's bits: the losses of steps [from, N), the
// dense state, every table, the digests and the final evaluation. Names the first difference.
static bool same_bits(const end_state *a, const end_state *b, int64_t from, const char *what) {
    const char *diff = NULL;
    if (a->res.steps != RESUME_STEPS || b->res.steps != RESUME_STEPS || b->res.resumed_step != from) diff = "steps";
    for (int64_t i = 0; !diff && i < RESUME_STEPS; i++) {
        // Steps before `from` were not trained again; the others give the same loss bits.
        if (i < from ? !isnan(b->losses[i]) : memcmp(&a->losses[i], &b->losses[i], sizeof(double)) != 0) {
            diff = "a step's loss";
        }
    }
    if (!diff && (a->res.dense_state_len != b->res.dense_state_len || a->res.dense_state_len == 0 ||
                  memcmp(a->dense, b->dense, sizeof(float) * (size_t)a->res.dense_state_len) != 0)) {
        diff = "the dense parameters or optimizer state";
    }
    if (!diff && (a->res.tables_len != b->res.tables_len || a->res.tables_len == 0 ||
                  memcmp(a->tables, b->tables, sizeof(float) * (size_t)a->res.tables_len) != 0)) {
        diff = "the tables' weights or optimizer state";
    }
    if (!diff && (a->res.digest_losses != b->res.digest_losses || a->res.digest_dense != b->res.digest_dense ||
                  a->res.digest_tables != b->res.digest_tables)) {
        diff = "the digests";
    }
    if (!diff && (memcmp(&a->res.eval_loss, &b->res.eval_loss, sizeof(double)) != 0 ||
                  memcmp(&a->res.eval_auc, &b->res.eval_auc, sizeof(double)) != 0)) {
        diff = "the final evaluation";
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        printf("%s: resumed at step %lld of %d: %s (%lld dense, %lld table floats)\n", what, (long long)from,
               (int)RESUME_STEPS, diff ? "DIFFERENT" : "the same bits", (long long)a->res.dense_state_len,
               (long long)a->res.tables_len);
        if (diff) fprintf(stderr, "%s: %s differ\n", what, diff);
    }
    return diff == NULL;
}

static void resume_is_exact(void **state) {
    (void)state;
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    end_state full, resumed;
    end_state_init(&full);
    end_state_init(&resumed);
    char save[160], from[200], what[160];
    for (int32_t k = 0; k < EMBER_OPT_COUNT; k++) {
        train_options o = resume_options(k);
        snprintf(save, sizeof save, "%s/exact_%d_np%d", dir, (int)k, world);
        snprintf(what, sizeof what, "W = %d, dense %s, embeddings %s", world, dense_optim_name(o.dense_optimizer),
                 ember_optim_name(o.embedding_optimizer));
        int64_t at;
        train_options r = o;
        if (k % 2 == 0) {
            // The uninterrupted run saves every `at` steps (mid-epoch: 3, or in the second epoch:
            // 7); a fresh run resumes from that checkpoint directory and trains on to the end.
            at = (k / 2) % 2 ? 7 : 3;
            o.save_dir = save;
            o.checkpoint_interval = at;
            o.keep_checkpoints = 10;
            run_state(MPI_COMM_WORLD, &o, &full);
            assert_true(ckpt_step_path(save, at, from, sizeof from));
            r.resume = from;
        } else {
            // A run of one epoch ends (its checkpoint at the end); resumed from the save
            // directory's latest checkpoint with two epochs, it goes on into the second.
            at = RESUME_BATCHES;
            train_options first = o;
            first.epochs = 1;
            first.save_dir = save;
            run_state(MPI_COMM_WORLD, &first, &resumed);
            run_state(MPI_COMM_WORLD, &o, &full);
            r.resume = save;
        }
        run_state(MPI_COMM_WORLD, &r, &resumed);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, same_bits(&full, &resumed, at, what));
    }
    // Criteo, malformed lines among them: the reader goes on at the checkpoint's batch (line 321
    // on: the held-out batch, then 5 training batches a pass; resumed mid-second epoch).
    char path[128];
    snprintf(path, sizeof path, "%s/resume.tsv", dir);
    const int bad[] = {70, 200, 300};
    write_criteo(path, 6 * 64, bad, 3);
    train_options o = resume_options(EMBER_OPT_ADAM);
    o.dataset = TRAIN_CRITEO;
    o.data_path = path;
    o.limit_train_batches = 0;
    snprintf(save, sizeof save, "%s/criteo_np%d", dir, world);
    snprintf(what, sizeof what, "W = %d, criteo, dense %s, embeddings %s", world, dense_optim_name(o.dense_optimizer),
             ember_optim_name(o.embedding_optimizer));
    train_options r = o;
    o.save_dir = save;
    o.checkpoint_interval = 6;
    run_state(MPI_COMM_WORLD, &o, &full);
    assert_true(ckpt_step_path(save, 6, from, sizeof from));
    r.resume = from;
    run_state(MPI_COMM_WORLD, &r, &resumed);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, same_bits(&full, &resumed, 6, what));
    end_state_free(&full);
    end_state_free(&resumed);

    // Another model than the checkpoint's (rowwise_adagrad tables, dense adam) is refused before
    // training, naming the field and both values.
    o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
    snprintf(save, sizeof save, "%s/exact_%d_np%d", dir, (int)EMBER_OPT_ROWWISE_ADAGRAD, world);
    o.resume = save;
    o.embedding_optimizer = EMBER_OPT_ADAM;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--resume: embedding optimizer is rowwise_adagrad in the checkpoint, adam here");
    o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
    o.resume = save;
    o.dense_optimizer = DENSE_OPT_ADAGRAD;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--resume: dense optimizer is adam in the checkpoint, adagrad here");
    o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
    o.resume = save;
    o.rows[4] = 999;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--resume: feature cat_4 (table t_cat_4) has 1000 rows in the checkpoint, 999 here");
    o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
    o.resume = save;
    o.batch_size = 128;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--resume: global batch size is 64 in the checkpoint, 128 here");
    o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
    o.resume = save;
    o.seed = 8;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--resume: seed is 7 in the checkpoint, 8 here");
    o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
    o.resume = save;
    o.grad_convention = EMBER_GRAD_SUM;
    expect_failure(&o, EMBER_ERR_INVALID_ARG, "--resume: gradient convention is mean in the checkpoint, sum here");
}

// Largest |a - b| / (atol + |a|) over n floats.
static double worst_f32(const float *a, const float *b, int64_t n, double atol) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]) / (atol + fabs((double)a[i]));
        worst = d > worst || d != d ? d : worst;
    }
    return worst;
}

// Whether b (resumed at `from` under another world size) ends within fp32 round-off of a. Another
// world size sums the dense gradients over other rank shares and the embedding gradients in
// another order: each step's sums differ in their last bits (about 1e-7 relative), which the
// optimizers carry on (Adam and Adagrad divide by accumulated squares). Over the 7 resumed steps
// the largest relative differences measured are 2e-8 in the losses and 5e-5 in the parameters and
// optimizer state (elements near 0 measured against 1e-3): the bounds, 1e-6 and 5e-4, leave 10x.
static bool close_to(const end_state *a, const end_state *b, int64_t from, const char *what) {
    double loss = 0.0;
    for (int64_t i = from; i < RESUME_STEPS; i++) {
        const double d = fabs(a->losses[i] - b->losses[i]) / fabs(a->losses[i]);
        loss = d > loss || d != d ? d : loss;
    }
    const bool shapes = a->res.dense_state_len == b->res.dense_state_len && a->res.tables_len == b->res.tables_len &&
                        b->res.steps == RESUME_STEPS && b->res.resumed_step == from && isnan(b->losses[from - 1]);
    const double dense = shapes ? worst_f32(a->dense, b->dense, a->res.dense_state_len, 1e-3) : INFINITY;
    const double tables = shapes ? worst_f32(a->tables, b->tables, a->res.tables_len, 1e-3) : INFINITY;
    const bool ok = loss <= 1e-6 && dense <= 5e-4 && tables <= 5e-4;
    printf("%s: resumed at step %lld: losses within %.1e, dense state within %.1e, tables within %.1e "
           "(relative, atol 1e-3): %s\n", what, (long long)from, loss, dense, tables, ok ? "ok" : "TOO FAR");
    return ok;
}

static void resume_under_another_world_size(void **state) {
    (void)state;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    assert_int_equal(world, 3);
    MPI_Comm two;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
    const ember_optim_kind kinds[] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM, EMBER_OPT_LAMB};
    end_state ref, w1, w3;
    end_state_init(&ref);
    end_state_init(&w1);
    end_state_init(&w3);
    for (size_t c = 0; c < sizeof kinds / sizeof kinds[0]; c++) {
        const int64_t at = 3;
        train_options o = resume_options(kinds[c]);
        char save[160], from[200], what[160];
        snprintf(save, sizeof save, "%s/reshard_%d", dir, (int)kinds[c]);
        assert_true(ckpt_step_path(save, at, from, sizeof from));
        // W = 2 trains uninterrupted, saving at step 3.
        train_options first = o;
        first.save_dir = save;
        first.checkpoint_interval = at;
        first.keep_checkpoints = 10;
        if (rank < 2) run_state(two, &first, &ref);
        MPI_Barrier(MPI_COMM_WORLD);
        // Its step-3 checkpoint resumed by 1 rank, then by 3, each saving into a directory of its own.
        train_options r = o;
        r.resume = from;
        char w1_dir[200], w3_dir[200];
        snprintf(w1_dir, sizeof w1_dir, "%s_w1", save);
        snprintf(w3_dir, sizeof w3_dir, "%s_w3", save);
        r.save_dir = w1_dir;
        if (rank == 0) run_state(MPI_COMM_SELF, &r, &w1);
        MPI_Barrier(MPI_COMM_WORLD);
        r.save_dir = w3_dir;
        run_state(MPI_COMM_WORLD, &r, &w3);
        bool ok = true;
        if (rank == 0) {
            snprintf(what, sizeof what, "W = 2 -> 1, dense %s, embeddings %s", dense_optim_name(o.dense_optimizer),
                     ember_optim_name(o.embedding_optimizer));
            ok = close_to(&ref, &w1, at, what);
            snprintf(what, sizeof what, "W = 2 -> 3, dense %s, embeddings %s", dense_optim_name(o.dense_optimizer),
                     ember_optim_name(o.embedding_optimizer));
            ok = close_to(&ref, &w3, at, what) && ok;
        }
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    }
    end_state_free(&ref);
    end_state_free(&w1);
    end_state_free(&w3);
    if (two != MPI_COMM_NULL) MPI_Comm_free(&two);
}

static int make_dir(void **state) {
    (void)state;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/ember_train_XXXXXX");
        if (!mkdtemp(dir)) return -1;
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    return 0;
}

static int remove_dir(void **state) {
    (void)state;
    int rank;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

// --overlap on (prefetch of the next batch, split embedding backward) against off: the same bits
// in every step's loss, the dense and table state, the digests and the final evaluation, with
// evaluations between steps (whose forwards drop the pending prefetch) and a partial last batch.
static void overlap_gives_the_same_bits(void **state) {
    (void)state;
    end_state off, on;
    end_state_init(&off);
    end_state_init(&on);
    const int32_t opts[] = {EMBER_OPT_SGD, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM};
    bool ok = true;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        train_options o = resume_options(opts[i]);
        o.eval_interval = 3;
        o.batch_size = 61; // ragged rank shares
        char what[96];
        snprintf(what, sizeof what, "--overlap on vs off, embedding optimizer %d", (int)opts[i]);
        o.overlap = false;
        run_state(MPI_COMM_WORLD, &o, &off);
        o.overlap = true;
        run_state(MPI_COMM_WORLD, &o, &on);
        ok = ok && same_bits(&off, &on, 0, what);
    }
    {
        // DLRM-DCNv2 with multi-hot bags: the prefetched batch's bags kept apart from the step's.
        train_options o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
        o.eval_interval = 3;
        o.batch_size = 61;
        o.interaction = DLRM_INTERACTION_DCN;
        o.dcn_num_layers = 2;
        o.dcn_low_rank_dim = 8;
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) o.multi_hot[f] = 1 + f % 3;
        o.overlap = false;
        run_state(MPI_COMM_WORLD, &o, &off);
        o.overlap = true;
        run_state(MPI_COMM_WORLD, &o, &on);
        ok = ok && same_bits(&off, &on, 0, "--overlap on vs off, dcn and multi-hot");
    }
    // Saved with overlap on (its data position is the one before the look-ahead), resumed with
    // it off: the uninterrupted run's bits.
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char save[160], from[200];
    snprintf(save, sizeof save, "%s/overlap_np%d", dir, world);
    train_options o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
    train_options r = o;
    o.save_dir = save;
    o.checkpoint_interval = 3;
    o.keep_checkpoints = 10;
    o.overlap = true;
    run_state(MPI_COMM_WORLD, &o, &on);
    assert_true(ckpt_step_path(save, 3, from, sizeof from));
    r.resume = from;
    r.overlap = false;
    run_state(MPI_COMM_WORLD, &r, &off);
    ok = ok && same_bits(&on, &off, 3, "saved with --overlap on at step 3, resumed with it off");
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    end_state_free(&off);
    end_state_free(&on);
}

// ---- The data loader (--prefetch_batches): the inline batches, messages and threads ----------------

// Threads of this process now (the kernel's list; MPI's and OpenMP's among them).
static int threads_now(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// Whether the process is back to at most `base` threads (a joined thread may stay listed an
// instant after pthread_join returns).
static bool threads_back_to(int base) {
    for (int i = 0; i < 400; i++) {
        if (threads_now() <= base) return true;
        nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
    }
    fprintf(stderr, "%d threads, %d before the loader\n", threads_now(), base);
    return false;
}

// Every batch a source gives over one sequence of calls, with the agreed outcome and the position
// after it: a pass started, 3 batches, a rewind mid-pass, the whole pass and two fetches past its
// end, then a seek to batch 2 (a resume) and on to the end; then the Criteo reader's statistics.
// depth: the loader's (0: inline). Returns the first failure's status with its message in msg.
static ember_status fetch_sequence(ember_comm *comm, source *s, int32_t depth, snap_bytes *log, char *msg,
                                   size_t cap) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t W = ember_comm_size(comm);
    dlrm_batch b;
    int64_t *sizes = malloc(sizeof(int64_t) * (size_t)W);
    assert_non_null(sizes);
    assert_int_equal(dlrm_batch_create(ctx, (int32_t)((s->global_batch + W - 1) / W), DLRM_NUM_DENSE,
                                       DLRM_NUM_SPARSE, &b),
                     EMBER_OK);
    ember_status st = ember_comm_agree(comm, source_start_loader(ctx, s, depth, NULL, &b));
    for (int phase = 0; phase < 3 && st == EMBER_OK; phase++) {
        st = ember_comm_agree(comm, phase == 2 ? source_seek(s, 2) : source_rewind(s));
        for (int k = 0, past = 0; st == EMBER_OK; k++) {
            fetched what;
            int64_t global = -1;
            st = source_fetch(comm, s, &b, sizes, &what, &global);
            if (st != EMBER_OK) break;
            const int64_t head[4] = {(int64_t)what, global, s->next, b.size};
            snap_add(log, head, sizeof head);
            snap_add(log, sizes, sizeof(int64_t) * (size_t)W);
            snap_add(log, b.dense, sizeof(float) * (size_t)b.size * DLRM_NUM_DENSE);
            snap_add(log, b.ids, sizeof(int64_t) * (size_t)b.size * DLRM_NUM_SPARSE);
            snap_add(log, b.labels, sizeof(float) * (size_t)b.size);
            snap_add(log, b.planted, sizeof(float) * (size_t)b.size);
            snap_add(log, b.origin, sizeof(int64_t) * (size_t)b.size);
            if (phase == 0 && k == 2) break;
            if (what == FETCH_END && (phase != 1 || ++past > 2)) break;
        }
    }
    source_stop_loader(ctx, s);
    if (st == EMBER_OK && s->reader) snap_add(log, criteo_get_stats(s->reader), sizeof(criteo_stats));
    snprintf(msg, cap, "%s", st == EMBER_OK ? "" : ember_ctx_errmsg(ctx));
    dlrm_batch_destroy(ctx, &b);
    free(sizes);
    return st;
}

// A synthetic source of 7 batches of 10, or a Criteo file's in batches of 8 (skip or fatal).
static source synthetic_source(ember_comm *comm, synth **syn) {
    train_options o = small_options();
    synth_config sc = {.seed = 9, .num_dense = DLRM_NUM_DENSE, .num_sparse = DLRM_NUM_SPARSE, .rows = o.rows,
                       .zipf_alpha = 1.1, .dense_scale = SYNTH_DENSE_SCALE, .sparse_scale = SYNTH_SPARSE_SCALE,
                       .bias = SYNTH_BIAS};
    assert_int_equal(synth_create(ember_comm_ctx(comm), &sc, syn), EMBER_OK);
    return (source){.syn = *syn, .limit = 7, .global_batch = 10, .rank = ember_comm_rank(comm),
                    .world = ember_comm_size(comm)};
}

static source criteo_source(ember_comm *comm, const char *path, criteo_malformed_mode mode) {
    train_options o = small_options();
    criteo_config cfg = {.path = path, .rows = o.rows, .rank = ember_comm_rank(comm), .world = ember_comm_size(comm),
                         .global_batch = 8, .malformed = mode};
    source s = {.global_batch = 8, .rank = cfg.rank, .world = cfg.world};
    assert_int_equal(ember_comm_agree(comm, criteo_open(ember_comm_ctx(comm), &cfg, &s.reader)), EMBER_OK);
    return s;
}

// The sequence through a loader of depth 1, 2 and 5 gives the inline sequence's every byte, on
// synthetic data and on a Criteo file with malformed lines (skipped; batch 3 all malformed: a
// FETCH_SKIP), and leaves no thread behind.
static void loader_gives_the_inline_batches(void **state) {
    (void)state;
    char path[128], msg[512];
    snprintf(path, sizeof path, "%s/loader.tsv", dir);
    int bad[16], nbad = 0;
    bad[nbad++] = 2;
    for (int l = 25; l <= 32; l++) bad[nbad++] = l; // batch 3 (lines 25..32)
    bad[nbad++] = 40;
    write_criteo(path, 77, bad, nbad); // 9 batches and 5 lines
    session ss = open_session(MPI_COMM_WORLD);
    const int base = threads_now();
    bool ok = true;
    for (int kind = 0; kind < 2; kind++) {
        snap_bytes inline_log = {0}, log = {0};
        synth *syn = NULL;
        source s = kind == 0 ? synthetic_source(ss.comm, &syn) : criteo_source(ss.comm, path, CRITEO_SKIP);
        assert_int_equal(fetch_sequence(ss.comm, &s, 0, &inline_log, msg, sizeof msg), EMBER_OK);
        criteo_close(ss.ctx, s.reader);
        const int32_t depths[] = {1, 2, 5};
        for (int d = 0; d < 3; d++) {
            snap_clear(&log);
            if (kind == 1) s = criteo_source(ss.comm, path, CRITEO_SKIP);
            assert_int_equal(fetch_sequence(ss.comm, &s, depths[d], &log, msg, sizeof msg), EMBER_OK);
            const bool same = snap_same(&inline_log, &log), gone = threads_back_to(base);
            if (!same || !gone)
                fprintf(stderr, "%s, loader of depth %d: %s\n", kind ? "criteo" : "synthetic", (int)depths[d],
                        !same ? "other batches than inline" : "a thread left behind");
            ok = ok && same && gone;
            criteo_close(ss.ctx, s.reader);
        }
        synth_destroy(ss.ctx, syn);
        snap_free(&inline_log);
        snap_free(&log);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    close_session(&ss);
}

// A fatal malformed line in batch 2 (the last rank's share) and a read error on the last rank
// (its file is a directory): through the loader, the same batches before it, then the same
// status and message on every rank as inline, and no thread left.
static void loader_errors_read_as_inline(void **state) {
    (void)state;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char path[128], msg[2][512];
    snprintf(path, sizeof path, "%s/loader_fatal.tsv", dir);
    const int bad[] = {24}; // batch 2 is lines 17..24: line 24 is the last rank's
    write_criteo(path, 64, bad, 1);
    session ss = open_session(MPI_COMM_WORLD);
    const int base = threads_now();
    bool ok = true;
    for (int kind = 0; kind < 2; kind++) {
        snap_bytes log[2] = {{0}, {0}};
        ember_status st[2];
        for (int d = 0; d < 2; d++) {
            source s = criteo_source(ss.comm, kind == 0 || rank < world - 1 ? path : dir, CRITEO_FATAL);
            st[d] = fetch_sequence(ss.comm, &s, d ? 2 : 0, &log[d], msg[d], sizeof msg[d]);
            criteo_close(ss.ctx, s.reader);
            ember_ctx_clear_error(ss.ctx);
        }
        char want[256];
        if (kind == 0)
            snprintf(want, sizeof want, "criteo: '%s' line 24: 5 tab-separated fields, expected 40 (rank %d)", path,
                     world - 1);
        else snprintf(want, sizeof want, "criteo: reading '%s' line 1: Is a directory (rank %d)", dir, world - 1);
        const bool same = st[0] == st[1] && snap_same(&log[0], &log[1]) && strcmp(msg[0], msg[1]) == 0;
        const bool right = st[0] == (kind ? EMBER_ERR_IO : EMBER_ERR_FORMAT) && strcmp(msg[0], want) == 0;
        const bool gone = threads_back_to(base);
        if (!same || !right || !gone)
            fprintf(stderr, "%s: inline %s '%s' (%zu bytes before), loader %s '%s' (%zu bytes); wanted '%s'%s\n",
                    kind ? "read error" : "fatal line", ember_status_name(st[0]), msg[0], log[0].n,
                    ember_status_name(st[1]), msg[1], log[1].n, want, gone ? "" : "; a thread left behind");
        ok = ok && same && right && gone;
        snap_free(&log[0]);
        snap_free(&log[1]);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    close_session(&ss);
}

// Each allocation of starting a loader failing in turn: EMBER_ERR_NOMEM with its message, the
// source inline as before, nothing allocated and no thread left; then it starts and runs.
static void loader_failing_allocation_leaves_nothing(void **state) {
    (void)state;
    fail_alloc fa = {0};
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.allocator = fail_alloc_hooks(&fa);
    ember_ctx *ctx;
    ember_comm *comm;
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_SELF, &comm), EMBER_OK);
    synth *syn;
    source s = synthetic_source(comm, &syn);
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 10, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    const int base = threads_now();
    const size_t held = fa.outstanding;
    fail_alloc_arm(&fa, 0);
    assert_int_equal(source_start_loader(ctx, &s, 3, NULL, &b), EMBER_OK);
    const int64_t sites = fa.count;
    source_stop_loader(ctx, &s);
    assert_true(sites >= 2 && fa.outstanding == held && threads_back_to(base));
    for (int64_t k = 1; k <= sites; k++) {
        fail_alloc_arm(&fa, k);
        const ember_status st = source_start_loader(ctx, &s, 3, NULL, &b);
        fail_alloc_arm(&fa, 0);
        if (st != EMBER_ERR_NOMEM || s.loader || fa.outstanding != held || !threads_back_to(base) ||
            !strstr(ember_ctx_errmsg(ctx), "cannot allocate"))
            fail_msg("allocation %lld of %lld failing: %s '%s', loader %p, %zu bytes held (%zu before)", (long long)k,
                     (long long)sites, ember_status_name(st), ember_ctx_errmsg(ctx), (void *)s.loader,
                     fa.outstanding, held);
    }
    // Started after all that, it produces the generator's batches.
    int64_t sizes[1];
    fetched what;
    int64_t global;
    assert_int_equal(source_start_loader(ctx, &s, 3, NULL, &b), EMBER_OK);
    assert_int_equal(source_seek(&s, 6), EMBER_OK);
    assert_int_equal(source_fetch(comm, &s, &b, sizes, &what, &global), EMBER_OK);
    assert_true(what == FETCH_OK && global == 10 && b.origin[0] == 60 && s.next == 7);
    assert_int_equal(source_fetch(comm, &s, &b, sizes, &what, &global), EMBER_OK);
    assert_true(what == FETCH_END && s.next == 7);
    source_stop_loader(ctx, &s);
    assert_true(threads_back_to(base));
    dlrm_batch_destroy(ctx, &b);
    synth_destroy(ctx, syn);
    ember_comm_destroy(comm);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    assert_int_equal(fa.outstanding, 0);
}

// Trains o like run_state, with rank 0's report in `report` (NULL: none); returns the status and
// the message instead of asserting success.
static ember_status run_report(const train_options *o, end_state *e, const char *report, char *msg, size_t cap) {
    for (int i = 0; i < RESUME_STEPS; i++) e->losses[i] = NAN;
    e->res = (train_result){.step_loss = e->losses, .step_loss_cap = RESUME_STEPS, .dense_state = e->dense,
                            .dense_state_cap = DENSE_CAP, .tables = e->tables, .tables_cap = TABLES_CAP};
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    FILE *out = report && rank == 0 ? fopen(report, "w") : NULL;
    session s = open_session(MPI_COMM_WORLD);
    const ember_status st = train_run(s.comm, o, factory, out, &e->res);
    snprintf(msg, cap, "%s", st == EMBER_OK ? "" : ember_ctx_errmsg(s.ctx));
    if (out) fclose(out);
    close_session(&s);
    return st;
}

// The lines of rank 0's report that start with one of `prefixes`, in order, into buf.
static void report_lines(const char *report, const char *const *prefixes, int n, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(report, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        for (int i = 0; i < n; i++) {
            if (strncmp(line, prefixes[i], strlen(prefixes[i])) == 0 && strlen(buf) + strlen(line) < cap) {
                strcat(buf, line);
                break;
            }
        }
    }
    fclose(f);
}

// ember train with the loader (--prefetch_batches 1, 2, 5) against without it: the same bits in
// every step's loss, the dense and table state, the digests and the evaluations between steps
// (synthetic, overlap on and off, ragged shares; Criteo with malformed lines skipped and a batch
// of nothing but them: the same malformed-line report); a run resumed with it from a checkpoint
// saved without it; a fatal malformed line in the third batch: the same steps before it, then
// the same status and message on every rank.
static void prefetch_gives_the_same_bits(void **state) {
    (void)state;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    end_state off, on;
    end_state_init(&off);
    end_state_init(&on);
    char what[160], msg[2][512], report[2][160], text[2][2048];
    snprintf(report[0], sizeof report[0], "%s/prefetch_off.txt", dir);
    snprintf(report[1], sizeof report[1], "%s/prefetch_on.txt", dir);
    bool ok = true;
    const int32_t depths[] = {1, 2, 5};
    for (int overlap = 0; overlap < 2; overlap++) {
        train_options o = resume_options(EMBER_OPT_ROWWISE_ADAGRAD);
        o.eval_interval = 3;
        o.batch_size = 61; // ragged rank shares
        o.overlap = overlap;
        o.prefetch_batches = 0;
        assert_int_equal(run_report(&o, &off, NULL, msg[0], sizeof msg[0]), EMBER_OK);
        for (int d = 0; d < 3; d++) {
            o.prefetch_batches = depths[d];
            assert_int_equal(run_report(&o, &on, NULL, msg[1], sizeof msg[1]), EMBER_OK);
            snprintf(what, sizeof what, "synthetic, --overlap %s, --prefetch_batches %d vs 0", overlap ? "on" : "off",
                     (int)depths[d]);
            ok = same_bits(&off, &on, 0, what) && ok;
        }
    }
    // Criteo: a held-out batch, then 6 training batches a pass of which the third is all malformed.
    char path[128];
    snprintf(path, sizeof path, "%s/prefetch.tsv", dir);
    int bad[80], nbad = 0;
    bad[nbad++] = 3;
    bad[nbad++] = 70;
    for (int l = 193; l <= 256; l++) bad[nbad++] = l;
    bad[nbad++] = 300;
    write_criteo(path, 7 * 64, bad, nbad);
    train_options o = resume_options(EMBER_OPT_ADAM);
    o.dataset = TRAIN_CRITEO;
    o.data_path = path;
    o.limit_train_batches = 0;
    o.eval_interval = 4;
    const char *const kept[] = {"criteo: skipped", "skipped "};
    for (int d = 0; d < 2; d++) {
        o.prefetch_batches = d ? 2 : 0;
        assert_int_equal(run_report(&o, d ? &on : &off, report[d], msg[d], sizeof msg[d]), EMBER_OK);
        if (rank == 0) report_lines(report[d], kept, 2, text[d], sizeof text[d]);
    }
    ok = same_bits(&off, &on, 0, "criteo, malformed lines skipped, --prefetch_batches 2 vs 0") && ok;
    if (rank == 0 && (strcmp(text[0], text[1]) != 0 || !strstr(text[0], "skipped 2 global batch(es)") ||
                      !strstr(text[0], "lines 70, 193, 194"))) {
        fprintf(stderr, "malformed-line reports differ or miss lines:\n%s---\n%s", text[0], text[1]);
        ok = false;
    }
    // Saved without the loader at step 3 (synthetic) or 6 (criteo, second epoch), resumed with it.
    for (int kind = 0; kind < 2; kind++) {
        train_options full = kind ? o : resume_options(EMBER_OPT_ADAGRAD);
        const int64_t at = kind ? 6 : 3;
        char save[160], from[200];
        snprintf(save, sizeof save, "%s/prefetch_%s_np%d", dir, kind ? "criteo" : "synthetic", world);
        full.prefetch_batches = 0;
        full.eval_interval = 2;
        train_options r = full;
        full.save_dir = save;
        full.checkpoint_interval = at;
        full.keep_checkpoints = 10;
        if (run_report(&full, &off, NULL, msg[0], sizeof msg[0]) != EMBER_OK) fail_msg("saving: %s", msg[0]);
        assert_true(ckpt_step_path(save, at, from, sizeof from));
        r.resume = from;
        r.prefetch_batches = 2;
        if (run_report(&r, &on, NULL, msg[1], sizeof msg[1]) != EMBER_OK) fail_msg("resumed: %s", msg[1]);
        snprintf(what, sizeof what, "%s, saved without the loader, resumed with it", kind ? "criteo" : "synthetic");
        ok = same_bits(&off, &on, at, what) && ok;
    }
    // Fatal: line 64 + 2 * 64 + 64 = 256 is the last rank's, in the third training batch.
    o.malformed = CRITEO_FATAL;
    const int fatal[] = {256};
    snprintf(path, sizeof path, "%s/prefetch_fatal.tsv", dir);
    write_criteo(path, 7 * 64, fatal, 1);
    o.data_path = path;
    ember_status st[2];
    for (int d = 0; d < 2; d++) {
        o.prefetch_batches = d ? 2 : 0;
        st[d] = run_report(&o, d ? &on : &off, NULL, msg[d], sizeof msg[d]);
    }
    char want[256];
    snprintf(want, sizeof want, "criteo: '%s' line 256: 5 tab-separated fields, expected 40 (rank %d)", path,
             world - 1);
    // --overlap on (the default) fetches the third batch before the second step: one step trained.
    const int trained = o.overlap ? 1 : 2;
    bool fatal_ok = st[0] == EMBER_ERR_FORMAT && st[1] == EMBER_ERR_FORMAT && strcmp(msg[0], want) == 0 &&
                    strcmp(msg[1], want) == 0;
    for (int i = 0; i < RESUME_STEPS && fatal_ok; i++)
        fatal_ok = (i < trained) == !isnan(off.losses[i]) && memcmp(&off.losses[i], &on.losses[i], sizeof(double)) == 0;
    if (!fatal_ok)
        fprintf(stderr, "fatal line: inline %s '%s', loader %s '%s', wanted '%s' after %d equal step(s)\n",
                ember_status_name(st[0]), msg[0], ember_status_name(st[1]), msg[1], want, trained);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok && fatal_ok);
    end_state_free(&off);
    end_state_free(&on);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *which = "all";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--case") == 0) which = argv[i + 1];
        if (strcmp(argv[i], "--backend") == 0 && strcmp(argv[i + 1], "sebc") == 0) factory = dlrm_backend_sebc_create;
    }
    const struct CMUnitTest all[] = {
        cmocka_unit_test(step_gradients_match_the_naive_chain),
        cmocka_unit_test(loss_curve_w1_equals_w2_grad_mean),
        cmocka_unit_test(grad_sum_doubles_the_sgd_step),
        cmocka_unit_test(learns_the_planted_model),
        cmocka_unit_test(trains_on_criteo_tsv_and_reports_malformed_lines),
        cmocka_unit_test(last_partial_batch_counts_on_any_world_size),
        cmocka_unit_test(threads_give_the_same_bits),
        cmocka_unit_test(bad_input_fails_on_every_rank),
        cmocka_unit_test(resume_is_exact),
        cmocka_unit_test(resume_under_another_world_size),
        cmocka_unit_test(overlap_gives_the_same_bits),
        cmocka_unit_test(loader_gives_the_inline_batches),
        cmocka_unit_test(loader_errors_read_as_inline),
        cmocka_unit_test(loader_failing_allocation_leaves_nothing),
        cmocka_unit_test(prefetch_gives_the_same_bits),
    };
    // --case picks the tests whose name starts with it.
    struct CMUnitTest tests[sizeof all / sizeof all[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(which, "all") == 0 || strncmp(all[i].name, which, strlen(which)) == 0) tests[n++] = all[i];
    }
    int fails = n ? _cmocka_run_group_tests("train", tests, n, make_dir, remove_dir) : 1;
    MPI_Finalize();
    return fails;
}
