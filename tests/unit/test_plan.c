// Planner: placements follow the cost model, memory budgets hold, bad inputs are refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"

static ember_table_config table(const char *name, int64_t rows, int32_t dim) {
    ember_table_config t = {name, rows, dim, EMBER_POOL_SUM, EMBER_DTYPE_F32, {EMBER_INIT_ZEROS, 0, 0, 0},
                            EMBER_OPTIM_CONFIG_DEFAULT, 0};
    return t;
}

// Two plans place every table alike (scheme, counts and the ranks' values).
static void assert_plans_equal(const ember_table_plan *a, const ember_table_plan *b, int n) {
    for (int t = 0; t < n; t++) {
        assert_int_equal(a[t].scheme, b[t].scheme);
        assert_int_equal(a[t].num_shards, b[t].num_shards);
        assert_int_equal(a[t].group_size, b[t].group_size);
        assert_int_equal(a[t].num_ranks, b[t].num_ranks);
        assert_int_equal(a[t].num_ranks, ember_table_plan_ranks_needed(&a[t]));
        if (a[t].num_ranks) assert_memory_equal(a[t].ranks, b[t].ranks, sizeof(int32_t) * (size_t)a[t].num_ranks);
    }
}

static void small_tables_are_data_parallel_equal_tables_spread(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t[6] = {table("tiny0", 10, 8), table("tiny1", 20, 8), table("m0", 200000, 64),
                               table("m1", 200000, 64), table("m2", 200000, 64), table("m3", 200000, 64)};
    ember_feature_config f[6] = {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}, {"e", 4}, {"g", 5}};
    ember_ebc_config ec = {t, 6, f, 6, EMBER_BOUNDS_ERROR, 1, 0, 0};
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = 4;
    pc.batch_size = 256;
    ember_table_plan plan[6];
    size_t storage[4];
    double step[4];
    ember_plan_stats st = {.storage_bytes = storage, .step_bytes = step};
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, &st), EMBER_OK);
    assert_int_equal(plan[0].scheme, EMBER_SHARD_DATA_PARALLEL);
    assert_int_equal(plan[1].scheme, EMBER_SHARD_DATA_PARALLEL);
    // Four equal medium tables: every rank ends with the same step load.
    for (int q = 1; q < 4; q++) assert_true(st.step_bytes[q] <= st.step_bytes[0] * 1.0001 &&
                                            st.step_bytes[q] >= st.step_bytes[0] * 0.9999);
    char buf[512];
    size_t n = ember_plan_describe(&ec, plan, buf, sizeof buf);
    assert_true(n > 0 && n < sizeof buf);
    assert_non_null(strstr(buf, "tiny0 data_parallel"));
    // Deterministic.
    ember_table_plan again[6];
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, again, NULL), EMBER_OK);
    assert_plans_equal(plan, again, 6);
    ember_plan_release(ctx, again, 6);
    ember_plan_release(ctx, plan, 6);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void memory_budget_forces_row_wise_and_is_respected(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t[2] = {table("huge", 4000000, 16), table("small", 1000, 16)};
    t[0].optim.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    ember_feature_config f[2] = {{"a", 0}, {"b", 1}};
    ember_ebc_config ec = {t, 2, f, 2, EMBER_BOUNDS_ERROR, 1, 0, 0};
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = 3;
    pc.batch_size = 128;
    // huge = 4e6 * (64 + 4) bytes = 272 MB: no single rank holds it under 200 MB; column
    // slices need 16 columns each (dim 16 has one), so row-wise is the one placement left.
    pc.memory_per_rank = (size_t)200 << 20;
    ember_table_plan plan[2];
    size_t storage[3];
    ember_plan_stats st = {.storage_bytes = storage};
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, &st), EMBER_OK);
    assert_int_equal(plan[0].scheme, EMBER_SHARD_ROW_WISE);
    for (int q = 0; q < 3; q++) assert_true(st.storage_bytes[q] <= pc.memory_per_rank);
    ember_plan_release(ctx, plan, 2);
    // Too little memory in total: the table is named.
    pc.memory_per_rank = (size_t)60 << 20;
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, NULL), EMBER_ERR_NOMEM);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "'huge'"));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0); // a failed plan leaves nothing allocated
    ember_ctx_destroy(ctx);
}

static void allowed_schemes_and_bad_inputs(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t[3] = {table("a", 5000, 128), table("b", 300, 8), table("c", 80000, 128)};
    ember_feature_config f[3] = {{"x", 0}, {"y", 1}, {"z", 2}};
    ember_ebc_config ec = {t, 3, f, 3, EMBER_BOUNDS_ERROR, 1, 0, 0};
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = 2;
    pc.allow = 1 << EMBER_SHARD_TABLE_WISE;
    ember_table_plan plan[3];
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, NULL), EMBER_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(plan[i].scheme, EMBER_SHARD_TABLE_WISE);
        assert_true(plan[i].num_ranks == 1 && plan[i].ranks[0] >= 0 && plan[i].ranks[0] < 2);
    }
    ember_plan_release(ctx, plan, 3);
    assert_true(plan[0].ranks == NULL && plan[0].num_ranks == 0);
    pc.world_size = 0;
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, NULL), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "world size 0"));
    pc.world_size = 2;
    pc.batch_size = 0;
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_plan_create(ctx, NULL, &pc, plan, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// Grid is offered only when pc->allow names it: then a 2 x (W / 2) grid over distinct ranks that
// the sharded collection accepts; the default allow never picks it.
static void grid_only_when_allowed(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t[1] = {table("g", 100000, 64)};
    ember_feature_config f[1] = {{"x", 0}};
    ember_ebc_config ec = {t, 1, f, 1, EMBER_BOUNDS_ERROR, 1, 0, 0};
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = 4;
    pc.batch_size = 256;
    ember_table_plan plan[1];
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, NULL), EMBER_OK);
    assert_int_not_equal(plan[0].scheme, EMBER_SHARD_GRID);
    ember_plan_release(ctx, plan, 1);
    pc.allow = 1 << EMBER_SHARD_GRID;
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, NULL), EMBER_OK);
    assert_int_equal(plan[0].scheme, EMBER_SHARD_GRID);
    assert_int_equal(plan[0].num_shards, 2);
    assert_int_equal(plan[0].group_size, 2);
    int seen = 0;
    for (int i = 0; i < 4; i++) seen |= 1 << plan[0].ranks[i];
    assert_int_equal(seen, 0xf);
    size_t total = 0;
    for (int q = 0; q < 4; q++) {
        size_t w = 0, st = 0;
        assert_int_equal(ember_shard_rank_bytes(ctx, &t[0], &plan[0], 4, q, &w, &st), EMBER_OK);
        total += w;
    }
    assert_int_equal(total, (size_t)100000 * 64 * 4);
    char buf[256];
    ember_plan_describe(&ec, plan, buf, sizeof buf);
    assert_non_null(strstr(buf, "g grid_shard ranks="));
    ember_plan_release(ctx, plan, 1);
    ember_ctx_destroy(ctx);
}

// No rank ceiling: 4096 ranks (every scheme allowed, grid included) give a plan the sharded
// collection accepts, within the memory budget, with every byte of every table placed, and a
// description that lists every rank.
static void plans_for_4096_ranks(void **state) {
    (void)state;
    enum { W = 4096, T = 8 };
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t[T] = {table("huge", 40000000, 128), table("big", 4000000, 64), table("mid0", 400000, 64),
                               table("mid1", 400000, 32),    table("wide", 100000, 256), table("s0", 5000, 16),
                               table("s1", 300, 8),          table("one", 1, 4)};
    t[0].optim.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    t[4].optim.kind = EMBER_OPT_ADAM;
    ember_feature_config f[T] = {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}, {"e", 4}, {"g", 5}, {"h", 6}, {"i", 7}};
    ember_ebc_config ec = {t, T, f, T, EMBER_BOUNDS_ERROR, 1, 0, 0};
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = W;
    pc.batch_size = 64;
    pc.allow = 0x1f | (1 << EMBER_SHARD_GRID);
    pc.memory_per_rank = (size_t)64 << 20; // "huge" (20.5 GB) fits only split over many ranks
    ember_table_plan plan[T];
    size_t *storage = calloc(W, sizeof *storage);
    double *step = calloc(W, sizeof *step);
    assert_true(storage && step);
    ember_plan_stats st = {.storage_bytes = storage, .step_bytes = step};
    assert_int_equal(ember_plan_create(ctx, &ec, &pc, plan, &st), EMBER_OK);
    size_t placed = 0, want = 0;
    for (int q = 0; q < W; q++) assert_true(storage[q] <= pc.memory_per_rank);
    for (int i = 0; i < T; i++) {
        assert_int_equal(plan[i].num_ranks, ember_table_plan_ranks_needed(&plan[i]));
        for (int k = 0; k < plan[i].num_ranks; k++) assert_true(plan[i].ranks[k] >= 0 && plan[i].ranks[k] < W);
        size_t w = 0, s = 0, tw = 0, ts = 0;
        ember_table_config_bytes(&t[i], &tw, &ts);
        want += plan[i].scheme == EMBER_SHARD_DATA_PARALLEL ? (size_t)W * (tw + ts) : tw + ts;
        for (int q = 0; q < W; q++) {
            assert_int_equal(ember_shard_rank_bytes(ctx, &t[i], &plan[i], W, q, &w, &s), EMBER_OK);
            placed += w + s;
        }
    }
    assert_int_equal(placed, want);
    assert_int_not_equal(plan[0].scheme, EMBER_SHARD_TABLE_WISE); // 20.5 GB on one 64 MiB rank: no
    // The description lists every rank of every table.
    const size_t need = ember_plan_describe(&ec, plan, NULL, 0);
    char *text = malloc(need + 1);
    assert_non_null(text);
    assert_int_equal(ember_plan_describe(&ec, plan, text, need + 1), need);
    int lines = 0;
    for (const char *c = text; *c; c++) lines += *c == '\n';
    assert_int_equal(lines, T);
    for (int i = 0; i < T; i++) {
        if (plan[i].num_ranks < 2) continue;
        char last[48];
        snprintf(last, sizeof last, ",%d\n", (int)plan[i].ranks[plan[i].num_ranks - 1]);
        assert_non_null(strstr(text, last));
    }
    free(text);
    ember_plan_release(ctx, plan, T);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    free(storage);
    free(step);
    ember_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_tables_are_data_parallel_equal_tables_spread),
        cmocka_unit_test(memory_budget_forces_row_wise_and_is_respected),
        cmocka_unit_test(allowed_schemes_and_bad_inputs),
        cmocka_unit_test(grid_only_when_allowed),
        cmocka_unit_test(plans_for_4096_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
