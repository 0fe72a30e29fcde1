// libFuzzer target: the Criteo TSV reader of the CLI (apps/ember/criteo.h) on a file holding the
// input's bytes after an 8-byte header that picks the reader's configuration.
//
// Header: world size (1..4), global batch (1..16), first line (0..3), lines used (0: all, or
// 1..15), malformed mode (skip / fatal), table sizes (1 row, small, or up to 2^63 - 1), the batch
// to seek to. The rest is written to a file in this process's directory on /dev/shm, once per
// input, and read:
//   1. by one reader of world size 1, batch after batch to the end (at most MAX_BATCHES), each
//      sample checked: label 0 or 1, dense features finite and >= 0 (log(1 + max(x, 0))), every
//      id inside its table, at most the rank's share of samples;
//   2. again after criteo_seek to the header's batch, and after criteo_rewind: the same samples;
//   3. by every rank of the header's world size (SKIP mode): the ranks' shares of each batch, in
//      rank order, are the world-1 batch, the same batches end the data on every rank, and the
//      malformed lines counted over the ranks are those world 1 counted. FATAL mode: a failure
//      is EMBER_ERR_FORMAT with a message.
#define _GNU_SOURCE // mkdtemp (fuzz_input.h)
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "batch.h"
#include "criteo.h"
#include "fuzz_input.h"

#define HEADER 8
#define MAX_BATCHES 256

static ember_ctx *ctx;
static char path[512];

static void quiet(void *user, ember_log_level level, const char *msg) { (void)user, (void)level, (void)msg; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    omp_set_num_threads(1); // one thread parses: reproducible, and 2 cores are shared
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.num_threads = 1;
    cc.log = quiet;
    const char *dir = fuzz_dir("criteo");
    if (!dir || ember_ctx_create(&cc, &ctx) != EMBER_OK) abort();
    snprintf(path, sizeof path, "%s/data.tsv", dir);
    return 0;
}

// One sample as the reader gives it.
typedef struct sample {
    float dense[DLRM_NUM_DENSE];
    int64_t ids[DLRM_NUM_SPARSE];
    float label;
} sample;

typedef struct run {
    sample *s;          // every sample of every batch, in order
    int64_t *first;     // [batches + 1] batch k is s[first[k] .. first[k + 1])
    int64_t n, cap, batches;
    bool ended;         // a batch reported eof (at index `batches`)
    ember_status st;    // the first failure
    int64_t malformed;
} run;

static void push(run *r, const dlrm_batch *b, int32_t i) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->s = realloc(r->s, sizeof(sample) * (size_t)r->cap);
        if (!r->s) abort();
    }
    sample *x = &r->s[r->n++];
    memset(x, 0, sizeof *x); // the padding too: samples are compared with memcmp
    memcpy(x->dense, b->dense + (size_t)i * DLRM_NUM_DENSE, sizeof x->dense);
    memcpy(x->ids, b->ids + (size_t)i * DLRM_NUM_SPARSE, sizeof x->ids);
    x->label = b->labels[i];
}

static void check_batch(const dlrm_batch *b, const int64_t *rows, int64_t share) {
    FUZZ_REQUIRE(b->size >= 0 && b->size <= share, "batch of %d samples, share %lld", (int)b->size, (long long)share);
    for (int32_t i = 0; i < b->size; i++) {
        FUZZ_REQUIRE(b->labels[i] == 0.0f || b->labels[i] == 1.0f, "label %g", (double)b->labels[i]);
        FUZZ_REQUIRE(isnan(b->planted[i]), "a planted logit on Criteo data");
        for (int j = 0; j < DLRM_NUM_DENSE; j++) {
            const float x = b->dense[(size_t)i * DLRM_NUM_DENSE + j];
            FUZZ_REQUIRE(isfinite(x) && x >= 0.0f, "dense feature %d: %g", j, (double)x);
        }
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
            const int64_t id = b->ids[(size_t)i * DLRM_NUM_SPARSE + f];
            FUZZ_REQUIRE(id >= 0 && id < rows[f], "feature %d: id %lld outside [0, %lld)", f, (long long)id,
                         (long long)rows[f]);
        }
    }
}

// Reads batches until the end, a failure or `limit` batches, appending to r.
static void read_all(criteo_reader *rd, dlrm_batch *b, const int64_t *rows, int64_t share, int64_t limit, run *r) {
    r->first = realloc(r->first, sizeof(int64_t) * (size_t)(limit + 2));
    if (!r->first) abort();
    r->first[0] = r->n;
    while (r->batches < limit) {
        bool eof = false;
        const ember_status st = criteo_next(rd, b, &eof);
        if (st != EMBER_OK) {
            FUZZ_REQUIRE(st == EMBER_ERR_FORMAT && ember_ctx_errmsg(ctx)[0], "criteo_next: %s", ember_status_name(st));
            r->st = st;
            return;
        }
        if (eof) {
            FUZZ_REQUIRE(b->size == 0, "eof with %d samples", (int)b->size);
            r->ended = true;
            return;
        }
        check_batch(b, rows, share);
        for (int32_t i = 0; i < b->size; i++) push(r, b, i);
        r->first[++r->batches] = r->n;
    }
}

static void run_free(run *r) {
    free(r->s);
    free(r->first);
}

// n samples of x from index i and of y from index j, bitwise (floats made from the same bytes).
static bool same(const run *x, int64_t i, const run *y, int64_t j, int64_t n) {
    return n == 0 || memcmp(x->s + i, y->s + j, sizeof(sample) * (size_t)n) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_bytes in = {data, size < HEADER ? size : HEADER};
    const int32_t world = 1 + fuzz_u8(&in) % 4;
    const int64_t G = 1 + fuzz_u8(&in) % 16;
    const int64_t first_line = fuzz_u8(&in) % 4;
    const uint8_t ml = fuzz_u8(&in);
    const int64_t max_lines = ml < 128 ? 0 : ml % 16;
    const criteo_malformed_mode mode = fuzz_u8(&in) % 4 == 3 ? CRITEO_FATAL : CRITEO_SKIP;
    const uint8_t rows_sel = fuzz_u8(&in);
    const uint8_t rows_seed = fuzz_u8(&in);
    const uint8_t seek_sel = fuzz_u8(&in);
    int64_t rows[DLRM_NUM_SPARSE];
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
        switch (rows_sel % 4) {
        case 0: rows[f] = 1; break;
        case 1: rows[f] = 1 + (f * 7 + rows_seed) % 97; break;
        case 2: rows[f] = INT64_MAX - f; break;
        default: rows[f] = (int64_t)1 << (f + rows_seed % 37); break;
        }
    }
    const size_t skip = size < HEADER ? size : HEADER;
    if (fuzz_write_file(path, data + skip, size - skip) != 0) abort();

    // 1. World size 1.
    criteo_config cfg = {path, rows, 0, 1, G, first_line, max_lines, mode, false};
    criteo_reader *rd = NULL;
    dlrm_batch b;
    if (criteo_open(ctx, &cfg, &rd) != EMBER_OK ||
        dlrm_batch_create(ctx, (int32_t)G, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b) != EMBER_OK)
        abort();
    run one = {0};
    read_all(rd, &b, rows, G, MAX_BATCHES, &one);
    one.malformed = criteo_get_stats(rd)->malformed;
    const criteo_stats *stats = criteo_get_stats(rd);
    FUZZ_REQUIRE(stats->num_lines >= 0 && stats->num_lines <= CRITEO_MAX_REPORTED &&
                     stats->num_lines <= stats->malformed,
                 "%d malformed lines listed of %lld", (int)stats->num_lines, (long long)stats->malformed);
    for (int32_t i = 1; i < stats->num_lines; i++)
        FUZZ_REQUIRE(stats->lines[i] > stats->lines[i - 1], "malformed lines listed out of order");
    if (mode == CRITEO_SKIP) FUZZ_REQUIRE(one.st == EMBER_OK, "a skipping reader failed");

    // 2. Seek to a batch read before (or to the end), then rewind: the same samples.
    if (one.st == EMBER_OK && one.batches > 0) {
        const int64_t k = seek_sel % (one.batches + 1);
        FUZZ_REQUIRE(criteo_seek(rd, k) == EMBER_OK, "seek");
        bool eof = false;
        FUZZ_REQUIRE(criteo_next(rd, &b, &eof) == EMBER_OK, "next after seek");
        if (k == one.batches) {
            FUZZ_REQUIRE(eof || !one.ended, "batch %lld after seek is not the end", (long long)k);
        } else {
            run again = {0};
            for (int32_t i = 0; i < b.size; i++) push(&again, &b, i);
            FUZZ_REQUIRE(!eof && again.n == one.first[k + 1] - one.first[k] &&
                             same(&again, 0, &one, one.first[k], again.n),
                         "batch %lld after seek differs", (long long)k);
            run_free(&again);
        }
        FUZZ_REQUIRE(criteo_rewind(rd) == EMBER_OK, "rewind");
        run again = {0};
        read_all(rd, &b, rows, G, one.batches, &again);
        FUZZ_REQUIRE(again.st == EMBER_OK && again.batches == one.batches && again.n == one.n &&
                         same(&again, 0, &one, 0, one.n),
                     "the second epoch differs");
        FUZZ_REQUIRE(criteo_get_stats(rd)->malformed == one.malformed, "malformed lines counted twice");
        run_free(&again);
    }
    criteo_close(ctx, rd);
    dlrm_batch_destroy(ctx, &b);

    // 3. Every rank of `world`: their shares, in rank order, are world 1's batches.
    if (world > 1) {
        run ranks[4] = {{0}};
        int64_t malformed = 0;
        for (int32_t r = 0; r < world; r++) {
            int64_t offset;
            const int64_t share = dlrm_share(G, r, world, &offset);
            criteo_config rc = {path, rows, r, world, G, first_line, max_lines, mode, false};
            if (criteo_open(ctx, &rc, &rd) != EMBER_OK ||
                dlrm_batch_create(ctx, share > 0 ? (int32_t)share : 1, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b) != EMBER_OK)
                abort();
            read_all(rd, &b, rows, share, one.batches + (one.ended ? 1 : 0), &ranks[r]);
            malformed += criteo_get_stats(rd)->malformed;
            criteo_close(ctx, rd);
            dlrm_batch_destroy(ctx, &b);
        }
        if (mode == CRITEO_SKIP) {
            for (int32_t r = 0; r < world; r++) {
                FUZZ_REQUIRE(ranks[r].st == EMBER_OK, "rank %d failed", (int)r);
                FUZZ_REQUIRE(ranks[r].batches == one.batches && ranks[r].ended == one.ended,
                             "rank %d of %d: %lld batches%s, world 1: %lld%s", (int)r, (int)world,
                             (long long)ranks[r].batches, ranks[r].ended ? " then the end" : "",
                             (long long)one.batches, one.ended ? " then the end" : "");
            }
            for (int64_t k = 0; k < one.batches; k++) {
                int64_t at = one.first[k];
                for (int32_t r = 0; r < world; r++) {
                    const int64_t n = ranks[r].first[k + 1] - ranks[r].first[k];
                    FUZZ_REQUIRE(at + n <= one.first[k + 1] && same(&ranks[r], ranks[r].first[k], &one, at, n),
                                 "batch %lld: rank %d of %d holds other samples than world 1", (long long)k, (int)r,
                                 (int)world);
                    at += n;
                }
                FUZZ_REQUIRE(at == one.first[k + 1], "batch %lld: the ranks hold %lld samples, world 1 %lld",
                             (long long)k, (long long)(at - one.first[k]),
                             (long long)(one.first[k + 1] - one.first[k]));
            }
            FUZZ_REQUIRE(malformed == one.malformed, "the ranks counted %lld malformed lines, world 1 %lld",
                         (long long)malformed, (long long)one.malformed);
        }
        for (int32_t r = 0; r < world; r++) run_free(&ranks[r]);
    }
    run_free(&one);
    FUZZ_REQUIRE(ember_ctx_bytes_outstanding(ctx) == 0, "%zu bytes left allocated", ember_ctx_bytes_outstanding(ctx));
    return 0;
}
