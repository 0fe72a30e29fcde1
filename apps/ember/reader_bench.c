// `ember bench reader`: the rows/s of the TorchRec day-file reader of `ember train --dataset
// criteo_npy` (criteo_npy.h), one process reading every training batch, from the page cache after
// a first untimed pass. bench/python/reader_ab.sh times TorchRec's InMemoryBinaryCriteoIterDataPipe
// on the same files beside it; both print a checksum of what they read (the sum of every id and
// label), the benchmark's correctness residual: equal checksums, the same batches.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "appctx.h"
#include "batch.h"
#include "cli.h"
#include "commands.h"
#include "criteo_npy.h"

static const char help[] =
    "usage: ember bench reader --data_dir DIR [options]\n"
    "Reads the training days of TorchRec's Criteo day files (days 0 .. last-1, as ember train's\n"
    "criteo_npy) batch after batch in one process and prints rows/s: an untimed pass, then --rounds\n"
    "timed ones. One JSON line per round with --json.\n"
    "  --data_dir DIR          day_{d}_dense.npy, day_{d}_sparse.npy, day_{d}_labels.npy\n"
    "  --batch_size N          rows per batch (default 2048)\n"
    "  --num_embeddings N      rows of every table: ids are v mod N (default 40000000)\n"
    "  --multi_hot_sizes L     read day_{d}_sparse_multi_hot.npz with these sizes (26 values or one)\n"
    "  --rounds N              timed passes (default 3)\n"
    "  --json                  JSON lines\n";

int reader_bench_main(int argc, char **argv) {
    const char *dir = NULL;
    int64_t batch = 2048, rows_all = 40000000, rounds = 3;
    int32_t hot[DLRM_NUM_SPARSE];
    bool multi = false, json = false;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) hot[f] = 1;
    char err[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        } else if (!v) {
            snprintf(err, sizeof err, "%s needs a value", a);
            ok = false;
        } else if (!strcmp(a, "--data_dir")) {
            dir = v;
        } else if (!strcmp(a, "--batch_size")) {
            ok = cli_parse_i64("--batch_size", v, 1, 1 << 24, &batch, err, sizeof err);
        } else if (!strcmp(a, "--num_embeddings")) {
            ok = cli_parse_i64("--num_embeddings", v, 1, (int64_t)1 << 48, &rows_all, err, sizeof err);
        } else if (!strcmp(a, "--rounds")) {
            ok = cli_parse_i64("--rounds", v, 1, 1000, &rounds, err, sizeof err);
        } else if (!strcmp(a, "--multi_hot_sizes")) {
            int64_t list[DLRM_NUM_SPARSE];
            int n = 0;
            ok = cli_parse_i64_list(a, v, 1, 1024, list, DLRM_NUM_SPARSE, &n, err, sizeof err);
            if (ok && n != 1 && n != DLRM_NUM_SPARSE) {
                snprintf(err, sizeof err, "--multi_hot_sizes: %d values, expected 1 or 26", n);
                ok = false;
            }
            for (int f = 0; ok && f < DLRM_NUM_SPARSE; f++) hot[f] = (int32_t)list[n == 1 ? 0 : f];
            multi = ok;
        } else {
            snprintf(err, sizeof err, "unknown option '%s'", a);
            ok = false;
        }
        if (!ok) {
            fprintf(stderr, "ember bench reader: %s (try --help)\n", err);
            return 2;
        }
        i++;
    }
    if (!dir) {
        fprintf(stderr, "ember bench reader: --data_dir DIR is missing (try --help)\n");
        return 2;
    }
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(NULL, &ctx) != EMBER_OK) return 1;
    int64_t rows[DLRM_NUM_SPARSE];
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) rows[f] = rows_all;
    const int32_t last = criteo_npy_last_day(dir);
    criteo_npy_config c = {.dir = dir, .rows = rows, .rank = 0, .world = 1, .global_batch = batch, .first_day = 0,
                           .num_days = last, .part = NPY_DAYS, .hot = multi ? hot : NULL};
    criteo_npy *r = NULL;
    dlrm_batch b;
    memset(&b, 0, sizeof b);
    int hot_total = 0;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) hot_total += hot[f];
    ember_status st = last >= 1 ? criteo_npy_open(ctx, &c, &r)
                                : ember_ctx_set_error(ctx, EMBER_ERR_IO, "'%s': fewer than 2 days (day_0, day_1 ...)",
                                                      dir);
    if (st == EMBER_OK) st = dlrm_batch_create(ctx, (int32_t)batch, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b);
    if (st == EMBER_OK && criteo_npy_multi_hot(r)) st = dlrm_batch_reserve_bags(ctx, &b, hot_total);
    for (int64_t round = 0; st == EMBER_OK && round <= rounds; round++) {
        criteo_npy_seek(r, 0);
        const double t0 = app_now_s();
        int64_t n = 0, sum = 0;
        bool eof = false;
        while (st == EMBER_OK) {
            st = criteo_npy_next(ctx, r, &b, &eof);
            if (eof || st != EMBER_OK) break;
            n += b.size;
            const int64_t *ids = b.has_bags ? b.bags : b.ids;
            const int64_t w = b.has_bags ? b.bag_width : DLRM_NUM_SPARSE;
            for (int64_t i = 0; i < (int64_t)b.size * w; i++) sum += ids[i];
            for (int32_t i = 0; i < b.size; i++) sum += (int64_t)b.labels[i];
        }
        const double s = app_now_s() - t0;
        if (st != EMBER_OK || round == 0) continue; // the first pass brings the files into the page cache
        if (json)
            printf("{\"bench\":\"reader\",\"impl\":\"ember\",\"round\":%lld,\"rows\":%lld,\"batch\":%lld,"
                   "\"multi_hot\":%s,\"seconds\":%.6f,\"rows_per_s\":%.1f,\"checksum\":%lld}\n",
                   (long long)round, (long long)n, (long long)batch, multi ? "true" : "false", s, (double)n / s,
                   (long long)sum);
        else
            printf("round %lld: %lld rows in %.3f s: %.0f rows/s (checksum %lld)\n", (long long)round, (long long)n, s,
                   (double)n / s, (long long)sum);
        fflush(stdout);
    }
    if (st != EMBER_OK) fprintf(stderr, "ember bench reader: error: %s\n", ember_ctx_errmsg(ctx));
    dlrm_batch_destroy(ctx, &b);
    criteo_npy_close(ctx, r);
    ember_ctx_destroy(ctx);
    return st == EMBER_OK ? 0 : 1;
}
