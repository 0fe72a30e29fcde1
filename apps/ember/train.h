// train.h — the DLRM training driver behind `ember train`: data, table plan, model, the step
// loop (evaluating through eval.h), metrics and the final report. cmd_train.c turns the command
// line into train_options; tests call train_run directly with any backend factory.
//
// Objective (docs/semantics.md §3): global batch g of G samples is split into contiguous rank shares
// B_r; rank r's loss is L_r = (W/G) sum_{i in share r} l_i, which is the mean over the local batch
// whenever the shares are equal, and under GRAD_MEAN makes J = (1/W) sum_r L_r the mean BCE over
// the global batch exactly, also for uneven shares (a last partial batch). The reported train
// loss is that global mean: sum over ranks of the local sums, divided by G.
//
// Checkpoints (docs/dlrm.md, Resume): with save_dir the run saves save_dir/step-<step>/ through
// the backend's save (the tables) with its own state as blobs (trainstate.h: configuration,
// position, dense parameters and optimizer state); with resume it refuses another model, loads
// all of it under any world size and plan, and trains on from the saved position: at the same
// world size the run then computes the uninterrupted run's bits.
#ifndef EMBER_APP_TRAIN_H
#define EMBER_APP_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "batch.h"
#include "criteo.h"
#include "dense_optim.h"
#include "dlrm.h"

#define TRAIN_MAX_LAYERS 16

// The synthetic set, a Criteo TSV file (criteo.h), TorchRec's Criteo day files (criteo_npy.h).
typedef enum train_dataset { TRAIN_SYNTHETIC = 0, TRAIN_CRITEO = 1, TRAIN_CRITEO_NPY = 2 } train_dataset;
#define TRAIN_DATASET_COUNT 3
// "synthetic", "criteo", "criteo_npy" ("unknown" outside the enum); parse is its inverse: EMBER_OK
// and *out set, or EMBER_ERR_INVALID_ARG (*out unchanged).
const char *train_dataset_name(train_dataset d);
ember_status train_dataset_parse(const char *name, train_dataset *out);

typedef struct train_options {
    // Model.
    int32_t embedding_dim;
    int64_t rows[DLRM_NUM_SPARSE];    // table size of each feature
    int32_t bottom[TRAIN_MAX_LAYERS]; // dense arch layer sizes (last == embedding_dim)
    int32_t num_bottom;
    int32_t top[TRAIN_MAX_LAYERS];    // over arch layer sizes (last == 1)
    int32_t num_top;
    dlrm_interaction interaction;     // --interaction dot (default) or dcn
    int32_t dcn_num_layers;           // dcn: cross layers (default 3, TorchRec's)
    int32_t dcn_low_rank_dim;         // dcn: their rank (default 512, TorchRec's)
    int32_t multi_hot[DLRM_NUM_SPARSE]; // ids per sample of each feature (--multi_hot_sizes, multihot.h;
                                      // default 1: the data's one id)
    multihot_dist multi_hot_dist;     // --multi_hot_distribution_type (default uniform)
    uint32_t dedup_features;          // bit f: feature f deduplicated per batch (--dedup_features, VBE)
    int sharding[DLRM_NUM_SPARSE];    // SHARDING_AUTO (all tables) or an ember_shard_scheme per table
    const char *plan_path;            // a plan file (planfile.h) instead of --sharding, or NULL
    ember_grad_convention grad_convention;
    ember_dtype wire_forward, wire_backward; // --wire_precision (default fp32: exact)
    float wire_scale_forward, wire_scale_backward; // --wire_loss_scale (default 1)
    int64_t rebalance_every;          // --rebalance_every: steps between re-plans (0: never)
    int32_t sharding_group_size;      // --sharding_group_size: 2D groups of G ranks (0: one group; -1: a host's)
    // Data.
    train_dataset dataset;
    const char *data_path;            // criteo: training file
    const char *eval_data_path;       // criteo: eval file; NULL: hold out the head of data_path
    double zipf_alpha;                // synthetic
    int32_t request_size;             // synthetic: samples per request (--candidates_per_request; 1: none)
    uint32_t user_features;           // synthetic: bit f: feature f is the same over a request's samples
    criteo_malformed_mode malformed;
    const char *data_dir;             // criteo_npy: the day files' directory
    int32_t train_days;               // criteo_npy: days [0, train_days) train, day train_days
                                      // evaluates (0: every day but the last)
    int eval_split;                   // criteo_npy: 0 the last day's first half (val), 1 its second (test)
    // Training.
    int64_t batch_size;               // global batch G
    int32_t epochs;
    int64_t limit_train_batches;      // global batches per epoch (0: the whole file; criteo only)
    int64_t limit_val_batches;        // eval global batches (0: the whole eval file; criteo only)
    int64_t eval_interval;            // steps between evaluations (0: only at the end)
    float learning_rate;              // dense
    float embedding_learning_rate;    // 0: learning_rate
    dense_optim_kind dense_optimizer;
    ember_optim_kind embedding_optimizer;
    uint64_t seed;
    double timeout_s;                 // every collective's deadline (ember_comm_set_timeout); 0: none
    bool overlap;                     // --overlap: prefetch the next batch's input dist and split the
                                      // embedding backward around the dense backward (bitwise the
                                      // same results; default on)
    int64_t num_generated_batches;    // synthetic: training batches generated before training and
                                      // cycled (global batch g is batch g mod N); 0: each one
                                      // generated when read
    int32_t prefetch_batches;         // --prefetch_batches: batches a loader thread per source
                                      // produces ahead of the step (0: inline on the main thread;
                                      // default -1: 2 unless loader_shares_cpu, then 0); the same
                                      // batches in the same order
    const char *loader_cpus;          // where the loader threads may run (a CPU list, threads.h's
                                      // threads_report.loader_cpus), or NULL: where the caller runs
    bool loader_shares_cpu;           // every CPU of the host has a rank's thread pinned to it, so a
                                      // loader would take turns with its rank's own (threads.h)
    double intra_gbps, inter_gbps;    // bandwidths for the planner, Gbit/s (0: probed)
    double disk_gbps;                 // tiered tables' files, Gbit/s for the planner (0: probed)
    // Tables beyond RAM and beyond fixed id ranges (docs/tiered.md, docs/hashed.md).
    uint32_t ssd_tables;              // bit f: table f lives on disk (--ssd_tables)
    int64_t cache_rows;               // its DRAM cache, rows (--cache_rows)
    ember_evict_policy cache_policy;
    const char *ssd_dir;              // NULL: $TMPDIR, else /tmp
    bool collisionless;               // --hash collisionless: raw categorical values as ids of
                                      // hashed tables of rows[f] rows (else modulo rows[f])
    ember_hash_config hash;           // bucket_rows, min_count, policy, ttl_steps of those tables
    int64_t synth_items;              // synthetic: distinct items per feature = rows * this (>= 1);
                                      // above 1 each item is a 64-bit key, hashed as above
    // Checkpoints (docs/dlrm.md, Resume; trainstate.h).
    const char *save_dir;             // saves DIR/step-<step, 10 digits>/ every checkpoint_interval
                                      // steps and at the end; NULL: none (but see resume)
    int64_t checkpoint_interval;      // steps between saves, 0: only at the end; -1 (default): the
                                      // resumed checkpoint's, else 0
    int32_t keep_checkpoints;         // committed checkpoints kept in save_dir, >= 1; 0 (default): the
                                      // resumed checkpoint's, else 3
    int64_t checkpoint_delta_interval;// steps between incremental saves (ember/state.h deltas: the rows
                                      // changed since) into the newest checkpoint this run saved in
                                      // full (a full one when there is none yet), 0: none; -1
                                      // (default): the resumed checkpoint's, else 0
    const char *resume;               // resume from this checkpoint directory, or from the latest
                                      // committed one of this save directory; NULL: start afresh.
                                      // Without save_dir, saving goes on into the save directory it
                                      // lies in (none for a checkpoint directory not named step-*)
    // Output.
    const char *metrics_path;         // .csv or .jsonl, NULL for none
    const char *mllog_path;           // MLPerf's :::MLLOG lines (rank 0), NULL for none
    double target_auc;                // stop at the first evaluation whose AUC reaches it (0: none)
    const char *plot_path;            // .png, NULL for none
    bool progress_bar;                // draw a progress bar on stderr, with carriage returns (for a
                                      // terminal), instead of a plain line a minute between
                                      // evaluations
    bool digest;                      // print hashes of the run's numbers at the end (--digest)
    const char *threads_note;         // how the threads were chosen and placed (threads.h), or NULL
} train_options;

// The defaults of `ember train` (the main job: see docs/dlrm.md for how they were chosen).
void train_options_default(train_options *o);
// `--preset mlperf_dcnv2` over them: MLPerf Training's recommendation benchmark (DLRM-DCNv2 on the
// Criteo 1TB multi-hot set) as its reference runs TorchRec's dlrm_main: D 128, its row caps and
// multi-hot sizes, the cross net, Adagrad at 0.004, batch 65536.
void train_options_mlperf_dcnv2(train_options *o);

typedef struct train_result {
    int64_t steps;
    double eval_auc;     // final, over the global eval set
    double eval_loss;
    double planted_auc;  // synthetic data; NaN otherwise
    double seconds;      // wall time of the training steps (evaluation excluded)
    bool target_reached; // --target_auc: an evaluation reached it (training stopped there)
    double time_to_train; // --target_auc: wall seconds from the first step to that evaluation's end
    double *step_loss;   // optional caller buffer: global train loss of step s at [s] (steps count
    int64_t step_loss_cap; // from the start of the run: a resumed run fills [resumed step, steps))
    int64_t resumed_step; // the step the run resumed at (0 when it started afresh)
    // The final state, as --digest prints it (FNV-1a, digest.h; set when o->digest, dense_state or
    // tables is given): every step's loss, the eval outputs, the dense parameters, every table's
    // weights and optimizer state in global coordinates.
    uint64_t digest_losses, digest_outputs, digest_dense, digest_tables;
    // Optional caller buffers, filled on every rank at the end: the dense parameters, then the
    // dense optimizer's m1 and m2 as it has them; every table in order, each tensor as
    // ember_table_tensors lists it ([rows, cols] fp32, global coordinates). *_len: the floats
    // the state has (written up to the capacity).
    float *dense_state;
    int64_t dense_state_cap, dense_state_len;
    float *tables;
    int64_t tables_cap, tables_len;
} train_result;

// Trains as configured. Every check that could fail on one rank only (files, memory, a malformed
// line) is agreed across ranks before the next collective, so every rank returns the same status
// and ember_ctx_errmsg names the failing rank. Rank 0 writes the configuration, progress and the
// report to `out` (NULL: silent) and writes the metrics and plot files.
// Collective on comm.
ember_status train_run(ember_comm *comm, const train_options *o, dlrm_backend_factory factory, FILE *out,
                       train_result *res);

// `ember eval --load`: a saved model on an eval set.
typedef struct eval_options {
    const char *load;          // a checkpoint directory, or a save directory (its latest checkpoint)
    const char *data_path;     // a Criteo TSV to evaluate on; NULL: the checkpoint's eval set (the
                               // synthetic eval split, or the run's Criteo eval data)
    int64_t limit_val_batches; // eval global batches; -1: the checkpoint's (with data_path: 0, the
                               // whole file)
    bool digest;               // print the digest line of the outputs and the loaded state
    const char *predictions;   // PREFIX: write PREFIX.inputs and PREFIX.probs (eval.h); one process
    double timeout_s;          // every collective's deadline (ember_comm_set_timeout); 0: none
    const char *threads_note;
    const char *loader_cpus;   // as train_options'
    bool loader_shares_cpu;    // as train_options'
} eval_options;

// What `ember export` is asked for (docs/serving.md).
typedef struct export_options {
    const char *load;      // a checkpoint directory, or a save directory (its latest checkpoint)
    const char *output;    // the bundle directory to write
    const char *quantize;  // "TYPE[,TABLE=TYPE...]": every table's storage, then exceptions
    double prune_below;    // rows whose L2 norm is below this are pruned (0: none)
    double timeout_s;      // every collective's deadline
    const char *threads_note;
} export_options;

// What `ember serve` is asked for (docs/serving.md).
struct run;
typedef struct serve_options {
    const char *load;        // a serving bundle (or a checkpoint: its fp32 tables)
    const char *host;        // IPv4 address to listen on
    int64_t port;            // 0: any free port (printed)
    int64_t max_batch;       // samples per forward of the model, at most
    int64_t max_wait_us;     // how long the first queued request waits for others
    int64_t max_body_bytes;  // a larger request body is refused (413)
    int64_t max_connections; // connections at once
    const char *threads_note;
    // The server (run_serve of serve.c, linked into ember-serve alone): run_model calls it with
    // the model restored.
    ember_status (*serve)(struct run *R);
} serve_options;

// Loads a bundle (as ember eval --load does) and serves it over HTTP until SIGINT or SIGTERM
// (serve.c): one process. Reports to `out`. Returns the status the server ended with.
ember_status serve_saved(ember_comm *comm, const serve_options *x, dlrm_backend_factory factory, FILE *out);

// Builds the checkpoint's model as eval_saved does, loads it, quantizes its tables and writes the
// serving bundle (include/ember/quant.h) with trainer.json and dense.params: rank 0 writes, the
// others take part in reading the tables. Rank 0 reports to `out`. Collective; every rank returns
// the same status.
ember_status export_saved(ember_comm *comm, const export_options *x, dlrm_backend_factory factory, FILE *out);

// Builds the checkpoint's model (its configuration from trainer.json, placed by the planner for
// this world size), loads it and evaluates it once: res gets eval_loss, eval_auc, planted_auc and
// the digests. Rank 0 reports to `out`. Collective on comm; every rank returns the same status.
ember_status eval_saved(ember_comm *comm, const eval_options *e, dlrm_backend_factory factory, FILE *out,
                        train_result *res);

#endif
