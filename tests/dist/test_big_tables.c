// Tiered and hashed tables sharded over W ranks against one process on the whole batch: a hashed
// table (arbitrary int64 ids, capacity far below the distinct ids: rows are evicted every step)
// and a tiered table (caches far smaller than the table: rows are written back every step) under
// one scheme (--scheme tw|cw|rw|twrw|grid|dp; dp replicates the hashed table, the tiered one is
// then table-wise), ranks with uneven batches, empty bags and duplicate ids, plain and pipelined
// steps (the prefetch stages tiered rows on the owners). Outputs match, and after the steps every row, its optimizer state and the hashed table's
// id map ("ids", exactly) match; a checkpoint saved under this plan loads under another plan and
// both go on as the single process does.
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <mpi.h>

#include "ember.h"
#include "gen.h"
#include "mpi_assert.h"
#include "plans.h"
#include "tmpdir.h"

static int W, R;
static const char *g_scheme = "rw";
static int32_t g_ranks[2][16];

enum { HROWS = 32, BR = 4, TROWS = 90, CACHE = 24, DIM = 4, NF = 3, MAXB = 6, MAXL = 3, NPOOL = 120 };

typedef struct env {
    ember_ctx *ctx;
    ember_comm *comm;
    ember_table_config t[2], ref_t[2];
    ember_feature_config f[NF];
    ember_ebc_config cfg, ref_cfg;
    ember_table_plan plan[2];
    ember_ebc *ref; // the single process, on every rank
    int64_t pool[NPOOL];
    char dir[64];
} env;

static void env_open(env *e, ember_evict_policy pol) {
    memset(e, 0, sizeof *e);
    assert_int_equal(ember_ctx_create(NULL, &e->ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(e->ctx, MPI_COMM_WORLD, &e->comm), EMBER_OK);
    ember_table_config h = EMBER_TABLE_CONFIG_DEFAULT, t = EMBER_TABLE_CONFIG_DEFAULT;
    h.name = "h", h.rows = HROWS, h.dim = DIM;
    h.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
    h.optim.kind = EMBER_OPT_ROWWISE_ADAGRAD, h.optim.lr = 0.1f, h.optim.initial_accumulator = 0.1f;
    h.hash = (ember_hash_config){.enabled = 1, .bucket_rows = BR, .min_count = pol == EMBER_EVICT_LFU ? 2 : 1,
                                 .policy = pol, .ttl_steps = 2};
    t = h;
    t.name = "t", t.rows = TROWS, t.hash = (ember_hash_config){.enabled = 0, .policy = EMBER_EVICT_LRU};
    t.pooling = EMBER_POOL_MEAN, t.cache_rows = CACHE, t.cache_policy = pol == EMBER_EVICT_LFU ? pol : EMBER_EVICT_LRU;
    e->t[0] = h, e->t[1] = t;
    e->ref_t[0] = h, e->ref_t[1] = t;
    e->ref_t[1].cache_rows = 0; // the reference keeps the tiered table in RAM: the same numbers
    e->f[0] = (ember_feature_config){.name = "user", .table = 0};
    e->f[1] = (ember_feature_config){.name = "item", .table = 1};
    e->f[2] = (ember_feature_config){.name = "page", .table = 0};
    ember_ebc_config c = EMBER_EBC_CONFIG_DEFAULT;
    c.tables = e->t, c.num_tables = 2, c.features = e->f, c.num_features = NF, c.seed = 21;
    if (R == 0) {
        snprintf(e->dir, sizeof e->dir, "/tmp/ember_big_XXXXXX");
        assert_non_null(mkdtemp(e->dir));
    }
    MPI_Bcast(e->dir, sizeof e->dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    c.ssd_dir = e->dir;
    e->cfg = c;
    e->ref_cfg = c;
    e->ref_cfg.tables = e->ref_t;
    assert_int_equal(ember_ebc_create(e->ctx, &e->ref_cfg, &e->ref), EMBER_OK);
    e->plan[0] = test_plan_named(g_scheme, W, g_ranks[0]);
    e->plan[1] = test_plan_named(strcmp(g_scheme, "dp") ? g_scheme : "tw", W, g_ranks[1]); // no tiered replicas
    test_rng r = {5};
    for (int i = 0; i < NPOOL; i++) e->pool[i] = (int64_t)rng_next(&r) >> (i % 3 ? 0 : 50); // small and huge, +/-
}

static void env_close(env *e) {
    ember_ebc_destroy(e->ref);
    ember_comm_destroy(e->comm);
    ember_ctx_destroy(e->ctx);
    MPI_Barrier(MPI_COMM_WORLD);
    if (R == 0) test_remove_tree(e->dir);
}

// Rank q's batch at `step`: B = 2 + q % 3 samples (uneven), lengths 0..MAXL-1, ids drawn with
// repeats (hashed features from the pool, the tiered feature from its rows).
typedef struct batch {
    int32_t B;
    int32_t len[NF * MAXB];
    int64_t ids[NF * MAXB * MAXL];
    int64_t nnz;
} batch;

static void make_batch(const env *e, int q, int step, batch *b) {
    test_rng r = {(uint64_t)(1000 * step + q + 1)};
    b->B = 2 + q % 3;
    b->nnz = 0;
    for (int f = 0; f < NF; f++)
        for (int s = 0; s < b->B; s++) {
            const int n = (int)rng_int(&r, MAXL);
            b->len[f * b->B + s] = n;
            for (int j = 0; j < n; j++)
                b->ids[b->nnz++] = f == 1 ? rng_int(&r, TROWS) : e->pool[rng_int(&r, NPOOL)];
        }
}

// The global batch (ranks' samples in rank order, feature-major) and the offset of each rank's
// first sample.
typedef struct global {
    int32_t B, first[16];
    int32_t len[16 * NF * MAXB];
    int64_t ids[16 * NF * MAXB * MAXL];
    ember_kjt k;
} global;

static void make_global(const env *e, int step, global *g) {
    batch b[16];
    int32_t B[16];
    const int32_t *len[16];
    const int64_t *ids[16];
    g->B = 0;
    for (int q = 0; q < W; q++) {
        make_batch(e, q, step, &b[q]);
        B[q] = b[q].B, len[q] = b[q].len, ids[q] = b[q].ids;
        g->B += b[q].B;
    }
    const int64_t n = gen_global_batch(W, NF, B, len, ids, g->len, g->ids, g->first);
    g->k = (ember_kjt){.num_features = NF, .batch_size = g->B, .lengths = g->len, .values = g->ids, .nnz = n};
}

static float grad_of(int step, int sample, int col) {
    return (float)((sample * 7 + col * 3 + step) % 11) / 11.0f - 0.45f;
}

// Steps [s0, s1): the sharded collection on this rank's batch, the reference on the global one.
// Pipelined: each step prefetches the next batch (after the forward on even steps, between the
// backward's start and finish on odd ones), so the tiered rows are read ahead while the step runs.
static void prefetch_next(env *e, ember_sebc *s, int step) {
    batch n;
    make_batch(e, R, step + 1, &n);
    ember_kjt k = {.num_features = NF, .batch_size = n.B, .lengths = n.len, .values = n.ids, .nnz = n.nnz};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_prefetch(s, &k) == EMBER_OK);
}

static void run(env *e, ember_sebc *s, int s0, int s1, bool pipelined) {
    const int D = NF * DIM;
    for (int step = s0; step < s1; step++) {
        batch b;
        make_batch(e, R, step, &b);
        global g;
        make_global(e, step, &g);
        ember_kjt k = {.num_features = NF, .batch_size = b.B, .lengths = b.len, .values = b.ids, .nnz = b.nnz};
        const bool next = pipelined && step + 1 < s1;
        float out[MAXB * NF * DIM], go[MAXB * NF * DIM];
        float *ref = calloc((size_t)g.B * D, sizeof(float)), *gref = calloc((size_t)g.B * D, sizeof(float));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK);
        if (next && step % 2 == 0) prefetch_next(e, s, step);
        assert_int_equal(ember_ebc_forward(e->ref, &g.k, ref), EMBER_OK);
        bool ok = true;
        for (int i = 0; i < b.B * D; i++) {
            const float x = ref[(size_t)g.first[R] * D + i];
            if (!(out[i] - x <= 1e-5f + 1e-5f * (x < 0 ? -x : x) && x - out[i] <= 1e-5f + 1e-5f * (x < 0 ? -x : x))) {
                if (ok) fprintf(stderr, "rank %d step %d: out[%d] = %g, one process %g\n", R, step, i, (double)out[i], (double)x);
                ok = false;
            }
        }
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
        for (int sa = 0; sa < g.B; sa++)
            for (int c = 0; c < D; c++) gref[sa * D + c] = grad_of(step, sa, c);
        memcpy(go, gref + (size_t)g.first[R] * D, sizeof(float) * (size_t)b.B * D);
        if (pipelined) {
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward_start(s, &k, go) == EMBER_OK);
            if (next && step % 2 == 1) prefetch_next(e, s, step);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward_finish(s) == EMBER_OK);
        } else {
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k, go) == EMBER_OK);
        }
        assert_int_equal(ember_ebc_backward(e->ref, &g.k, gref, NULL), EMBER_OK);
        free(ref);
        free(gref);
    }
}

// Every tensor of both tables, gathered from the shards, against the reference.
static void compare(env *e, ember_sebc *s) {
    for (int t = 0; t < 2; t++) {
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int nt = ember_table_tensors(&e->t[t], ti);
        for (int k = 0; k < nt; k++) {
            const size_t es = ti[k].dtype == EMBER_DTYPE_I64 ? 8 : 4, n = (size_t)ti[k].rows * (size_t)ti[k].cols;
            const ember_dtype dt = ti[k].dtype == EMBER_DTYPE_I64 ? EMBER_DTYPE_I64 : EMBER_DTYPE_F32;
            void *a = calloc(n, es), *b = calloc(n, es);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read_as(s, t, ti[k].name, dt, a, -1) == EMBER_OK);
            assert_int_equal(ember_ebc_read(e->ref, t, ti[k].name, 0, ti[k].rows, dt, b), EMBER_OK);
            bool ok = true;
            if (dt == EMBER_DTYPE_I64) {
                ok = memcmp(a, b, n * es) == 0;
            } else {
                for (size_t i = 0; i < n; i++) {
                    const float x = ((float *)b)[i], y = ((float *)a)[i], d = x > y ? x - y : y - x;
                    if (d > 1e-5f + 1e-4f * (x < 0 ? -x : x)) ok = false;
                }
            }
            if (!ok && R == 0) fprintf(stderr, "table %s tensor %s differs\n", e->t[t].name, ti[k].name);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
            free(a);
            free(b);
        }
        int64_t step = -1;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_step(s, t, &step) == EMBER_OK && step == ember_ebc_step(e->ref, t));
    }
}

static void equals_one_process(void **state) {
    (void)state;
    for (int pol = EMBER_EVICT_LRU; pol <= EMBER_EVICT_TTL; pol++) {
        env e;
        env_open(&e, (ember_evict_policy)pol);
        ember_sebc *s = NULL;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e.comm, &e.cfg, e.plan, EMBER_GRAD_SUM, &s) == EMBER_OK);
        run(&e, s, 0, 4, false);
        run(&e, s, 4, 8, true);
        compare(&e, s);
        ember_tier_stats ts;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_tier_stats(s, 0, &ts) == EMBER_ERR_INVALID_ARG); // hashed
        ember_hash_stats hs = {0};
        ember_ebc_hash_stats(e.ref, 0, &hs);
        assert_true(pol != EMBER_EVICT_LRU || hs.evicted > 0); // and the shards followed it
        assert_true(hs.admitted > 0);
        // Evaluation changes nothing: no admission, no clock, no update.
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_set_training(s, 0) == EMBER_OK);
        batch b;
        make_batch(&e, R, 99, &b);
        ember_kjt k = {.num_features = NF, .batch_size = b.B, .lengths = b.len, .values = b.ids, .nnz = b.nnz};
        float out[MAXB * NF * DIM];
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK);
        compare(&e, s);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_set_training(s, 1) == EMBER_OK);
        // A checkpoint under this plan, loaded under another (row-wise <-> table-wise): both go
        // on as the single process.
        char ck[128];
        snprintf(ck, sizeof ck, "%s/ckpt", e.dir);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(s, ck, NULL) == EMBER_OK);
        ember_table_plan other[2];
        const char *o = strcmp(g_scheme, "tw") ? "tw" : "rw";
        other[0] = test_plan_named(o, W, g_ranks[0]);
        other[1] = test_plan_named(o, W, g_ranks[1]);
        ember_sebc *s2 = NULL;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e.comm, &e.cfg, other, EMBER_GRAD_SUM, &s2) == EMBER_OK);
        const ember_status ls = ember_checkpoint_load(s2, ck, NULL);
        if (ls != EMBER_OK) fprintf(stderr, "%s\n", ember_ctx_errmsg(e.ctx));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ls == EMBER_OK);
        compare(&e, s2);
        run(&e, s2, 8, 11, true); // s2 and the reference
        compare(&e, s2);
        ember_sebc_destroy(s2);
        ember_sebc_destroy(s);
        env_close(&e);
    }
}

// The pipelined step on a tiered table whose rows go to the file and come back (caches of 3W
// rows, each rank's 3 ids a step drawn from rows [0, 3W) on even steps, [3W, 6W) on odd ones): the
// owners ask for the file rows the next forward reads (prefetched > 0 over the ranks), and every
// output and, at the end, every tensor are bitwise those of the same collection stepped plainly.
static void pipelined_reads_rows_ahead(void **state) {
    (void)state;
    enum { ROWS = 256, STEPS = 24, L = 3 };
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    char dir[64] = "/tmp/ember_stage_XXXXXX";
    if (R == 0) assert_non_null(mkdtemp(dir));
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t", t.rows = ROWS, t.dim = DIM, t.cache_rows = L * W;
    t.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
    t.optim.kind = EMBER_OPT_ADAM, t.optim.lr = 0.05f;
    ember_feature_config f = {.name = "item", .table = 0};
    ember_ebc_config c = EMBER_EBC_CONFIG_DEFAULT;
    c.tables = &t, c.num_tables = 1, c.features = &f, c.num_features = 1, c.seed = 3, c.ssd_dir = dir;
    ember_table_plan plan = test_plan_named(strcmp(g_scheme, "dp") ? g_scheme : "tw", W, g_ranks[0]);
    ember_sebc *a = NULL, *b = NULL; // pipelined, plain
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(comm, &c, &plan, EMBER_GRAD_SUM, &a) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(comm, &c, &plan, EMBER_GRAD_SUM, &b) == EMBER_OK);
    int32_t len[STEPS + 1] = {0};
    int64_t ids[STEPS + 1][L];
    ember_kjt k[STEPS + 1];
    for (int st = 0; st <= STEPS; st++) {
        test_rng r = {(uint64_t)(7919 * st + R + 1)};
        len[st] = L;
        for (int j = 0; j < L; j++) ids[st][j] = (st % 2) * L * W + rng_int(&r, L * W);
        k[st] = (ember_kjt){.num_features = 1, .batch_size = 1, .lengths = &len[st], .values = ids[st], .nnz = L};
    }
    for (int st = 0; st < STEPS; st++) {
        float oa[DIM], ob[DIM], g[DIM];
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(a, &k[st], oa) == EMBER_OK);
        if (st % 2 == 0) MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_prefetch(a, &k[st + 1]) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(b, &k[st], ob) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(oa, ob, sizeof oa) == 0);
        for (int d = 0; d < DIM; d++) g[d] = grad_of(st, R, d);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward_start(a, &k[st], g) == EMBER_OK);
        if (st % 2 == 1) MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_prefetch(a, &k[st + 1]) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward_finish(a) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(b, &k[st], g) == EMBER_OK);
    }
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int nt = ember_table_tensors(&t, ti);
    for (int i = 0; i < nt; i++) {
        const size_t n = (size_t)ti[i].rows * (size_t)ti[i].cols;
        float *x = calloc(n, sizeof(float)), *y = calloc(n, sizeof(float));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read_as(a, 0, ti[i].name, EMBER_DTYPE_F32, x, -1) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read_as(b, 0, ti[i].name, EMBER_DTYPE_F32, y, -1) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(x, y, n * sizeof(float)) == 0);
        free(x);
        free(y);
    }
    ember_tier_stats sa, sb;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_tier_stats(a, 0, &sa) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_tier_stats(b, 0, &sb) == EMBER_OK);
    int64_t v[4] = {sa.prefetched, sb.prefetched, sa.rows_read, sa.misses - sb.misses};
    MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (R == 0) fprintf(stderr, "pipelined: %lld of %lld file reads prefetched\n", (long long)v[0], (long long)v[2]);
    assert_true(v[0] > 0 && v[1] == 0 && v[2] > 0 && v[3] == 0); // the same misses, rows read ahead
    ember_sebc_destroy(a);
    ember_sebc_destroy(b);
    ember_comm_destroy(comm);
    ember_ctx_destroy(ctx);
    MPI_Barrier(MPI_COMM_WORLD);
    if (R == 0) test_remove_tree(dir);
}

// Plans the tables cannot take are refused on every rank, naming the table.
static void refused_plans(void **state) {
    (void)state;
    env e;
    env_open(&e, EMBER_EVICT_LRU);
    ember_table_plan p[2] = {test_plan_named("tw", W, g_ranks[0]), test_plan_named("dp", W, g_ranks[1])};
    ember_sebc *s = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e.comm, &e.cfg, p, EMBER_GRAD_SUM, &s) == EMBER_ERR_UNSUPPORTED);
    e.t[0].pooling = EMBER_POOL_MEAN;
    p[0] = test_plan_named("rw", W, g_ranks[0]);
    p[1] = test_plan_named("rw", W, g_ranks[1]);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e.comm, &e.cfg, p, EMBER_GRAD_SUM, &s) == EMBER_ERR_UNSUPPORTED);
    assert_null(s);
    env_close(&e);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--scheme")) g_scheme = argv[i + 1];
    const struct CMUnitTest tests[] = {cmocka_unit_test(equals_one_process), cmocka_unit_test(pipelined_reads_rows_ahead),
                                       cmocka_unit_test(refused_plans)};
    const int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
