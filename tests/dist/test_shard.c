// Sharded collection: distributed training equals the single-process collection trained on the
// concatenated global batch, for every scheme, pooling, weighting, optimizer and gradient
// convention, with unequal local batches; plus the named regression scenarios.
// Usage: test_shard --scheme dp|tw|cw|rw|twrw|grid|mixed [--pool sum|mean|none]   (the matrix)
//        test_shard --seed                                                     (regressions)
#include <math.h>
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
static const int32_t DIMS[NT] = {4, 3, 8, 5, 4};
static const int32_t FTAB[NF] = {0, 1, 2, 3, 4, 2};

static const char *g_scheme = "mixed";
static const char *g_pool = "sum";
static int g_empty0 = 0; // --empty0: rank 0 has an empty local batch
static int g_extra = 0;  // --extra-opts: Adagrad, partial row-wise Adam and LAMB instead
static int g_reshard = 0; // --reshard: checkpoint after step 1, reload under another plan
static int g_group = 0;   // --group G: 2D, tables sharded over groups of G ranks (0: one group)
static int g_group_after = -1; // --group-after G: --reshard's new collection's (-1: --group's)
static int W, R;

// The ranks a plan places tables on: a sharding group's under --group, else the world's.
static int plan_ranks(void) { return g_group ? g_group : W; }

static ember_shard_scheme parse_scheme(const char *s, int t) {
    if (!strcmp(s, "dp")) return EMBER_SHARD_DATA_PARALLEL;
    if (!strcmp(s, "tw")) return EMBER_SHARD_TABLE_WISE;
    if (!strcmp(s, "cw")) return EMBER_SHARD_COLUMN_WISE;
    if (!strcmp(s, "rw")) return EMBER_SHARD_ROW_WISE;
    if (!strcmp(s, "twrw")) return EMBER_SHARD_TABLE_ROW_WISE;
    if (!strcmp(s, "grid")) return EMBER_SHARD_GRID;
    return (ember_shard_scheme)(t % 5); // mixed: every scheme in one collection
}

// Table t's plan under scheme sc; its ranks live in store (at least 8 entries).
static ember_table_plan make_plan(ember_shard_scheme sc, int t, int32_t *store) {
    return test_plan_for(sc, t, DIMS[t], plan_ranks(), store);
}

typedef struct setup {
    ember_table_config tables[NT];
    ember_feature_config features[NF];
    ember_table_plan plan[NT];
    int32_t ranks[NT][8]; // the plans' ranks
    ember_ebc_config cfg;
    char names[NT + NF][8];
} setup;

static void make_setup(setup *su, ember_pooling pool_all, int mixed_pool, ember_optim_kind opt) {
    memset(su, 0, sizeof *su);
    for (int t = 0; t < NT; t++) {
        snprintf(su->names[t], 8, "t%d", t);
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = opt;
        o.lr = opt == EMBER_OPT_SGD ? 0.5f : 0.05f;
        o.eta = 0.5f; // LARS-SGD: large enough for its updates to show
        o.momentum = 0.8f;
        ember_pooling p = mixed_pool ? (t % 2 ? EMBER_POOL_MEAN : EMBER_POOL_SUM) : pool_all;
        // A sequence collection needs one dim for every table.
        ember_table_config *tc = &su->tables[t];
        *tc = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc->name = su->names[t], tc->rows = ROWS[t], tc->dim = p == EMBER_POOL_NONE ? 4 : DIMS[t], tc->pooling = p;
        tc->init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f}, tc->optim = o;
        su->plan[t] = make_plan(parse_scheme(g_scheme, t), t, su->ranks[t]);
    }
    for (int f = 0; f < NF; f++) {
        snprintf(su->names[NT + f], 8, "f%d", f);
        su->features[f] = (ember_feature_config){.name = su->names[NT + f], .table = FTAB[f]};
    }
    su->cfg = (ember_ebc_config){.tables = su->tables, .num_tables = NT, .features = su->features, .num_features = NF,
                                 .bounds = EMBER_BOUNDS_ERROR, .seed = 77};
    if (!strcmp(g_scheme, "planned")) {
        // The planner's choice (tiny budget for data parallelism, so several schemes appear).
        ember_ctx *pctx = NULL;
        assert_int_equal(ember_ctx_create(NULL, &pctx), EMBER_OK);
        ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
        pc.world_size = plan_ranks();
        pc.batch_size = 4;
        pc.dp_max_bytes = 64;
        assert_int_equal(ember_plan_create(pctx, &su->cfg, &pc, su->plan, NULL), EMBER_OK);
        for (int t = 0; t < NT; t++) { // keep the planner's ranks in the setup's own arrays
            assert_true(su->plan[t].num_ranks <= 8);
            if (su->plan[t].num_ranks) memcpy(su->ranks[t], su->plan[t].ranks, sizeof(int32_t) * (size_t)su->plan[t].num_ranks);
        }
        ember_plan_release(pctx, su->plan, NT);
        for (int t = 0; t < NT; t++) {
            su->plan[t].num_ranks = ember_table_plan_ranks_needed(&su->plan[t]);
            su->plan[t].ranks = su->ranks[t];
        }
        ember_ctx_destroy(pctx);
    }
}

// The collection under test: 2D with --group.
static ember_status create(ember_comm *comm, const setup *su, ember_grad_convention conv, ember_sebc **s) {
    if (g_group) return ember_sebc_create_2d(comm, &su->cfg, su->plan, conv, g_group, s);
    return ember_sebc_create(comm, &su->cfg, su->plan, conv, s);
}

// Rank r's slice [b0, b0 + Bl) of a global KJT (feature-major), as an owned KJT.
static void slice_kjt(const gen_kjt *g, int32_t Bglob, int32_t b0, int32_t Bl, gen_kjt *out) {
    const ember_kjt *k = &g->kjt;
    out->lengths = malloc(sizeof(int32_t) * (size_t)(NF * Bl + 1));
    out->offsets = malloc(sizeof(int64_t) * (size_t)(NF * Bl + 1));
    out->values = malloc(sizeof(int64_t) * (size_t)(k->nnz + 1));
    out->weights = k->weights ? malloc(sizeof(float) * (size_t)(k->nnz + 1)) : NULL;
    int64_t n = 0;
    out->offsets[0] = 0;
    for (int f = 0; f < NF; f++) {
        for (int b = 0; b < Bl; b++) {
            int64_t gi = (int64_t)f * Bglob + b0 + b, li = (int64_t)f * Bl + b;
            int32_t len = g->lengths[gi];
            out->lengths[li] = len;
            memcpy(out->values + n, k->values + g->offsets[gi], sizeof(int64_t) * (size_t)len);
            if (k->weights) memcpy(out->weights + n, k->weights + g->offsets[gi], sizeof(float) * (size_t)len);
            n += len;
            out->offsets[li + 1] = n;
        }
    }
    out->kjt = (ember_kjt){.num_features = NF, .batch_size = Bl, .lengths = out->lengths, .offsets = out->offsets,
                           .values = out->values, .weights = out->weights, .nnz = n};
}

static double max_rel(const float *a, const float *b, int64_t n, double atol) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + 1e-4 * fabs((double)b[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

// K steps of distributed training against the single-process collection on the global batch.
// Tolerance: |dist - single| <= 2e-5 + 1e-4 |single| for outputs, weights and optimizer state
// (fp32; the two differ only in summation order across ranks).
static void run_combo(ember_pooling pool, int mixed_pool, int weighted, ember_optim_kind opt,
                      ember_grad_convention conv, int K) {
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    ember_ctx_set_num_threads(ctx, 1);
    setup su;
    make_setup(&su, pool, mixed_pool, opt);
    ember_sebc *s = NULL;
    ember_ebc *ref = NULL;
    ember_status st = create(comm, &su, conv, &s);
    int has_cw = 0;
    for (int t = 0; t < NT; t++)
        has_cw |= su.plan[t].scheme == EMBER_SHARD_COLUMN_WISE || su.plan[t].scheme == EMBER_SHARD_GRID;
    ember_optim_info oi;
    assert_int_equal(ember_optim_info_get(opt, &oi), EMBER_OK);
    if (!oi.column_wise && has_cw) {
        // Whole-row norms (LAMB's trust ratio, LARS's rate) are not offered column-wise: a clear
        // refusal everywhere.
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_UNSUPPORTED && s == NULL);
        ember_comm_destroy(comm);
        ember_ctx_destroy(ctx);
        return;
    }
    if (st != EMBER_OK) fprintf(stderr, "rank %d: %s\n", R, ember_ctx_errmsg(ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
    assert_int_equal(ember_ebc_create(ctx, &su.cfg, &ref), EMBER_OK);
    // Unequal local batches: rank r holds 2 + r samples (none on rank 0 with --empty0).
#define LOCAL_B(r) ((g_empty0 && (r) == 0) ? 0 : 2 + (r))
    int32_t Bglob = 0, b0 = 0, Bl = LOCAL_B(R);
    for (int r = 0; r < W; r++) {
        if (r < R) b0 += LOCAL_B(r);
        Bglob += LOCAL_B(r);
    }
    int64_t rows[NF];
    for (int f = 0; f < NF; f++) rows[f] = ROWS[FTAB[f]];
    test_rng rng = {12345};
    const int D = ember_sebc_output_dim(s);
    bool ok = true;
    for (int k = 0; k < K; k++) {
        if (g_reshard && k == 1) {
            // Save under this plan, rebuild under another (every table two schemes further
            // along), load, and go on: the result must still equal the uninterrupted process.
            char path[96];
            snprintf(path, sizeof path, "ckpt_%s_%s_np%d", g_scheme, g_pool, W);
            st = ember_checkpoint_save(s, path, NULL);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
            ember_sebc_destroy(s);
            s = NULL;
            if (g_group_after >= 0) g_group = g_group_after; // 2D to 1D or back
            for (int t = 0; t < NT; t++) su.plan[t] = make_plan((ember_shard_scheme)((parse_scheme(g_scheme, t) + 2) % 5), t, su.ranks[t]);
            st = create(comm, &su, conv, &s);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
            st = ember_checkpoint_load(s, path, NULL);
            if (st != EMBER_OK) fprintf(stderr, "rank %d: %s\n", R, ember_ctx_errmsg(ctx));
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
            if (R == 0) test_remove_tree(path);
        }
        gen_kjt g, l;
        gen_kjt_make(&g, &rng, NF, Bglob, rows, 4, 0.3, weighted);
        slice_kjt(&g, Bglob, b0, Bl, &l);
        const int seq = pool == EMBER_POOL_NONE;
        int64_t nglob = seq ? g.kjt.nnz * D : (int64_t)Bglob * D, nloc = seq ? l.kjt.nnz * D : (int64_t)Bl * D;
        float *out_ref = malloc(sizeof(float) * (size_t)(nglob + 1)), *out = malloc(sizeof(float) * (size_t)(nloc + 1));
        float *G = malloc(sizeof(float) * (size_t)(nglob + 1)), *gl = malloc(sizeof(float) * (size_t)(nloc + 1));
        for (int64_t i = 0; i < nglob; i++) G[i] = (float)(rng_uniform(&rng) * 2 - 1);
        assert_int_equal(ember_ebc_forward(ref, &g.kjt, out_ref), EMBER_OK);
        st = ember_sebc_forward(s, &l.kjt, out);
        if (st != EMBER_OK) fprintf(stderr, "rank %d: %s\n", R, ember_ctx_errmsg(ctx));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
        // This rank's rows of the global output: its samples, or (sequence) its ids.
        int64_t lo = seq ? g.offsets[0] : (int64_t)b0 * D;
        if (seq) {
            // Ids of rank r are interleaved per feature: compare feature by feature.
            int64_t m = 0;
            for (int f = 0; f < NF; f++) {
                int64_t gs = g.offsets[(int64_t)f * Bglob + b0], n = g.offsets[(int64_t)f * Bglob + b0 + Bl] - gs;
                double e = max_rel(out + m * D, out_ref + gs * D, n * D, 2e-5);
                ok = ok && e <= 1;
                for (int64_t i = 0; i < n * D; i++) gl[m * D + i] = G[gs * D + i];
                m += n;
            }
            (void)lo;
        } else {
            double e = max_rel(out, out_ref + lo, nloc, 2e-5);
            if (e > 1) fprintf(stderr, "rank %d step %d: forward err %.3g (opt %d)\n", R, k, e, (int)opt);
            ok = ok && e <= 1;
            memcpy(gl, G + lo, sizeof(float) * (size_t)nloc);
        }
        // The single process trains on G; rank r's local loss gradient is its rows of G, times
        // W under GRAD_MEAN (J = (1/W) sum_r L_r equals the single-process loss).
        if (conv == EMBER_GRAD_MEAN)
            for (int64_t i = 0; i < nloc; i++) gl[i] *= (float)W;
        assert_int_equal(ember_ebc_backward(ref, &g.kjt, G, NULL), EMBER_OK);
        st = ember_sebc_backward(s, &l.kjt, gl);
        if (st != EMBER_OK) fprintf(stderr, "rank %d: %s\n", R, ember_ctx_errmsg(ctx));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
        free(out_ref);
        free(out);
        free(G);
        free(gl);
        gen_kjt_free(&g);
        gen_kjt_free(&l);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    // Weights and optimizer state, gathered as global arrays, against the single process.
    for (int t = 0; t < NT; t++) {
        for (int ti = 0; ti < ember_ebc_num_tensors(ref, t); ti++) {
            ember_tensor_info info;
            ember_ebc_tensor_info(ref, t, ti, &info);
            int64_t n = info.rows * info.cols;
            float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
            ember_ebc_read(ref, t, info.name, 0, info.rows, EMBER_DTYPE_F32, b);
            st = ember_sebc_read(s, t, info.name, a, -1);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
            double e = max_rel(a, b, n, 2e-5);
            if (e > 1) {
                fprintf(stderr, "rank %d: table %d %s err %.3g\n", R, t, info.name, e);
                for (int64_t i = 0; i < n && getenv("EMBER_TEST_OPT"); i++)
                    if (a[i] != b[i]) fprintf(stderr, "  [%lld] %g vs %g\n", (long long)i, (double)a[i], (double)b[i]);
            }
            ok = ok && e <= 1;
            // Data-parallel replicas and every rank's gathered view agree bitwise: rank 0's copy.
            float *c0 = malloc(sizeof(float) * (size_t)n);
            memcpy(c0, a, sizeof(float) * (size_t)n);
            MPI_Bcast(c0, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
            ok = ok && memcmp(c0, a, sizeof(float) * (size_t)n) == 0;
            free(a);
            free(b);
            free(c0);
        }
    }
    if (!ok)
        fprintf(stderr, "rank %d: FAILED scheme %s pool %d mixed %d weighted %d opt %d conv %d\n", R, g_scheme,
                (int)pool, mixed_pool, weighted, (int)opt, (int)conv);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    ember_sebc_destroy(s);
    ember_ebc_destroy(ref);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

static void distributed_equals_single_process(void **state) {
    (void)state;
    // The optimizer test table: the common three, or (--extra-opts) every other one.
    static const ember_optim_kind common[] = {EMBER_OPT_SGD, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM};
    static const ember_optim_kind extra[] = {EMBER_OPT_ADAGRAD, EMBER_OPT_PARTIAL_ROWWISE_ADAM, EMBER_OPT_LAMB,
                                             EMBER_OPT_PARTIAL_ROWWISE_LAMB, EMBER_OPT_LARS_SGD};
    const ember_optim_kind *opts = g_extra ? extra : common;
    const int nopts = g_extra ? (int)(sizeof extra / sizeof extra[0]) : (int)(sizeof common / sizeof common[0]);
    if (!strcmp(g_pool, "none")) {
        for (int o = 0; o < nopts; o++)
            for (int w = 0; w < 2; w++)
                run_combo(EMBER_POOL_NONE, 0, w, opts[o], (ember_grad_convention)(o % 2), 3);
        return;
    }
    const ember_pooling pool = !strcmp(g_pool, "mean") ? EMBER_POOL_MEAN : EMBER_POOL_SUM;
    const char *only = getenv("EMBER_TEST_OPT"); // debugging: one optimizer only
    for (int o = only ? atoi(only) : 0; o < (only ? atoi(only) + 1 : nopts); o++)
        for (int w = 0; w < 2; w++)
            for (int c = 0; c < 2; c++) run_combo(pool, !strcmp(g_scheme, "mixed"), w, opts[o], (ember_grad_convention)c, 3);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--scheme")) g_scheme = argv[i + 1];
        if (!strcmp(argv[i], "--pool")) g_pool = argv[i + 1];
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--empty0")) g_empty0 = 1;
        else if (!strcmp(argv[i], "--extra-opts")) g_extra = 1;
        else if (!strcmp(argv[i], "--reshard")) g_reshard = 1;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--group")) g_group = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--group-after")) g_group_after = atoi(argv[i + 1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(distributed_equals_single_process),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
