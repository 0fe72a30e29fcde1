// run.h — one run of the DLRM driver (train.h), shared by its parts: train.c (the run's life and
// the step loop), run_setup.c (options, tables, memory and data, before the model exists),
// run_ckpt.c (checkpoints: save, open, restore) and report.c (everything printed or written
// besides checkpoints). Internal to them; the driver's interface is train.h.
#ifndef EMBER_APP_RUN_H
#define EMBER_APP_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <mpi.h>

#include "backend.h"
#include "batch.h"
#include "dlrm.h"
#include "eval.h"
#include "report.h"
#include "source.h"
#include "synth.h"
#include "train.h"
#include "train_topology.h"
#include "trainstate.h"

struct run {
    const train_options *o; // &opts
    train_options opts;     // the run's options: as given, with the checkpoint's filled in
    bool eval_only;         // ember eval --load: one evaluation of a saved model
    const export_options *export_to; // ember export: write a serving bundle instead of evaluating
    const serve_options *serve_to;   // ember serve: serve the model over HTTP instead of evaluating
    const char *predictions;         // ember eval --predictions PREFIX (eval.h)
    const char *eval_flag;  // the option that named the eval file, for messages (NULL: as train's)
    ember_comm *comm;
    ember_ctx *ctx;
    int32_t rank, world;
    MPI_Comm node;          // the ranks of this host
    int32_t node_size;
    int32_t group;          // 2D: ranks of a sharding group (--sharding_group_size resolved; 0: one group)
    int32_t node_leader;    // the world rank of this host's first rank
    int64_t max_local;      // largest rank share of a global batch
    synth *syn;
    source train, eval;
    dlrm_batch batch;
    dlrm_batch ahead;       // --overlap on: the next training batch, fetched before this step
    dlrm_backend backend;
    dlrm_model *model;
    ember_table_config tables[DLRM_NUM_SPARSE];
    ember_feature_config features[DLRM_NUM_SPARSE];
    ember_table_plan plan[DLRM_NUM_SPARSE];
    train_topology topo;    // hosts, bandwidths and the plan's predicted embedding step
    double *rank_speed;     // [W] --rebalance_every: each rank's measured speed so far (0: none yet)
    char table_names[DLRM_NUM_SPARSE][16];
    char feature_names[DLRM_NUM_SPARSE][16];
    int64_t *sizes;         // [W] shares of the current global batch
    evaluator ev;           // the eval set's outputs and AUCs
    report rep;             // rank 0's output: stream, progress, metrics rows (report.h)
    int64_t skipped_batches;
    int64_t total_steps;    // 0 when unknown (a Criteo file without --limit_train_batches)
    uint64_t digest_losses;  // --digest: every step's global loss, in order
    // Checkpoints.
    bool resumed;                          // the model starts from ckpt_path
    bool bundle;                           // ckpt_path is a serving bundle (ember eval --load)
    char ckpt_path[TRAINSTATE_PATH_MAX];   // the checkpoint resumed from (or loaded by ember eval)
    char ckpt_save_dir[TRAINSTATE_PATH_MAX]; // the save directory it lies in, or ""
    trainstate ckpt;                       // its trainer.json
    int64_t ckpt_generation;
    int32_t ckpt_world;
    char save_dir[TRAINSTATE_PATH_MAX];    // where this run saves, or "" for nowhere
    char delta_dir[TRAINSTATE_PATH_MAX + 32]; // the newest checkpoint this run saved in full: where a
                                           // delta goes (--checkpoint_delta_interval), or ""
    train_position start;                  // where training starts: zero, or the checkpoint's position
};


// ---- run_export.c: ember export ------------------------------------------------------------------

// Quantizes (and prunes) the restored model's tables and writes the serving bundle R->export_to
// asks for. Collective.
ember_status run_export(run *R);

// ---- serve.c: ember serve (linked into ember-serve alone) ---------------------------------------------

// Serves the restored model over HTTP as R->serve_to asks, until SIGINT or SIGTERM. One process.
ember_status run_serve(run *R);

// The dense model's configuration for a local batch of at most max_local samples.
dlrm_config run_model_config(const train_options *o, int64_t max_local);

// ---- run_setup.c: before the model exists ------------------------------------------------------

// Checks everything that depends only on the options (identical on every rank). Local.
ember_status run_validate_options(ember_ctx *ctx, const train_options *o, int32_t world);
// The table and feature configurations of the options (names, sizes, optimizer, initialisation,
// tiering and hashing). Local.
void run_setup_tables(run *R);
// This host's communicator, its size and its first world rank. Collective.
ember_status run_join_host(run *R);
// The tables' placement: a plan file, explicit schemes or the planner, with the hosts, bandwidths
// and the plan's predicted step (R->topo). Collective; every rank returns the same status.
ember_status run_place_tables(run *R);
// Checks that the ranks of each host fit in the host's available memory. Collective.
ember_status run_check_memory(run *R);
// The training and eval sources, the batch buffers and (rank 0) the metrics file. Local.
ember_status run_open_data(run *R);
// Whether the data sources read multi-hot bags (MLPerf's archives) rather than one id per feature.
bool run_data_has_bags(const run *R);
// Fails before training when a Criteo file has no usable sample in the lines it is read for,
// naming the option, the file and what it held. Collective; every rank returns the same status.
ember_status run_require_data(run *R);

// ---- run_ckpt.c: checkpoints -------------------------------------------------------------------

// Finds the checkpoint `dir` names for `flag` (rank 0 looks, every rank learns it) and reads its
// trainer state into R (resumed, ckpt_*, start). Collective.
ember_status run_open_checkpoint(run *R, const char *flag, const char *dir);
// Loads the opened checkpoint into the created model: the tables through the backend, the dense
// parameters and optimizer state, the digests' running values. Collective.
ember_status run_restore(run *R);
// Saves the run after `step` into save_dir/step-<step>/ and prunes the save directory to
// --keep_checkpoints; or with `delta`, the rows changed since into delta_dir (in full as above when
// this run has saved no full checkpoint yet). next_batch: the data position after `step`.
// Collective.
ember_status run_save_checkpoint(run *R, int32_t epoch, int64_t step, int64_t samples, int64_t next_batch,
                                 bool delta);

#endif
