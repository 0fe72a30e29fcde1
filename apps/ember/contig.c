// Contiguous categorical ids per feature over day files (contig.h).
#define _POSIX_C_SOURCE 200809L

#include "contig.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "appctx.h"
#include "batch.h"
#include "commands.h"
#include "ember/rng.h"
#include "npy.h"

#define F DLRM_NUM_SPARSE
#define HLL_BITS 12
#define HLL_M (1 << HLL_BITS)
#define MAX_LOAD 0.7

typedef struct slot {
    int32_t key;
    uint32_t count;
    int32_t id;    // 0: not assigned yet
    uint32_t used;
} slot;

typedef struct table {
    slot *s;
    uint64_t cap, n; // slots (a power of 2), used
} table;

typedef struct day_io {
    npy_array raw;
    int64_t rows;
    char final[1024], partial[1100];
    int fd;
    void *map;
    size_t map_bytes;
    int32_t *out; // [rows, F]
} day_io;

static uint64_t hash32(int32_t v) { return ember_splitmix64((uint64_t)(uint32_t)v); }

// HyperLogLog's estimate of the distinct values a register set saw.
static double hll_estimate(const uint8_t *reg) {
    double sum = 0.0;
    int zeros = 0;
    for (int i = 0; i < HLL_M; i++) {
        sum += ldexp(1.0, -reg[i]);
        zeros += reg[i] == 0;
    }
    const double m = HLL_M, e = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
    return e <= 2.5 * m && zeros > 0 ? m * log(m / zeros) : e;
}

static uint64_t pow2_at_least(double x) {
    uint64_t c = 1024;
    while ((double)c < x && c < ((uint64_t)1 << 40)) c <<= 1;
    return c;
}

static slot *find(table *t, int32_t key) {
    uint64_t i = hash32(key) & (t->cap - 1);
    while (t->s[i].used && t->s[i].key != key) i = (i + 1) & (t->cap - 1);
    return &t->s[i];
}

// Doubles t; false when the group's tables would pass the budget.
static bool grow(table *t, uint64_t *bytes, uint64_t budget) {
    const uint64_t more = t->cap * sizeof(slot);
    if (*bytes + more > budget) return false;
    table g = {.s = calloc(t->cap * 2, sizeof(slot)), .cap = t->cap * 2, .n = t->n};
    if (!g.s) return false;
    for (uint64_t i = 0; i < t->cap; i++)
        if (t->s[i].used) *find(&g, t->s[i].key) = t->s[i];
    free(t->s);
    *t = g;
    *bytes += more;
    return true;
}

// The slot of key in t, inserted if new; NULL when t cannot grow within the budget.
static slot *upsert(table *t, int32_t key, uint64_t *bytes, uint64_t budget) {
    slot *s = find(t, key);
    if (s->used) return s;
    if ((double)(t->n + 1) > MAX_LOAD * (double)t->cap) {
        if (!grow(t, bytes, budget)) return NULL;
        s = find(t, key);
    }
    s->used = 1;
    s->key = key;
    t->n++;
    return s;
}

static void close_days(day_io *io, int days, bool remove_partial) {
    for (int d = 0; d < days; d++) {
        npy_close(&io[d].raw);
        if (io[d].map) munmap(io[d].map, io[d].map_bytes);
        if (io[d].fd >= 0) close(io[d].fd);
        io[d].map = NULL;
        io[d].fd = -1;
        if (remove_partial && io[d].partial[0]) unlink(io[d].partial);
    }
}

// Opens the raw days and creates their mapped outputs.
static int open_days(const char *dir, int first_day, int days, day_io *io) {
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(NULL, &ctx) != EMBER_OK) return cmd_preprocess_fail("cannot create a context");
    int rc = 0;
    for (int d = 0; d < days && rc == 0; d++) {
        day_io *x = &io[d];
        char raw[1024];
        snprintf(raw, sizeof raw, "%s/day_%d_" CONTIG_RAW ".npy", dir, first_day + d);
        snprintf(x->final, sizeof x->final, "%s/day_%d_sparse.npy", dir, first_day + d);
        snprintf(x->partial, sizeof x->partial, "%s.partial", x->final);
        if (npy_open(ctx, raw, &x->raw) != EMBER_OK) {
            rc = cmd_preprocess_fail("%s", ember_ctx_errmsg(ctx));
            break;
        }
        if (x->raw.kind != 'i' || x->raw.itemsize != 4 || x->raw.ndim != 2 || x->raw.shape[1] != F) {
            rc = cmd_preprocess_fail("'%s': %s: expected int32 of shape (N, 26), as ember preprocess writes it", raw,
                                     x->raw.descr);
            break;
        }
        x->rows = x->raw.shape[0];
        FILE *f = fopen(x->partial, "wb");
        const size_t bytes = NPY_HEADER_BYTES + (size_t)x->rows * F * sizeof(int32_t);
        if (!f || npy_write_header(f, "<i4", x->rows, F) != 0 || fflush(f) != 0 ||
            ftruncate(fileno(f), (off_t)bytes) != 0) {
            rc = cmd_preprocess_fail("'%s': cannot write: %s", x->partial, strerror(errno));
            if (f) fclose(f);
            break;
        }
        fclose(f);
        x->fd = open(x->partial, O_RDWR | O_CLOEXEC);
        x->map_bytes = bytes;
        x->map = x->fd >= 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, x->fd, 0) : MAP_FAILED;
        if (x->map == MAP_FAILED) {
            x->map = NULL;
            rc = cmd_preprocess_fail("'%s': cannot map: %s", x->partial, strerror(errno));
            break;
        }
        x->out = (int32_t *)((char *)x->map + NPY_HEADER_BYTES);
    }
    ember_ctx_destroy(ctx);
    return rc;
}

static const int32_t *raw_row(const day_io *x, int64_t i) {
    return (const int32_t *)x->raw.data + (size_t)i * F;
}

int contig_remap(const char *dir, int first_day, int days, int64_t threshold, int64_t memory_mb, FILE *out) {
    const double t0 = app_now_s();
    day_io *io = calloc((size_t)days, sizeof *io);
    uint8_t *hll = calloc((size_t)F * HLL_M, 1);
    if (!io || !hll) {
        free(io);
        free(hll);
        return cmd_preprocess_fail("out of memory");
    }
    for (int d = 0; d < days; d++) io[d].fd = -1;
    int rc = open_days(dir, first_day, days, io);
    // Pass 0: each feature's distinct values, estimated.
    int64_t total = 0;
    for (int d = 0; rc == 0 && d < days; d++) {
        total += io[d].rows;
        for (int64_t i = 0; i < io[d].rows; i++) {
            const int32_t *r = raw_row(&io[d], i);
            for (int c = 0; c < F; c++) {
                const uint64_t h = hash32(r[c]) ^ (uint64_t)c * EMBER_RNG_GAMMA;
                const uint64_t z = ember_mix64(h);
                const int idx = (int)(z >> (64 - HLL_BITS));
                const uint64_t w = (z << HLL_BITS) | ((uint64_t)1 << (HLL_BITS - 1));
                const uint8_t rank = (uint8_t)(__builtin_clzll(w) + 1);
                uint8_t *reg = &hll[(size_t)c * HLL_M + (size_t)idx];
                if (rank > *reg) *reg = rank;
            }
        }
    }
    const uint64_t budget = (uint64_t)memory_mb << 20;
    uint64_t want[F];
    for (int c = 0; rc == 0 && c < F; c++) {
        const double est = hll_estimate(hll + (size_t)c * HLL_M);
        want[c] = pow2_at_least(est * 1.1 / MAX_LOAD) * sizeof(slot); // HLL's error is about 1.6%
        if (want[c] > budget) {
            rc = cmd_preprocess_fail("--frequency_threshold: feature cat_%d: about %.0f distinct values need %llu "
                                     "MB for their table; --memory_mb is %lld",
                                     c, est, (unsigned long long)(want[c] >> 20) + 1, (long long)memory_mb);
        }
    }
    int64_t max_id = 0;
    int groups = 0;
    for (int c0 = 0; rc == 0 && c0 < F; groups++) {
        // The group: features from c0 on while their estimated tables fit the budget.
        int c1 = c0;
        uint64_t bytes = 0;
        while (c1 < F && bytes + want[c1] <= budget) bytes += want[c1++];
        table t[F];
        memset(t, 0, sizeof t);
        for (int c = c0; c < c1 && rc == 0; c++) {
            t[c].cap = want[c] / sizeof(slot);
            t[c].s = calloc(t[c].cap, sizeof(slot));
            if (!t[c].s) rc = cmd_preprocess_fail("out of memory for the remap's tables");
        }
        // Pass 1 (T > 1): every value's count; pass 2: ids in order of first occurrence.
        for (int pass = threshold > 1 ? 1 : 2; rc == 0 && pass <= 2; pass++) {
            int32_t next[F];
            for (int c = 0; c < F; c++) next[c] = 2;
            for (int d = 0; rc == 0 && d < days; d++) {
                for (int64_t i = 0; rc == 0 && i < io[d].rows; i++) {
                    const int32_t *r = raw_row(&io[d], i);
                    for (int c = c0; c < c1; c++) {
                        slot *s = upsert(&t[c], r[c], &bytes, budget);
                        if (!s) {
                            rc = cmd_preprocess_fail("--frequency_threshold: feature cat_%d: more than %llu "
                                                     "distinct values do not fit --memory_mb %lld",
                                                     c, (unsigned long long)t[c].n, (long long)memory_mb);
                            break;
                        }
                        if (pass == 1) {
                            if (s->count < UINT32_MAX) s->count++;
                            continue;
                        }
                        if (s->id == 0) {
                            if (threshold > 1 && s->count < (uint64_t)threshold) {
                                s->id = 1;
                            } else if (next[c] == INT32_MAX) {
                                rc = cmd_preprocess_fail("--frequency_threshold: feature cat_%d: more than 2^31 "
                                                         "ids", c);
                                break;
                            } else {
                                s->id = next[c]++;
                            }
                        }
                        io[d].out[(size_t)i * F + (size_t)c] = s->id;
                        if (s->id > max_id) max_id = s->id;
                    }
                }
            }
        }
        uint64_t distinct = 0;
        for (int c = c0; c < c1; c++) {
            distinct += t[c].n;
            free(t[c].s);
        }
        if (rc == 0) {
            fprintf(out, "remap: features cat_%d..cat_%d: %llu distinct values, tables of %.1f MB\n", c0, c1 - 1,
                    (unsigned long long)distinct, (double)bytes / 1048576.0);
            fflush(out);
        }
        c0 = c1;
    }
    // The outputs in place, then the raw files gone.
    for (int d = 0; rc == 0 && d < days; d++) {
        if (msync(io[d].map, io[d].map_bytes, MS_SYNC) != 0 || fsync(io[d].fd) != 0)
            rc = cmd_preprocess_fail("'%s': cannot write: %s", io[d].partial, strerror(errno));
    }
    for (int d = 0; rc == 0 && d < days; d++) {
        if (rename(io[d].partial, io[d].final) != 0)
            rc = cmd_preprocess_fail("'%s': cannot rename into place: %s", io[d].partial, strerror(errno));
        else
            io[d].partial[0] = 0;
    }
    close_days(io, days, rc != 0);
    for (int d = 0; rc == 0 && d < days; d++) {
        char raw[1024];
        snprintf(raw, sizeof raw, "%s/day_%d_" CONTIG_RAW ".npy", dir, first_day + d);
        unlink(raw);
    }
    if (rc == 0) {
        fprintf(out, "remap: %lld rows of %d days, frequency threshold %lld, largest id %lld, %d group%s in %.2f s\n",
                (long long)total, days, (long long)threshold, (long long)max_id, groups, groups == 1 ? "" : "s",
                app_now_s() - t0);
        fflush(out);
    }
    free(io);
    free(hll);
    return rc;
}
