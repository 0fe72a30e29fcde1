// Every parameter of a table whose ids are not plain rows, at its edges, under every scheme, on
// this world size, against one process on the whole batch. A hashed table (ids: any int64, one
// bucket, buckets fewer than ranks, the default bucket size, min_count 0/1/2, LRU/LFU/TTL with a
// TTL of one step) or a tiered table (a one-row table, a cache of exactly its rows, a cache larger
// than the table, a small cache evicting every step, LRU/LFU) is trained beside a plain table
// read by a second feature, so ids of both spaces travel in the same messages. Each accepted
// configuration trains three steps: outputs match one process every step, and every tensor
// (weights, optimizer state, the hashed table's id map exactly) matches at the end. Each
// configuration the library cannot honour is refused at creation with the same status on every
// rank, naming the table. A new hashed or tiered parameter belongs in CASES.
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpi.h>

#include "ember.h"
#include "gen.h"
#include "mpi_assert.h"
#include "plans.h"
#include "tmpdir.h"

static int W, R;

enum { DIM = 4, NF = 2, MAXB = 4, MAXL = 3, PROWS = 5, NPOOL = 24, STEPS = 3 };

typedef struct edge_case {
    const char *what;
    int hashed;            // else tiered
    int64_t rows;
    int32_t bucket_rows;   // hashed
    int64_t min_count, ttl;
    int64_t cache_rows;    // tiered
    ember_evict_policy policy;
    ember_pooling pooling;
    ember_status refused;  // at creation under every scheme (EMBER_OK: accepted, see refused_by)
} edge_case;

static const edge_case CASES[] = {
    {"hashed, one bucket of two rows", 1, 2, 2, 0, 0, 0, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_OK},
    {"hashed, three buckets, min_count 2, LFU", 1, 6, 2, 2, 0, 0, EMBER_EVICT_LFU, EMBER_POOL_SUM, EMBER_OK},
    {"hashed, default bucket rows (one bucket)", 1, 16, 0, 1, 0, 0, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_OK},
    {"hashed, TTL of one step", 1, 8, 4, 1, 1, 0, EMBER_EVICT_TTL, EMBER_POOL_SUM, EMBER_OK},
    {"hashed, MEAN", 1, 8, 2, 0, 0, 0, EMBER_EVICT_LRU, EMBER_POOL_MEAN, EMBER_OK},
    {"hashed, bucket rows 1", 1, 8, 1, 0, 0, 0, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_ERR_INVALID_ARG},
    {"hashed, bucket rows -2", 1, 8, -2, 0, 0, 0, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_ERR_INVALID_ARG},
    {"hashed, bucket rows not dividing rows", 1, 8, 3, 0, 0, 0, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_ERR_INVALID_ARG},
    {"hashed, TTL of zero steps", 1, 8, 2, 0, 0, 0, EMBER_EVICT_TTL, EMBER_POOL_SUM, EMBER_ERR_INVALID_ARG},
    {"tiered, one-row table", 0, 1, 0, 0, 0, 1, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_OK},
    {"tiered, cache of exactly its rows", 0, 7, 0, 0, 0, 7, EMBER_EVICT_LFU, EMBER_POOL_MEAN, EMBER_OK},
    {"tiered, cache larger than the table", 0, 7, 0, 0, 0, 100, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_OK},
    {"tiered, small cache evicting every step", 0, 40, 0, 0, 0, 6, EMBER_EVICT_LRU, EMBER_POOL_MEAN, EMBER_OK},
    {"tiered, LFU", 0, 40, 0, 0, 0, 6, EMBER_EVICT_LFU, EMBER_POOL_SUM, EMBER_OK},
    {"tiered, negative cache", 0, 40, 0, 0, 0, -1, EMBER_EVICT_LRU, EMBER_POOL_SUM, EMBER_ERR_INVALID_ARG},
    {"tiered, TTL cache policy", 0, 40, 0, 0, 0, 6, EMBER_EVICT_TTL, EMBER_POOL_SUM, EMBER_ERR_INVALID_ARG},
};

static const char *const SCHEMES[] = {"dp", "tw", "cw", "rw", "twrw", "grid"};

// What a scheme refuses of an otherwise valid case: a replicated tiered table (each replica would
// be the whole table on disk), a hashed MEAN table whose pools are summed over row blocks (the
// absent ids are only known where the rows are).
static ember_status refused_by(const edge_case *c, const char *scheme) {
    if (c->refused != EMBER_OK) return c->refused;
    const int partial = !strcmp(scheme, "rw") || !strcmp(scheme, "twrw") || !strcmp(scheme, "grid");
    if (!c->hashed && !strcmp(scheme, "dp")) return EMBER_ERR_UNSUPPORTED;
    if (c->hashed && c->pooling == EMBER_POOL_MEAN && partial) return EMBER_ERR_UNSUPPORTED;
    return EMBER_OK;
}

typedef struct env {
    ember_ctx *ctx;
    ember_comm *comm;
    const edge_case *c;
    ember_table_config t[2], ref_t[2];
    ember_feature_config f[NF];
    ember_ebc_config cfg, ref_cfg;
    int64_t pool[NPOOL];
    char dir[64];
} env;

static void env_open(env *e, const edge_case *c) {
    memset(e, 0, sizeof *e);
    e->c = c;
    assert_int_equal(ember_ctx_create(NULL, &e->ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(e->ctx, MPI_COMM_WORLD, &e->comm), EMBER_OK);
    ember_table_config x = EMBER_TABLE_CONFIG_DEFAULT, p = EMBER_TABLE_CONFIG_DEFAULT;
    x.name = "edge", x.rows = c->rows, x.dim = DIM, x.pooling = c->pooling;
    x.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
    x.optim.kind = EMBER_OPT_ROWWISE_ADAGRAD, x.optim.lr = 0.1f, x.optim.initial_accumulator = 0.1f;
    if (c->hashed)
        x.hash = (ember_hash_config){.enabled = 1, .bucket_rows = c->bucket_rows, .min_count = c->min_count,
                                     .policy = c->policy, .ttl_steps = c->ttl};
    else
        x.cache_rows = c->cache_rows, x.cache_policy = c->policy;
    p = x;
    p.name = "plain", p.rows = PROWS, p.pooling = EMBER_POOL_SUM, p.cache_rows = 0;
    p.hash = (ember_hash_config){.enabled = 0};
    e->t[0] = x, e->t[1] = p;
    e->ref_t[0] = x, e->ref_t[1] = p;
    e->ref_t[0].cache_rows = 0; // the one process keeps a tiered table in RAM: the same numbers
    e->f[0] = (ember_feature_config){.name = "f_edge", .table = 0};
    e->f[1] = (ember_feature_config){.name = "f_plain", .table = 1};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = e->t, cfg.num_tables = 2, cfg.features = e->f, cfg.num_features = NF, cfg.seed = 9;
    if (R == 0) {
        snprintf(e->dir, sizeof e->dir, "/tmp/ember_ids_XXXXXX");
        assert_non_null(mkdtemp(e->dir));
    }
    MPI_Bcast(e->dir, sizeof e->dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    cfg.ssd_dir = e->dir;
    e->cfg = cfg;
    e->ref_cfg = cfg;
    e->ref_cfg.tables = e->ref_t;
    test_rng r = {77};
    for (int i = 0; i < NPOOL; i++) e->pool[i] = (int64_t)rng_next(&r) >> (i % 3 ? 0 : 56); // small and huge, +/-
}

static void env_close(env *e) {
    ember_comm_destroy(e->comm);
    assert_int_equal(ember_ctx_bytes_outstanding(e->ctx), 0);
    ember_ctx_destroy(e->ctx);
    MPI_Barrier(MPI_COMM_WORLD);
    if (R == 0) test_remove_tree(e->dir);
}

// Rank q's batch at `step`: 1 + q % 3 samples (uneven), bags of 0..MAXL-1 ids with repeats. The
// edge table's ids: hashed, from the pool (more distinct ids than rows: evictions); tiered, from a
// window of 6 rows that moves every step (misses and write-backs, within every cache here).
typedef struct batch {
    int32_t B;
    int32_t len[NF * MAXB];
    int64_t ids[NF * MAXB * MAXL];
    int64_t nnz;
} batch;

static void make_batch(const env *e, int q, int step, batch *b) {
    test_rng r = {(uint64_t)(100 * step + q + 1)};
    b->B = 1 + q % 3;
    b->nnz = 0;
    const int64_t rows = e->c->rows, win = rows < 6 ? rows : 6, base = (7 * step) % (rows - win + 1);
    for (int f = 0; f < NF; f++)
        for (int s = 0; s < b->B; s++) {
            const int n = (int)rng_int(&r, MAXL);
            b->len[f * b->B + s] = n;
            for (int j = 0; j < n; j++)
                b->ids[b->nnz++] = f == 1 ? rng_int(&r, PROWS)
                                   : e->c->hashed ? e->pool[rng_int(&r, NPOOL)]
                                                  : base + rng_int(&r, win);
        }
}

// The global batch: the ranks' samples in rank order, feature-major; first[q]: rank q's first.
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

static bool close_to(float a, float b) {
    const float d = a > b ? a - b : b - a, m = b < 0 ? -b : b;
    return d <= 1e-5f + 1e-4f * m;
}

// STEPS steps on this rank's batch against the one process on the global batch; then every
// tensor. Returns false (on every rank) at the first difference.
static bool train_and_compare(env *e, ember_sebc *s, ember_ebc *ref, const char *scheme) {
    const int D = NF * DIM;
    bool ok = true;
    for (int step = 0; step < STEPS && ok; step++) {
        batch b;
        global g;
        make_batch(e, R, step, &b);
        make_global(e, step, &g);
        ember_kjt k = {.num_features = NF, .batch_size = b.B, .lengths = b.len, .values = b.ids, .nnz = b.nnz};
        float out[MAXB * NF * DIM], go[MAXB * NF * DIM], ref_out[16 * MAXB * NF * DIM], ref_go[16 * MAXB * NF * DIM];
        ok = ember_test_all_ok(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK, "forward", __FILE__, __LINE__);
        if (!ok) break;
        assert_int_equal(ember_ebc_forward(ref, &g.k, ref_out), EMBER_OK);
        bool same = true;
        for (int i = 0; i < b.B * D; i++) {
            if (!close_to(out[i], ref_out[(size_t)g.first[R] * D + i]) && same)
                fprintf(stderr, "rank %d: out[%d] = %g, one process %g\n", R, i, (double)out[i],
                        (double)ref_out[(size_t)g.first[R] * D + i]);
            same &= close_to(out[i], ref_out[(size_t)g.first[R] * D + i]);
        }
        if (!same) fprintf(stderr, "rank %d: %s under %s: step %d output differs\n", R, e->c->what, scheme, step);
        ok = ember_test_all_ok(MPI_COMM_WORLD, same, "output", __FILE__, __LINE__);
        for (int sa = 0; sa < g.B; sa++)
            for (int c = 0; c < D; c++) ref_go[sa * D + c] = (float)((sa * 7 + c * 3 + step) % 11) / 11.0f - 0.45f;
        memcpy(go, ref_go + (size_t)g.first[R] * D, sizeof(float) * (size_t)b.B * D);
        ok &= ember_test_all_ok(MPI_COMM_WORLD, ember_sebc_backward(s, &k, go) == EMBER_OK, "backward", __FILE__,
                                __LINE__);
        assert_int_equal(ember_ebc_backward(ref, &g.k, ref_go, NULL), EMBER_OK);
    }
    for (int t = 0; t < 2 && ok; t++) {
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int nt = ember_table_tensors(&e->t[t], ti);
        for (int k = 0; k < nt && ok; k++) {
            const int i64 = ti[k].dtype == EMBER_DTYPE_I64;
            const ember_dtype dt = i64 ? EMBER_DTYPE_I64 : EMBER_DTYPE_F32;
            const size_t n = (size_t)ti[k].rows * (size_t)ti[k].cols, es = ember_dtype_size(dt);
            void *a = calloc(n, es), *b = calloc(n, es);
            ok = ember_test_all_ok(MPI_COMM_WORLD, ember_sebc_read_as(s, t, ti[k].name, dt, a, -1) == EMBER_OK, "read",
                                   __FILE__, __LINE__);
            assert_int_equal(ember_ebc_read(ref, t, ti[k].name, 0, ti[k].rows, dt, b), EMBER_OK);
            bool same = true;
            if (i64) same = memcmp(a, b, n * es) == 0;
            else
                for (size_t i = 0; i < n; i++) same &= close_to(((float *)a)[i], ((float *)b)[i]);
            if (!same) fprintf(stderr, "rank %d: %s under %s: table %s tensor %s differs\n", R, e->c->what, scheme,
                               e->t[t].name, ti[k].name);
            ok &= ember_test_all_ok(MPI_COMM_WORLD, same, "tensor", __FILE__, __LINE__);
            free(a);
            free(b);
        }
    }
    return ok;
}

static void every_edge_under_every_scheme(void **state) {
    (void)state;
    int32_t ranks[2][16];
    int failures = 0;
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        for (size_t si = 0; si < sizeof SCHEMES / sizeof SCHEMES[0]; si++) {
            const char *scheme = SCHEMES[si];
            env e;
            env_open(&e, &CASES[ci]);
            ember_table_plan plan[2] = {test_plan_named(scheme, W, ranks[0]), test_plan_named("rw", W, ranks[1])};
            ember_sebc *s = NULL;
            const ember_status want = refused_by(&CASES[ci], scheme);
            const ember_status got = ember_sebc_create(e.comm, &e.cfg, plan, EMBER_GRAD_SUM, &s);
            bool ok = got == want;
            if (!ok) fprintf(stderr, "rank %d: %s under %s: created with %s, expected %s (%s)\n", R, CASES[ci].what, scheme,
                             ember_status_name(got), ember_status_name(want), ember_ctx_errmsg(e.ctx));
            // A refusal names the table, the same on every rank.
            if (ok && got != EMBER_OK) ok = s == NULL && strstr(ember_ctx_errmsg(e.ctx), "'edge'") != NULL;
            ok = ember_test_all_ok(MPI_COMM_WORLD, ok, CASES[ci].what, __FILE__, __LINE__);
            if (ok && got == EMBER_OK) {
                ember_ebc *ref = NULL;
                assert_int_equal(ember_ebc_create(e.ctx, &e.ref_cfg, &ref), EMBER_OK);
                ok = train_and_compare(&e, s, ref, scheme);
                ember_ebc_destroy(ref);
            }
            ember_sebc_destroy(s);
            if (!ok && R == 0) fprintf(stderr, "FAILED: %s under %s at W = %d\n", CASES[ci].what, scheme, W);
            failures += !ok;
            env_close(&e);
        }
    }
    assert_int_equal(failures, 0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    const struct CMUnitTest tests[] = {cmocka_unit_test(every_edge_under_every_scheme)};
    const int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
