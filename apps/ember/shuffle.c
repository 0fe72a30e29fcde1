// The joint shuffle of training days, through bucket files (shuffle.h).
#define _POSIX_C_SOURCE 200809L

#include "shuffle.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "appctx.h"
#include "batch.h"
#include "commands.h"
#include "ember/rng.h"
#include "criteo_npy.h"
#include "npy.h"

enum { DENSE = CRITEO_NPY_DENSE, SPARSE = CRITEO_NPY_SPARSE, LABELS = CRITEO_NPY_LABELS, FILES = CRITEO_NPY_FILES };

// One row as the bucket files hold it.
typedef struct row {
    float dense[DLRM_NUM_DENSE];
    int32_t sparse[DLRM_NUM_SPARSE];
    int32_t label;
} row;

int shuffle_days(const char *dir, int first_day, int days, uint64_t seed, int64_t memory_mb, FILE *out) {
    const double t0 = app_now_s();
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(NULL, &ctx) != EMBER_OK) return cmd_preprocess_fail("cannot create a context");
    npy_array (*in)[FILES] = calloc((size_t)days, sizeof *in);
    criteo_npy_writer *o = calloc((size_t)days, sizeof *o);
    int64_t *rows = calloc((size_t)days, sizeof *rows);
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s/shuffle.tmp", dir);
    int rc = in && o && rows ? 0 : cmd_preprocess_fail("out of memory");
    int64_t total = 0;
    for (int d = 0; rc == 0 && d < days; d++) {
        for (int k = 0; k < FILES && rc == 0; k++) {
            char p[1024];
            snprintf(p, sizeof p, "%s/day_%d_%s.npy", dir, first_day + d, criteo_npy_file[k]);
            if (npy_open(ctx, p, &in[d][k]) != EMBER_OK) {
                rc = cmd_preprocess_fail("%s", ember_ctx_errmsg(ctx));
                break;
            }
            const npy_array *a = &in[d][k];
            if (strcmp(a->descr, criteo_npy_descr[k]) != 0 || a->ndim != 2 || a->shape[1] != criteo_npy_cols[k] ||
                a->shape[0] != in[d][0].shape[0])
                rc = cmd_preprocess_fail("'%s': %s of shape (%lld, %lld): expected %s of shape (%lld, %d), as ember "
                                         "preprocess writes it", p, a->descr, (long long)a->shape[0],
                                         (long long)a->shape[1], criteo_npy_descr[k], (long long)in[d][0].shape[0],
                                         criteo_npy_cols[k]);
        }
        if (rc == 0) total += rows[d] = in[d][0].shape[0];
    }
    // Buckets: the expected bucket fits half the budget (the other half: slack for its variance).
    const int64_t budget = memory_mb << 20, per = (int64_t)sizeof(row);
    int64_t buckets = total * per / (budget / 2) + 1;
    if (buckets > 4096) buckets = 4096; // file handles; a bucket larger than the budget fails below
    FILE **bf = rc == 0 ? calloc((size_t)buckets, sizeof *bf) : NULL;
    if (rc == 0 && !bf) rc = cmd_preprocess_fail("out of memory");
    if (rc == 0 && mkdir(tmp, 0777) != 0 && errno != EEXIST)
        rc = cmd_preprocess_fail("'%s': cannot create: %s", tmp, strerror(errno));
    for (int64_t b = 0; rc == 0 && b < buckets; b++) {
        char p[1100];
        snprintf(p, sizeof p, "%s/bucket_%lld", tmp, (long long)b);
        if (!(bf[b] = fopen(p, "w+b"))) rc = cmd_preprocess_fail("'%s': cannot write: %s", p, strerror(errno));
        else unlink(p); // anonymous from now on: gone with the handle, even after a crash
    }
    // Pass 1: every row to its bucket.
    int64_t global = 0;
    for (int d = 0; rc == 0 && d < days; d++) {
        for (int64_t i = 0; i < rows[d]; i++, global++) {
            row r;
            memcpy(r.dense, in[d][DENSE].data + (size_t)i * sizeof r.dense, sizeof r.dense);
            memcpy(r.sparse, in[d][SPARSE].data + (size_t)i * sizeof r.sparse, sizeof r.sparse);
            memcpy(&r.label, in[d][LABELS].data + (size_t)i * sizeof r.label, sizeof r.label);
            ember_rng g = ember_rng_at(seed, 0, (uint64_t)global);
            const int64_t b = (int64_t)(ember_rng_next(&g) % (uint64_t)buckets);
            if (fwrite(&r, sizeof r, 1, bf[b]) != 1) {
                rc = cmd_preprocess_fail("'%s': cannot write a bucket file: %s", tmp, strerror(errno));
                break;
            }
        }
    }
    for (int d = 0; in && d < days; d++)
        for (int k = 0; k < FILES; k++) npy_close(&in[d][k]);
    // The outputs, then pass 2: bucket after bucket, shuffled, into the days in order.
    int opened = 0;
    for (; rc == 0 && opened < days; opened++) {
        if (criteo_npy_writer_open(&o[opened], dir, first_day + opened, criteo_npy_file[SPARSE]) != 0) {
            rc = cmd_preprocess_fail("%s", o[opened].error); // the loop's step counts it: removed below
        }
    }
    row *mem = NULL;
    int64_t largest = 0;
    int cur = 0;
    for (int64_t b = 0; rc == 0 && b < buckets; b++) {
        const long bytes = fseek(bf[b], 0, SEEK_END) == 0 ? ftell(bf[b]) : -1;
        const int64_t n = bytes / per;
        if (bytes < 0 || fseek(bf[b], 0, SEEK_SET) != 0) {
            rc = cmd_preprocess_fail("'%s': cannot read a bucket file: %s", tmp, strerror(errno));
            break;
        }
        if (n * per > budget) {
            rc = cmd_preprocess_fail("--shuffle_seed: a bucket of %lld rows (%lld MB) outgrew --memory_mb %lld: "
                                     "raise it", (long long)n, (long long)(n * per >> 20), (long long)memory_mb);
            break;
        }
        if (n > largest) {
            free(mem);
            mem = malloc((size_t)n * sizeof *mem);
            largest = mem ? n : 0;
            if (!mem) {
                rc = cmd_preprocess_fail("out of memory for a bucket of %lld rows", (long long)n);
                break;
            }
        }
        if (n > 0 && fread(mem, sizeof *mem, (size_t)n, bf[b]) != (size_t)n) {
            rc = cmd_preprocess_fail("'%s': cannot read a bucket file: %s", tmp, strerror(errno));
            break;
        }
        ember_rng g = ember_rng_at(seed, 1, (uint64_t)b);
        for (int64_t i = n - 1; i > 0; i--) { // Fisher-Yates
            const int64_t j = (int64_t)(ember_rng_next(&g) % (uint64_t)(i + 1));
            const row t = mem[i];
            mem[i] = mem[j];
            mem[j] = t;
        }
        for (int64_t i = 0; i < n && rc == 0; i++) {
            while (cur < days && o[cur].rows == rows[cur]) cur++;
            if (criteo_npy_writer_row(&o[cur], mem[i].dense, mem[i].sparse, mem[i].label) != 0)
                rc = cmd_preprocess_fail("%s", o[cur].error);
        }
    }
    free(mem);
    for (int64_t b = 0; bf && b < buckets; b++)
        if (bf[b]) fclose(bf[b]);
    free(bf);
    rmdir(tmp);
    // Every day complete before any replaces its input: a stop leaves the days as they were.
    for (int d = 0; rc == 0 && d < days; d++)
        if (criteo_npy_writer_close(&o[d]) != 0) rc = cmd_preprocess_fail("%s", o[d].error);
    for (int d = 0; rc == 0 && d < days; d++)
        if (criteo_npy_writer_commit(&o[d]) != 0) rc = cmd_preprocess_fail("%s", o[d].error);
    for (int d = 0; rc != 0 && d < opened; d++) criteo_npy_writer_abort(&o[d]);
    if (rc == 0) {
        fprintf(out, "shuffle: %lld rows of days %d..%d, seed %llu, %lld bucket%s of at most %lld rows, in %.2f s\n",
                (long long)total, first_day, first_day + days - 1, (unsigned long long)seed, (long long)buckets,
                buckets == 1 ? "" : "s", (long long)largest, app_now_s() - t0);
        fflush(out);
    }
    free(in);
    free(o);
    free(rows);
    ember_ctx_destroy(ctx);
    return rc;
}
