// `ember train` outputs and plan: metrics files (CSV, JSONL), the gnuplot plot, the explicit
// sharding rule and per-rank memory.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/plan.h"
#include "tmpdir.h"
#include "metrics.h"
#include "sharding.h"


static char *slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static const metrics_row sample_rows[2] = {
    {.step = 100, .epoch = 0, .samples = 204800, .train_loss = 0.5, .eval_loss = 0.25, .eval_auc = 0.75,
     .planted_auc = 0.8125, .samples_per_s = 1000, .data_wait_ms = 0.25},
    {.step = 150, .epoch = 1, .samples = 307200, .train_loss = NAN, .eval_loss = 0.125, .eval_auc = 0.875,
     .planted_auc = NAN, .samples_per_s = NAN, .data_wait_ms = NAN},
};

static void metrics_writes_csv_and_jsonl_rows(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    char path[128], text[1024];
    metrics_writer w;
    snprintf(path, sizeof path, "%s/m.csv", test_tmpdir);
    assert_int_equal(metrics_open(ctx, path, &w), EMBER_OK);
    for (int i = 0; i < 2; i++) assert_int_equal(metrics_write(ctx, &w, &sample_rows[i]), EMBER_OK);
    metrics_close(&w);
    assert_string_equal(slurp(path, text, sizeof text),
                        "step,epoch,samples,train_loss,eval_loss,eval_auc,planted_auc,samples_per_s,data_wait_ms\n"
                        "100,0,204800,0.5,0.25,0.75,0.8125,1000,0.25\n"
                        "150,1,307200,,0.125,0.875,,,\n");
    snprintf(path, sizeof path, "%s/m.jsonl", test_tmpdir);
    assert_int_equal(metrics_open(ctx, path, &w), EMBER_OK);
    for (int i = 0; i < 2; i++) assert_int_equal(metrics_write(ctx, &w, &sample_rows[i]), EMBER_OK);
    metrics_close(&w);
    assert_string_equal(slurp(path, text, sizeof text),
                        "{\"step\":100,\"epoch\":0,\"samples\":204800,\"train_loss\":0.5,\"eval_loss\":0.25,"
                        "\"eval_auc\":0.75,\"planted_auc\":0.8125,\"samples_per_s\":1000,\"data_wait_ms\":0.25}\n"
                        "{\"step\":150,\"epoch\":1,\"samples\":307200,\"train_loss\":null,\"eval_loss\":0.125,"
                        "\"eval_auc\":0.875,\"planted_auc\":null,\"samples_per_s\":null,\"data_wait_ms\":null}\n");
    metrics_format fmt;
    assert_int_equal(metrics_format_of(ctx, "run.txt", &fmt), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "--metrics 'run.txt': the name must end in .csv or .jsonl"));
    assert_int_equal(metrics_open(ctx, "/nonexistent/m.csv", &w), EMBER_ERR_IO);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "cannot create '/nonexistent/m.csv'"));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void plot_runs_gnuplot_or_says_it_is_missing(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    char png[128], path[160], text[4096];
    snprintf(png, sizeof png, "%s/curves.png", test_tmpdir);
    if (plot_check_gnuplot(ctx) == EMBER_OK) {
        assert_int_equal(plot_write(ctx, png, sample_rows, 2, "it's a test"), EMBER_OK);
        assert_memory_equal(slurp(png, text, 9), "\x89PNG\r\n\x1a\n", 8);
        snprintf(path, sizeof path, "%s.gp", png);
        assert_non_null(strstr(slurp(path, text, sizeof text), "title 'it''s a test'"));
        snprintf(path, sizeof path, "%s.dat", png);
        assert_non_null(strstr(slurp(path, text, sizeof text), "150 nan 0.125 0.875 nan"));
    } else {
        printf("gnuplot is not installed: only the missing-gnuplot message is checked\n");
    }
    // Without gnuplot on PATH: one clear message.
    char *saved = strdup(getenv("PATH") ? getenv("PATH") : "");
    setenv("PATH", "/nonexistent", 1);
    assert_int_equal(plot_write(ctx, png, sample_rows, 2, "t"), EMBER_ERR_UNSUPPORTED);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "--plot needs gnuplot, which is not on PATH (Debian: apt-get install "
                                                  "gnuplot-nox)"));
    setenv("PATH", saved, 1);
    free(saved);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void sharding_explicit_default_placement(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    // The library's default placement (ember_table_plan_default): table-wise table t on rank t mod
    // W; dp and rw use every rank.
    int choice[5] = {EMBER_SHARD_TABLE_WISE, EMBER_SHARD_DATA_PARALLEL, EMBER_SHARD_TABLE_WISE, EMBER_SHARD_ROW_WISE,
                     EMBER_SHARD_TABLE_WISE};
    ember_table_plan plan[5];
    assert_int_equal(sharding_plan(ctx, 5, 16, choice, 3, 3, plan), EMBER_OK);
    for (int t = 0; t < 5; t++) assert_int_equal(plan[t].scheme, choice[t]);
    assert_int_equal(plan[0].ranks[0], 0);
    assert_int_equal(plan[2].ranks[0], 2);
    assert_int_equal(plan[4].ranks[0], 1);
    assert_true(plan[1].num_ranks == 0 && plan[1].ranks == NULL && plan[4].num_ranks == 1);
    ember_plan_release(ctx, plan, 5);
    // Explicit schemes: cw slices min(W, dim) ways; twrw groups of the host's ranks.
    int cw[4] = {EMBER_SHARD_COLUMN_WISE, EMBER_SHARD_COLUMN_WISE, EMBER_SHARD_TABLE_ROW_WISE,
                 EMBER_SHARD_TABLE_ROW_WISE};
    assert_int_equal(sharding_plan(ctx, 4, 2, cw, 4, 2, plan), EMBER_OK);
    assert_int_equal(plan[0].num_shards, 2);
    assert_true(plan[0].ranks[0] == 0 && plan[0].ranks[1] == 1);
    assert_true(plan[1].ranks[0] == 1 && plan[1].ranks[1] == 2);
    assert_int_equal(plan[2].group_size, 2);
    assert_true(plan[2].ranks[0] == 0 && plan[2].ranks[1] == 1);
    assert_true(plan[3].ranks[0] == 2 && plan[3].ranks[1] == 3);
    ember_plan_release(ctx, plan, 4);
    assert_int_equal(sharding_plan(ctx, 4, 2, cw, 4, 3, plan), EMBER_OK); // 3 does not divide 4
    assert_int_equal(plan[2].group_size, 4);
    assert_int_equal(plan[2].num_ranks, 4);
    ember_plan_release(ctx, plan, 4);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    assert_int_equal(sharding_parse("twrw"), EMBER_SHARD_TABLE_ROW_WISE);
    assert_int_equal(sharding_parse("auto"), SHARDING_AUTO);
    assert_int_equal(sharding_parse("plan"), SHARDING_AUTO); // a synonym: the library's planner
    char name[16];
    sharding_table_name(25, name, sizeof name);
    assert_string_equal(name, "t_cat_25");
    assert_int_equal(sharding_parse("rows"), -2);
    assert_string_equal(sharding_name(EMBER_SHARD_COLUMN_WISE), "cw");
    ember_ctx_destroy(ctx);
}

// Bytes rank r of W holds of a rows x dim table under plan p (the library's count, which the
// trainer's memory check uses): weights in the table's dtype plus fp32 optimizer state.
static double rank_bytes(const ember_table_plan *p, int64_t rows, int32_t dim, ember_optim_kind kind,
                         ember_dtype dtype, int32_t r, int32_t W) {
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t";
    t.rows = rows;
    t.dim = dim;
    t.dtype = dtype;
    t.optim.kind = kind;
    size_t w = 0, st = 0;
    assert_int_equal(ember_shard_rank_bytes(ctx, &t, p, W, r, &w, &st), EMBER_OK);
    ember_ctx_destroy(ctx);
    return (double)w + (double)st;
}

static void sharding_bytes_per_rank(void **state) {
    (void)state;
    const ember_dtype F32 = EMBER_DTYPE_F32;
    ember_table_plan p = {.scheme = EMBER_SHARD_ROW_WISE};
    // 10 rows over 3 ranks: 4, 3, 3 rows of (8 weights + 1 row-wise Adagrad state) floats.
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_ROWWISE_ADAGRAD, F32, 0, 3) == 4 * 4 * 9.0);
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_ROWWISE_ADAGRAD, F32, 2, 3) == 4 * 3 * 9.0);
    // bf16 weights count 2 bytes, the fp32 state 4.
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_DTYPE_BF16, 0, 3) == 4 * (2 * 8.0 + 4));
    p.scheme = EMBER_SHARD_DATA_PARALLEL;
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_ADAM, F32, 1, 3) == 4 * 10 * 24.0);
    int32_t ranks[3] = {2};
    p.scheme = EMBER_SHARD_TABLE_WISE;
    p.ranks = ranks;
    p.num_ranks = 1;
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_SGD, F32, 2, 3) == 4 * 10 * 8.0);
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_SGD, F32, 0, 3) == 0.0);
    p.scheme = EMBER_SHARD_COLUMN_WISE;
    p.num_shards = 3;
    p.num_ranks = 3;
    p.ranks[0] = 1, p.ranks[1] = 2, p.ranks[2] = 0;
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_SGD, F32, 1, 3) == 4 * 10 * 3.0); // columns 3, 3, 2
    assert_true(rank_bytes(&p, 10, 8, EMBER_OPT_SGD, F32, 0, 3) == 4 * 10 * 2.0);
    // A plan the collection would refuse is refused here too, with the table named.
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "big";
    t.rows = 10;
    t.dim = 8;
    p.ranks[2] = 7;
    size_t w, st;
    assert_int_equal(ember_shard_rank_bytes(ctx, &t, &p, 3, 0, &w, &st), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "'big'"));
    p.ranks[2] = 0;
    p.num_ranks = 2; // fewer ranks than shards
    assert_int_equal(ember_shard_rank_bytes(ctx, &t, &p, 3, 0, &w, &st), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "table 'big': 2 ranks given, column_wise reads 3"));
    ember_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(metrics_writes_csv_and_jsonl_rows),
        cmocka_unit_test(plot_runs_gnuplot_or_says_it_is_missing),
        cmocka_unit_test(sharding_explicit_default_placement),
        cmocka_unit_test(sharding_bytes_per_rank),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_make, test_tmpdir_remove);
}
