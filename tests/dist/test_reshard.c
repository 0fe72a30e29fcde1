// Resharding a running collection (ember_sebc_reshard): after a few training steps under one
// plan, a reshard to another gives every tensor of every table bitwise what a collection created
// with the new plan and loaded from a checkpoint of the old one holds, and the step after it
// (outputs, tables, step counters) is bitwise that collection's step, for pairs of plans covering
// every scheme (mixed plans, to and from data-parallel, other column splits), with per-row and
// element-wise optimizer state, an fp16 table, a one-row table, a hashed and a tiered table and
// rounds of a few bytes. A reshard between backward_start and finish, and a plan create refuses,
// fail on every rank and change nothing; a forward's backward after a reshard is refused.
#define _POSIX_C_SOURCE 200809L // mkdtemp
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"
#include "gen.h"
#include "mpi_assert.h"
#include "plans.h"
#include "tmpdir.h"

#define NT 5
#define NF 6
static const int64_t ROWS[NT] = {7, 1, 50, 13, 20};
static const int32_t DIMS[NT] = {4, 3, 8, 6, 4};
static const int32_t FTAB[NF] = {0, 1, 2, 3, 4, 2};
static const ember_optim_kind OPTS[NT] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM, EMBER_OPT_SGD,
                                          EMBER_OPT_ADAGRAD, EMBER_OPT_ROWWISE_ADAGRAD};
static int W, R;

enum { MIXED = 100 };

typedef struct setup {
    ember_table_config tables[NT];
    ember_feature_config features[NF];
    char names[NT + NF][8];
    ember_ebc_config cfg;
} setup;

// special: table 4 hashed (buckets of 2 rows, an id's row at its second occurrence) and table 2
// tiered (a cache of 32 of its 50 rows, files under /tmp).
static void make_setup(setup *su, int special) {
    memset(su, 0, sizeof *su);
    for (int t = 0; t < NT; t++) {
        snprintf(su->names[t], 8, "t%d", t);
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = OPTS[t];
        o.lr = OPTS[t] == EMBER_OPT_SGD ? 0.5f : 0.05f;
        ember_table_config *tc = &su->tables[t];
        *tc = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc->name = su->names[t], tc->rows = ROWS[t], tc->dim = DIMS[t];
        tc->pooling = t % 2 ? EMBER_POOL_MEAN : EMBER_POOL_SUM;
        tc->dtype = t == 2 ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
        tc->init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f}, tc->optim = o;
        if (special && t == 4)
            tc->hash = (ember_hash_config){.enabled = 1, .bucket_rows = 2, .min_count = 2, .policy = EMBER_EVICT_LRU};
        if (special && t == 2) tc->cache_rows = 32;
    }
    for (int f = 0; f < NF; f++) {
        snprintf(su->names[NT + f], 8, "f%d", f);
        su->features[f] = (ember_feature_config){.name = su->names[NT + f], .table = FTAB[f]};
    }
    su->cfg = (ember_ebc_config){.tables = su->tables, .num_tables = NT, .features = su->features, .num_features = NF,
                                 .bounds = EMBER_BOUNDS_ERROR, .seed = 5, .ssd_dir = special ? "/tmp" : NULL};
}

// Every table under scheme sc (MIXED: table t under scheme t % 5), ranks in store.
static void make_plan(int sc, ember_table_plan *plan, int32_t (*store)[8]) {
    for (int t = 0; t < NT; t++) {
        const ember_shard_scheme s = sc == MIXED ? (ember_shard_scheme)(t % 5) : (ember_shard_scheme)sc;
        plan[t] = test_plan_for(s, t, DIMS[t], W, store[t]);
    }
}

static void check_ok(ember_ctx *ctx, ember_status st, const char *what) {
    if (st != EMBER_OK) fprintf(stderr, "rank %d: %s: %s\n", R, what, ember_ctx_errmsg(ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
}

// One training step on this rank's batch of step k: out receives the forward.
static void train_step(ember_ctx *ctx, ember_sebc *s, int k, float *out, int64_t *nout) {
    int64_t rows[NF];
    for (int f = 0; f < NF; f++) rows[f] = ROWS[FTAB[f]];
    test_rng rng = {(uint64_t)k * 1000003u + (uint64_t)R * 7919u + 11};
    const int32_t B = (R == 0 && k == 1) ? 0 : 1 + (int32_t)rng_int(&rng, 3 + R);
    gen_kjt g;
    gen_kjt_make(&g, &rng, NF, B, rows, 4, 0.3, k % 2);
    const int64_t n = (int64_t)B * ember_sebc_output_dim(s);
    float *grad = malloc(sizeof(float) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) grad[i] = (float)(rng_uniform(&rng) * 2 - 1);
    check_ok(ctx, ember_sebc_forward(s, &g.kjt, out), "forward");
    check_ok(ctx, ember_sebc_backward(s, &g.kjt, grad), "backward");
    *nout = n;
    free(grad);
    gen_kjt_free(&g);
}

// Every tensor of every table of a and b, gathered: bitwise equal; and their step counters.
static bool tables_equal(ember_ctx *ctx, const setup *su, ember_sebc *a, ember_sebc *b) {
    bool ok = true;
    for (int t = 0; t < NT; t++) {
        ember_tensor_info info[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(&su->tables[t], info);
        for (int32_t k = 0; k < n; k++) {
            // As fp32, or a hashed table's int64 id map as int64.
            const ember_dtype dt = info[k].dtype == EMBER_DTYPE_I64 ? EMBER_DTYPE_I64 : EMBER_DTYPE_F32;
            const size_t m = (size_t)(info[k].rows * info[k].cols) * ember_dtype_size(dt);
            void *x = malloc(m), *y = malloc(m);
            check_ok(ctx, ember_sebc_read_as(a, t, info[k].name, dt, x, -1), "read");
            check_ok(ctx, ember_sebc_read_as(b, t, info[k].name, dt, y, -1), "read");
            if (memcmp(x, y, m) != 0) {
                fprintf(stderr, "rank %d: table %d %s differs\n", R, t, info[k].name);
                ok = false;
            }
            free(x);
            free(y);
        }
        int64_t sa = -1, sb = -2;
        check_ok(ctx, ember_sebc_step(a, t, &sa), "step");
        check_ok(ctx, ember_sebc_step(b, t, &sb), "step");
        ok = ok && sa == sb;
    }
    return ok;
}

// A directory every rank sees (rank 0 makes it).
static void shared_dir(char *dir, size_t cap) {
    if (R == 0) {
        snprintf(dir, cap, "/tmp/ember-reshard-XXXXXX");
        if (!mkdtemp(dir)) dir[0] = '\0';
    }
    MPI_Bcast(dir, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, dir[0] != '\0');
}

// Plan `from`, two steps (a learning rate changed between them), then a reshard to `to` in rounds
// of `chunk` bytes against a collection made with `to` and loaded from a checkpoint taken just
// before it; then one more step on both.
static void reshard_pair(int from, int to, size_t chunk, int special) {
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    setup su;
    make_setup(&su, special);
    ember_table_plan p1[NT], p2[NT];
    int32_t r1[NT][8], r2[NT][8];
    make_plan(from, p1, r1);
    make_plan(to, p2, r2);
    ember_sebc *A = NULL, *B = NULL;
    check_ok(ctx, ember_sebc_create(comm, &su.cfg, p1, EMBER_GRAD_MEAN, &A), "create");
    check_ok(ctx, ember_sebc_set_wire_precision(A, EMBER_DTYPE_F32, EMBER_DTYPE_BF16), "wire");
    float out[2][8 * 32];
    int64_t n[2];
    train_step(ctx, A, 0, out[0], &n[0]);
    check_ok(ctx, ember_sebc_set_lr(A, 1, 0.01f), "lr");
    train_step(ctx, A, 1, out[0], &n[0]);
    char dir[64], ck[96];
    shared_dir(dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    check_ok(ctx, ember_checkpoint_save(A, ck, NULL), "save");
    ember_reshard_stats stats = {0};
    check_ok(ctx, ember_sebc_reshard(A, p2, chunk, &stats), "reshard");
    check_ok(ctx, ember_sebc_create(comm, &su.cfg, p2, EMBER_GRAD_MEAN, &B), "create new");
    check_ok(ctx, ember_checkpoint_load(B, ck, NULL), "load");
    check_ok(ctx, ember_sebc_set_lr(B, 1, 0.01f), "lr");
    check_ok(ctx, ember_sebc_set_wire_precision(B, EMBER_DTYPE_F32, EMBER_DTYPE_BF16), "wire");
    bool ok = tables_equal(ctx, &su, A, B);
    ember_dtype wf, wb;
    ember_sebc_wire_precision(A, &wf, &wb);
    ok = ok && wf == EMBER_DTYPE_F32 && wb == EMBER_DTYPE_BF16 && ember_sebc_table(A, 1)->optim.lr == 0.01f;
    train_step(ctx, A, 2, out[0], &n[0]);
    train_step(ctx, B, 2, out[1], &n[1]);
    ok = ok && n[0] == n[1] && memcmp(out[0], out[1], sizeof(float) * (size_t)n[0]) == 0;
    ok = ok && tables_equal(ctx, &su, A, B);
    // Bytes: what one rank sent another received; nothing leaves one process.
    uint64_t b[2] = {stats.bytes_sent, stats.bytes_received};
    MPI_Allreduce(MPI_IN_PLACE, b, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    ok = ok && b[0] == b[1] && (W > 1 || b[0] == 0) && stats.seconds >= 0;
    if (!ok) fprintf(stderr, "rank %d: FAILED reshard %d -> %d (chunk %zu, special %d)\n", R, from, to, chunk, special);
    if (R == 0)
        printf("W=%d %d -> %d%s: %llu bytes moved, %.3f ms\n", W, from, to, special ? " (hashed, tiered)" : "",
               (unsigned long long)b[0], stats.seconds * 1e3);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    ember_sebc_destroy(A);
    ember_sebc_destroy(B);
    MPI_Barrier(MPI_COMM_WORLD);
    if (R == 0) test_remove_tree(dir);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

static void plans_equal_a_loaded_collection(void **state) {
    (void)state;
    static const int pairs[][2] = {
        {MIXED, EMBER_SHARD_TABLE_WISE},      {EMBER_SHARD_TABLE_WISE, EMBER_SHARD_ROW_WISE},
        {EMBER_SHARD_ROW_WISE, EMBER_SHARD_COLUMN_WISE}, {EMBER_SHARD_COLUMN_WISE, EMBER_SHARD_DATA_PARALLEL},
        {EMBER_SHARD_DATA_PARALLEL, MIXED},   {EMBER_SHARD_TABLE_ROW_WISE, EMBER_SHARD_GRID},
        {EMBER_SHARD_GRID, EMBER_SHARD_TABLE_ROW_WISE}, {MIXED, MIXED},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        if ((pairs[i][0] == EMBER_SHARD_GRID || pairs[i][1] == EMBER_SHARD_GRID) && W < 2) continue;
        reshard_pair(pairs[i][0], pairs[i][1], i % 2 ? 0 : 40, 0); // 40 bytes: a row or two a round
    }
}

// A hashed table (its id map and candidates move with its rows, whole buckets a round) and a
// tiered one (rows in its file and cache), under the schemes they take.
static void hashed_and_tiered(void **state) {
    (void)state;
    static const int pairs[][2] = {{EMBER_SHARD_TABLE_WISE, EMBER_SHARD_ROW_WISE},
                                   {EMBER_SHARD_ROW_WISE, EMBER_SHARD_COLUMN_WISE},
                                   {EMBER_SHARD_COLUMN_WISE, EMBER_SHARD_TABLE_ROW_WISE},
                                   {EMBER_SHARD_TABLE_ROW_WISE, EMBER_SHARD_TABLE_WISE}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) reshard_pair(pairs[i][0], pairs[i][1], i % 2 ? 0 : 40, 1);
}

// Refusals: between backward_start and finish (EMBER_ERR_STATE), and a plan with a rank outside
// the communicator (create's refusal); each on every rank, the collection unchanged and usable.
static void refusals_change_nothing(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    setup su;
    make_setup(&su, 0);
    ember_table_plan p1[NT], p2[NT];
    int32_t r1[NT][8], r2[NT][8];
    make_plan(EMBER_SHARD_ROW_WISE, p1, r1);
    make_plan(EMBER_SHARD_TABLE_WISE, p2, r2);
    ember_sebc *A = NULL, *B = NULL;
    check_ok(ctx, ember_sebc_create(comm, &su.cfg, p1, EMBER_GRAD_MEAN, &A), "create");
    check_ok(ctx, ember_sebc_create(comm, &su.cfg, p1, EMBER_GRAD_MEAN, &B), "create");
    float out[8 * 32];
    int64_t n;
    train_step(ctx, A, 0, out, &n);
    train_step(ctx, B, 0, out, &n);
    // Between the halves of a backward.
    int64_t rows[NF];
    for (int f = 0; f < NF; f++) rows[f] = ROWS[FTAB[f]];
    test_rng rng = {99u + (uint64_t)R};
    gen_kjt g;
    gen_kjt_make(&g, &rng, NF, 2, rows, 3, 0.2, 0);
    float grad[2 * 64];
    for (int i = 0; i < 2 * 64; i++) grad[i] = 0.25f;
    check_ok(ctx, ember_sebc_forward(A, &g.kjt, out), "forward");
    check_ok(ctx, ember_sebc_forward(B, &g.kjt, out), "forward");
    check_ok(ctx, ember_sebc_backward_start(A, &g.kjt, grad), "backward_start");
    ember_status st = ember_sebc_reshard(A, p2, 0, NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_STATE && strstr(ember_ctx_errmsg(ctx), "ember_sebc_reshard") != NULL);
    check_ok(ctx, ember_sebc_backward_finish(A), "backward_finish");
    check_ok(ctx, ember_sebc_backward(B, &g.kjt, grad), "backward");
    gen_kjt_free(&g);
    // A rank outside the communicator in table 1's plan.
    int32_t bad_rank = W;
    ember_table_plan bad[NT];
    memcpy(bad, p2, sizeof bad);
    bad[1] = (ember_table_plan){.scheme = EMBER_SHARD_TABLE_WISE, .ranks = &bad_rank, .num_ranks = 1};
    st = ember_sebc_reshard(A, bad, 0, NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_reshard(A, NULL, 0, NULL) == EMBER_ERR_INVALID_ARG);
    // A and B, which took no reshard, still step alike.
    bool ok = tables_equal(ctx, &su, A, B);
    float oa[8 * 32], ob[8 * 32];
    int64_t na, nb;
    train_step(ctx, A, 3, oa, &na);
    train_step(ctx, B, 3, ob, &nb);
    ok = ok && na == nb && memcmp(oa, ob, sizeof(float) * (size_t)na) == 0 && tables_equal(ctx, &su, A, B);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    // A forward, then a reshard: that forward's backward is refused (the reshard forgot it), and
    // the next step works.
    gen_kjt_make(&g, &rng, NF, 2, rows, 3, 0.2, 0);
    check_ok(ctx, ember_sebc_forward(A, &g.kjt, out), "forward");
    check_ok(ctx, ember_sebc_reshard(A, p2, 0, NULL), "reshard after a forward");
    st = ember_sebc_backward(A, &g.kjt, grad);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_STATE);
    gen_kjt_free(&g);
    train_step(ctx, A, 4, oa, &na);
    ember_sebc_destroy(A);
    ember_sebc_destroy(B);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    const struct CMUnitTest tests[] = {cmocka_unit_test(plans_equal_a_loaded_collection), cmocka_unit_test(hashed_and_tiered),
                                       cmocka_unit_test(refusals_change_nothing)};
    const int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
