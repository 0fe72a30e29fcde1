// Metrics files and gnuplot curves.
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "appctx.h"
#include "metrics.h"

extern char **environ;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

ember_status metrics_format_of(ember_ctx *ctx, const char *path, metrics_format *fmt) {
    if (ends_with(path, ".csv")) *fmt = METRICS_CSV;
    else if (ends_with(path, ".jsonl") || ends_with(path, ".json")) *fmt = METRICS_JSONL;
    else return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "--metrics '%s': the name must end in .csv or .jsonl",
                                    path);
    return EMBER_OK;
}

ember_status metrics_open(ember_ctx *ctx, const char *path, metrics_writer *w) {
    memset(w, 0, sizeof *w);
    APP_TRY(metrics_format_of(ctx, path, &w->format));
    w->file = fopen(path, "w");
    if (!w->file) {
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "--metrics: cannot create '%s': %s", path, strerror(errno));
    }
    if (w->format == METRICS_CSV) {
        fprintf(w->file, "step,epoch,samples,train_loss,eval_loss,eval_auc,planted_auc,samples_per_s,data_wait_ms\n");
    }
    return EMBER_OK;
}

// A number, or the format's "missing" marker for NaN.
static void put(FILE *f, double v, const char *missing) {
    if (isnan(v)) fputs(missing, f);
    else fprintf(f, "%.9g", v);
}

ember_status metrics_write(ember_ctx *ctx, metrics_writer *w, const metrics_row *r) {
    static const char *names[] = {"train_loss",  "eval_loss",     "eval_auc",
                                  "planted_auc", "samples_per_s", "data_wait_ms"};
    const double vals[] = {r->train_loss,  r->eval_loss,     r->eval_auc,
                           r->planted_auc, r->samples_per_s, r->data_wait_ms};
    FILE *f = w->file;
    if (w->format == METRICS_CSV) {
        fprintf(f, "%lld,%d,%lld", (long long)r->step, (int)r->epoch, (long long)r->samples);
        for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
            fputc(',', f);
            put(f, vals[i], "");
        }
        fputc('\n', f);
    } else {
        fprintf(f, "{\"step\":%lld,\"epoch\":%d,\"samples\":%lld", (long long)r->step, (int)r->epoch,
                (long long)r->samples);
        for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
            fprintf(f, ",\"%s\":", names[i]);
            put(f, vals[i], "null");
        }
        fputs("}\n", f);
    }
    if (fflush(f) != 0 || ferror(f)) {
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "--metrics: write failed: %s", strerror(errno));
    }
    return EMBER_OK;
}

void metrics_close(metrics_writer *w) {
    if (w->file) fclose(w->file);
    w->file = NULL;
}

ember_status plot_check_gnuplot(ember_ctx *ctx) {
    const char *path = getenv("PATH");
    char buf[4096];
    for (const char *p = path ? path : ""; *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n > 0 && n + sizeof "/gnuplot" < sizeof buf) {
            memcpy(buf, p, n);
            memcpy(buf + n, "/gnuplot", sizeof "/gnuplot");
            if (access(buf, X_OK) == 0) return EMBER_OK;
        }
        p += n + (colon ? 1 : 0);
    }
    return ember_ctx_set_error(ctx, EMBER_ERR_UNSUPPORTED,
                               "--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
}

// Writes s as a gnuplot single-quoted string ('' stands for one quote).
static void put_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

ember_status plot_write(ember_ctx *ctx, const char *png_path, const metrics_row *rows, int64_t n,
                        const char *title) {
    APP_TRY(plot_check_gnuplot(ctx));
    size_t len = strlen(png_path);
    char *dat = app_alloc(ctx, 2 * (len + 8), "plot file names");
    if (!dat) return EMBER_ERR_NOMEM;
    char *gp = dat + len + 8;
    snprintf(dat, len + 8, "%s.dat", png_path);
    snprintf(gp, len + 8, "%s.gp", png_path);
    ember_status st = EMBER_OK;
    FILE *f = fopen(dat, "w");
    if (!f) {
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "--plot: cannot create '%s': %s", dat, strerror(errno));
        goto done;
    }
    bool planted = false;
    fprintf(f, "# step train_loss eval_loss eval_auc planted_auc\n");
    for (int64_t i = 0; i < n; i++) {
        const metrics_row *r = &rows[i];
        const double vals[] = {r->train_loss, r->eval_loss, r->eval_auc, r->planted_auc};
        fprintf(f, "%lld", (long long)r->step);
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
            fputc(' ', f);
            put(f, vals[k], "nan");
        }
        fputc('\n', f);
        planted = planted || !isnan(r->planted_auc);
    }
    fclose(f);
    f = fopen(gp, "w");
    if (!f) {
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "--plot: cannot create '%s': %s", gp, strerror(errno));
        goto done;
    }
    fputs("# Generated by `ember train --plot`; run `gnuplot <this file>` to redraw.\n", f);
    fputs("set terminal pngcairo size 1100,450 font ',10'\nset output ", f);
    put_quoted(f, png_path);
    fputs("\nset datafile missing 'nan'\nset grid\nset key bottom left\nset xlabel 'step'\n", f);
    fputs("set multiplot layout 1,2 title ", f);
    put_quoted(f, title);
    fputs("\nset ylabel 'BCE loss (mean)'\nplot ", f);
    put_quoted(f, dat);
    fputs(" using 1:2 with linespoints title 'train', '' using 1:3 with linespoints title 'eval'\n", f);
    fputs("set ylabel 'AUC'\nset key bottom right\nplot ", f);
    put_quoted(f, dat);
    fputs(" using 1:4 with linespoints title 'eval AUC'", f);
    if (planted) fputs(", '' using 1:5 with lines dashtype 2 title 'planted model AUC'", f);
    fputs("\nunset multiplot\n", f);
    if (fclose(f) != 0) {
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "--plot: cannot write '%s'", gp);
        goto done;
    }
    {
        pid_t pid;
        char *argv[] = {(char *)"gnuplot", gp, NULL};
        int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
        int status = 0;
        if (rc != 0) {
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "--plot: cannot run gnuplot: %s", strerror(rc));
        } else if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "--plot: gnuplot failed on '%s' (exit status %d)", gp,
                                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
    }
done:
    ember_ctx_free(ctx, dat);
    return st;
}
