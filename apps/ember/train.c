// The DLRM training driver (train.h): a run's life and its step loop. Its other parts (run.h):
// run_setup.c before the model exists, run_ckpt.c the checkpoints, report.c everything printed;
// evaluation is eval.c, the data sources source.c.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "appctx.h"
#include "digest.h"
#include "ember/plan.h"
#include "report.h"
#include "run.h"
#include "sharding.h"

// ---- Defaults (the main job) -------------------------------------------------------------------
// 26 tables from 4 to 100k rows, as Criteo's (hashed) cardinalities spread over orders of
// magnitude; under the automatic rule at dim 16 the 18 small ones are data parallel, 5 middle ones
// table-wise and the 3 largest row-wise. With Zipf 1.2 ids, one pass over 2 M samples ends about
// 0.013 AUC below the planted model (seeds 1-3), well within 2 minutes on 2 cores: docs/dlrm.md.
static const int64_t default_rows[DLRM_NUM_SPARSE] = {
    1000,  20000, 100000, 50000, 300,  30,   10000, 600,   4,    20000, 5000, 80000, 3000,
    30000, 40,    100000, 10,    1000, 2000, 5,     20000, 20,   15,    6000, 100,  80,
};

void train_options_default(train_options *o) {
    memset(o, 0, sizeof *o);
    o->embedding_dim = 16;
    memcpy(o->rows, default_rows, sizeof o->rows);
    const int32_t bottom[] = {64, 16}, top[] = {64, 32, 1};
    o->num_bottom = 2;
    memcpy(o->bottom, bottom, sizeof bottom);
    o->num_top = 3;
    memcpy(o->top, top, sizeof top);
    o->interaction = DLRM_INTERACTION_DOT;
    o->dcn_num_layers = 3;
    o->dcn_low_rank_dim = 512;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) o->multi_hot[f] = 1;
    o->multi_hot_dist = MULTIHOT_UNIFORM;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) o->sharding[f] = SHARDING_AUTO;
    o->grad_convention = EMBER_GRAD_MEAN;
    o->wire_scale_forward = o->wire_scale_backward = 1.0f;
    o->dataset = TRAIN_SYNTHETIC;
    o->zipf_alpha = 1.2;
    o->malformed = CRITEO_SKIP;
    o->batch_size = 2048;
    o->epochs = 1;
    o->limit_train_batches = 1000;
    o->limit_val_batches = 16;
    o->eval_interval = 200;
    o->learning_rate = 0.05f;
    o->dense_optimizer = DENSE_OPT_ADAGRAD;
    o->embedding_optimizer = EMBER_OPT_ROWWISE_ADAGRAD;
    o->seed = 1;
    o->checkpoint_interval = -1; // the resumed checkpoint's, else 0: only at the end
    o->keep_checkpoints = 0;     // the resumed checkpoint's, else 3
    o->checkpoint_delta_interval = -1; // the resumed checkpoint's, else 0: none
    o->timeout_s = EMBER_COMM_DEFAULT_TIMEOUT_S;
    o->overlap = true;
    o->prefetch_batches = -1; // by placement (resolve_prefetch)
    o->cache_policy = EMBER_EVICT_LRU;
    o->hash = (ember_hash_config){
        .enabled = 1, .bucket_rows = EMBER_HASH_BUCKET_ROWS, .min_count = 1, .policy = EMBER_EVICT_LRU};
    o->synth_items = 1;
    o->request_size = 1;
}

void train_options_mlperf_dcnv2(train_options *o) {
    static const int64_t rows[DLRM_NUM_SPARSE] = {40000000, 39060, 17295, 7424,     20265,    3,        7122,
                                                  1543,     63,    40000000, 3067956, 405282,   10,       2209,
                                                  11938,    155,   4,        976,     14,       40000000, 40000000,
                                                  40000000, 590152, 12973,   108,     36};
    static const int32_t hot[DLRM_NUM_SPARSE] = {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1,
                                                 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
    static const int32_t bottom[] = {512, 256, 128}, top[] = {1024, 1024, 512, 256, 1};
    o->embedding_dim = 128;
    memcpy(o->rows, rows, sizeof rows);
    memcpy(o->multi_hot, hot, sizeof hot);
    o->multi_hot_dist = MULTIHOT_UNIFORM;
    o->num_bottom = 3;
    memcpy(o->bottom, bottom, sizeof bottom);
    o->num_top = 5;
    memcpy(o->top, top, sizeof top);
    o->interaction = DLRM_INTERACTION_DCN;
    o->dcn_num_layers = 3;
    o->dcn_low_rank_dim = 512;
    o->dense_optimizer = DENSE_OPT_ADAGRAD;
    o->embedding_optimizer = EMBER_OPT_ROWWISE_ADAGRAD;
    o->learning_rate = 0.004f;
    o->batch_size = 65536;
}

#define DEFAULT_KEEP_CHECKPOINTS 3

static const char *const dataset_names[TRAIN_DATASET_COUNT] = {"synthetic", "criteo", "criteo_npy"};

const char *train_dataset_name(train_dataset d) {
    return (unsigned)d < TRAIN_DATASET_COUNT ? dataset_names[d] : "unknown";
}

ember_status train_dataset_parse(const char *name, train_dataset *out) {
    const int k = app_name_index(dataset_names, TRAIN_DATASET_COUNT, name);
    if (k < 0) return EMBER_ERR_INVALID_ARG;
    *out = (train_dataset)k;
    return EMBER_OK;
}

// ---- The run -----------------------------------------------------------------------------------

double app_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// --prefetch_batches by default: a loader pays where it has a CPU to itself; where it would take
// turns with its rank's pinned threads, the step's team waits whenever the loader holds one of
// their CPUs (1 rank x 2 threads on 2 CPUs ran 0.85x as fast as producing inline).
static void resolve_prefetch(train_options *o) {
    if (o->prefetch_batches < 0) o->prefetch_batches = o->loader_shares_cpu ? 0 : 2;
}

static void begin(run *R, ember_comm *comm, const train_options *o, FILE *out, train_result *res) {
    memset(R, 0, sizeof *R);
    R->opts = *o;
    R->o = &R->opts;
    resolve_prefetch(&R->opts);
    R->comm = comm;
    R->ctx = ember_comm_ctx(comm);
    R->rank = ember_comm_rank(comm);
    R->world = ember_comm_size(comm);
    report_begin(&R->rep, R->rank == 0 ? out : NULL, o->progress_bar);
    R->node = MPI_COMM_NULL;
    R->digest_losses = DIGEST_SEED;
    res->steps = res->resumed_step = 0;
    res->eval_auc = res->eval_loss = res->planted_auc = NAN;
    res->dense_state_len = res->tables_len = 0;
}

// The loader threads of --prefetch_batches, for training (or the one evaluation): started after
// run_require_data's scans, which read inline (a loader reads ahead of what the scan would).
// Collective; every rank returns the same status.
static ember_status start_loaders(run *R) {
    const int32_t depth = R->o->prefetch_batches;
    ember_status st = EMBER_OK;
    if (!R->eval_only) st = source_start_loader(R->ctx, &R->train, depth, R->o->loader_cpus, &R->batch);
    if (st == EMBER_OK) st = source_start_loader(R->ctx, &R->eval, depth, R->o->loader_cpus, &R->batch);
    return ember_comm_agree(R->comm, st);
}

// Joins them: before the reports read the Criteo readers' statistics, and on every way out.
static void stop_loaders(run *R) {
    source_stop_loader(R->ctx, &R->train);
    source_stop_loader(R->ctx, &R->eval);
}

static void cleanup(run *R) {
    stop_loaders(R);
    dlrm_destroy(R->model);
    if (R->backend.destroy) R->backend.destroy(R->backend.impl);
    criteo_close(R->ctx, R->train.reader);
    criteo_close(R->ctx, R->eval.reader);
    criteo_npy_close(R->ctx, R->train.npy);
    criteo_npy_close(R->ctx, R->eval.npy);
    source_free_pool(R->ctx, &R->train);
    synth_destroy(R->ctx, R->syn);
    dlrm_batch_destroy(R->ctx, &R->batch);
    dlrm_batch_destroy(R->ctx, &R->ahead);
    report_free(R->ctx, &R->rep);
    ember_ctx_free(R->ctx, R->sizes);
    eval_free(&R->ev);
    ember_plan_release(R->ctx, R->plan, DLRM_NUM_SPARSE);
    ember_ctx_free(R->ctx, R->rank_speed);
    if (R->node != MPI_COMM_NULL) MPI_Comm_free(&R->node);
    trainstate_free(&R->ckpt);
}

// ---- Evaluation --------------------------------------------------------------------------------

// The eval set's loss and AUC with the tables in evaluation mode (no hashed table admits an eval
// id). Collective.
static ember_status eval_tables(run *R, double *loss, double *auc) {
    if (R->backend.set_training) APP_TRY(R->backend.set_training(R->backend.impl, 0));
    const ember_status st = eval_run(&R->ev, &R->eval, R->model, &R->batch, R->sizes, loss, auc);
    if (R->backend.set_training) R->backend.set_training(R->backend.impl, 1);
    return st;
}

// Evaluates, records a metrics row and reports it. Collective.
static ember_status eval_point(run *R, metrics_row *row) {
    APP_TRY(eval_tables(R, &row->eval_loss, &row->eval_auc));
    row->planted_auc = R->ev.planted_auc;
    return report_eval(R, row);
}

// eval_point inside MLPerf's eval_start / eval_stop, with its eval_accuracy. Collective.
static ember_status mllog_eval(run *R, metrics_row *row, double epoch_num) {
    char meta[48], value[32];
    snprintf(meta, sizeof meta, "\"epoch_num\": %.6g", epoch_num);
    report_mllog(R, "INTERVAL_START", "eval_start", NULL, meta);
    APP_TRY(eval_point(R, row));
    report_mllog(R, "INTERVAL_END", "eval_stop", NULL, meta);
    snprintf(value, sizeof value, "%.6f", row->eval_auc);
    report_mllog(R, "POINT_IN_TIME", "eval_accuracy", value, meta);
    return EMBER_OK;
}

// ember eval --load: the checkpoint's outputs on the eval set. Collective.
static ember_status evaluate_once(run *R, train_result *res) {
    report_eval_header(R);
    double loss = NAN, auc = NAN;
    if (R->predictions) {
        APP_CHECK(R->ctx, R->world == 1, EMBER_ERR_UNSUPPORTED,
                  "--predictions writes from one process: run ember eval without mpiexec (%d ranks here)", (int)R->world);
        APP_TRY(eval_open_predictions(&R->ev, R->predictions));
    }
    const ember_status st = eval_tables(R, &loss, &auc);
    const ember_status closed = eval_close_predictions(&R->ev);
    APP_TRY(st);
    APP_TRY(closed);
    res->steps = R->start.steps;
    res->eval_loss = loss;
    res->eval_auc = auc;
    res->planted_auc = R->ev.planted_auc;
    report_eval_result(R, res);
    return EMBER_OK;
}

// ---- Training ----------------------------------------------------------------------------------

// --overlap on: the next training batch, fetched into R->ahead before this step, so that the step
// can start its input dist (dlrm_train_step_overlap); the batches and their order are the same.
typedef struct lookahead {
    bool have;       // R->ahead holds the next batch (or the end of the epoch)
    fetched what;    // what it is
    int64_t global;  // its global sample count
    int64_t skipped; // batches without a usable line skipped to get there
} lookahead;

// The next training batch into R->batch: the one fetched ahead, else from the source. Collective.
static ember_status next_batch(run *R, lookahead *a, fetched *what, int64_t *global) {
    if (!a->have) return source_fetch(R->comm, &R->train, &R->batch, R->sizes, what, global);
    dlrm_batch t = R->batch;
    R->batch = R->ahead;
    R->ahead = t;
    *what = a->what;
    *global = a->global;
    R->skipped_batches += a->skipped;
    a->have = false;
    return EMBER_OK;
}

// Fetches the batch after R->batch into R->ahead, past batches without a usable line. Collective.
static ember_status fetch_ahead(run *R, lookahead *a) {
    a->skipped = 0;
    do {
        APP_TRY(source_fetch(R->comm, &R->train, &R->ahead, R->sizes, &a->what, &a->global));
        a->skipped += a->what == FETCH_SKIP;
    } while (a->what == FETCH_SKIP);
    a->have = true;
    return EMBER_OK;
}

// One optimizer step on R->batch of `global` samples; *loss: the sum of the global batch's
// losses, also folded into the --digest hash. Collective.
static ember_status train_step(run *R, const lookahead *a, int64_t global, double *loss) {
    const float scale = (float)((double)R->world / (double)global);
    *loss = 0.0;
    if (R->o->overlap)
        APP_TRY(dlrm_train_step_overlap(R->model, &R->batch, a->what == FETCH_OK ? &R->ahead : NULL, scale, loss));
    else
        APP_TRY(dlrm_train_step(R->model, &R->batch, scale, loss));
    APP_TRY(ember_comm_allreduce_sum_f64(R->comm, loss, 1));
    R->digest_losses = digest_fold(R->digest_losses, loss, sizeof *loss);
    return EMBER_OK;
}

// --rebalance_every: every rank's embedding time over the window, a plan for the speeds they
// show (train_topology_rebalance), and, when it predicts the slowest rank at least 10% faster,
// the tables moved there (the backend's reshard: the numbers go on as from a checkpoint loaded
// into the new plan). Collective: every rank decides alike from the same gathered times.
static ember_status rebalance(run *R, int64_t step) {
    ember_ctx *ctx = R->ctx;
    const int32_t W = R->world;
    ember_status st = R->backend.busy_seconds && R->backend.reshard
                          ? EMBER_OK
                          : ember_ctx_set_error(ctx, EMBER_ERR_UNSUPPORTED,
                                                "--rebalance_every: this embedding backend cannot move its tables");
    double *busy = ember_ctx_alloc(ctx, sizeof(double) * (size_t)W);
    int32_t *host_of = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)W);
    if (!R->rank_speed && (R->rank_speed = ember_ctx_alloc(ctx, sizeof(double) * (size_t)W)))
        memset(R->rank_speed, 0, sizeof(double) * (size_t)W);
    if (st == EMBER_OK && (!busy || !host_of || !R->rank_speed))
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "--rebalance_every: out of memory for %d ranks", (int)W);
    st = ember_comm_agree(R->comm, st);
    double *speed = R->rank_speed;
    if (st == EMBER_OK) {
        memset(busy, 0, sizeof(double) * (size_t)W);
        busy[R->rank] = R->backend.busy_seconds(R->backend.impl, 1);
        st = ember_comm_allreduce_sum_f64(R->comm, busy, (size_t)W);
    }
    int32_t hosts = 1;
    if (st == EMBER_OK) st = ember_plan_detect_topology(R->comm, host_of, &hosts, 0, 0, NULL, NULL, NULL);
    ember_table_plan next[DLRM_NUM_SPARSE];
    double cur = 0, proposed = 0;
    if (st == EMBER_OK) {
        const train_options *o = R->o;
        ember_ebc_config pe = EMBER_EBC_CONFIG_DEFAULT;
        pe.tables = R->tables, pe.num_tables = DLRM_NUM_SPARSE, pe.features = R->features;
        pe.num_features = DLRM_NUM_SPARSE, pe.ssd_dir = o->ssd_dir;
        const int32_t local_batch = o->batch_size / W > 0 ? (int32_t)(o->batch_size / W) : 1;
        float pooling[DLRM_NUM_SPARSE];
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) pooling[f] = (float)o->multi_hot[f];
        st = ember_comm_agree(R->comm, train_topology_rebalance(ctx, &pe, local_batch, pooling, &R->topo, host_of, W,
                                                                 R->plan, busy, speed, next, &cur, &proposed));
    }
    if (st == EMBER_OK) {
        const bool move = proposed < 0.9 * cur;
        ember_reshard_stats rs = {0};
        if (move) st = R->backend.reshard(R->backend.impl, next, &rs);
        double bytes = (double)rs.bytes_sent;
        int64_t us = (int64_t)(rs.seconds * 1e6); // the slowest rank's
        if (st == EMBER_OK) st = ember_comm_allreduce_sum_f64(R->comm, &bytes, 1);
        if (st == EMBER_OK) st = ember_comm_allreduce_max_i64(R->comm, &us, 1);
        if (st == EMBER_OK && move) {
            ember_plan_release(ctx, R->plan, DLRM_NUM_SPARSE); // the new placement is the run's now
            memcpy(R->plan, next, sizeof next);
        } else {
            ember_plan_release(ctx, next, DLRM_NUM_SPARSE);
        }
        if (st == EMBER_OK) report_rebalance(R, step, speed, R->topo.hosts > 1, cur, proposed, move, bytes, (double)us * 1e-6);
    }
    ember_ctx_free(ctx, busy);
    ember_ctx_free(ctx, host_of);
    return st;
}

// MLPerf's epoch_num of an evaluation after `step` steps: the fraction of the epochs' steps done
// when their count is known, else the epochs begun.
static double mllog_epoch(const run *R, int64_t step, int32_t epoch) {
    const int64_t per = R->o->limit_train_batches;
    return per > 0 ? (double)step / (double)per : (double)epoch + 1.0;
}

// --target_auc: whether the evaluation just made (rank 0's AUC, sent to every rank) reached it.
// Collective.
static ember_status reached_target(run *R, double auc, bool *reached) {
    *reached = false;
    if (R->o->target_auc <= 0.0) return EMBER_OK;
    APP_TRY(ember_comm_bcast(R->comm, &auc, sizeof auc, 0));
    *reached = auc >= R->o->target_auc;
    return EMBER_OK;
}

static ember_status train_loop(run *R, train_result *res) {
    const train_options *o = R->o;
    const train_position *p = &R->start;
    const double run_t0 = app_now_s();
    char v[64];
    snprintf(v, sizeof v, "%lld", (long long)o->batch_size);
    // MLPerf's benchmark names: DLRM v1 (dot interaction) and DLRM-DCNv2.
    report_mllog(R, "POINT_IN_TIME", "submission_benchmark",
                 o->interaction == DLRM_INTERACTION_DCN ? "\"dlrm_dcnv2\"" : "\"dlrm\"", NULL);
    report_mllog(R, "POINT_IN_TIME", "global_batch_size", v, NULL);
    snprintf(v, sizeof v, "%.9g", (double)o->learning_rate);
    report_mllog(R, "POINT_IN_TIME", "opt_base_learning_rate", v, NULL);
    report_mllog(R, "INTERVAL_END", "init_stop", NULL, NULL);
    report_mllog(R, "INTERVAL_START", "run_start", NULL, NULL);
    bool reached = false;
    int64_t after = R->train.next; // the position after the last batch trained
    int64_t step = p->steps, samples = p->samples, last_eval = -1, last_save = R->resumed ? p->steps : -1;
    int64_t win_steps = 0;
    // win_wait, train_wait: the part of the steps' time spent waiting for this rank's data.
    double win_loss = 0.0, win_samples = 0.0, win_time = 0.0, train_time = 0.0, win_wait = 0.0, train_wait = 0.0;
    int32_t epoch = p->epoch, last_epoch = p->epoch;
    metrics_row last = {0}; // the last evaluation (rank 0's numbers are the run's)
    R->skipped_batches = p->skipped_batches;
    for (; epoch < o->epochs; epoch++) {
        // A resumed run goes on from its batch; every later epoch starts from the first.
        const bool resume_here = R->resumed && epoch == p->epoch;
        APP_TRY(ember_comm_agree(R->comm, resume_here ? source_seek(&R->train, p->next_batch)
                                                      : source_rewind(&R->train)));
        last_epoch = epoch;
        snprintf(v, sizeof v, "\"epoch_num\": %d", (int)epoch + 1);
        report_mllog(R, "INTERVAL_START", "epoch_start", NULL, v);
        lookahead ahead = {.what = FETCH_END};
        for (;;) {
            double t0 = app_now_s(), w0 = R->train.waited_s;
            fetched what;
            int64_t global;
            APP_TRY(next_batch(R, &ahead, &what, &global));
            if (what == FETCH_END) break;
            if (what == FETCH_SKIP) {
                R->skipped_batches++;
                continue;
            }
            const int64_t next = R->train.next; // the position after this batch
            after = next;
            if (o->overlap) APP_TRY(fetch_ahead(R, &ahead));
            double loss;
            APP_TRY(train_step(R, &ahead, global, &loss));
            if (res->step_loss && step < res->step_loss_cap) res->step_loss[step] = loss / (double)global;
            step++;
            samples += global;
            win_loss += loss;
            win_samples += (double)global;
            double dt = app_now_s() - t0, wait = R->train.waited_s - w0;
            win_time += dt;
            train_time += dt;
            win_wait += wait;
            train_wait += wait;
            win_steps++;
            report_progress(R, step, epoch, win_loss / win_samples, win_samples / win_time,
                            1e3 * win_wait / (double)win_steps);
            if (o->eval_interval > 0 && step % o->eval_interval == 0) {
                last = (metrics_row){.step = step, .epoch = epoch, .samples = samples,
                                     .train_loss = win_loss / win_samples, .samples_per_s = win_samples / win_time,
                                     .data_wait_ms = 1e3 * win_wait / (double)win_steps};
                APP_TRY(mllog_eval(R, &last, mllog_epoch(R, step, epoch)));
                APP_TRY(reached_target(R, last.eval_auc, &reached));
                if (reached) res->time_to_train = app_now_s() - run_t0;
                last_eval = step;
                win_loss = win_samples = win_time = win_wait = 0.0;
                win_steps = 0;
            }
            if (R->save_dir[0] && o->checkpoint_interval > 0 && step % o->checkpoint_interval == 0) {
                APP_TRY(run_save_checkpoint(R, epoch, step, samples, next, false));
                last_save = step;
            } else if (R->save_dir[0] && o->checkpoint_delta_interval > 0 && step % o->checkpoint_delta_interval == 0) {
                APP_TRY(run_save_checkpoint(R, epoch, step, samples, next, true));
                last_save = step;
            }
            if (reached) break;
            // Not after the last step: nothing would use the new placement.
            if (o->rebalance_every > 0 && step % o->rebalance_every == 0 && step != R->total_steps)
                APP_TRY(rebalance(R, step));
        }
        snprintf(v, sizeof v, "\"epoch_num\": %d", (int)epoch + 1);
        report_mllog(R, "INTERVAL_END", "epoch_stop", NULL, v);
        if (reached) break;
    }
    if (last_eval != step) {
        last = (metrics_row){.step = step, .epoch = last_epoch, .samples = samples,
                             .train_loss = win_samples > 0.0 ? win_loss / win_samples : NAN,
                             .samples_per_s = win_time > 0.0 ? win_samples / win_time : NAN,
                             .data_wait_ms = win_steps > 0 ? 1e3 * win_wait / (double)win_steps : NAN};
        APP_TRY(mllog_eval(R, &last, mllog_epoch(R, step, last_epoch)));
        APP_TRY(reached_target(R, last.eval_auc, &reached));
        if (reached) res->time_to_train = app_now_s() - run_t0;
    }
    res->target_reached = reached;
    report_mllog(R, "INTERVAL_END", "run_stop", NULL,
                 o->target_auc > 0.0 && !reached ? "\"status\": \"aborted\"" : "\"status\": \"success\"");
    // Stopped at the target, the batch fetched ahead (--overlap) was not trained: resume before it.
    if (R->save_dir[0] && step != last_save)
        APP_TRY(run_save_checkpoint(R, last_epoch, step, samples, reached ? after : R->train.next, false));
    res->steps = step;
    res->seconds = train_time;
    double final[2] = {last.eval_auc, last.eval_loss};
    APP_TRY(ember_comm_bcast(R->comm, final, sizeof final, 0));
    res->eval_auc = final[0];
    res->eval_loss = final[1];
    res->planted_auc = R->ev.planted_auc;
    APP_TRY(report_tier_stats(R));
    report_done(R, step, samples, train_time, train_wait, res);
    return EMBER_OK;
}

// The final state's hashes (--digest: printed by rank 0; two builds that train the same numbers
// print the same line) and the caller's copies of it: the dense parameters and optimizer state,
// every table's weights and optimizer state gathered in global coordinates. Collective.
static ember_status final_state(run *R, train_result *res) {
    dlrm_model *m = R->model;
    const int64_t np = dlrm_num_dense_params(m);
    const dense_optim *opt = dlrm_dense_optim(m);
    // Whether any rank wants the tables read (a collective), or copied to every rank.
    int64_t want[2] = {R->o->digest || res->tables || res->dense_state, res->tables != NULL};
    APP_TRY(ember_comm_allreduce_max_i64(R->comm, want, 2));
    uint64_t outputs = R->ev.digest;
    APP_TRY(ember_comm_bcast(R->comm, &outputs, sizeof outputs, 0));
    res->digest_losses = R->digest_losses;
    res->digest_outputs = outputs;
    res->digest_dense = digest_fold(DIGEST_SEED, dlrm_dense_params(m), sizeof(float) * (size_t)np);
    res->digest_tables = 0;
    res->dense_state_len = res->tables_len = 0;
    const float *dense[3] = {dlrm_dense_params(m), opt->m1, opt->m2};
    for (int i = 0; i < 3; i++) {
        if (!dense[i]) continue;
        for (int64_t k = 0; k < np && res->dense_state; k++) {
            if (res->dense_state_len + k < res->dense_state_cap)
                res->dense_state[res->dense_state_len + k] = dense[i][k];
        }
        res->dense_state_len += np;
    }
    if (!want[0]) return EMBER_OK;
    uint64_t tables = DIGEST_SEED;
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < DLRM_NUM_SPARSE && st == EMBER_OK && R->backend.read; t++) {
        ember_tensor_info info[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(&R->tables[t], info);
        for (int32_t k = 0; k < n && st == EMBER_OK; k++) {
            const size_t len = (size_t)info[k].rows * (size_t)info[k].cols;
            // A hashed table's id map is int64: in the digest, not in the float export.
            const bool i64 = info[k].dtype == EMBER_DTYPE_I64;
            const size_t es = i64 ? sizeof(int64_t) : sizeof(float);
            float *buf = app_alloc(R->ctx, es * len, "digest buffer");
            st = ember_comm_agree(R->comm, buf ? EMBER_OK : EMBER_ERR_NOMEM);
            if (st == EMBER_OK)
                st = R->backend.read(R->backend.impl, t, info[k].name, i64 ? EMBER_DTYPE_I64 : EMBER_DTYPE_F32, buf);
            if (st == EMBER_OK) tables = digest_fold(tables, buf, es * len);
            if (st == EMBER_OK && want[1] && !i64) st = ember_comm_bcast(R->comm, buf, sizeof(float) * len, 0);
            if (st == EMBER_OK && want[1] && !i64) {
                for (size_t i = 0; i < len && res->tables; i++) {
                    if (res->tables_len + (int64_t)i < res->tables_cap)
                        res->tables[res->tables_len + (int64_t)i] = buf[i];
                }
                res->tables_len += (int64_t)len;
            }
            ember_ctx_free(R->ctx, buf);
        }
    }
    APP_TRY(st);
    APP_TRY(ember_comm_bcast(R->comm, &tables, sizeof tables, 0)); // read gathers onto rank 0
    if (R->backend.read) res->digest_tables = tables;
    report_digest(R, res);
    return EMBER_OK;
}


// The embedding backend the factory makes (with the wire precision) and the dense model on it,
// and the save directory. Collective; every rank returns the same status.
static ember_status build_model(run *R, dlrm_backend_factory factory) {
    const train_options *o = R->o;
    ember_comm *comm = R->comm;
    ember_ebc_config ec = EMBER_EBC_CONFIG_DEFAULT;
    ec.tables = R->tables, ec.num_tables = DLRM_NUM_SPARSE, ec.features = R->features;
    ec.num_features = DLRM_NUM_SPARSE, ec.seed = o->seed, ec.max_batch_size = (int32_t)R->max_local;
    ec.max_nnz = DLRM_NUM_SPARSE * R->max_local, ec.ssd_dir = o->ssd_dir;
    ember_status st = factory(comm, &ec, R->plan, o->grad_convention, R->group, &R->backend);
    if (st == EMBER_OK && (o->wire_forward != EMBER_DTYPE_F32 || o->wire_backward != EMBER_DTYPE_F32 ||
                           o->wire_scale_forward != 1.0f || o->wire_scale_backward != 1.0f))
        st = R->backend.set_wire ? R->backend.set_wire(R->backend.impl, o->wire_forward, o->wire_backward,
                                                       o->wire_scale_forward, o->wire_scale_backward)
                                 : ember_ctx_set_error(R->ctx, EMBER_ERR_UNSUPPORTED,
                                                       "--wire_precision: this embedding backend sends fp32 only");
    // The backend is the same on every rank: these verdicts are too.
    if (st == EMBER_OK && R->resumed && !R->backend.load) {
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_UNSUPPORTED, "%s: this embedding backend cannot load checkpoints",
                                 R->eval_only ? "--load" : "--resume");
    }
    if (st == EMBER_OK && R->save_dir[0] && !R->backend.save) {
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_UNSUPPORTED, "--save_dir: this embedding backend cannot save "
                                                                "checkpoints");
    }
    if (st == EMBER_OK && R->save_dir[0]) {
        st = ember_comm_agree(comm, R->rank == 0 ? ckpt_make_save_dir(R->ctx, R->save_dir) : EMBER_OK);
    }
    if (st == EMBER_OK) {
        dlrm_config mc = run_model_config(o, R->max_local);
        st = ember_comm_agree(comm, dlrm_create(R->ctx, &mc, &R->backend, &R->model));
    }
    return st;
}

// Everything after the options are settled: placement, data, model, the checkpoint's state, then
// training (or one evaluation). Collective.
static ember_status run_model(run *R, dlrm_backend_factory factory, train_result *res) {
    const train_options *o = R->o;
    ember_comm *comm = R->comm;
    R->max_local = (o->batch_size + R->world - 1) / R->world;
    eval_init(&R->ev, comm, o->dataset == TRAIN_SYNTHETIC,
              R->max_local * (o->limit_val_batches ? o->limit_val_batches : 64));
    R->total_steps = o->limit_train_batches * o->epochs;

    // Everything that can fail on one rank only is agreed before the next collective.
    ember_status st = ember_comm_agree(comm, run_validate_options(R->ctx, o, R->world));
    if (st == EMBER_OK) st = run_join_host(R);
    if (st == EMBER_OK) {
        run_setup_tables(R);
        st = run_place_tables(R);
    }
    if (st == EMBER_OK) st = run_check_memory(R);
    // An export or a server reads no data set: the model is all they need.
    const bool data = !R->export_to && !R->serve_to;
    if (st == EMBER_OK && data) st = ember_comm_agree(comm, run_open_data(R));
    if (st == EMBER_OK && data) st = run_require_data(R);
    if (st == EMBER_OK) st = build_model(R, factory);
    if (st == EMBER_OK && R->resumed) st = run_restore(R);
    if (R->export_to) return st == EMBER_OK ? run_export(R) : st;
    if (R->serve_to) return st == EMBER_OK ? R->serve_to->serve(R) : st;
    if (st == EMBER_OK) st = start_loaders(R);
    const char *eval_path = o->eval_data_path ? o->eval_data_path : o->data_path;
    if (st == EMBER_OK && R->eval_only) {
        st = evaluate_once(R, res);
        stop_loaders(R);
        if (st == EMBER_OK) st = final_state(R, res);
        if (st == EMBER_OK) st = report_malformed(R, &R->eval, eval_path);
        return st;
    }
    if (st == EMBER_OK) {
        report_config(R);
        res->resumed_step = R->start.steps;
        st = train_loop(R, res);
        stop_loaders(R);
    }
    if (st == EMBER_OK) st = final_state(R, res);
    if (st == EMBER_OK) st = report_malformed(R, &R->train, o->data_path);
    if (st == EMBER_OK) st = report_malformed(R, &R->eval, eval_path);
    if (st == EMBER_OK) st = report_plot(R);
    return st;
}

ember_status train_run(ember_comm *comm, const train_options *o, dlrm_backend_factory factory, FILE *out,
                       train_result *res) {
    run R;
    begin(&R, comm, o, out, res);
    ember_status st = EMBER_OK;
    if (o->resume) {
        // The model must be the one the checkpoint holds, refused before anything is built.
        st = run_open_checkpoint(&R, "--resume", o->resume);
        if (st == EMBER_OK) st = ember_comm_agree(comm, trainstate_check(R.ctx, &R.ckpt, o));
    }
    if (st == EMBER_OK) {
        // Saving: --save_dir, else the save directory the resumed checkpoint lies in; interval and
        // count as given, else as the checkpoint's run had them, else the defaults.
        train_options *e = &R.opts;
        const char *dir = o->save_dir ? o->save_dir : R.resumed ? R.ckpt_save_dir : "";
        if (strlen(dir) >= sizeof R.save_dir) {
            st = ember_ctx_set_error(R.ctx, EMBER_ERR_INVALID_ARG, "--save_dir '%s': path too long", dir);
        } else {
            snprintf(R.save_dir, sizeof R.save_dir, "%s", dir);
        }
        if (o->checkpoint_interval > 0 && !R.save_dir[0]) {
            st = ember_ctx_set_error(R.ctx, EMBER_ERR_INVALID_ARG,
                                     "--checkpoint_interval %lld: give --save_dir DIR to save into",
                                     (long long)o->checkpoint_interval);
        }
        e->save_dir = R.save_dir[0] ? R.save_dir : NULL;
        if (e->checkpoint_interval < 0) e->checkpoint_interval = R.resumed ? R.ckpt.cfg.checkpoint_interval : 0;
        if (e->keep_checkpoints == 0) e->keep_checkpoints = R.resumed ? R.ckpt.cfg.keep_checkpoints
                                                                      : DEFAULT_KEEP_CHECKPOINTS;
        if (e->checkpoint_delta_interval < 0)
            e->checkpoint_delta_interval = R.resumed ? R.ckpt.cfg.checkpoint_delta_interval : 0;
        if (e->checkpoint_delta_interval < 0) e->checkpoint_delta_interval = 0; // an older checkpoint's: none
        st = ember_comm_agree(comm, st);
    }
    if (st == EMBER_OK) st = run_model(&R, factory, res);
    cleanup(&R);
    return st;
}

// ember eval, export and serve: the saved model at `load` rebuilt from its trainer.json (every option
// it records: its tables hashed or on disk as they were), placed by the planner for this world, no
// output files; `setup` adds the command's own options; then run_model runs what R's mode says
// (one evaluation, an export, a server). A serving bundle brings its quantized tables, whatever
// backend the factory makes; `bundles` false refuses one. R is begun by the caller.
typedef void (*saved_setup)(run *R, train_options *x, const void *arg);
static ember_status run_saved(run *R, const char *load, const char *threads_note, bool bundles,
                              dlrm_backend_factory factory, saved_setup setup, const void *arg, train_result *res) {
    R->eval_only = true;
    ember_status st = run_open_checkpoint(R, "--load", load);
    if (st == EMBER_OK && R->bundle && !bundles)
        st = ember_ctx_set_error(R->ctx, EMBER_ERR_INVALID_ARG, "--load '%s' is a serving bundle already: export "
                                 "from the training checkpoint it came from", R->ckpt_path);
    st = ember_comm_agree(R->comm, st);
    if (st == EMBER_OK && R->bundle) factory = dlrm_backend_quant_create;
    if (st == EMBER_OK) {
        train_options *x = &R->opts;
        trainstate_apply(&R->ckpt, x);
        x->checkpoint_interval = 0;
        x->checkpoint_delta_interval = 0;
        x->keep_checkpoints = 1;
        x->threads_note = threads_note;
        if (setup) setup(R, x, arg);
        st = run_model(R, factory, res);
    }
    cleanup(R);
    return st;
}

static void eval_setup(run *R, train_options *x, const void *arg) {
    const eval_options *e = arg;
    x->digest = e->digest;
    R->predictions = e->predictions;
    if (e->data_path) {
        R->eval_flag = "--data_path";
        x->dataset = TRAIN_CRITEO;
        x->data_path = x->eval_data_path = e->data_path;
        x->limit_val_batches = 0;
    }
    if (e->limit_val_batches >= 0) x->limit_val_batches = e->limit_val_batches;
}

ember_status eval_saved(ember_comm *comm, const eval_options *e, dlrm_backend_factory factory, FILE *out,
                        train_result *res) {
    train_options o;
    train_options_default(&o);
    o.loader_cpus = e->loader_cpus; // the checkpoint records neither (trainstate_apply keeps them)
    o.loader_shares_cpu = e->loader_shares_cpu;
    run R;
    begin(&R, comm, &o, out, res);
    return run_saved(&R, e->load, e->threads_note, true, factory, eval_setup, e, res);
}

ember_status export_saved(ember_comm *comm, const export_options *x, dlrm_backend_factory factory, FILE *out) {
    train_options o;
    train_options_default(&o);
    train_result res = {0};
    run R;
    begin(&R, comm, &o, out, &res);
    R.export_to = x;
    return run_saved(&R, x->load, x->threads_note, false, factory, NULL, NULL, &res);
}

// The model's workspace: one forward of at most max_batch samples.
static void serve_setup(run *R, train_options *x, const void *arg) {
    (void)R;
    x->batch_size = ((const serve_options *)arg)->max_batch;
}

ember_status serve_saved(ember_comm *comm, const serve_options *x, dlrm_backend_factory factory, FILE *out) {
    train_options o;
    train_options_default(&o);
    train_result res = {0};
    run R;
    begin(&R, comm, &o, out, &res);
    R.serve_to = x;
    return run_saved(&R, x->load, x->threads_note, true, factory, serve_setup, x, &res);
}
