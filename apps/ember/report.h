// report.h — what `ember train` and `ember eval` print and write besides checkpoints: the
// configuration block, the progress bar or lines, one line per evaluation with its metrics row
// (--metrics file, and the rows kept for --plot), the checkpoint lines, the end-of-run summary
// (steps, throughput, measured against predicted step time, final AUC), the tiered tables' cache
// line, the --digest line, the malformed lines of Criteo files and the plot.
//
// Rank 0 prints, to rep.out (NULL elsewhere, or when the caller passed no stream); the progress
// bar goes to stderr. Functions marked Collective gather numbers from every rank (or agree on a
// file's status) and must be called by every rank; the others are Local and do nothing where
// rep.out is NULL.
#ifndef EMBER_APP_REPORT_H
#define EMBER_APP_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ember/core.h"
#include "metrics.h"
#include "source.h"
#include "train.h"

typedef struct run run; // run.h

typedef struct report {
    FILE *out;              // rank 0's report stream; NULL elsewhere or when silent
    FILE *bar;              // where the progress bar is drawn (stderr), or NULL: plain lines
    double last_draw;       // progress bar refresh time
    double last_line;       // when the last progress or evaluation line was printed
    metrics_writer metrics; // --metrics (rank 0)
    FILE *mllog;            // --mllog (rank 0)
    metrics_row *rows;      // [rows_cap] every evaluation (rank 0), for the plot
    int64_t num_rows, rows_cap;
} report;

// Rank 0's stream `out` (NULL on the other ranks), with the progress bar on stderr when asked.
void report_begin(report *p, FILE *out, bool progress_bar);
// Rank 0 with --metrics or --mllog: creates the files. Local.
ember_status report_open_metrics(run *R);
// --mllog: one of MLPerf's log lines, `:::MLLOG {"namespace": "", "time_ms": T, "event_type": TYPE,
// "key": KEY, "value": VALUE, "metadata": {"file": ..., "lineno": ..., META}}` with T the wall
// clock in ms, TYPE POINT_IN_TIME, INTERVAL_START or INTERVAL_END, VALUE and META JSON text
// (VALUE NULL: null; META NULL: none). Rank 0; nothing elsewhere or without --mllog.
#define report_mllog(R, type, key, value, meta) report_mllog_at((R), __FILE__, __LINE__, (type), (key), (value), (meta))
void report_mllog_at(const run *R, const char *file, int line, const char *type, const char *key, const char *value,
                     const char *meta);
void report_free(ember_ctx *ctx, report *p);

// The configuration block before training: ranks and threads, data and its loader, batches, model, optimizers,
// every table's placement, the topology and predicted step, resume point and checkpoints.
void report_config(run *R);
// After each step: the progress bar (redrawn at most 5 times a second), or a plain line at most
// once a minute without an evaluation line; sps and wait_ms (the time a step waited for its data,
// in ms) over the steps since the last evaluation.
void report_progress(run *R, int64_t step, int32_t epoch, double loss, double sps, double wait_ms);
// One evaluation: written to the metrics file, kept for the plot and printed. Collective (the
// metrics file's status is agreed).
ember_status report_eval(run *R, const metrics_row *row);
// A committed checkpoint (or a delta into one): its path, the time the save took and the older
// ones removed.
void report_checkpoint(run *R, const char *path, bool delta, double seconds, int32_t removed);
// --rebalance_every: the ranks' measured speeds, the slowest rank's predicted load under the plan
// and the one proposed (ms when time is modelled, else MB), and whether the tables moved (bytes
// moved between ranks, all ranks, and the slowest rank's seconds). Rank 0 prints.
void report_rebalance(run *R, int64_t step, const double *speed, bool timed, double cur, double next, bool moved,
                      double bytes, double seconds);
// The tiered tables' caches over the run, summed over ranks. Collective.
ember_status report_tier_stats(run *R);
// The end of training: steps and samples (since the resume), throughput, measured step time
// beside the planner's prediction and the part of it rank 0 waited for its data (wait_time of
// train_time), the final eval AUC (and the planted model's), skipped batches.
void report_done(const run *R, int64_t step, int64_t samples, double train_time, double wait_time,
                 const train_result *res);
// --digest: the hashes of the final state (res->digest_*).
void report_digest(const run *R, const train_result *res);
// The malformed lines every rank met in Criteo source `s` of file `path`. Collective.
ember_status report_malformed(run *R, const source *s, const char *path);
// --plot: rank 0 draws the evaluations' curves. Collective (its status is agreed).
ember_status report_plot(run *R);
// ember eval --load: the checkpoint and the eval data before the evaluation, the result after.
void report_eval_header(const run *R);
void report_eval_result(const run *R, const train_result *res);

#endif
