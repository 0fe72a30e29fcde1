// DLRM data: the synthetic generator (determinism, world-size independence, Zipf shape, planted
// model), the Criteo TSV reader on generated files (transforms, empty fields, malformed lines
// with their numbers, rank shares, windows, rewinds, NUL bytes, the line-length limit, dense text
// that is not an integer) and the check of every batch's dense features for NaN and infinities.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"
#include "criteo.h"
#include "multihot.h"
#include "naive_dlrm.h"
#include "source.h"
#include "synth.h"

static const int64_t small_rows[DLRM_NUM_SPARSE] = {10,   200,  3000, 1,    50,  7,     100000, 20, 2,
                                                    1000, 40,   5,    600,  30,  9,     8000,   11, 3,
                                                    70,   4000, 25,   13,   300, 50000, 6,      90};

static synth_config synth_cfg(uint64_t seed, const int64_t *rows, double alpha) {
    return (synth_config){.seed = seed,
                          .num_dense = DLRM_NUM_DENSE,
                          .num_sparse = DLRM_NUM_SPARSE,
                          .rows = rows,
                          .zipf_alpha = alpha,
                          .dense_scale = SYNTH_DENSE_SCALE,
                          .sparse_scale = SYNTH_SPARSE_SCALE,
                          .bias = SYNTH_BIAS};
}

static bool same_sample(const dlrm_batch *a, int32_t i, const dlrm_batch *b, int32_t j) {
    return memcmp(a->dense + (size_t)i * DLRM_NUM_DENSE, b->dense + (size_t)j * DLRM_NUM_DENSE,
                  sizeof(float) * DLRM_NUM_DENSE) == 0 &&
           memcmp(a->ids + (size_t)i * DLRM_NUM_SPARSE, b->ids + (size_t)j * DLRM_NUM_SPARSE,
                  sizeof(int64_t) * DLRM_NUM_SPARSE) == 0 &&
           a->labels[i] == b->labels[j] && a->planted[i] == b->planted[j];
}

static void synthetic_samples_depend_on_seed_and_index_only(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    synth_config cfg = synth_cfg(42, small_rows, 1.1);
    synth *s, *t, *u;
    assert_int_equal(synth_create(ctx, &cfg, &s), EMBER_OK);
    assert_int_equal(synth_create(ctx, &cfg, &t), EMBER_OK);
    cfg.seed = 43;
    assert_int_equal(synth_create(ctx, &cfg, &u), EMBER_OK);
    dlrm_batch whole, part, other;
    assert_int_equal(dlrm_batch_create(ctx, 96, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &whole), EMBER_OK);
    assert_int_equal(dlrm_batch_create(ctx, 96, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &part), EMBER_OK);
    assert_int_equal(dlrm_batch_create(ctx, 96, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &other), EMBER_OK);
    // Global batch 3 of 96 samples, generated whole (W = 1) and as the shares of W = 1..5 ranks.
    synth_fill(s, 0, 3 * 96, 96, &whole);
    for (int32_t world = 1; world <= 5; world++) {
        int64_t covered = 0;
        for (int32_t r = 0; r < world; r++) {
            int64_t first, n = dlrm_share(96, r, world, &first);
            assert_int_equal(first, covered);
            synth_fill(t, 0, 3 * 96 + first, (int32_t)n, &part);
            for (int32_t i = 0; i < n; i++) assert_true(same_sample(&part, i, &whole, (int32_t)first + i));
            covered += n;
        }
        assert_int_equal(covered, 96);
    }
    // Another seed, or the eval split, gives other samples; ids stay inside their tables.
    synth_fill(u, 0, 3 * 96, 96, &other);
    int differ = 0;
    for (int32_t i = 0; i < 96; i++) differ += !same_sample(&other, i, &whole, i);
    assert_true(differ > 90);
    synth_fill(s, 1, 3 * 96, 96, &other);
    differ = 0;
    for (int32_t i = 0; i < 96; i++) differ += !same_sample(&other, i, &whole, i);
    assert_true(differ > 90);
    for (int32_t i = 0; i < 96; i++) {
        for (int f = 0; f < DLRM_NUM_SPARSE; f++) {
            int64_t id = whole.ids[i * DLRM_NUM_SPARSE + f];
            assert_true(id >= 0 && id < small_rows[f]);
        }
        for (int j = 0; j < DLRM_NUM_DENSE; j++) assert_true(whole.dense[i * DLRM_NUM_DENSE + j] >= 0.0f);
        assert_true(whole.labels[i] == 0.0f || whole.labels[i] == 1.0f);
    }
    dlrm_batch_destroy(ctx, &whole);
    dlrm_batch_destroy(ctx, &part);
    dlrm_batch_destroy(ctx, &other);
    synth_destroy(ctx, s);
    synth_destroy(ctx, t);
    synth_destroy(ctx, u);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// Exact Zipf probability of rank k on {1..n}.
static double zipf_pmf(int64_t k, int64_t n, double alpha) {
    double h = 0.0;
    for (int64_t i = 1; i <= n; i++) h += pow((double)i, -alpha);
    return pow((double)k, -alpha) / h;
}

static void zipf_draws_follow_the_power_law(void **state) {
    (void)state;
    enum { N = 1000, DRAWS = 400000 };
    const double alphas[] = {0.0, 0.6, 1.0, 1.2, 2.0};
    int64_t *count = calloc(N + 1, sizeof(int64_t));
    for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
        zipf z;
        zipf_init(&z, N, alphas[a]);
        memset(count, 0, sizeof(int64_t) * (N + 1));
        ember_rng r = ember_rng_at(5, 6, a);
        for (int i = 0; i < DRAWS; i++) {
            int64_t k = zipf_draw(&z, &r);
            assert_true(k >= 1 && k <= N);
            count[k]++;
        }
        // The head, rank by rank, within 4 standard deviations of the binomial count.
        for (int64_t k = 1; k <= 8; k++) {
            double p = zipf_pmf(k, N, alphas[a]), mean = p * DRAWS, sd = sqrt(DRAWS * p * (1.0 - p));
            if (fabs((double)count[k] - mean) > 4.0 * sd) {
                fail_msg("alpha %g rank %lld: %lld draws, expected %.0f +- %.0f", alphas[a], (long long)k,
                         (long long)count[k], mean, sd);
            }
        }
        // The tail as a block: ranks 501..1000.
        double p_tail = 0.0;
        int64_t tail = 0;
        for (int64_t k = 501; k <= N; k++) {
            p_tail += zipf_pmf(k, N, alphas[a]);
            tail += count[k];
        }
        assert_true(fabs((double)tail - p_tail * DRAWS) <= 4.0 * sqrt(DRAWS * p_tail) + 1.0);
    }
    free(count);
    // A table of one row and a huge table both work.
    zipf z;
    ember_rng r = ember_rng_at(1, 2, 3);
    zipf_init(&z, 1, 1.05);
    assert_int_equal(zipf_draw(&z, &r), 1);
    zipf_init(&z, (int64_t)1 << 40, 1.05);
    for (int i = 0; i < 1000; i++) {
        int64_t k = zipf_draw(&z, &r);
        assert_true(k >= 1 && k <= (int64_t)1 << 40);
    }
}

static void synthetic_ids_are_zipf_over_a_permutation(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) rows[f] = 500;
    synth_config cfg = synth_cfg(9, rows, 1.2);
    synth *s;
    assert_int_equal(synth_create(ctx, &cfg, &s), EMBER_OK);
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 20000, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    synth_fill(s, 0, 0, 20000, &b);
    // Feature 0: the most frequent id takes about P(rank 1); it is not id 0 (ids are permuted).
    int64_t count[500] = {0}, top = 0;
    for (int i = 0; i < 20000; i++) count[b.ids[i * DLRM_NUM_SPARSE]]++;
    for (int k = 1; k < 500; k++) top = count[k] > count[top] ? k : top;
    double p1 = zipf_pmf(1, 500, 1.2);
    assert_true(fabs((double)count[top] / 20000.0 - p1) < 0.02);
    int hot_at_zero = top == 0;
    // Over all features the hottest id is spread, not always 0.
    for (int f = 1; f < DLRM_NUM_SPARSE; f++) {
        memset(count, 0, sizeof count);
        for (int i = 0; i < 20000; i++) count[b.ids[i * DLRM_NUM_SPARSE + f]]++;
        top = 0;
        for (int k = 1; k < 500; k++) top = count[k] > count[top] ? k : top;
        hot_at_zero += top == 0;
    }
    assert_true(hot_at_zero <= 2);
    dlrm_batch_destroy(ctx, &b);
    synth_destroy(ctx, s);
    ember_ctx_destroy(ctx);
}

static void planted_model_gives_known_auc_and_click_rate(void **state) {
    (void)state;
    enum { N = 40000 };
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    synth_config cfg = synth_cfg(1, small_rows, 1.05);
    synth *s;
    assert_int_equal(synth_create(ctx, &cfg, &s), EMBER_OK);
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, N, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    synth_fill(s, 1, 0, N, &b);
    double clicks = 0.0, expected = 0.0, var = 0.0, mean = 0.0;
    for (int i = 0; i < N; i++) {
        clicks += b.labels[i];
        expected += 1.0 / (1.0 + exp(-b.planted[i]));
        mean += b.planted[i];
    }
    mean /= N;
    for (int i = 0; i < N; i++) var += (b.planted[i] - mean) * (b.planted[i] - mean) / N;
    // Labels are Bernoulli(sigmoid(planted logit)).
    assert_true(fabs(clicks - expected) < 4.0 * sqrt(expected));
    assert_true(clicks / N > 0.15 && clicks / N < 0.45);
    // The logit's spread is the configured dense and per-id parts: sqrt(1 + 1.6^2) = 1.89.
    assert_true(fabs(sqrt(var) - sqrt(1.0 + 1.6 * 1.6)) < 0.15);
    // Its AUC (the best achievable) is about 0.8: learnable but far from trivial.
    double auc = naive_auc(2000, b.planted, b.labels);
    assert_true(auc > 0.75 && auc < 0.9);
    // Per-id effects are deterministic and scaled per feature.
    assert_true(synth_effect(s, 3, 17) == synth_effect(s, 3, 17));
    double ss = 0.0;
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) ss += synth_sigma(s, f) * synth_sigma(s, f);
    assert_true(fabs(sqrt(ss) - SYNTH_SPARSE_SCALE) < 1e-9);
    dlrm_batch_destroy(ctx, &b);
    synth_destroy(ctx, s);
    ember_ctx_destroy(ctx);
}

// ---- Criteo --------------------------------------------------------------------------------------


// A valid line: label, dense j = base + j, categorical f = hex(base * 1000 + f); then `end`.
static void line_ending(FILE *f, int base, const char *end) {
    fprintf(f, "%d", base % 2);
    for (int j = 0; j < DLRM_NUM_DENSE; j++) fprintf(f, "\t%d", base + j);
    for (int c = 0; c < DLRM_NUM_SPARSE; c++) fprintf(f, "\t%x", base * 1000 + c);
    fputs(end, f);
}

static void good_line(FILE *f, int base) { line_ending(f, base, "\n"); }

static char *write_file(const char *name, void (*fill)(FILE *)) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fill(f);
    fclose(f);
    return path;
}

static int64_t rows_all(int64_t *rows, int64_t n) {
    for (int f = 0; f < DLRM_NUM_SPARSE; f++) rows[f] = n;
    return n;
}

static void fill_transforms(FILE *f) {
    // Line 1: empty fields everywhere except the label; negative and uppercase values.
    fputs("1", f);
    for (int j = 0; j < DLRM_NUM_DENSE; j++) fputs(j == 2 ? "\t-3" : j == 5 ? "\t7" : "\t", f);
    for (int c = 0; c < DLRM_NUM_SPARSE; c++) fputs(c == 1 ? "\tFF" : c == 4 ? "\t68fd1e64" : "\t", f);
    fputs("\r\n", f); // a Windows line ending is accepted
    good_line(f, 1);
}

static void criteo_transforms_fields_and_accepts_empty_ones(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 1000);
    criteo_config cfg = {.path = write_file("transforms.tsv", fill_transforms), .rows = rows, .rank = 0, .world = 1,
                         .global_batch = 8};
    criteo_reader *r;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 8, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    bool eof;
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK);
    assert_false(eof);
    assert_int_equal(b.size, 2);
    assert_true(b.labels[0] == 1.0f && b.labels[1] == 1.0f);
    for (int j = 0; j < DLRM_NUM_DENSE; j++) {
        float want = j == 5 ? (float)log1p(7.0) : 0.0f; // empty -> 0, negative -> clamped to 0
        assert_true(b.dense[j] == want);
        assert_true(b.dense[DLRM_NUM_DENSE + j] == (float)log1p(1.0 + j));
    }
    for (int c = 0; c < DLRM_NUM_SPARSE; c++) {
        int64_t want = c == 1 ? 255 % 1000 : c == 4 ? (int64_t)(0x68fd1e64ull % 1000) : 0;
        assert_int_equal(b.ids[c], want);
        assert_int_equal(b.ids[DLRM_NUM_SPARSE + c], (1000 + c) % 1000);
    }
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK);
    assert_true(eof);
    assert_int_equal(criteo_get_stats(r)->malformed, 0);
    criteo_close(ctx, r);
    dlrm_batch_destroy(ctx, &b);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void fill_malformed(FILE *f) {
    good_line(f, 1);                     // line 1
    fputs("1\t2\t3\n", f);               // line 2: too few fields
    good_line(f, 3);                     // line 3
    fputs("2", f);                       // line 4: label 2
    for (int i = 1; i < CRITEO_NUM_FIELDS; i++) fputs("\t1", f);
    fputc('\n', f);
    fputs("0\t1x", f);                   // line 5: dense "1x"
    for (int i = 2; i < CRITEO_NUM_FIELDS; i++) fputs("\t1", f);
    fputc('\n', f);
    good_line(f, 6);                     // line 6
    fputs("0", f);                       // line 7: categorical "zz"
    for (int i = 1; i < CRITEO_NUM_FIELDS; i++) fputs(i == 20 ? "\tzz" : "\t1", f);
    fputc('\n', f);
    for (int i = 0; i < CRITEO_LINE_MAX + 10; i++) fputc('1', f); // line 8: too long
    fputc('\n', f);
    fputs("1", f);                       // line 9: 41 fields
    for (int i = 1; i <= CRITEO_NUM_FIELDS; i++) fputs("\t1", f);
    fputc('\n', f);
    line_ending(f, 10, "");              // line 10, without a final newline
}

static void criteo_counts_malformed_lines_with_numbers(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 1 << 20);
    criteo_config cfg = {.path = write_file("malformed.tsv", fill_malformed), .rows = rows, .rank = 0, .world = 1,
                         .global_batch = 4};
    criteo_reader *r;
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 4, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    // Two epochs: lines are counted once.
    for (int epoch = 0; epoch < 2; epoch++) {
        int sizes[4], n = 0;
        bool eof = false;
        assert_int_equal(criteo_rewind(r), EMBER_OK);
        while (assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK), !eof) sizes[n++] = b.size;
        assert_int_equal(n, 3); // lines 1-4, 5-8, 9-10
        assert_int_equal(sizes[0], 2);
        assert_int_equal(sizes[1], 1);
        assert_int_equal(sizes[2], 1);
    }
    const criteo_stats *st = criteo_get_stats(r);
    assert_int_equal(st->malformed, 6);
    const int64_t want[6] = {2, 4, 5, 7, 8, 9};
    assert_int_equal(st->num_lines, 6);
    for (int i = 0; i < 6; i++) assert_int_equal(st->lines[i], want[i]);
    assert_non_null(strstr(st->first_reason, "3 tab-separated fields, expected 40"));
    criteo_close(ctx, r);
    // Fatal mode: the first malformed line stops the read, named by path and number.
    cfg.malformed = CRITEO_FATAL;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    bool eof;
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "malformed.tsv' line 2: 3 tab-separated fields"));
    criteo_close(ctx, r);
    // Each reason names its field.
    cfg.malformed = CRITEO_FATAL;
    cfg.first_line = 3;
    const char *reasons[] = {"field 1 (label): '2' is not 0 or 1", "field 2 (int_0): '1x' is not an integer"};
    for (int i = 0; i < 2; i++) {
        cfg.first_line = 3 + i;
        cfg.global_batch = 1;
        assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
        assert_int_equal(criteo_next(r, &b, &eof), EMBER_ERR_FORMAT);
        assert_non_null(strstr(ember_ctx_errmsg(ctx), reasons[i]));
        criteo_close(ctx, r);
    }
    cfg.first_line = 6;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "line 7: field 21 (cat_6): 'zz' is not a hexadecimal"));
    criteo_close(ctx, r);
    dlrm_batch_destroy(ctx, &b);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void fill_23(FILE *f) {
    for (int i = 0; i < 23; i++) good_line(f, 100 + i);
}

// Reads every batch of a file as rank r of W; returns the base value of each sample read,
// batch after batch, and the batch count.
static int read_shares(ember_ctx *ctx, criteo_config cfg, int32_t rank, int32_t world, int *bases, int *nbases,
                       int *batches) {
    criteo_reader *r;
    dlrm_batch b;
    cfg.rank = rank;
    cfg.world = world;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    assert_int_equal(dlrm_batch_create(ctx, (int32_t)cfg.global_batch, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b),
                     EMBER_OK);
    bool eof = false;
    *nbases = 0;
    *batches = 0;
    while (assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK), !eof) {
        for (int i = 0; i < b.size; i++) bases[(*nbases)++] = (int)lround(expm1(b.dense[i * DLRM_NUM_DENSE]));
        (*batches)++;
    }
    dlrm_batch_destroy(ctx, &b);
    criteo_close(ctx, r);
    return 0;
}

static void criteo_ranks_read_contiguous_shares_of_each_batch(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 1 << 30);
    criteo_config cfg = {.path = write_file("lines23.tsv", fill_23), .rows = rows, .global_batch = 5};
    int bases[3][32], n[3], batches[3];
    for (int32_t world = 1; world <= 3; world++) {
        for (int32_t r = 0; r < world; r++) read_shares(ctx, cfg, r, world, bases[r], &n[r], &batches[r]);
        // Interleave the shares back, batch by batch: the file in order.
        int next = 100, pos[3] = {0, 0, 0};
        for (int g = 0; g < 5; g++) {
            assert_int_equal(batches[0], 5);
            for (int32_t r = 0; r < world; r++) {
                int64_t first, share = dlrm_share(5, r, world, &first);
                for (int64_t i = 0; i < share && next < 123; i++) assert_int_equal(bases[r][pos[r]++], next++);
            }
        }
        assert_int_equal(next, 123);
        for (int32_t r = 0; r < world; r++) assert_int_equal(pos[r], n[r]);
    }
    // A window: lines [5, 12) in batches of 5 -> 5 + 2 lines, then the end.
    cfg.first_line = 5;
    cfg.max_lines = 7;
    read_shares(ctx, cfg, 0, 1, bases[0], &n[0], &batches[0]);
    assert_int_equal(batches[0], 2);
    assert_int_equal(n[0], 7);
    assert_int_equal(bases[0][0], 105);
    assert_int_equal(bases[0][6], 111);
    // A window beyond the end of the file is empty.
    cfg.first_line = 30;
    cfg.max_lines = 0;
    read_shares(ctx, cfg, 0, 1, bases[0], &n[0], &batches[0]);
    assert_int_equal(batches[0], 0);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// ---- Criteo: bytes that are not text, the line-length limit, non-integer dense text --------------

static void fill_nul(FILE *f) {
    good_line(f, 1);                     // line 1
    fputs("0\t5", f);                    // line 2: a NUL byte inside field 2
    fputc('\0', f);
    for (int i = 2; i < CRITEO_NUM_FIELDS; i++) fputs("\t1", f);
    fputc('\n', f);
    good_line(f, 3);                     // line 3
    fputs("1\t2\n", f);                  // line 4: too few fields
    good_line(f, 5);                     // line 5
    fputc('\0', f);                      // line 6: a lone NUL byte, then the last line
    fputc('\n', f);
    good_line(f, 7);                     // line 7
}

static void criteo_nul_byte_invalidates_only_its_own_line(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 1 << 20);
    criteo_config cfg = {.path = write_file("nul.tsv", fill_nul), .rows = rows, .rank = 0, .world = 1,
                         .global_batch = 16};
    criteo_reader *r;
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 16, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    bool eof;
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK);
    assert_false(eof);
    // Lines 1, 3, 5 and 7 are read, each whole: the line after a NUL byte is not swallowed.
    const int want_bases[] = {1, 3, 5, 7};
    assert_int_equal(b.size, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(b.dense[(size_t)i * DLRM_NUM_DENSE] == (float)log1p((double)want_bases[i]));
        assert_int_equal(b.ids[(size_t)i * DLRM_NUM_SPARSE + 1], want_bases[i] * 1000 + 1);
        assert_int_equal(b.origin[i], want_bases[i]); // line i's number
    }
    // Physical line numbers: 2, 4 and 6, not shifted by the NUL bytes.
    const criteo_stats *st = criteo_get_stats(r);
    assert_int_equal(st->malformed, 3);
    assert_int_equal(st->num_lines, 3);
    assert_int_equal(st->lines[0], 2);
    assert_int_equal(st->lines[1], 4);
    assert_int_equal(st->lines[2], 6);
    assert_non_null(strstr(st->first_reason, "a NUL byte at byte 4"));
    assert_int_equal(st->lines_read, 7);
    criteo_close(ctx, r);
    // Fatal: the NUL byte is named with its line and byte.
    cfg.malformed = CRITEO_FATAL;
    cfg.first_line = 2;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "nul.tsv' line 4: 2 tab-separated fields"));
    criteo_close(ctx, r);
    cfg.first_line = 5;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "nul.tsv' line 6: a NUL byte at byte 1"));
    criteo_close(ctx, r);
    dlrm_batch_destroy(ctx, &b);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// A valid line of exactly `len` bytes before its ending: field 2 (int_0) padded with leading zeros.
static void padded_line(FILE *f, int base, size_t len, const char *end) {
    char text[CRITEO_LINE_MAX + 64];
    int n = snprintf(text, sizeof text, "%d\t", base % 2);
    const size_t head = (size_t)n;
    for (int j = 0; j < DLRM_NUM_DENSE; j++) n += snprintf(text + n, sizeof text - (size_t)n, j ? "\t%d" : "%d", base + j);
    for (int c = 0; c < DLRM_NUM_SPARSE; c++) n += snprintf(text + n, sizeof text - (size_t)n, "\t%x", base * 1000 + c);
    assert_true((size_t)n <= len);
    fwrite(text, 1, head, f);
    for (size_t i = (size_t)n; i < len; i++) fputc('0', f);
    fwrite(text + head, 1, (size_t)n - head, f);
    fputs(end, f);
}

static void fill_long(FILE *f) {
    padded_line(f, 1, CRITEO_LINE_MAX, "\n");       // line 1: at the limit
    padded_line(f, 2, CRITEO_LINE_MAX, "\r\n");     // line 2: at the limit, Windows ending
    padded_line(f, 3, CRITEO_LINE_MAX + 1, "\n");   // line 3: one byte over
    padded_line(f, 4, 3 * CRITEO_LINE_MAX, "\n");   // line 4: far over
    padded_line(f, 5, CRITEO_LINE_MAX, "");         // line 5: at the limit, no final newline
}

static void criteo_line_limit_counts_the_text_without_its_ending(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 1 << 20);
    criteo_config cfg = {.path = write_file("long.tsv", fill_long), .rows = rows, .rank = 0, .world = 1,
                         .global_batch = 8};
    criteo_reader *r;
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 8, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    bool eof;
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK);
    assert_int_equal(b.size, 3);
    const int want_bases[] = {1, 2, 5};
    for (int i = 0; i < 3; i++) {
        assert_true(b.dense[(size_t)i * DLRM_NUM_DENSE] == (float)log1p((double)want_bases[i]));
        assert_int_equal(b.ids[(size_t)i * DLRM_NUM_SPARSE + 25], want_bases[i] * 1000 + 25);
    }
    const criteo_stats *st = criteo_get_stats(r);
    assert_int_equal(st->malformed, 2);
    assert_int_equal(st->lines[0], 3);
    assert_int_equal(st->lines[1], 4);
    char want[64];
    snprintf(want, sizeof want, "longer than %d bytes", CRITEO_LINE_MAX);
    assert_non_null(strstr(st->first_reason, want));
    assert_string_equal(want, "longer than 4095 bytes"); // as docs/dlrm.md says
    criteo_close(ctx, r);
    dlrm_batch_destroy(ctx, &b);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// Dense text that is not a decimal integer, such as "nan" or "inf", is malformed like any other
// unparsable field: no non-finite value reaches the model from a file.
static const char *const not_integers[] = {"nan", "NaN", "inf", "-inf", "Infinity", "1e3", "1.5", "0x10", "+3", " 3",
                                           "3 ", "99999999999999999999"};
enum { NUM_NOT_INTEGERS = sizeof not_integers / sizeof not_integers[0] };

static void fill_not_integers(FILE *f) {
    for (int k = 0; k < NUM_NOT_INTEGERS; k++) {
        fputs("1", f);
        for (int i = 1; i < CRITEO_NUM_FIELDS; i++) {
            fputc('\t', f);
            fputs(i == 5 ? not_integers[k] : "1", f);
        }
        fputc('\n', f);
    }
    good_line(f, 9);
}

static void criteo_dense_text_that_is_not_an_integer_is_malformed(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 1 << 20);
    criteo_config cfg = {.path = write_file("notint.tsv", fill_not_integers), .rows = rows, .rank = 0, .world = 1,
                         .global_batch = 32};
    criteo_reader *r;
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 32, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    bool eof;
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK);
    assert_int_equal(b.size, 1);
    for (int j = 0; j < DLRM_NUM_DENSE; j++) assert_true(isfinite(b.dense[j]));
    assert_int_equal(criteo_get_stats(r)->malformed, NUM_NOT_INTEGERS);
    assert_non_null(strstr(criteo_get_stats(r)->first_reason, "field 6 (int_4): 'nan' is not an integer"));
    criteo_close(ctx, r);
    // Each one, fatal, names its text.
    cfg.malformed = CRITEO_FATAL;
    cfg.global_batch = 1;
    for (int k = 0; k < NUM_NOT_INTEGERS; k++) {
        char want[96];
        snprintf(want, sizeof want, "line %d: field 6 (int_4): '%s' is not an integer", k + 1, not_integers[k]);
        cfg.first_line = k;
        assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
        assert_int_equal(criteo_next(r, &b, &eof), EMBER_ERR_FORMAT);
        if (!strstr(ember_ctx_errmsg(ctx), want)) fail_msg("'%s' does not say '%s'", ember_ctx_errmsg(ctx), want);
        criteo_close(ctx, r);
    }
    dlrm_batch_destroy(ctx, &b);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// ---- Dense features: NaN and infinities never reach the model ---------------------------------

static void dense_features_are_checked_for_nan_and_inf(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    synth_config sc = synth_cfg(5, small_rows, 1.1);
    synth *syn;
    assert_int_equal(synth_create(ctx, &sc, &syn), EMBER_OK);
    dlrm_batch b;
    assert_int_equal(dlrm_batch_create(ctx, 8, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &b), EMBER_OK);
    // Synthetic eval samples 100..103: each one's origin is its index; all finite.
    synth_fill(syn, 1, 100, 4, &b);
    source src = {.syn = syn, .split = 1, .global_batch = 4, .rank = 0, .world = 1};
    int32_t feature;
    assert_int_equal(dlrm_batch_first_nonfinite(&b, &feature), 4);
    assert_int_equal(source_check_dense(ctx, &src, &b), EMBER_OK);
    for (int i = 0; i < 4; i++) assert_int_equal(b.origin[i], 100 + i);
    // A NaN, then an earlier infinity: the first one in sample order is named.
    b.dense[2 * DLRM_NUM_DENSE + 5] = NAN;
    assert_int_equal(dlrm_batch_first_nonfinite(&b, &feature), 2);
    assert_int_equal(feature, 5);
    assert_int_equal(source_check_dense(ctx, &src, &b), EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "dense feature 5 (int_5) of synthetic eval sample 102 is nan: not a "
                                                  "finite number (rank 0)"));
    b.dense[0 * DLRM_NUM_DENSE + 12] = INFINITY;
    assert_int_equal(source_check_dense(ctx, &src, &b), EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "dense feature 12 (int_12) of synthetic eval sample 100 is inf"));
    // A Criteo batch names the line and the file.
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 1 << 30);
    criteo_config cfg = {.path = write_file("lines23.tsv", fill_23), .rows = rows, .world = 1, .global_batch = 5,
                         .first_line = 5};
    criteo_reader *r;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_OK);
    bool eof;
    assert_int_equal(criteo_next(r, &b, &eof), EMBER_OK);
    assert_int_equal(b.size, 5);
    src = (source){.reader = r, .global_batch = 5, .rank = 0, .world = 1};
    assert_int_equal(source_check_dense(ctx, &src, &b), EMBER_OK);
    b.dense[3 * DLRM_NUM_DENSE + 0] = -INFINITY;
    assert_int_equal(source_check_dense(ctx, &src, &b), EMBER_ERR_NUMERIC);
    char want[256];
    snprintf(want, sizeof want, "dense feature 0 (int_0) of line 9 of '%s' is -inf", cfg.path);
    if (!strstr(ember_ctx_errmsg(ctx), want)) fail_msg("'%s' does not say '%s'", ember_ctx_errmsg(ctx), want);
    criteo_close(ctx, r);
    dlrm_batch_destroy(ctx, &b);
    synth_destroy(ctx, syn);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void criteo_missing_file_names_the_path(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int64_t rows[DLRM_NUM_SPARSE];
    rows_all(rows, 10);
    criteo_config cfg = {.path = "/nonexistent/day_0", .rows = rows, .world = 1, .global_batch = 4};
    static char sentinel;
    criteo_reader *r = (criteo_reader *)(void *)&sentinel;
    assert_int_equal(criteo_open(ctx, &cfg, &r), EMBER_ERR_IO);
    assert_null(r);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "cannot open '/nonexistent/day_0': No such file"));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// MLPerf's synthetic multi-hot bags: the row itself first, extras a function of (feature, row)
// alone, within the table, uniform or Pareto(0.25) as MLPerf's reference draws them.
static void multi_hot_bags_follow_mlperfs_rule(void **state) {
    (void)state;
    enum { K = 9, N = 40000 };
    int64_t a[K], b[K];
    for (int d = 0; d < MULTIHOT_DIST_COUNT; d++) {
        // Deterministic, first id the row, every id in range; another row or feature draws others.
        multihot_bag((multihot_dist)d, 4, 1000, 77, K, a);
        multihot_bag((multihot_dist)d, 4, 1000, 77, K, b);
        assert_memory_equal(a, b, sizeof a);
        assert_int_equal(a[0], 77);
        for (int j = 0; j < K; j++) assert_true(a[j] >= 0 && a[j] < 1000);
        multihot_bag((multihot_dist)d, 5, 1000, 77, K, b);
        assert_true(memcmp(a + 1, b + 1, sizeof(int64_t) * (K - 1)) != 0);
        multihot_bag((multihot_dist)d, 4, 1000, 78, K, b);
        assert_int_equal(b[0], 78);
        assert_true(memcmp(a + 1, b + 1, sizeof(int64_t) * (K - 1)) != 0);
        // A one-row table: every id is 0; k = 1: the row alone.
        multihot_bag((multihot_dist)d, 0, 1, 0, K, a);
        for (int j = 0; j < K; j++) assert_int_equal(a[j], 0);
        a[1] = -5;
        multihot_bag((multihot_dist)d, 0, 50, 3, 1, a);
        assert_true(a[0] == 3 && a[1] == -5);
    }
    // Uniform over the N rows of a table (each row's extras drawn once): each tenth of the rows
    // gets N (K-1) / 10 within 5 standard deviations.
    int64_t counts[10] = {0};
    for (int64_t x = 0; x < N; x++) {
        multihot_bag(MULTIHOT_UNIFORM, 2, N, x, K, a);
        for (int j = 1; j < K; j++) counts[a[j] * 10 / N]++;
    }
    const double n = (double)N * (K - 1), sd = sqrt(n * 0.1 * 0.9);
    for (int v = 0; v < 10; v++) assert_true(fabs((double)counts[v] - n / 10) < 5 * sd);
    // Pareto(0.25) over a large table: P(v <= k) = 1 - (k + 2)^-0.25 (numpy's Lomax, floored).
    int64_t zero = 0, le14 = 0;
    for (int64_t x = 0; x < N; x++) {
        multihot_bag(MULTIHOT_PARETO, 3, (int64_t)1 << 40, x, K, a);
        for (int j = 1; j < K; j++) {
            zero += a[j] == 0;
            le14 += a[j] <= 14;
        }
    }
    assert_true(fabs((double)zero / n - (1.0 - pow(2.0, -0.25))) < 0.005);
    assert_true(fabs((double)le14 / n - 0.5) < 0.005);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(synthetic_samples_depend_on_seed_and_index_only),
        cmocka_unit_test(zipf_draws_follow_the_power_law),
        cmocka_unit_test(synthetic_ids_are_zipf_over_a_permutation),
        cmocka_unit_test(planted_model_gives_known_auc_and_click_rate),
        cmocka_unit_test(criteo_transforms_fields_and_accepts_empty_ones),
        cmocka_unit_test(criteo_counts_malformed_lines_with_numbers),
        cmocka_unit_test(criteo_ranks_read_contiguous_shares_of_each_batch),
        cmocka_unit_test(criteo_missing_file_names_the_path),
        cmocka_unit_test(criteo_nul_byte_invalidates_only_its_own_line),
        cmocka_unit_test(criteo_line_limit_counts_the_text_without_its_ending),
        cmocka_unit_test(criteo_dense_text_that_is_not_an_integer_is_malformed),
        cmocka_unit_test(dense_features_are_checked_for_nan_and_inf),
        cmocka_unit_test(multi_hot_bags_follow_mlperfs_rule),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_make, test_tmpdir_remove);
}
