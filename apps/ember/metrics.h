// metrics.h — training metrics as CSV or JSON Lines, and loss/AUC curves drawn by gnuplot.
#ifndef EMBER_APP_METRICS_H
#define EMBER_APP_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "ember/core.h"

// One evaluation point. NaN fields are written as empty CSV cells / JSON null.
typedef struct metrics_row {
    int64_t step;         // training steps done
    int32_t epoch;        // 0-based epoch of the last step
    int64_t samples;      // training samples seen (global)
    double train_loss;    // mean BCE over the global training samples since the previous row
    double eval_loss;     // mean BCE over the global eval set
    double eval_auc;      // exact AUC over the global eval set
    double planted_auc;   // AUC of the planted model on the same set (synthetic data)
    double samples_per_s; // training throughput since the previous row (eval time excluded)
    double data_wait_ms;  // the part of those steps' time (mean per step, ms) rank 0 waited for
                          // its data: producing it inline, or for the loader thread
} metrics_row;

typedef enum metrics_format { METRICS_CSV = 0, METRICS_JSONL = 1 } metrics_format;

// The format from the file name: ".csv" or ".jsonl" (also ".json"); anything else is an error.
ember_status metrics_format_of(ember_ctx *ctx, const char *path, metrics_format *fmt);

typedef struct metrics_writer {
    FILE *file;
    metrics_format format;
} metrics_writer;

// Creates (truncates) the file and, for CSV, writes the header.
ember_status metrics_open(ember_ctx *ctx, const char *path, metrics_writer *w);
// Writes one row and flushes, so the file is useful while training runs.
ember_status metrics_write(ember_ctx *ctx, metrics_writer *w, const metrics_row *row);
void metrics_close(metrics_writer *w);

// Looks for `gnuplot` on PATH; returns EMBER_ERR_UNSUPPORTED with an installation hint if absent.
ember_status plot_check_gnuplot(ember_ctx *ctx);

// Draws train/eval loss and eval AUC (with the planted AUC as a reference line when known) against
// the step into png_path. Writes the data and the gnuplot script next to it (png_path + ".dat",
// png_path + ".gp", kept so the plot can be redrawn or restyled) and runs gnuplot on the script.
ember_status plot_write(ember_ctx *ctx, const char *png_path, const metrics_row *rows, int64_t n,
                        const char *title);

#endif
