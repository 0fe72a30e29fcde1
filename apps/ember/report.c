// What the DLRM driver prints and writes besides checkpoints (report.h).
#define _POSIX_C_SOURCE 200809L // clock_gettime (the MLPerf log's wall clock)

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "appctx.h"
#include "report.h"
#include "run.h"
#include "sharding.h"

// Seconds between plain progress lines when no evaluation line comes sooner.
#define PROGRESS_LINE_S 60.0

void report_begin(report *p, FILE *out, bool progress_bar) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->bar = out && progress_bar ? stderr : NULL;
}

ember_status report_open_metrics(run *R) {
    if (R->rank != 0) return EMBER_OK;
    if (R->o->mllog_path) {
        R->rep.mllog = fopen(R->o->mllog_path, "w");
        APP_CHECK(R->ctx, R->rep.mllog != NULL, EMBER_ERR_IO, "--mllog '%s': cannot create: %s", R->o->mllog_path,
                  strerror(errno));
        report_mllog(R, "INTERVAL_START", "init_start", NULL, NULL);
    }
    if (!R->o->metrics_path) return EMBER_OK;
    return metrics_open(R->ctx, R->o->metrics_path, &R->rep.metrics);
}

void report_mllog_at(const run *R, const char *file, int line, const char *type, const char *key, const char *value,
                     const char *meta) {
    FILE *f = R->rep.mllog;
    if (!f) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const char *base = strrchr(file, '/');
    fprintf(f,
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": %lld, \"event_type\": \"%s\", \"key\": \"%s\", "
            "\"value\": %s, \"metadata\": {\"file\": \"%s\", \"lineno\": %d%s%s}}\n",
            (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, type, key, value ? value : "null", base ? base + 1 : file,
            line, meta ? ", " : "", meta ? meta : "");
    fflush(f);
}

void report_free(ember_ctx *ctx, report *p) {
    metrics_close(&p->metrics);
    if (p->mllog) fclose(p->mllog);
    p->mllog = NULL;
    ember_ctx_free(ctx, p->rows);
    p->rows = NULL;
    p->num_rows = p->rows_cap = 0;
}

// ---- Before training ---------------------------------------------------------------------------

// The planner's line: hosts, bandwidths and the plan's predicted embedding step.
static void print_topology(const run *R, FILE *f) {
    const train_topology *t = &R->topo;
    fprintf(f, "  topology    %d host%s, intra-host %.2f Gbit/s (%s), inter-host %.2f Gbit/s (%s), round %.3f ms\n",
            (int)t->hosts, t->hosts == 1 ? "" : "s", t->intra_bw * 8 / 1e9,
            t->intra_given ? "given" : t->intra_bw > 0 ? "probed" : "none: one rank per host",
            t->inter_bw * 8 / 1e9, t->inter_given ? "given" : "probed", t->round_s * 1e3);
    if (t->disk_bw > 0) {
        char how[64];
        if (t->disk_given) snprintf(how, sizeof how, "given");
        else snprintf(how, sizeof how, "probed, %.1f MiB", (double)t->disk_probe_bytes / (1024.0 * 1024.0));
        fprintf(f, "  disk        %.0f MB/s to and from tiered tables' files in '%s' (%s)\n", t->disk_bw / 1e6,
                R->o->ssd_dir      ? R->o->ssd_dir
                : getenv("TMPDIR") ? getenv("TMPDIR")
                                   : "/tmp",
                how);
    }
    if (isnan(t->predicted_s)) fprintf(f, "  predicted   no embedding step prediction: %s\n", t->why_none);
    else fprintf(f, "  predicted   embedding step %.3f ms (planner, slowest rank)\n", t->predicted_s * 1e3);
}

// Every table's rows as built (a hashed table's rounded up to whole buckets) and placement.
static void print_tables(const run *R, FILE *f) {
    const train_options *o = R->o;
    double rows = 0.0;
    for (int t = 0; t < DLRM_NUM_SPARSE; t++) rows += (double)R->tables[t].rows;
    fprintf(f, "  tables      %d x dim %d, %.0f rows, %.1f MiB of fp32 weights:\n", DLRM_NUM_SPARSE,
            (int)o->embedding_dim, rows, rows * o->embedding_dim * 4.0 / (1024.0 * 1024.0));
    for (int t = 0; t < DLRM_NUM_SPARSE; t++) {
        const ember_table_plan *p = &R->plan[t];
        fprintf(f, "    %-9s %12lld rows  %-4s", R->table_names[t], (long long)R->tables[t].rows,
                sharding_name(p->scheme));
        const int n = p->num_ranks;
        if (n > 0) {
            fprintf(f, " rank%s", n > 1 ? "s" : "");
            for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : " ", (int)p->ranks[i]);
        } else {
            fprintf(f, " %s", p->scheme == EMBER_SHARD_DATA_PARALLEL ? "replicated" : "all ranks");
        }
        fputc('\n', f);
    }
    if (R->group > 0)
        fprintf(f, "  2D          the placement above (ranks of a group) in each of %d sharding groups of %d "
                   "consecutive ranks; the touched rows' gradients summed over the groups every step\n",
                (int)(R->world / R->group), (int)R->group);
}

// Where the run resumed from and where it saves.
static void print_checkpoints(const run *R, FILE *f) {
    const train_options *o = R->o;
    if (R->resumed) {
        const train_position *p = &R->start;
        fprintf(f, "  resume      '%s': step %lld, epoch %d, next batch %lld (written by %d rank%s, generation %lld)\n",
                R->ckpt_path, (long long)p->steps, (int)p->epoch, (long long)p->next_batch, (int)R->ckpt_world,
                R->ckpt_world > 1 ? "s" : "", (long long)R->ckpt_generation);
    }
    if (R->save_dir[0]) {
        fprintf(f, "  checkpoints ");
        if (o->checkpoint_interval > 0) fprintf(f, "every %lld steps and ", (long long)o->checkpoint_interval);
        fprintf(f, "at the end into '%s/step-*', keeping the newest %d", R->save_dir, (int)o->keep_checkpoints);
        if (o->checkpoint_delta_interval > 0)
            fprintf(f, "; deltas every %lld steps into the newest", (long long)o->checkpoint_delta_interval);
        fputc('\n', f);
    } else if (R->resumed) {
        fprintf(f, "  checkpoints none (the checkpoint is not in a save directory: --save_dir DIR saves)\n");
    }
}

// The features of a mask, "cat_0,cat_3" (all: "all 26").
static void print_features(FILE *f, uint32_t mask) {
    if (mask == (1u << DLRM_NUM_SPARSE) - 1) {
        fprintf(f, "all %d", DLRM_NUM_SPARSE);
        return;
    }
    for (int t = 0, k = 0; t < DLRM_NUM_SPARSE; t++)
        if (mask & (1u << t)) fprintf(f, "%scat_%d", k++ ? "," : "", t);
}

void report_config(run *R) {
    R->rep.last_line = app_now_s();
    FILE *f = R->rep.out;
    if (!f) return;
    const train_options *o = R->o;
    fprintf(f, "ember train: DLRM on %d rank%s x %d thread%s, gradient convention %s\n", (int)R->world,
            R->world > 1 ? "s" : "", (int)ember_ctx_num_threads(R->ctx),
            ember_ctx_num_threads(R->ctx) > 1 ? "s" : "", ember_grad_convention_name(o->grad_convention));
    if (o->threads_note) fprintf(f, "  threads     %s\n", o->threads_note);
    if (o->wire_forward != EMBER_DTYPE_F32 || o->wire_backward != EMBER_DTYPE_F32) {
        fprintf(f, "  wire        pooled outputs %s, their gradients %s between ranks",
                ember_dtype_name(o->wire_forward), ember_dtype_name(o->wire_backward));
        if (o->wire_scale_forward != 1.0f || o->wire_scale_backward != 1.0f)
            fprintf(f, " (loss scales %g, %g)", (double)o->wire_scale_forward, (double)o->wire_scale_backward);
        fputc('\n', f);
    }
    if (o->dedup_features) {
        fprintf(f, "  dedup       features ");
        print_features(f, o->dedup_features);
        fprintf(f, " looked up once per distinct bag of a rank's batch (variable batch per feature)\n");
    }
    if (o->dataset == TRAIN_SYNTHETIC) {
        fprintf(f, "  data        synthetic (13 dense, 26 sparse features), seed %llu, zipf alpha %g",
                (unsigned long long)o->seed, o->zipf_alpha);
        if (o->request_size > 1) {
            fprintf(f, "; requests of %d candidates sharing features ", (int)o->request_size);
            print_features(f, o->user_features);
        }
        fputc('\n', f);
    } else if (o->dataset == TRAIN_CRITEO_NPY) {
        fprintf(f, "  data        criteo day files in '%s': train %lld rows, eval %lld rows (%s split)\n", o->data_dir,
                R->train.npy ? (long long)criteo_npy_rows(R->train.npy) : 0LL,
                R->eval.npy ? (long long)criteo_npy_rows(R->eval.npy) : 0LL, o->eval_split ? "test" : "val");
    } else {
        fprintf(f, "  data        criteo '%s', eval ", o->data_path);
        if (o->eval_data_path) fprintf(f, "'%s'", o->eval_data_path);
        else fprintf(f, "its first %lld lines (held out)", (long long)(o->limit_val_batches * o->batch_size));
        fprintf(f, ", malformed lines %s\n", o->malformed == CRITEO_FATAL ? "fatal" : "skipped");
    }
    if (o->prefetch_batches > 0) {
        fprintf(f, "  loader      a thread per source produces %d batch%s ahead of the step (--prefetch_batches)",
                (int)o->prefetch_batches, o->prefetch_batches > 1 ? "es" : "");
        if (o->loader_cpus) fprintf(f, ", rank 0's on CPUs %s", o->loader_cpus);
        fputc('\n', f);
    } else {
        fprintf(f, "  loader      none: each batch is produced when the step needs it, on its threads "
                   "(--prefetch_batches 0: the default where every CPU has a rank's thread)\n");
    }
    char train_batches[32] = "all", val_batches[32] = "all";
    if (o->limit_train_batches) snprintf(train_batches, sizeof train_batches, "%lld", (long long)o->limit_train_batches);
    if (o->limit_val_batches) snprintf(val_batches, sizeof val_batches, "%lld", (long long)o->limit_val_batches);
    fprintf(f, "  batches     %lld global (%lld per rank at most); %d epoch%s of %s batches; eval on %s batches",
            (long long)o->batch_size, (long long)R->max_local, (int)o->epochs, o->epochs > 1 ? "s" : "",
            train_batches, val_batches);
    if (o->eval_interval) fprintf(f, " every %lld steps\n", (long long)o->eval_interval);
    else fprintf(f, " at the end\n");
    fprintf(f, "  model       dense arch %d", DLRM_NUM_DENSE);
    for (int l = 0; l < o->num_bottom; l++) fprintf(f, "-%d", (int)o->bottom[l]);
    const dlrm_config mc = run_model_config(o, R->max_local);
    const int width = (int)dlrm_interaction_width(&mc);
    if (o->interaction == DLRM_INTERACTION_DCN)
        fprintf(f, ", dcn interaction %d wide (%d cross layers of rank %d), over arch %d", width,
                (int)o->dcn_num_layers, (int)o->dcn_low_rank_dim, width);
    else
        fprintf(f, ", dot interaction %d, over arch %d", width, width);
    for (int l = 0; l < o->num_top; l++) fprintf(f, "-%d", (int)o->top[l]);
    fprintf(f, ": %lld dense parameters\n", (long long)dlrm_num_dense_params(R->model));
    bool multi = false, same = true;
    for (int t = 0; t < DLRM_NUM_SPARSE; t++) {
        multi = multi || o->multi_hot[t] != 1;
        same = same && o->multi_hot[t] == o->multi_hot[0];
    }
    if (multi) {
        fprintf(f, "  multi-hot   ids per sample ");
        if (same) fprintf(f, "%d for every feature", (int)o->multi_hot[0]);
        for (int t = 0; !same && t < DLRM_NUM_SPARSE; t++) fprintf(f, "%s%d", t ? "," : "", (int)o->multi_hot[t]);
        if (run_data_has_bags(R))
            fprintf(f, ": read from %s/day_*_sparse_multi_hot.npz (MLPerf's multi-hot archives)\n", o->data_dir);
        else
            fprintf(f, ": the data's id, then %s draws from a fixed per-row lookup (MLPerf's synthetic multi-hot)\n",
                    multihot_dist_name(o->multi_hot_dist));
    }
    fprintf(f, "  optimizers  dense %s lr %g, embeddings %s lr %g\n", dense_optim_name(o->dense_optimizer),
            (double)o->learning_rate, ember_optim_name(o->embedding_optimizer),
            (double)(o->embedding_learning_rate > 0.0f ? o->embedding_learning_rate : o->learning_rate));
    print_tables(R, f);
    print_topology(R, f);
    print_checkpoints(R, f);
    fflush(f);
}

// ---- During training ---------------------------------------------------------------------------

// Erases the progress bar's line, so that a line of the report starts at its left edge.
static void clear_bar(report *p) {
    if (!p->bar) return;
    fputs("\r\033[K", p->bar);
    fflush(p->bar);
}

void report_progress(run *R, int64_t step, int32_t epoch, double loss, double sps, double wait_ms) {
    report *p = &R->rep;
    if (!p->out) return;
    double t = app_now_s();
    char where[64];
    if (R->total_steps > 0) snprintf(where, sizeof where, "step %lld/%lld", (long long)step, (long long)R->total_steps);
    else snprintf(where, sizeof where, "step %lld", (long long)step);
    if (!p->bar) {
        if (t - p->last_line < PROGRESS_LINE_S) return;
        p->last_line = t;
        fprintf(p->out, "%s  epoch %d  train loss %.5f  %.0f samples/s  data wait %.3f ms/step\n", where, (int)epoch,
                loss, sps, wait_ms);
        fflush(p->out);
        return;
    }
    if (t - p->last_draw < 0.2 && step != R->total_steps) return;
    p->last_draw = t;
    fputs("\r\033[K", p->bar);
    if (R->total_steps > 0) {
        char bar[33];
        int fill = (int)(30 * step / R->total_steps);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(p->bar, "[%s] ", bar);
    }
    fprintf(p->bar, "%s  epoch %d  loss %.4f  %.0f samples/s", where, (int)epoch, loss, sps);
    fflush(p->bar);
}

// Rank 0: the row into the metrics file and the rows kept for the plot.
static ember_status record_row(run *R, const metrics_row *row) {
    report *p = &R->rep;
    if (p->metrics.file) APP_TRY(metrics_write(R->ctx, &p->metrics, row));
    if (p->num_rows == p->rows_cap) {
        int64_t cap = p->rows_cap ? 2 * p->rows_cap : 64;
        metrics_row *rows = app_alloc(R->ctx, sizeof *rows * (size_t)cap, "metrics rows");
        if (!rows) return EMBER_ERR_NOMEM;
        if (p->num_rows) memcpy(rows, p->rows, sizeof *rows * (size_t)p->num_rows);
        ember_ctx_free(R->ctx, p->rows);
        p->rows = rows;
        p->rows_cap = cap;
    }
    p->rows[p->num_rows++] = *row;
    return EMBER_OK;
}

ember_status report_eval(run *R, const metrics_row *row) {
    report *p = &R->rep;
    const ember_status st = R->rank == 0 ? record_row(R, row) : EMBER_OK;
    if (p->out) {
        clear_bar(p);
        p->last_line = app_now_s();
        fprintf(p->out, "step %6lld  epoch %d  train loss %.5f  eval loss %.5f  eval AUC %.4f", (long long)row->step,
                (int)row->epoch, row->train_loss, row->eval_loss, row->eval_auc);
        if (!isnan(row->planted_auc)) fprintf(p->out, " (planted %.4f)", row->planted_auc);
        if (!isnan(row->samples_per_s)) fprintf(p->out, "  %.0f samples/s", row->samples_per_s);
        if (!isnan(row->data_wait_ms)) fprintf(p->out, "  data wait %.3f ms/step", row->data_wait_ms);
        fputc('\n', p->out);
        fflush(p->out);
    }
    return ember_comm_agree(R->comm, st);
}

void report_checkpoint(run *R, const char *path, bool delta, double seconds, int32_t removed) {
    report *p = &R->rep;
    if (!p->out) return;
    clear_bar(p);
    fprintf(p->out, "checkpoint '%s' %s in %.2f s", path, delta ? "delta saved" : "saved", seconds);
    if (removed) fprintf(p->out, "; removed %d older", (int)removed);
    fputc('\n', p->out);
    fflush(p->out);
}

void report_rebalance(run *R, int64_t step, const double *speed, bool timed, double cur, double next, bool moved,
                      double bytes, double seconds) {
    report *p = &R->rep;
    if (!p->out) return;
    clear_bar(p);
    fprintf(p->out, "rebalance   step %lld: rank speeds", (long long)step);
    for (int32_t q = 0; q < R->world && q < 16; q++) fprintf(p->out, " %.2f", speed[q]);
    if (R->world > 16) fprintf(p->out, " ...");
    const double u = timed ? 1e3 : 1e-6;
    const char *unit = timed ? "ms" : "MB";
    fprintf(p->out, "; slowest rank's predicted load %.3g %s, %.3g %s with a new plan", cur * u, unit, next * u, unit);
    if (moved) fprintf(p->out, ": moved the tables (%.1f MB between ranks, %.3f s)\n", bytes * 1e-6, seconds);
    else fprintf(p->out, ": kept the plan (under 10%% better)\n");
    fflush(p->out);
}

// ---- After training ----------------------------------------------------------------------------

// Tiered tables' caches over the run (training and evaluation forwards), summed over ranks:
// hit rate, rows moved to and from the files, rows the prefetch asked the kernel to read ahead
// (--overlap on). One line for all of them, and one per table when there are few.
ember_status report_tier_stats(run *R) {
    enum { K = 5 };
    double v[DLRM_NUM_SPARSE][K] = {{0}}, tot[K] = {0};
    int n = 0;
    for (int32_t t = 0; t < DLRM_NUM_SPARSE; t++) {
        if (R->tables[t].cache_rows == 0 || !R->backend.tier_stats) continue;
        ember_tier_stats x;
        APP_TRY(R->backend.tier_stats(R->backend.impl, t, &x));
        v[t][0] = (double)x.hits, v[t][1] = (double)x.misses, v[t][2] = (double)x.prefetched;
        v[t][3] = (double)x.bytes_read, v[t][4] = (double)x.bytes_written;
        APP_TRY(ember_comm_allreduce_sum_f64(R->comm, v[t], K));
        for (int k = 0; k < K; k++) tot[k] += v[t][k];
        n++;
    }
    FILE *out = R->rep.out;
    if (n == 0 || !out) return EMBER_OK;
    fprintf(out,
            "tiered tables (%d): cache hit rate %.3f over %.0f row lookups, %.0f misses (%.0f read ahead by "
            "the prefetch), %.1f MB read from and %.1f MB written to their files\n",
            n, tot[0] + tot[1] > 0 ? tot[0] / (tot[0] + tot[1]) : 0.0, tot[0] + tot[1], tot[1], tot[2], tot[3] / 1e6,
            tot[4] / 1e6);
    for (int32_t t = 0; t < DLRM_NUM_SPARSE && n <= 4; t++)
        if (R->tables[t].cache_rows > 0)
            fprintf(out, "  %s: hit rate %.3f, %.0f misses (%.0f read ahead)\n", R->table_names[t],
                    v[t][0] + v[t][1] > 0 ? v[t][0] / (v[t][0] + v[t][1]) : 0.0, v[t][1], v[t][2]);
    return EMBER_OK;
}

void report_done(const run *R, int64_t step, int64_t samples, double train_time, double wait_time,
                 const train_result *res) {
    FILE *out = R->rep.out;
    if (!out) return;
    const train_position *p = &R->start;
    const int64_t run_samples = samples - p->samples;
    fprintf(out, "done: %lld steps", (long long)step);
    if (R->resumed) fprintf(out, " (%lld after resuming at step %lld)", (long long)(step - p->steps),
                            (long long)p->steps);
    fprintf(out, ", %lld samples in %.1f s of training (%.0f samples/s)\n", (long long)run_samples,
            train_time, train_time > 0.0 ? (double)run_samples / train_time : 0.0);
    if (step > p->steps) {
        fprintf(out, "step time: measured %.3f ms", train_time * 1e3 / (double)(step - p->steps));
        if (!isnan(R->topo.predicted_s))
            fprintf(out, ", predicted %.3f ms for the embeddings (planner)", R->topo.predicted_s * 1e3);
        // Whether the data is on the critical path: the part of a step rank 0 waited for its share
        // (produced inline, or not yet ready on the loader thread).
        fprintf(out, "; waiting for data %.3f ms of it (%.1f%%)", wait_time * 1e3 / (double)(step - p->steps),
                train_time > 0.0 ? 100.0 * wait_time / train_time : 0.0);
        fputc('\n', out);
    }
    if (R->o->dedup_features && R->model) {
        int64_t all, kept;
        dlrm_dedup_counts(R->model, &all, &kept);
        if (kept > 0)
            fprintf(out, "dedup: %lld of %lld bags of the deduplicated features looked up on rank 0 (1 in %.1f)\n",
                    (long long)kept, (long long)all, (double)all / (double)kept);
    }
    fprintf(out, "eval AUC %.4f", res->eval_auc);
    if (!isnan(res->planted_auc)) {
        fprintf(out, "   planted model AUC %.4f (gap %.4f)", res->planted_auc, res->planted_auc - res->eval_auc);
    }
    fprintf(out, "   eval loss %.5f\n", res->eval_loss);
    if (R->o->target_auc > 0.0) {
        if (res->target_reached)
            fprintf(out, "target AUC %.5f reached at step %lld: time to train %.2f s (steps and evaluations)\n",
                    R->o->target_auc, (long long)step, res->time_to_train);
        else
            fprintf(out, "target AUC %.5f not reached in %lld steps (last eval AUC %.5f)\n", R->o->target_auc,
                    (long long)step, res->eval_auc);
    }
    if (R->skipped_batches) {
        fprintf(out, "skipped %lld global batch(es) without a usable line\n", (long long)R->skipped_batches);
    }
}

void report_digest(const run *R, const train_result *res) {
    if (!R->o->digest || !R->rep.out) return;
    fprintf(R->rep.out, "digest: losses %016llx outputs %016llx dense %016llx tables %016llx\n",
            (unsigned long long)res->digest_losses, (unsigned long long)res->digest_outputs,
            (unsigned long long)res->digest_dense, (unsigned long long)res->digest_tables);
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Rank 0: the line of report_malformed from every rank's counts and first lines.
static void print_malformed(FILE *out, const char *path, const criteo_stats *all, int32_t world, int64_t *lines) {
    int64_t total = 0, n = 0;
    int first = -1;
    for (int32_t r = 0; r < world; r++) {
        total += all[r].malformed;
        for (int i = 0; i < all[r].num_lines; i++) lines[n++] = all[r].lines[i];
        if (all[r].num_lines > 0 && (first < 0 || all[r].lines[0] < all[first].lines[0])) first = r;
    }
    qsort(lines, (size_t)n, sizeof *lines, by_value);
    if (n > CRITEO_MAX_REPORTED) n = CRITEO_MAX_REPORTED;
    if (total == 0) return;
    fprintf(out, "criteo: skipped %lld malformed line%s of '%s': line%s", (long long)total, total > 1 ? "s" : "", path,
            total > 1 ? "s" : "");
    for (int64_t i = 0; i < n; i++) fprintf(out, "%s%lld", i ? ", " : " ", (long long)lines[i]);
    fprintf(out, "%s (line %lld: %s)\n", total > n ? ", ..." : "", (long long)all[first].lines[0],
            all[first].first_reason);
}

ember_status report_malformed(run *R, const source *s, const char *path) {
    if (!s->reader) return EMBER_OK;
    const size_t W = (size_t)R->world;
    criteo_stats *all = app_alloc(R->ctx, sizeof(criteo_stats) * W, "malformed line report");
    int64_t *lines = app_alloc(R->ctx, sizeof(int64_t) * W * CRITEO_MAX_REPORTED, "malformed line report");
    ember_status st = ember_comm_agree(R->comm, all && lines ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st == EMBER_OK) st = source_gather_stats(R->comm, s, all);
    if (st == EMBER_OK && R->rep.out) print_malformed(R->rep.out, path, all, R->world, lines);
    ember_ctx_free(R->ctx, all);
    ember_ctx_free(R->ctx, lines);
    return st;
}

ember_status report_plot(run *R) {
    const train_options *o = R->o;
    if (!o->plot_path) return EMBER_OK;
    ember_status plot = EMBER_OK;
    if (R->rank == 0) {
        char title[128];
        snprintf(title, sizeof title, "ember train: DLRM, %s data, %d rank%s",
                 train_dataset_name(o->dataset), (int)R->world, R->world > 1 ? "s" : "");
        plot = plot_write(R->ctx, o->plot_path, R->rep.rows, R->rep.num_rows, title);
        if (plot == EMBER_OK && R->rep.out) fprintf(R->rep.out, "plot: %s\n", o->plot_path);
    }
    return ember_comm_agree(R->comm, plot);
}

// ---- ember eval --------------------------------------------------------------------------------

void report_eval_header(const run *R) {
    FILE *out = R->rep.out;
    if (!out) return;
    const train_options *o = R->o;
    const train_position *p = &R->start;
    if (R->bundle)
        fprintf(out, "ember eval: '%s': serving bundle (quantized tables) of DLRM after %lld steps (epoch %d); on %d "
                     "rank%s\n",
                R->ckpt_path, (long long)p->steps, (int)p->epoch, (int)R->world, R->world > 1 ? "s" : "");
    else
        fprintf(out, "ember eval: '%s': DLRM after %lld steps (epoch %d), written by %d rank%s; on %d rank%s\n",
                R->ckpt_path, (long long)p->steps, (int)p->epoch, (int)R->ckpt_world, R->ckpt_world > 1 ? "s" : "",
                (int)R->world, R->world > 1 ? "s" : "");
    if (o->dataset == TRAIN_SYNTHETIC) {
        fprintf(out, "  data        synthetic eval split, seed %llu, zipf alpha %g: %lld global batches of %lld\n",
                (unsigned long long)o->seed, o->zipf_alpha, (long long)o->limit_val_batches, (long long)o->batch_size);
    } else if (o->dataset == TRAIN_CRITEO_NPY) {
        fprintf(out, "  data        criteo day files in '%s', the %s split (%lld rows) in global batches of %lld\n",
                o->data_dir, o->eval_split ? "test" : "val", R->eval.npy ? (long long)criteo_npy_rows(R->eval.npy) : 0LL,
                (long long)o->batch_size);
    } else {
        const char *path = o->eval_data_path ? o->eval_data_path : o->data_path;
        fprintf(out, "  data        criteo '%s', ", path);
        if (o->limit_val_batches) {
            fprintf(out, "%s%lld global batches of %lld\n", o->eval_data_path ? "" : "its held-out first ",
                    (long long)o->limit_val_batches, (long long)o->batch_size);
        } else {
            fprintf(out, "the whole file in global batches of %lld\n", (long long)o->batch_size);
        }
    }
    fflush(out);
}

void report_eval_result(const run *R, const train_result *res) {
    FILE *out = R->rep.out;
    if (!out) return;
    fprintf(out, "eval loss %.5f  eval AUC %.4f", res->eval_loss, res->eval_auc);
    if (!isnan(res->planted_auc)) fprintf(out, "  (planted model AUC %.4f)", res->planted_auc);
    fputc('\n', out);
    fflush(out);
}
