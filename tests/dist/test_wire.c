// Wire precision of the sharded collection (ember_sebc_set_wire_precision and its loss scales):
// fp16/bf16/fp8/int8 pooled outputs and gradients against the fp32 path, explicit fp32 bitwise
// equal to the default, ranks that disagree, overflow. Usage: test_wire CASE [--scheme tw|cw|rw|twrw|grid|dp]
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

static ember_sebc *make_scaled(env *e, int set, ember_dtype fwd, ember_dtype bwd, float fscale, float bscale) {
    ember_sebc *s = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e->comm, &e->cfg, e->plan, EMBER_GRAD_MEAN, &s) == EMBER_OK);
    if (set) MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_set_wire_precision(s, fwd, bwd) == EMBER_OK);
    if (fscale != 1.0f || bscale != 1.0f)
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_set_wire_loss_scale(s, fscale, bscale) == EMBER_OK);
    return s;
}

static ember_sebc *make(env *e, int set, ember_dtype fwd, ember_dtype bwd) { return make_scaled(e, set, fwd, bwd, 1, 1); }

// The precisions the bound and train cases run: (forward, backward, their loss scales). fp8's
// backward scale 16 lifts the smallest gradients here (0.25 / (W x 4)) out of E4M3's subnormals.
typedef struct wire_case {
    ember_dtype fwd, bwd;
    float fscale, bscale;
} wire_case;
static const wire_case CASES[] = {
    {EMBER_DTYPE_F32, EMBER_DTYPE_F32, 1, 1},           {EMBER_DTYPE_F16, EMBER_DTYPE_F16, 1, 1},
    {EMBER_DTYPE_BF16, EMBER_DTYPE_BF16, 1, 1},         {EMBER_DTYPE_I8, EMBER_DTYPE_I8, 1, 1},
    {EMBER_DTYPE_FP8_E4M3, EMBER_DTYPE_FP8_E4M3, 1, 16}, {EMBER_DTYPE_FP8_E4M3, EMBER_DTYPE_FP8_E5M2, 2, 256},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

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

// The relative bound of one rounding in the normal range. int8 is bounded by its piece's range
// instead (see int8_within); with the positive values here (a piece's max / min <= 3.5 for the
// gradients) (hi - lo) / 510 <= 3.5 / 510 |x| < 2^-7 |x|, so 2^-7 bounds its gradients.
static float unit_for(ember_dtype dt) {
    switch (dt) {
    case EMBER_DTYPE_F16: return 0x1p-11f;
    case EMBER_DTYPE_BF16: return 0x1p-8f;
    case EMBER_DTYPE_FP8_E4M3: return 0x1p-4f;
    case EMBER_DTYPE_FP8_E5M2: return 0x1p-3f;
    default: return 0x1p-7f;
    }
}

// |got - want| <= u |want| (one rounding per value or per positive partial), with slack for
// fp32's own rounding of the sums that follow (a few ulps).
static int within(float got, float want, float u) {
    return fabsf(got - want) <= u * fabsf(want) * 1.0001f + 4 * 0x1p-24f * fabsf(want);
}

// int8 rounds each row piece: a pooled value (positive partials, at most W of them, each a piece
// of values no larger than the pooled value's largest column in its group of DIM, times the
// bag's length under MEAN, divided out again) is within W ((max of the group) / 510 + 1e-8),
// plus the fp32 roundings of the dequantizing fma and the sums.
static int int8_within(const float *got, const float *want, int64_t i) {
    const int64_t g0 = i / DIM * DIM;
    float big = 0;
    for (int64_t j = g0; j < g0 + DIM; j++) big = fmaxf(big, fabsf(want[j]));
    return fabsf(got[i] - want[i]) <= (float)W * (big / 510.0f * 1.0001f + 1e-8f) + 16 * 0x1p-24f * big * MAXL;
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
    for (int ci = 0; ci < NCASES; ci++) {
        const wire_case wc = CASES[ci];
        const ember_dtype dt = wc.fwd;
        ember_sebc *s = make_scaled(&e, 1, wc.fwd, wc.bwd, wc.fscale, wc.bscale);
        ember_dtype f = EMBER_DTYPE_F32, bk = EMBER_DTYPE_F32;
        float fs = 0, bs = 0;
        ember_sebc_wire_precision(s, &f, &bk);
        ember_sebc_wire_loss_scale(s, &fs, &bs);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, f == wc.fwd && bk == wc.bwd && fs == wc.fscale && bs == wc.bscale);
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
        const float u = unit_for(dt), ub = unit_for(wc.bwd);
        for (int64_t i = 0; i < n && ok; i++)
            if (dt == EMBER_DTYPE_I8 ? !int8_within(out, out_ref, i) : !within(out[i], out_ref[i], u)) {
                fprintf(stderr, "rank %d %s %s: out[%lld] = %.9g, fp32 %.9g\n", R, g_scheme, ember_dtype_name(dt),
                        (long long)i, (double)out[i], (double)out_ref[i]);
                ok = false;
            }
        for (int i = 0; i < ROWS * DIM && ok; i++) {
            // w = w0 - lr sum g (rounded partials), wr = w0 - lr sum g: |w - wr| <= u |w0 - wr|,
            // plus the fp32 rounding of each subtraction (half an ulp of w and of wr).
            const float lim = ub * fabsf(w0[i] - wr[i]) * 1.0001f + 0x1p-23f * (fabsf(w[i]) + fabsf(wr[i]));
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
            printf("%s %s %s,%s W=%d: %lld bytes, fp32 %lld\n", g_scheme, g_pool, ember_dtype_name(dt),
                   ember_dtype_name(wc.bwd), W, (long long)tot[0], (long long)tot[1]);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    }
    env_close(&e);
}

// 20 steps of a quadratic loss L = 1/2 |out - 0.1|^2 (the gradient out - 0.1 feeds the forward's
// error back into training): the weights stay within twice the coarser direction's unit (2^-10
// fp16, 2^-7 bf16, 2^-6 int8, 2^-3 E4M3, 2^-2 with E5M2) of the fp32 run relative to their
// largest magnitude, and the loss decreases as the fp32 run's does.
static void train(void **state) {
    (void)state;
    env e;
    env_open(&e, g_scheme, pool_for(g_pool));
    float wfin[NCASES][ROWS * DIM], dfin[NCASES][7 * DIM];
    double loss[NCASES][2];
    for (int di = 0; di < NCASES; di++) {
        ember_sebc *s = make_scaled(&e, 1, CASES[di].fwd, CASES[di].bwd, CASES[di].fscale, CASES[di].bscale);
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
    for (int di = 1; di < NCASES; di++) {
        const float tol = 2 * fmaxf(unit_for(CASES[di].fwd), unit_for(CASES[di].bwd)) * big;
        float worst = 0;
        for (int i = 0; i < ROWS * DIM; i++) worst = fmaxf(worst, fabsf(wfin[di][i] - wfin[0][i]));
        for (int i = 0; i < 7 * DIM; i++) worst = fmaxf(worst, fabsf(dfin[di][i] - dfin[0][i]));
        ok = ok && worst <= tol && loss[di][1] < loss[di][0];
        if (R == 0)
            printf("%s %s %s,%s W=%d: loss %.6g -> %.6g (fp32 %.6g -> %.6g), max |w - w_fp32| %.3g (tolerance "
                   "%.3g)\n",
                   g_scheme, g_pool, ember_dtype_name(CASES[di].fwd), ember_dtype_name(CASES[di].bwd), W, loss[di][0],
                   loss[di][1], loss[0][0], loss[0][1], (double)worst, (double)tol);
    }
    ok = ok && loss[0][1] < loss[0][0];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    env_close(&e);
}

// Ranks that pass different precisions or loss scales, or a value outside the allowed, all fail
// with one message; the precision and scales stay as they were.
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
    st = ember_sebc_set_wire_precision(s, R == 0 ? (ember_dtype)9 : EMBER_DTYPE_F16, EMBER_DTYPE_F16);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && strstr(ember_ctx_errmsg(e.ctx), "forward precision 9") != NULL);
    st = ember_sebc_set_wire_precision(s, EMBER_DTYPE_BF16, R == 0 ? EMBER_DTYPE_I64 : EMBER_DTYPE_F16);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && strstr(ember_ctx_errmsg(e.ctx), "backward precision 3") != NULL);
    ember_dtype f, b;
    ember_sebc_wire_precision(s, &f, &b);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, f == EMBER_DTYPE_BF16 && b == EMBER_DTYPE_F32);
    // Loss scales: ranks that differ (exactly compared), and values not finite and positive.
    st = ember_sebc_set_wire_loss_scale(s, R == W - 1 ? 2.0f : 1.0f, 1.0f);
    snprintf(want, sizeof want, "ranks disagree on forward loss scale: '2' on rank %d, '1' on rank 0", W - 1);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG && strstr(ember_ctx_errmsg(e.ctx), want) != NULL);
    const float badv[] = {0.0f, -1.0f, INFINITY, NAN};
    for (int i = 0; i < 4; i++) {
        st = ember_sebc_set_wire_loss_scale(s, 1.0f, R == 0 ? badv[i] : 1.0f);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_INVALID_ARG &&
                                            strstr(ember_ctx_errmsg(e.ctx), "is not a positive finite number") != NULL);
    }
    float fs, bs;
    ember_sebc_wire_loss_scale(s, &fs, &bs);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, fs == 1.0f && bs == 1.0f);
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

// fp8 and int8 refusals, and the loss scale, on the same layout as overflow: a pooled value of
// 2 x 300 = 600 rounds beyond E4M3's 448 and is refused, naming it; a forward loss scale of 0.5
// carries it (300 on the wire) within E4M3's bound; a scale of 2 refuses 2 x 200 = 400 (800 on
// the wire) and says that the scale did it. int8 refuses a pooled value that is not finite
// (2 x 3e38 overflows fp32 to inf), which fp16 carries as it is.
static void overflow8(void **state) {
    (void)state;
    env e;
    env_open(&e, "tw", EMBER_POOL_SUM);
    const int B = 3 + R;
    int32_t len[3 * MAXB] = {0};
    int64_t ids[2] = {4, 4};
    len[0] = R == 0 ? 2 : 0;
    ember_kjt k = {.num_features = 3, .batch_size = B, .lengths = len, .values = ids, .nnz = len[0]};
    float out[3 * MAXB * DIM], w[ROWS * DIM], d[7 * DIM];
    const struct {
        ember_dtype dt;
        float scale, value;
        const char *msg; // NULL: carried
    } cases[] = {
        {EMBER_DTYPE_FP8_E4M3, 1.0f, 300.0f,
         "pooled value 600 of feature 'user' (table 'big', sample 0 of rank 0, column 0) overflows fp8_e4m3 on the "
         "wire (largest finite 448); lower the wire loss scale or use a wider wire precision"},
        {EMBER_DTYPE_FP8_E4M3, 0.5f, 300.0f, NULL},
        {EMBER_DTYPE_FP8_E4M3, 2.0f, 200.0f,
         "pooled value 400 of feature 'user' (table 'big', sample 0 of rank 0, column 0) times the loss scale 2 "
         "overflows fp8_e4m3 on the wire (largest finite 448)"},
        {EMBER_DTYPE_FP8_E5M2, 1.0f, 300.0f, NULL},
        {EMBER_DTYPE_I8, 1.0f, 3e38f,
         "pooled value inf of feature 'user' (table 'big', sample 0 of rank 0, column 0) is not finite: int8 on the "
         "wire carries finite values only"},
        {EMBER_DTYPE_F16, 1.0f, 3e38f, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ember_sebc *s = make_scaled(&e, 1, cases[c].dt, EMBER_DTYPE_F32, cases[c].scale, 1.0f);
        read_all(s, w, d);
        for (int j = 0; j < DIM; j++) w[4 * DIM + j] = cases[c].value;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_write(s, 0, "weight", w, -1) == EMBER_OK);
        const ember_status st = ember_sebc_forward(s, &k, out);
        const char *msg = ember_ctx_errmsg(e.ctx);
        bool ok;
        if (cases[c].msg) {
            ok = st == EMBER_ERR_NUMERIC && strstr(msg, cases[c].msg) != NULL;
        } else {
            const float want = 2 * cases[c].value;
            ok = st == EMBER_OK &&
                 (R != 0 || (isinf(want) ? out[0] == want : within(out[0], want, unit_for(cases[c].dt))));
        }
        if (!ok) fprintf(stderr, "rank %d case %zu: status %d, out[0] %g, \"%s\"\n", R, c, (int)st, (double)out[0], msg);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
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
                               cmocka_unit_test(overflow), cmocka_unit_test(overflow8)};
    const int nall = (int)(sizeof all / sizeof all[0]);
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    int n = 0;
    for (int i = 0; i < nall; i++)
        if (!g_case[0] || !strcmp(all[i].name, g_case)) chosen[n++] = all[i];
    int fails = _cmocka_run_group_tests("wire", chosen, (size_t)n, NULL, NULL);
    MPI_Finalize();
    return fails;
}
