// Wire precision of the sharded collection (ember_sebc_set_wire_precision): fp16/bf16 pooled
// outputs and gradients against the fp32 path, explicit fp32 bitwise equal to the default,
// ranks that disagree, overflow. Usage: test_wire CASE [--scheme tw|cw|rw|twrw|grid|dp]
// [--pool sum|mean|none]
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
#include "mpi_assert.h"
#include "plans.h"

static int W, R;
static const char *g_case = "", *g_scheme = "rw", *g_pool = "sum";
static int32_t g_ranks[16];

enum { ROWS = 13, DIM = 6, MAXB = 8, MAXL = 5 };

static ember_table_plan plan_for(const char *scheme) { return test_plan_named(scheme, W, g_ranks); }

static ember_pooling pool_for(const char *pool) {
    return !strcmp(pool, "mean") ? EMBER_POOL_MEAN : !strcmp(pool, "none") ? EMBER_POOL_NONE : EMBER_POOL_SUM;
}

typedef struct env {
    ember_ctx *ctx;
    ember_comm *comm;
    ember_table_config t[2];
    ember_feature_config f[3];
    ember_ebc_config cfg;
    ember_table_plan plan[2];
} env;

// Two tables (the second data-parallel, so every scheme shares a step with replicas), three
// features; weights uniform in [0.25, 1]: every pooled value, partial sum and (with positive
// upstream gradients) every gradient contribution is positive, so the sum of the magnitudes of a
// value's partials is the value itself and the stated bounds read |err| <= u |x|.
static void env_open(env *e, const char *scheme, ember_pooling pool) {
    memset(e, 0, sizeof *e);
    assert_int_equal(ember_ctx_create(NULL, &e->ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(e->ctx, MPI_COMM_WORLD, &e->comm), EMBER_OK);
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = EMBER_OPT_SGD;
    o.lr = 0.5f;
    const ember_init init = {.kind = EMBER_INIT_UNIFORM, .a = 0.25f, .b = 1.0f};
    for (int t = 0; t < 2; t++) {
        e->t[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        e->t[t].dim = DIM, e->t[t].pooling = pool, e->t[t].init = init, e->t[t].optim = o;
    }
    e->t[0].name = "big", e->t[0].rows = ROWS;
    e->t[1].name = "small", e->t[1].rows = 7;
    e->f[0] = (ember_feature_config){.name = "user", .table = 0};
    e->f[1] = (ember_feature_config){.name = "item", .table = 0};
    e->f[2] = (ember_feature_config){.name = "ctx", .table = 1};
    e->cfg = (ember_ebc_config){.tables = e->t, .num_tables = 2, .features = e->f, .num_features = 3,
                                .bounds = EMBER_BOUNDS_ERROR, .seed = 11};
    e->plan[0] = plan_for(scheme);
    e->plan[1] = plan_for("dp");
}

static ember_sebc *make(env *e, int set, ember_dtype fwd, ember_dtype bwd) {
    ember_sebc *s = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e->comm, &e->cfg, e->plan, EMBER_GRAD_MEAN, &s) == EMBER_OK);
    if (set) MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_set_wire_precision(s, fwd, bwd) == EMBER_OK);
    return s;
}

static void env_close(env *e) {
    ember_comm_destroy(e->comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(e->ctx) == 0);
    ember_ctx_destroy(e->ctx);
}

// Rank R's batch at step `step`: B = 3 + R samples, bag lengths 0..MAXL-1 (empty bags included).
typedef struct batch {
    int32_t len[3 * MAXB];
    int64_t ids[3 * MAXB * MAXL];
    ember_kjt k;
} batch;

static void make_batch(batch *b, int step) {
    const int B = 3 + R;
    int64_t n = 0;
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < B; i++) {
            const int L = (i * 3 + f + R + step) % MAXL;
            b->len[f * B + i] = L;
            for (int j = 0; j < L; j++, n++) b->ids[n] = (n * 7 + R * 5 + step * 3) % (f == 2 ? 7 : ROWS);
        }
    b->k = (ember_kjt){.num_features = 3, .batch_size = B, .lengths = b->len, .values = b->ids, .nnz = n};
}

static int64_t out_size(const env *e, const batch *b) {
    return e->t[0].pooling == EMBER_POOL_NONE ? b->k.nnz * DIM : (int64_t)b->k.batch_size * 3 * DIM;
}

static float unit_for(ember_dtype dt) { return dt == EMBER_DTYPE_F16 ? 0x1p-11f : 0x1p-8f; }

// |got - want| <= u |want| (one rounding per value or per positive partial), with slack for
// fp32's own rounding of the sums that follow (a few ulps).
static int within(float got, float want, float u) {
    return fabsf(got - want) <= u * fabsf(want) * 1.0001f + 4 * 0x1p-24f * fabsf(want);
}

static void read_all(ember_sebc *s, float *w0, float *w1) {
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", w0, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 1, "weight", w1, -1) == EMBER_OK);
}

// One forward + SGD step per wire precision against the default: outputs within the bound; each
// updated weight's change within the bound of the default's change (w - w_ref versus w0 - w_ref,
// all contributions positive); the data-parallel table (not on the wire) bitwise equal; fewer
// bytes sent. Explicit fp32 is bitwise the default.
static void bound(void **state) {
    (void)state;
    env e;
    env_open(&e, g_scheme, pool_for(g_pool));
    batch b;
    make_batch(&b, 0);
    const int64_t n = out_size(&e, &b);
    float out_ref[3 * MAXB * MAXL * DIM], out[3 * MAXB * MAXL * DIM], go[3 * MAXB * MAXL * DIM];
    for (int64_t i = 0; i < n; i++) go[i] = 0.25f + (float)((i * 5 + R) % 11) / 16.0f;
    float w0[ROWS * DIM], d0[7 * DIM], wr[ROWS * DIM], dr[7 * DIM], w[ROWS * DIM], d[7 * DIM];
    ember_sebc *ref = make(&e, 0, EMBER_DTYPE_F32, EMBER_DTYPE_F32);
    read_all(ref, w0, d0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(ref, &b.k, out_ref) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(ref, &b.k, go) == EMBER_OK);
    uint64_t bytes_ref = ember_sebc_bytes_sent_last_step(ref);
    read_all(ref, wr, dr);
    ember_sebc_destroy(ref);
    const ember_dtype dts[3] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16};
    for (int di = 0; di < 3; di++) {
        const ember_dtype dt = dts[di];
        ember_sebc *s = make(&e, 1, dt, dt);
        ember_dtype f = EMBER_DTYPE_F32, bk = EMBER_DTYPE_F32;
        ember_sebc_wire_precision(s, &f, &bk);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, f == dt && bk == dt);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &b.k, out) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &b.k, go) == EMBER_OK);
        uint64_t bytes = ember_sebc_bytes_sent_last_step(s);
        read_all(s, w, d);
        ember_sebc_destroy(s);
        bool ok = true;
        if (dt == EMBER_DTYPE_F32) {
            ok = memcmp(out, out_ref, sizeof(float) * (size_t)n) == 0 && memcmp(w, wr, sizeof w) == 0 &&
                 memcmp(d, dr, sizeof d) == 0 && bytes == bytes_ref;
            if (!ok) fprintf(stderr, "rank %d %s: explicit fp32 differs from the default\n", R, g_scheme);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
            continue;
        }
        const float u = unit_for(dt);
        for (int64_t i = 0; i < n && ok; i++)
            if (!within(out[i], out_ref[i], u)) {
                fprintf(stderr, "rank %d %s %s: out[%lld] = %.9g, fp32 %.9g\n", R, g_scheme, ember_dtype_name(dt),
                        (long long)i, (double)out[i], (double)out_ref[i]);
                ok = false;
            }
        for (int i = 0; i < ROWS * DIM && ok; i++) {
            // w = w0 - lr sum g (rounded partials), wr = w0 - lr sum g: |w - wr| <= u |w0 - wr|,
            // plus the fp32 rounding of each subtraction (half an ulp of w and of wr).
            const float lim = u * fabsf(w0[i] - wr[i]) * 1.0001f + 0x1p-23f * (fabsf(w[i]) + fabsf(wr[i]));
            if (fabsf(w[i] - wr[i]) > lim) {
                fprintf(stderr, "rank %d %s %s: weight %d = %.9g, fp32 %.9g, before %.9g\n", R, g_scheme,
                        ember_dtype_name(dt), i, (double)w[i], (double)wr[i], (double)w0[i]);
                ok = false;
            }
        }
        ok = ok && memcmp(d, dr, sizeof d) == 0;
        // Every rank's bytes: fewer in total whenever anything crosses ranks (W > 1), and the
        // encoding did round something (the outputs are not all the fp32 bits); otherwise (one
        // process, or nothing routed) the same bytes and bits as fp32, outputs and weights.
        int64_t tot[3] = {(int64_t)bytes, (int64_t)bytes_ref,
                          memcmp(out, out_ref, sizeof(float) * (size_t)n) != 0 || memcmp(w, wr, sizeof w) != 0};
        MPI_Allreduce(MPI_IN_PLACE, tot, 3, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (W > 1 && strcmp(g_scheme, "dp") != 0) ok = ok && tot[0] < tot[1] && tot[2] > 0;
        else ok = ok && tot[0] == tot[1] && tot[2] == 0;
        if (R == 0)
            printf("%s %s %s W=%d: %lld bytes, fp32 %lld\n", g_scheme, g_pool, ember_dtype_name(dt), W,
                   (long long)tot[0], (long long)tot[1]);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    }
    env_close(&e);
}

// 20 steps of a quadratic loss L = 1/2 |out - 0.1|^2 (the gradient out - 0.1 feeds the forward's
// error back into training): the weights stay within 2^-10 (fp16) or 2^-7 (bf16) of the fp32 run
// relative to their largest magnitude, and the loss decreases as the fp32 run's does.
static void train(void **state) {
    (void)state;
    env e;
    env_open(&e, g_scheme, pool_for(g_pool));
    const ember_dtype dts[3] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16};
    float wfin[3][ROWS * DIM], dfin[3][7 * DIM];
    double loss[3][2];
    for (int di = 0; di < 3; di++) {
        ember_sebc *s = make(&e, 1, dts[di], dts[di]);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_set_lr(s, -1, 0.05f) == EMBER_OK);
        for (int step = 0; step < 20; step++) {
            batch b;
            make_batch(&b, step);
            float out[3 * MAXB * MAXL * DIM], go[3 * MAXB * MAXL * DIM];
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &b.k, out) == EMBER_OK);
            double l = 0;
            for (int64_t i = 0; i < out_size(&e, &b); i++) {
                go[i] = out[i] - 0.1f;
                l += 0.5 * (double)go[i] * go[i];
            }
            MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (step == 0) loss[di][0] = l;
            loss[di][1] = l;
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &b.k, go) == EMBER_OK);
        }
        read_all(s, wfin[di], dfin[di]);
        ember_sebc_destroy(s);
    }
    bool ok = true;
    float big = 0;
    for (int i = 0; i < ROWS * DIM; i++) big = fmaxf(big, fabsf(wfin[0][i]));
    for (int di = 1; di < 3; di++) {
        const float tol = (di == 1 ? 0x1p-10f : 0x1p-7f) * big;
        float worst = 0;
        for (int i = 0; i < ROWS * DIM; i++) worst = fmaxf(worst, fabsf(wfin[di][i] - wfin[0][i]));
        for (int i = 0; i < 7 * DIM; i++) worst = fmaxf(worst, fabsf(dfin[di][i] - dfin[0][i]));
        ok = ok && worst <= tol && loss[di][1] < loss[di][0];
        if (R == 0)
            printf("%s %s %s W=%d: loss %.6g -> %.6g (fp32 %.6g -> %.6g), max |w - w_fp32| %.3g (tolerance %.3g)\n",
                   g_scheme, g_pool, ember_dtype_name(dts[di]), W, loss[di][0], loss[di][1], loss[0][0], loss[0][1],
                   (double)worst, (double)tol);
    }
    ok = ok && loss[0][1] < loss[0][0];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    env_close(&e);
}

// Ranks that pass different precisions, or a value outside the three, all fail with one message;
// the precision stays as it was.
static void disagree(void **state) {
    (void)state;
    env e;
    env_open(&e, "rw", EMBER_POOL_SUM);
    ember_sebc *s = make(&e, 1, EMBER_DTYPE_BF16, EMBER_DTYPE_F32);
    ember_status st = ember_sebc_set_wire_precision(s, R == W - 1 ? EMBER_DTYPE_F16 : EMBER_DTYPE_BF16, EMBER_DTYPE_F32);
    char want[200];
    snprintf(want, sizeof want, "ranks disagree on forward precision: 'fp16' on rank %d, 'bf16' on rank 0",
             W - 1);
    const char *msg = ember_ctx_errmsg(e.ctx);
    if (!strstr(msg, want)) fprintf(stderr, "rank %d: message \"%s\"\n", R, msg);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && strstr(msg, want) != NULL);
    st = ember_sebc_set_wire_precision(s, EMBER_DTYPE_BF16, R == 0 ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32);
    snprintf(want, sizeof want, "ranks disagree on backward precision: 'fp32' on rank 1, 'fp16' on rank 0");
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && strstr(ember_ctx_errmsg(e.ctx), want) != NULL);
    st = ember_sebc_set_wire_precision(s, R == 0 ? (ember_dtype)7 : EMBER_DTYPE_F16, EMBER_DTYPE_F16);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && strstr(ember_ctx_errmsg(e.ctx), "forward precision 7") != NULL);
    ember_dtype f, b;
    ember_sebc_wire_precision(s, &f, &b);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, f == EMBER_DTYPE_BF16 && b == EMBER_DTYPE_F32);
    ember_sebc_destroy(s);
    env_close(&e);
}

// fp16 overflow: table 'big' table-wise on rank W - 1, so rank 0's bags cross the wire. A pooled
// value of 2 x 40000 = 80000 > 65504: the forward fails on every rank naming the feature and the
// value; bf16 carries it (within its bound). A gradient of 1e5 (x 1/W) overflows the backward:
// every rank fails and no weight changes; the same forward's backward then succeeds.
static void overflow(void **state) {
    (void)state;
    env e;
    env_open(&e, "tw", EMBER_POOL_SUM);
    const int B = 3 + R;
    int32_t len[3 * MAXB] = {0};
    int64_t ids[2] = {4, 4};
    len[0] = R == 0 ? 2 : 0; // rank 0's sample 0 of feature 'user': row 4 twice; other bags empty
    ember_kjt k = {.num_features = 3, .batch_size = B, .lengths = len, .values = ids, .nnz = len[0]};
    float out[3 * MAXB * DIM], go[3 * MAXB * DIM];
    float w[ROWS * DIM], d[7 * DIM], w2[ROWS * DIM], d2[7 * DIM];
    for (int dt = EMBER_DTYPE_F16; dt <= EMBER_DTYPE_BF16; dt++) {
        ember_sebc *s = make(&e, 1, (ember_dtype)dt, (ember_dtype)dt);
        read_all(s, w, d);
        for (int c = 0; c < DIM; c++) w[4 * DIM + c] = 40000.0f;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_write(s, 0, "weight", w, -1) == EMBER_OK);
        ember_status st = ember_sebc_forward(s, &k, out);
        if (dt == EMBER_DTYPE_F16) {
            const char *msg = ember_ctx_errmsg(e.ctx);
            const bool named = strstr(msg, "pooled value 80000 of feature 'user' (table 'big', sample 0 of rank 0, column 0) "
                                           "overflows fp16 on the wire") != NULL;
            if (!named) fprintf(stderr, "rank %d: \"%s\"\n", R, msg);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_NUMERIC && named);
        } else {
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK && (R != 0 || within(out[0], 80000.0f, 0x1p-8f)));
        }
        ember_sebc_destroy(s);
    }
    for (int dt = EMBER_DTYPE_F16; dt <= EMBER_DTYPE_BF16; dt++) {
        ember_sebc *s = make(&e, 1, (ember_dtype)dt, (ember_dtype)dt);
        read_all(s, w, d);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK);
        for (int i = 0; i < 3 * B * DIM; i++) go[i] = i == 1 && R == 0 ? 1e5f * (float)W : 0.5f;
        ember_status st = ember_sebc_backward(s, &k, go);
        read_all(s, w2, d2);
        if (dt == EMBER_DTYPE_F16) {
            const bool named = strstr(ember_ctx_errmsg(e.ctx), "gradient 100000 of feature 'user' (table 'big', sample 0 of "
                                                              "rank 0, column 1) overflows fp16") != NULL;
            if (!named) fprintf(stderr, "rank %d: \"%s\"\n", R, ember_ctx_errmsg(e.ctx));
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_NUMERIC && named);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(w, w2, sizeof w) == 0 && memcmp(d, d2, sizeof d) == 0);
            for (int i = 0; i < 3 * B * DIM; i++) go[i] = 0.5f;
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k, go) == EMBER_OK);
        } else {
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
        }
        ember_sebc_destroy(s);
    }
    env_close(&e);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    if (argc > 1) g_case = argv[1];
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--scheme")) g_scheme = argv[i + 1];
        if (!strcmp(argv[i], "--pool")) g_pool = argv[i + 1];
    }
    struct CMUnitTest all[] = {cmocka_unit_test(bound), cmocka_unit_test(train), cmocka_unit_test(disagree),
                               cmocka_unit_test(overflow)};
    const int nall = (int)(sizeof all / sizeof all[0]);
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    int n = 0;
    for (int i = 0; i < nall; i++)
        if (!g_case[0] || !strcmp(all[i].name, g_case)) chosen[n++] = all[i];
    int fails = _cmocka_run_group_tests("wire", chosen, (size_t)n, NULL, NULL);
    MPI_Finalize();
    return fails;
}
