// Ranks that disagree: on the configuration of a sharded collection (refused on every rank with
// the same message naming the field, the values and the ranks, nothing created, nothing leaked),
// on the KJT a backward goes through (refused, nothing changed), and a NaN per-id weight on one
// rank (NUMERIC everywhere, naming the feature and bag). Collective assertions; W = 1..4.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"
#include "mpi_assert.h"

static int W, R;

typedef struct env {
    ember_ctx *ctx;
    ember_comm *comm;
    ember_table_config t[2];
    ember_feature_config f[2];
    ember_ebc_config cfg;
    ember_table_plan plan[2];
    int32_t ranks[2];
} env;

// Two tables: "user" (30 x 4, row-wise) and "item" (20 x 3, table-wise on the last rank).
static void env_open(env *e) {
    memset(e, 0, sizeof *e);
    assert_int_equal(ember_ctx_create(NULL, &e->ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(e->ctx, MPI_COMM_WORLD, &e->comm), EMBER_OK);
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    o.lr = 0.1f;
    ember_init init = {.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1};
    for (int t = 0; t < 2; t++) {
        e->t[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        e->t[t].init = init, e->t[t].optim = o;
    }
    e->t[0].name = "user", e->t[0].rows = 30, e->t[0].dim = 4;
    e->t[1].name = "item", e->t[1].rows = 20, e->t[1].dim = 3, e->t[1].pooling = EMBER_POOL_MEAN;
    e->f[0] = (ember_feature_config){.name = "u", .table = 0};
    e->f[1] = (ember_feature_config){.name = "i", .table = 1};
    e->cfg = (ember_ebc_config){.tables = e->t, .num_tables = 2, .features = e->f, .num_features = 2,
                                .bounds = EMBER_BOUNDS_ERROR, .seed = 11};
    e->plan[0] = (ember_table_plan){.scheme = EMBER_SHARD_ROW_WISE};
    e->ranks[0] = W - 1;
    e->plan[1] = (ember_table_plan){.scheme = EMBER_SHARD_TABLE_WISE, .num_ranks = 1, .ranks = e->ranks};
}

static void env_close(env *e) {
    ember_comm_destroy(e->comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(e->ctx) == 0);
    ember_ctx_destroy(e->ctx);
}

// Every rank holds exactly `want` as its message (the same text everywhere).
static void same_message_everywhere(ember_ctx *ctx, const char *want) {
    const char *msg = ember_ctx_errmsg(ctx);
    int ok = strstr(msg, want) != NULL;
    if (!ok) fprintf(stderr, "rank %d: message \"%s\" lacks \"%s\"\n", R, msg, want);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    char root[512] = "";
    snprintf(root, sizeof root, "%s", msg);
    MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strncmp(root, msg, sizeof root - 1) == 0);
}

// One field changed on the last rank: create fails on every rank, naming it.
static void refused(env *e, const char *want) {
    ember_sebc *s = (ember_sebc *)&s; // must come back NULL
    size_t before = ember_ctx_bytes_outstanding(e->ctx);
    ember_status st = ember_sebc_create(e->comm, &e->cfg, e->plan, EMBER_GRAD_MEAN, &s);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && s == NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(e->ctx) == before);
    same_message_everywhere(e->ctx, want);
}

static void configurations_must_agree(void **state) {
    (void)state;
    env e;
    char want[256];
    const int odd = W - 1;
    if (W < 2) { // nothing to disagree with: the reference configuration is created
        env_open(&e);
        ember_sebc *s = NULL;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e.comm, &e.cfg, e.plan, EMBER_GRAD_MEAN, &s) == EMBER_OK);
        ember_sebc_destroy(s);
        env_close(&e);
        return;
    }
    // Rows: one rank declares 31 where the others declare 30.
    env_open(&e);
    if (R == odd) e.t[0].rows = 31;
    snprintf(want, sizeof want, "ranks disagree on the configuration: table 'user' rows: 31 on rank %d, 30 on rank 0",
             odd);
    refused(&e, want);
    env_close(&e);
    // The table-wise owner named differently.
    env_open(&e);
    if (R == odd) e.ranks[0] = 0;
    snprintf(want, sizeof want, "table 'item' plan ranks[0]: 0 on rank %d, %d on rank 0", odd, W - 1);
    refused(&e, want);
    env_close(&e);
    // A learning rate, a scheme, a feature's table, the seed.
    env_open(&e);
    if (R == odd) e.t[1].optim.lr = 0.2f;
    snprintf(want, sizeof want, "table 'item' optimizer settings: lr 0.200000003 eps");
    refused(&e, want);
    env_close(&e);
    env_open(&e);
    if (R == odd) e.plan[0].scheme = EMBER_SHARD_DATA_PARALLEL;
    snprintf(want, sizeof want, "table 'user' plan: data_parallel on rank %d, row_wise on rank 0", odd);
    refused(&e, want);
    env_close(&e);
    env_open(&e);
    if (R == odd) e.f[1].table = 0;
    snprintf(want, sizeof want, "feature 1: 'i' of table 'user' on rank %d, 'i' of table 'item' on rank 0", odd);
    refused(&e, want);
    env_close(&e);
    env_open(&e);
    if (R == odd) e.cfg.seed = 12;
    snprintf(want, sizeof want, "seed: 12 on rank %d, 11 on rank 0", odd);
    refused(&e, want);
    env_close(&e);
    // One table fewer on a middle rank (3+ ranks): the count is the first difference.
    env_open(&e);
    if (R == W / 2 && W > 2) e.cfg.num_tables = 1, e.cfg.num_features = 1;
    if (W > 2) {
        snprintf(want, sizeof want, "tables: 1 on rank %d, 2 on rank 0", W / 2);
        refused(&e, want);
    }
    env_close(&e);
    // The gradient convention.
    env_open(&e);
    {
        ember_sebc *s = NULL;
        ember_status st = ember_sebc_create(e.comm, &e.cfg, e.plan, R == odd ? EMBER_GRAD_SUM : EMBER_GRAD_MEAN, &s);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && s == NULL);
        snprintf(want, sizeof want, "gradient convention: sum on rank %d, mean on rank 0", odd);
        same_message_everywhere(e.ctx, want);
    }
    env_close(&e);
    // Workspace hints may differ: the collection is created.
    env_open(&e);
    {
        if (R == odd) e.cfg.max_batch_size = 64;
        ember_sebc *s = NULL;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e.comm, &e.cfg, e.plan, EMBER_GRAD_MEAN, &s) == EMBER_OK);
        ember_sebc_destroy(s);
    }
    env_close(&e);
}

// Backward with a KJT other than the forward's, and a NaN per-id weight.
static void inputs_must_be_what_they_claim(void **state) {
    (void)state;
    env e;
    env_open(&e);
    ember_sebc *s = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e.comm, &e.cfg, e.plan, EMBER_GRAD_MEAN, &s) == EMBER_OK);
    float before[30 * 4], after[30 * 4];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", before, -1) == EMBER_OK);
    // Two samples; bags (u,0) (u,1) (i,0) (i,1); the second "item" bag is empty.
    int32_t len[4] = {2, 1, 1, 0};
    int64_t ids[4] = {3, 29, 7, 19};
    float w[4] = {1.0f, 0.5f, 2.0f, 1.0f};
    ember_kjt k = {.num_features = 2, .batch_size = 2, .lengths = len, .values = ids, .weights = w, .nnz = 4};
    float out[2 * 7], go[2 * 7];
    for (int i = 0; i < 14; i++) go[i] = 0.25f;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK);
    // The last rank's ids changed between forward and backward (same shape).
    int64_t other[4] = {3, 28, 7, 19};
    ember_kjt k2 = k;
    if (R == W - 1) k2.values = other;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k2, go) == EMBER_ERR_INVALID_ARG);
    char want[128];
    snprintf(want, sizeof want, "its lengths, ids or weights differ (rank %d)", W - 1);
    same_message_everywhere(e.ctx, want);
    // A different weight only, on the last rank: also refused.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK);
    float w2[4] = {1.0f, 0.5f, 2.0f, 1.5f};
    k2 = k;
    if (R == W - 1) k2.weights = w2;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k2, go) == EMBER_ERR_INVALID_ARG);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", after, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof before) == 0);
    // The same contents through offsets instead of lengths are the same KJT.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK);
    int64_t offs[5] = {0, 2, 3, 4, 4};
    k2 = (ember_kjt){.num_features = 2, .batch_size = 2, .offsets = offs, .values = ids, .weights = w, .nnz = 4};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k2, go) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", after, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof before) != 0);
    memcpy(before, after, sizeof before);
    // A NaN weight (feature 'i', bag 0) on rank 0 only, and an Inf one.
    float nanw[4] = {1.0f, 0.5f, 2.0f, NAN};
    k2 = k;
    if (R == 0) k2.weights = nanw;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k2, out) == EMBER_ERR_NUMERIC);
    same_message_everywhere(e.ctx, "feature 'i' bag 0: weight 0 of the bag is nan (not finite) (rank 0)");
    nanw[3] = 1.0f;
    nanw[1] = -INFINITY;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k2, out) == EMBER_ERR_NUMERIC);
    same_message_everywhere(e.ctx, "feature 'u' bag 0: weight 1 of the bag is -inf (not finite) (rank 0)");
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k, go) == EMBER_ERR_STATE);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", after, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof before) == 0);
    ember_sebc_destroy(s);
    env_close(&e);
}

// LFQ: the first training forward agrees on the configuration; a module whose ranks agree trains.
static void lfq_configurations_must_agree(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
    cfg.dim = 4;
    cfg.codebook_size = R == W - 1 && W > 1 ? 8 : 16;
    cfg.comm = comm;
    ember_lfq *q = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_lfq_create(ctx, &cfg, &q) == EMBER_OK);
    float x[2 * 4] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, -0.7f, 0.8f}, out[8];
    ember_status st = ember_lfq_forward(q, x, 2, 1, NULL, true, out, NULL, NULL);
    if (W > 1) {
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG);
        char want[128];
        snprintf(want, sizeof want, "ember_lfq_forward: ranks disagree on the configuration: codebook_size: 8 on rank %d, "
                 "16 on rank 0", W - 1);
        same_message_everywhere(ctx, want);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_lfq_backward(q, out, 1.0, NULL) == EMBER_ERR_STATE);
        ember_lfq_destroy(q);
        cfg.codebook_size = 16;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_lfq_create(ctx, &cfg, &q) == EMBER_OK);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_lfq_forward(q, x, 2, 1, NULL, true, out, NULL, NULL) == EMBER_OK);
    ember_lfq_destroy(q);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(configurations_must_agree),
        cmocka_unit_test(inputs_must_be_what_they_claim),
        cmocka_unit_test(lfq_configurations_must_agree),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
