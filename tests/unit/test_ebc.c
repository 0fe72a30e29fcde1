// Local EmbeddingBagCollection against the naive oracle: forward, fused backward with every
// optimizer, dtypes, bounds modes, errors that change nothing, determinism, state dict.
// A new optimizer or dtype is one more row in `cases` below.
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
#include "isa_env.h"
#include "oracle.h"

// Four tables (one with a single row), five features, one pair sharing a table.
#define NT 4
#define NF 5
static const int64_t ROWS[NT] = {50, 1, 200, 30};
static const int32_t DIMS[NT] = {8, 4, 16, 3};
static const int32_t FTAB[NF] = {0, 1, 2, 0, 3};

typedef struct tcase {
    const char *name;
    int pool;          // EMBER_POOL_SUM/MEAN, or -1: tables alternate SUM and MEAN
    int weighted;
    ember_optim_kind opt;
    ember_weight_decay_mode wd;
    ember_dtype dtype;
    int sr;            // stochastic rounding
} tcase;

static const tcase cases[] = {
    {"sgd_sum", EMBER_POOL_SUM, 0, EMBER_OPT_SGD, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"sgd_mean_weighted", EMBER_POOL_MEAN, 1, EMBER_OPT_SGD, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"sgd_mixed_l2", -1, 1, EMBER_OPT_SGD, EMBER_WD_L2, EMBER_DTYPE_F32, 0},
    {"rowwise_adagrad_sum", EMBER_POOL_SUM, 0, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"rowwise_adagrad_mean_weighted", EMBER_POOL_MEAN, 1, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"rowwise_adagrad_decoupled", -1, 0, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_WD_DECOUPLED, EMBER_DTYPE_F32, 0},
    {"adagrad_mixed", -1, 1, EMBER_OPT_ADAGRAD, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"adagrad_l2", EMBER_POOL_SUM, 0, EMBER_OPT_ADAGRAD, EMBER_WD_L2, EMBER_DTYPE_F32, 0},
    {"adam_sum", EMBER_POOL_SUM, 0, EMBER_OPT_ADAM, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"adam_mean_weighted_decoupled", EMBER_POOL_MEAN, 1, EMBER_OPT_ADAM, EMBER_WD_DECOUPLED, EMBER_DTYPE_F32, 0},
    {"adam_l2", -1, 0, EMBER_OPT_ADAM, EMBER_WD_L2, EMBER_DTYPE_F32, 0},
    {"partial_rowwise_adam", -1, 1, EMBER_OPT_PARTIAL_ROWWISE_ADAM, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"partial_rowwise_adam_decoupled", EMBER_POOL_SUM, 0, EMBER_OPT_PARTIAL_ROWWISE_ADAM, EMBER_WD_DECOUPLED,
     EMBER_DTYPE_F32, 0},
    {"lamb", -1, 0, EMBER_OPT_LAMB, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"lamb_decoupled_weighted", EMBER_POOL_MEAN, 1, EMBER_OPT_LAMB, EMBER_WD_DECOUPLED, EMBER_DTYPE_F32, 0},
    {"partial_rowwise_lamb", -1, 1, EMBER_OPT_PARTIAL_ROWWISE_LAMB, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"partial_rowwise_lamb_decoupled", EMBER_POOL_SUM, 0, EMBER_OPT_PARTIAL_ROWWISE_LAMB, EMBER_WD_DECOUPLED,
     EMBER_DTYPE_F32, 0},
    {"lars_sgd", -1, 1, EMBER_OPT_LARS_SGD, EMBER_WD_NONE, EMBER_DTYPE_F32, 0},
    {"lars_sgd_l2", EMBER_POOL_MEAN, 0, EMBER_OPT_LARS_SGD, EMBER_WD_L2, EMBER_DTYPE_F32, 0},
    {"lars_sgd_decoupled_bf16", EMBER_POOL_SUM, 1, EMBER_OPT_LARS_SGD, EMBER_WD_DECOUPLED, EMBER_DTYPE_BF16, 0},
    {"sgd_bf16", -1, 1, EMBER_OPT_SGD, EMBER_WD_NONE, EMBER_DTYPE_BF16, 0},
    {"rowwise_adagrad_fp16", EMBER_POOL_SUM, 0, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_WD_NONE, EMBER_DTYPE_F16, 0},
    {"adam_bf16_sr", EMBER_POOL_MEAN, 0, EMBER_OPT_ADAM, EMBER_WD_NONE, EMBER_DTYPE_BF16, 1},
    {"sgd_fp16_sr", EMBER_POOL_SUM, 1, EMBER_OPT_SGD, EMBER_WD_NONE, EMBER_DTYPE_F16, 1},
};

typedef struct fixture {
    ember_table_config tables[NT];
    ember_feature_config features[NF];
    ember_ebc_config cfg;
    char names[NT + NF][16];
} fixture;

static void make_config(fixture *fx, const tcase *c, ember_bounds_mode bounds) {
    memset(fx, 0, sizeof *fx);
    for (int t = 0; t < NT; t++) {
        snprintf(fx->names[t], 16, "t%d", t);
        ember_table_config *tc = &fx->tables[t];
        tc->name = fx->names[t];
        tc->rows = ROWS[t];
        tc->dim = DIMS[t];
        tc->pooling = c->pool >= 0 ? (ember_pooling)c->pool : (t % 2 ? EMBER_POOL_MEAN : EMBER_POOL_SUM);
        tc->dtype = c->dtype;
        tc->init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = c->opt;
        o.lr = c->opt == EMBER_OPT_SGD ? 0.3f : 0.05f;
        o.eta = 0.5f; // LARS: a trust coefficient large enough for its updates to show
        o.momentum = 0.8f;
        o.weight_decay_mode = c->wd;
        o.weight_decay = c->wd ? 0.1f : 0.0f;
        o.initial_accumulator = c->opt == EMBER_OPT_ROWWISE_ADAGRAD ? 0.01f : 0.0f;
        tc->optim = o;
        tc->stochastic_rounding = c->sr;
    }
    for (int f = 0; f < NF; f++) {
        snprintf(fx->names[NT + f], 16, "f%d", f);
        fx->features[f] = (ember_feature_config){.name = fx->names[NT + f], .table = FTAB[f]};
    }
    fx->cfg = (ember_ebc_config){.tables = fx->tables, .num_tables = NT, .features = fx->features, .num_features = NF,
                                 .bounds = bounds, .seed = 1234};
}

static void feature_rows(int64_t *rows) {
    for (int f = 0; f < NF; f++) rows[f] = ROWS[FTAB[f]];
}

// Largest relative-to-tolerance error of every tensor of every table against the oracle.
static double state_err(const ember_ebc *ebc, const oracle *o, double atol, double rtol) {
    double worst = 0;
    for (int t = 0; t < NT; t++) {
        for (int s = 0; s < ember_ebc_num_tensors(ebc, t); s++) {
            ember_tensor_info info;
            assert_int_equal(ember_ebc_tensor_info(ebc, t, s, &info), EMBER_OK);
            int64_t n = info.rows * info.cols;
            float *got = malloc(sizeof(float) * (size_t)n);
            assert_int_equal(ember_ebc_read(ebc, t, info.name, 0, info.rows, EMBER_DTYPE_F32, got), EMBER_OK);
            const double *want = s == 0 ? o->t[t].w : s == 1 ? o->t[t].m1 : o->t[t].m2;
            double e = rel_err_f(got, want, n, atol, rtol);
            if (e > worst) worst = e;
            if (e > 1) fprintf(stderr, "  table %d tensor %s: err %.3g\n", t, info.name, e);
            free(got);
        }
    }
    return worst;
}

// Trains K steps on random batches with ebc and the oracle side by side, checking forward
// outputs, per-id weight gradients and every tensor after the steps.
// Tolerances: fp32 storage: atol 2e-5, rtol 2e-4 (fp32 vs double over 5 steps); 16-bit
// storage: the oracle is re-synchronised to the stored weights after every step (so rounding
// does not compound) and compared with the 16-bit unit roundoff as rtol.
static void run_case(const tcase *c, int threads) {
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_ctx_set_num_threads(ctx, threads);
    fixture fx;
    make_config(&fx, c, EMBER_BOUNDS_ERROR);
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_OK);
    oracle *o = oracle_create(&fx.cfg, ebc);
    const int K = 5, B = 7;
    const int is16 = c->dtype != EMBER_DTYPE_F32;
    const double atol = is16 ? 2e-3 : 2e-5, rtol = is16 ? (c->dtype == EMBER_DTYPE_BF16 ? 8e-3 : 1e-3) : 2e-4;
    int64_t rows[NF];
    feature_rows(rows);
    test_rng rng = {(uint64_t)(0xabc + strlen(c->name))};
    for (int k = 0; k < K; k++) {
        gen_kjt g;
        gen_kjt_make(&g, &rng, NF, B, rows, 6, 0.3, c->weighted);
        int64_t n = ember_ebc_output_size(ebc, &g.kjt);
        float *out = malloc(sizeof(float) * (size_t)n);
        double *ref = malloc(sizeof(double) * (size_t)n);
        assert_int_equal(ember_ebc_forward(ebc, &g.kjt, out), EMBER_OK);
        oracle_forward(o, &g.kjt, ref);
        double fe = rel_err_f(out, ref, n, atol, rtol);
        if (fe > 1) fprintf(stderr, "%s step %d forward err %.3g\n", c->name, k, fe);
        assert_true(fe <= 1);
        float *go = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&rng) * 2 - 1);
        float *gw = c->weighted ? malloc(sizeof(float) * (size_t)(g.kjt.nnz + 1)) : NULL;
        double *gw_ref = c->weighted ? malloc(sizeof(double) * (size_t)(g.kjt.nnz + 1)) : NULL;
        assert_int_equal(ember_ebc_backward(ebc, &g.kjt, go, gw), EMBER_OK);
        oracle_backward(o, &g.kjt, go, gw_ref);
        if (gw) assert_true(rel_err_f(gw, gw_ref, g.kjt.nnz, atol, rtol) <= 1);
        double se = state_err(ebc, o, atol, rtol);
        if (se > 1) fprintf(stderr, "%s step %d state err %.3g\n", c->name, k, se);
        assert_true(se <= 1);
        if (is16) {
            // Re-synchronise the oracle's weights to the rounded storage.
            for (int t = 0; t < NT; t++) {
                int64_t m = ROWS[t] * DIMS[t];
                float *w = malloc(sizeof(float) * (size_t)m);
                ember_ebc_read(ebc, t, "weight", 0, ROWS[t], EMBER_DTYPE_F32, w);
                for (int64_t i = 0; i < m; i++) o->t[t].w[i] = w[i];
                free(w);
            }
        }
        free(out);
        free(ref);
        free(go);
        free(gw);
        free(gw_ref);
        gen_kjt_free(&g);
    }
    for (int t = 0; t < NT; t++) assert_int_equal(ember_ebc_step(ebc, t), K);
    oracle_destroy(o);
    ember_ebc_destroy(ebc);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void every_optimizer_and_dtype_matches_oracle(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], 1);
        run_case(&cases[i], 2);
    }
}

// Snapshot of every tensor's bytes, to prove a failed call changed nothing.
static size_t snapshot(const ember_ebc *ebc, unsigned char *buf) {
    size_t off = 0;
    for (int t = 0; t < ember_ebc_num_tables(ebc); t++) {
        for (int s = 0; s < ember_ebc_num_tensors(ebc, t); s++) {
            ember_tensor_info info;
            ember_ebc_tensor_info(ebc, t, s, &info);
            if (buf) ember_ebc_read(ebc, t, info.name, 0, info.rows, info.dtype, buf + off);
            off += (size_t)(info.rows * info.cols) * ember_dtype_size(info.dtype);
        }
        off += 8;
        if (buf) {
            int64_t st = ember_ebc_step(ebc, t);
            memcpy(buf + off - 8, &st, 8);
        }
    }
    return off;
}

static void failed_calls_change_nothing(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    fixture fx;
    make_config(&fx, &cases[9], EMBER_BOUNDS_ERROR); // Adam: weights and two states
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_OK);
    int64_t rows[NF];
    feature_rows(rows);
    test_rng rng = {7};
    gen_kjt g;
    gen_kjt_make(&g, &rng, NF, 4, rows, 5, 0.2, 1);
    int64_t n = ember_ebc_output_size(ebc, &g.kjt);
    float *out = calloc((size_t)n, sizeof(float));
    float *go = calloc((size_t)n, sizeof(float));
    assert_int_equal(ember_ebc_backward(ebc, &g.kjt, go, NULL), EMBER_OK); // one good step first
    size_t sz = snapshot(ebc, NULL);
    unsigned char *before = malloc(sz), *after = malloc(sz);
    snapshot(ebc, before);

    // An id out of range in feature f2 (table t2, 200 rows).
    int64_t j = g.offsets[2 * 4 + 1];
    if (g.lengths[2 * 4 + 1] == 0) { g.lengths[2 * 4 + 1] = 1; }
    int64_t saved = g.values[j];
    if (g.offsets[2 * 4 + 2] == j) { /* empty bag: use the next id of the batch instead */ }
    g.values[j] = 200;
    ember_kjt bad = g.kjt;
    bad.lengths = NULL; // offsets only, so the edited length above does not matter
    ember_status st = ember_ebc_backward(ebc, &bad, go, NULL);
    if (g.offsets[2 * 4 + 2] > j) {
        assert_int_equal(st, EMBER_ERR_OUT_OF_RANGE);
        assert_non_null(strstr(ember_ctx_errmsg(ctx), "feature 'f2'"));
        assert_non_null(strstr(ember_ctx_errmsg(ctx), "id 200"));
        assert_int_equal(ember_ebc_forward(ebc, &bad, out), EMBER_ERR_OUT_OF_RANGE);
    }
    g.values[j] = saved;
    // A NaN in grad_out.
    go[n / 2] = NAN;
    assert_int_equal(ember_ebc_backward(ebc, &g.kjt, go, NULL), EMBER_ERR_NUMERIC);
    go[n / 2] = 0;
    // Lengths that do not sum to nnz, a negative length, wrong feature count.
    ember_kjt k2 = g.kjt;
    k2.offsets = NULL;
    k2.nnz += 1;
    assert_int_equal(ember_ebc_backward(ebc, &k2, go, NULL), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "nnz"));
    int32_t l0 = g.lengths[0];
    g.lengths[0] = -1;
    k2 = g.kjt;
    k2.offsets = NULL;
    assert_int_equal(ember_ebc_backward(ebc, &k2, go, NULL), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "negative length"));
    g.lengths[0] = l0;
    k2 = g.kjt;
    k2.num_features = NF - 1;
    assert_int_equal(ember_ebc_backward(ebc, &k2, go, NULL), EMBER_ERR_INVALID_ARG);
    // grad_weights without weights.
    k2 = g.kjt;
    k2.weights = NULL;
    float gw[1];
    assert_int_equal(ember_ebc_backward(ebc, &k2, go, gw), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_ebc_backward(ebc, NULL, go, NULL), EMBER_ERR_INVALID_ARG);
    snapshot(ebc, after);
    assert_memory_equal(before, after, sz);
    free(before);
    free(after);
    free(out);
    free(go);
    gen_kjt_free(&g);
    ember_ebc_destroy(ebc);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void forward_mean_empty_bag_is_zero_and_divides_by_count(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t", t.rows = 4, t.dim = 2, t.pooling = EMBER_POOL_MEAN, t.init = (ember_init){.kind = EMBER_INIT_ZEROS};
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = {.tables = &t, .num_tables = 1, .features = &f, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 1};
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &ebc), EMBER_OK);
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(ember_ebc_write(ebc, 0, "weight", 0, 4, EMBER_DTYPE_F32, w), EMBER_OK);
    // Bag 0 empty; bag 1 = {0, 3} with weights {2, 1}: mean = (2*[1,2] + [7,8]) / 2 (count, not weight sum).
    int32_t len[2] = {0, 2};
    int64_t ids[2] = {0, 3};
    float wts[2] = {2, 1};
    ember_kjt k = {.num_features = 1, .batch_size = 2, .lengths = len, .values = ids, .weights = wts, .nnz = 2};
    float out[4] = {9, 9, 9, 9};
    assert_int_equal(ember_ebc_forward(ebc, &k, out), EMBER_OK);
    assert_true(out[0] == 0 && out[1] == 0);
    assert_true(out[2] == 4.5f && out[3] == 6.0f);
    ember_ebc_destroy(ebc);
    ember_ctx_destroy(ctx);
}

// Found by fuzz/fuzz_kjt.c: offsets[i + 1] near INT64_MIN made the validator's offsets[i + 1] -
// offsets[i] overflow (undefined behaviour, caught by UBSan) before it could call the length negative.
static void kjt_offsets_near_int64_min_are_rejected(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    int32_t len[2] = {5, 3};
    int64_t offsets[3] = {0, 5, INT64_MIN}, ids[8] = {0};
    ember_kjt both = {.num_features = 1, .batch_size = 2, .lengths = len, .offsets = offsets, .values = ids, .nnz = 8};
    assert_int_equal(ember_kjt_validate(ctx, &both, 1, NULL, EMBER_BOUNDS_ERROR, NULL), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "bag 1: length 3 disagrees with offsets"));
    ember_kjt only = {.num_features = 1, .batch_size = 2, .offsets = offsets, .values = ids, .nnz = 8};
    assert_int_equal(ember_kjt_validate(ctx, &only, 1, NULL, EMBER_BOUNDS_ERROR, NULL), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "bag 1: negative length"));
    offsets[2] = INT64_MIN + 5; // exactly representable: -2^63 after the subtraction
    assert_int_equal(ember_kjt_validate(ctx, &only, 1, NULL, EMBER_BOUNDS_ERROR, NULL), EMBER_ERR_INVALID_ARG);
    ember_ctx_destroy(ctx);
}

static void backward_duplicate_ids_coalesced(void **state) {
    (void)state;
    // Row-wise Adagrad is not additive over partial updates: two updates with g/2 differ from
    // one with g. The same id twice in a bag and across bags must give exactly one update.
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    o.lr = 1.0f;
    o.eps = 0.0f;
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t", t.rows = 3, t.dim = 2, t.init = (ember_init){.kind = EMBER_INIT_ZEROS}, t.optim = o;
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = {.tables = &t, .num_tables = 1, .features = &f, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 1};
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &ebc), EMBER_OK);
    int32_t len[2] = {2, 1};
    int64_t ids[3] = {1, 1, 1};
    ember_kjt k = {.num_features = 1, .batch_size = 2, .lengths = len, .values = ids, .nnz = 3};
    float go[4] = {1, 2, 1, 2};
    assert_int_equal(ember_ebc_backward(ebc, &k, go, NULL), EMBER_OK);
    // g = 3 * [1, 2] = [3, 6]; m1 = mean(g^2) = 22.5; w = -g / sqrt(22.5).
    float w[6], m1[3];
    ember_ebc_read(ebc, 0, "weight", 0, 3, EMBER_DTYPE_F32, w);
    ember_ebc_read(ebc, 0, "momentum1", 0, 3, EMBER_DTYPE_F32, m1);
    assert_float_equal(m1[1], 22.5f, 1e-5f);
    assert_float_equal(w[2], -3.0f / sqrtf(22.5f), 1e-6f);
    assert_float_equal(w[3], -6.0f / sqrtf(22.5f), 1e-6f);
    assert_true(w[0] == 0 && w[1] == 0 && w[4] == 0 && w[5] == 0 && m1[0] == 0 && m1[2] == 0);
    ember_ebc_destroy(ebc);
    ember_ctx_destroy(ctx);
}

static void bounds_clamp_and_skip(void **state) {
    (void)state;
    for (int mode = EMBER_BOUNDS_CLAMP; mode <= EMBER_BOUNDS_SKIP; mode++) {
        ember_ctx *ctx = NULL;
        ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
        cc.log_level = EMBER_LOG_ERROR; // the clamp warning is expected here
        assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
        fixture fx;
        tcase c = cases[4];
        make_config(&fx, &c, (ember_bounds_mode)mode);
        ember_ebc *ebc = NULL;
        assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_OK);
        oracle *o = oracle_create(&fx.cfg, ebc);
        int64_t rows[NF];
        feature_rows(rows);
        test_rng rng = {99};
        gen_kjt g;
        gen_kjt_make(&g, &rng, NF, 6, rows, 5, 0.2, 1);
        for (int64_t j = 0; j < g.kjt.nnz; j += 3) g.values[j] = (j % 2) ? -5 : 1000;
        int64_t n = ember_ebc_output_size(ebc, &g.kjt);
        float *out = malloc(sizeof(float) * (size_t)n), *go = malloc(sizeof(float) * (size_t)n);
        double *ref = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&rng) - 0.5);
        assert_int_equal(ember_ebc_forward(ebc, &g.kjt, out), EMBER_OK);
        oracle_forward(o, &g.kjt, ref);
        assert_true(rel_err_f(out, ref, n, 2e-5, 2e-4) <= 1);
        assert_int_equal(ember_ebc_backward(ebc, &g.kjt, go, NULL), EMBER_OK);
        oracle_backward(o, &g.kjt, go, NULL);
        assert_true(state_err(ebc, o, 2e-5, 2e-4) <= 1);
        free(out);
        free(go);
        free(ref);
        gen_kjt_free(&g);
        oracle_destroy(o);
        ember_ebc_destroy(ebc);
        ember_ctx_destroy(ctx);
    }
}

// Same inputs, 1 vs 2 threads and two runs: outputs and weights bitwise equal.
static void results_bitwise_equal_across_threads_and_runs(void **state) {
    (void)state;
    unsigned char *snap[3] = {0};
    float *outs[3] = {0};
    size_t sz = 0;
    int64_t n = 0;
    int threads[3] = {1, 2, 2};
    for (int run = 0; run < 3; run++) {
        ember_ctx *ctx = NULL;
        assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
        ember_ctx_set_num_threads(ctx, threads[run]);
        fixture fx;
        make_config(&fx, &cases[14], EMBER_BOUNDS_ERROR);
        ember_ebc *ebc = NULL;
        assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_OK);
        int64_t rows[NF];
        feature_rows(rows);
        test_rng rng = {5};
        for (int k = 0; k < 4; k++) {
            gen_kjt g;
            gen_kjt_make(&g, &rng, NF, 64, rows, 20, 0.5, 1);
            n = ember_ebc_output_size(ebc, &g.kjt);
            float *out = malloc(sizeof(float) * (size_t)n), *go = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&rng) - 0.5);
            assert_int_equal(ember_ebc_forward(ebc, &g.kjt, out), EMBER_OK);
            assert_int_equal(ember_ebc_backward(ebc, &g.kjt, go, NULL), EMBER_OK);
            free(outs[run]);
            outs[run] = out;
            free(go);
            gen_kjt_free(&g);
        }
        sz = snapshot(ebc, NULL);
        snap[run] = malloc(sz);
        snapshot(ebc, snap[run]);
        ember_ebc_destroy(ebc);
        ember_ctx_destroy(ctx);
    }
    for (int run = 1; run < 3; run++) {
        assert_memory_equal(snap[0], snap[run], sz);
        assert_memory_equal(outs[0], outs[run], sizeof(float) * (size_t)n);
    }
    for (int run = 0; run < 3; run++) {
        free(snap[run]);
        free(outs[run]);
    }
}

static void sequence_collection_matches_oracle(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = EMBER_OPT_ADAGRAD;
    o.lr = 0.1f;
    ember_table_config t[2] = {EMBER_TABLE_CONFIG_DEFAULT, EMBER_TABLE_CONFIG_DEFAULT};
    for (int i = 0; i < 2; i++) {
        t[i].dim = 4, t[i].pooling = EMBER_POOL_NONE, t[i].optim = o;
        t[i].init = (ember_init){.kind = EMBER_INIT_NORMAL, .std = 0.3f};
    }
    t[0].name = "a", t[0].rows = 10;
    t[1].name = "b", t[1].rows = 1;
    ember_feature_config f[3] = {{.name = "x", .table = 0}, {.name = "y", .table = 1}, {.name = "z", .table = 0}};
    ember_ebc_config cfg = {.tables = t, .num_tables = 2, .features = f, .num_features = 3,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 3};
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &ebc), EMBER_OK);
    oracle *orc = oracle_create(&cfg, ebc);
    int64_t rows[3] = {10, 1, 10};
    test_rng rng = {11};
    for (int k = 0; k < 3; k++) {
        gen_kjt g;
        gen_kjt_make(&g, &rng, 3, 5, rows, 4, 0.4, k == 1);
        int64_t n = ember_ebc_output_size(ebc, &g.kjt);
        assert_int_equal(n, g.kjt.nnz * 4);
        float *out = malloc(sizeof(float) * (size_t)(n + 1)), *go = malloc(sizeof(float) * (size_t)(n + 1));
        double *ref = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&rng) - 0.5);
        assert_int_equal(ember_ebc_forward(ebc, &g.kjt, out), EMBER_OK);
        oracle_forward(orc, &g.kjt, ref);
        assert_true(rel_err_f(out, ref, n, 1e-6, 1e-5) <= 1);
        assert_int_equal(ember_ebc_backward(ebc, &g.kjt, go, NULL), EMBER_OK);
        oracle_backward(orc, &g.kjt, go, NULL);
        free(out);
        free(go);
        free(ref);
        gen_kjt_free(&g);
    }
    float w[40];
    ember_ebc_read(ebc, 0, "weight", 0, 10, EMBER_DTYPE_F32, w);
    assert_true(rel_err_f(w, orc->t[0].w, 40, 2e-5, 2e-4) <= 1);
    oracle_destroy(orc);
    ember_ebc_destroy(ebc);
    ember_ctx_destroy(ctx);
}

static void bad_configs_are_rejected_with_names(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    fixture fx;
    make_config(&fx, &cases[0], EMBER_BOUNDS_ERROR);
    ember_ebc *ebc = (ember_ebc *)&fx;
    fx.tables[2].rows = 0;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_ERR_INVALID_ARG);
    assert_null(ebc);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "table 't2'"));
    make_config(&fx, &cases[0], EMBER_BOUNDS_ERROR);
    fx.features[3].table = 9;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "feature 'f3'"));
    make_config(&fx, &cases[0], EMBER_BOUNDS_ERROR);
    fx.tables[1].pooling = EMBER_POOL_NONE;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_ERR_INVALID_ARG);
    make_config(&fx, &cases[0], EMBER_BOUNDS_ERROR);
    fx.tables[3].name = "t0";
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_ERR_INVALID_ARG);
    make_config(&fx, &cases[8], EMBER_BOUNDS_ERROR);
    fx.tables[0].optim.beta1 = 1.0f;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static void state_dict_round_trip_is_bitwise(void **state) {
    (void)state;
    for (int ci = 0; ci < 3; ci++) {
        const tcase *c = &cases[ci == 0 ? 9 : ci == 1 ? 11 : 15];
        ember_ctx *ctx = NULL;
        assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
        fixture fx;
        make_config(&fx, c, EMBER_BOUNDS_ERROR);
        ember_ebc *a = NULL, *b = NULL;
        assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &a), EMBER_OK);
        fx.cfg.seed = 999; // b starts elsewhere and receives a's state
        assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &b), EMBER_OK);
        int64_t rows[NF];
        feature_rows(rows);
        test_rng rng = {3};
        gen_kjt g;
        gen_kjt_make(&g, &rng, NF, 8, rows, 4, 0.3, 0);
        int64_t n = ember_ebc_output_size(a, &g.kjt);
        float *go = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&rng) - 0.5);
        assert_int_equal(ember_ebc_backward(a, &g.kjt, go, NULL), EMBER_OK);
        for (int t = 0; t < NT; t++) {
            for (int s = 0; s < ember_ebc_num_tensors(a, t); s++) {
                ember_tensor_info info;
                ember_ebc_tensor_info(a, t, s, &info);
                size_t bytes = (size_t)(info.rows * info.cols) * ember_dtype_size(info.dtype);
                void *buf = malloc(bytes);
                // Whole tensor in its native dtype, then the second half again by row range.
                assert_int_equal(ember_ebc_read(a, t, info.name, 0, info.rows, info.dtype, buf), EMBER_OK);
                assert_int_equal(ember_ebc_write(b, t, info.name, 0, info.rows, info.dtype, buf), EMBER_OK);
                free(buf);
            }
            ember_ebc_set_step(b, t, ember_ebc_step(a, t));
        }
        size_t sz = snapshot(a, NULL);
        unsigned char *sa = malloc(sz), *sb = malloc(sz);
        snapshot(a, sa);
        snapshot(b, sb);
        assert_memory_equal(sa, sb, sz);
        // Row-range reads agree with whole reads.
        float part[8 * 10], whole[50 * 8];
        ember_ebc_read(a, 0, "weight", 0, 50, EMBER_DTYPE_F32, whole);
        ember_ebc_read(a, 0, "weight", 20, 30, EMBER_DTYPE_F32, part);
        assert_memory_equal(part, whole + 20 * 8, sizeof part);
        assert_int_equal(ember_ebc_read(a, 0, "weight", 20, 51, EMBER_DTYPE_F32, part), EMBER_ERR_INVALID_ARG);
        assert_int_equal(ember_ebc_read(a, 0, "momentum7", 0, 1, EMBER_DTYPE_F32, part), EMBER_ERR_INVALID_ARG);
        free(sa);
        free(sb);
        free(go);
        gen_kjt_free(&g);
        ember_ebc_destroy(a);
        ember_ebc_destroy(b);
        assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
        ember_ctx_destroy(ctx);
    }
}

// The seed bug: a table converted to bf16 kept training a detached fp32 copy. Here the one
// storage is converted, and the next update shows in the state dict.
static void dtype_conversion_converts_the_one_storage(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    fixture fx;
    make_config(&fx, &cases[0], EMBER_BOUNDS_ERROR);
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_OK);
    float before[200 * 16], after[200 * 16], other[50 * 8], other2[50 * 8];
    ember_ebc_read(ebc, 2, "weight", 0, 200, EMBER_DTYPE_F32, before);
    ember_ebc_read(ebc, 0, "weight", 0, 50, EMBER_DTYPE_F32, other);
    assert_int_equal(ember_ebc_convert_dtype(ebc, 2, EMBER_DTYPE_BF16), EMBER_OK);
    ember_tensor_info info;
    ember_ebc_tensor_info(ebc, 2, 0, &info);
    assert_int_equal(info.dtype, EMBER_DTYPE_BF16);
    size_t wb = 0;
    ember_ebc_table_bytes(ebc, 2, &wb, NULL);
    assert_int_equal(wb, 200 * 16 * 2);
    ember_ebc_read(ebc, 2, "weight", 0, 200, EMBER_DTYPE_F32, after);
    for (int i = 0; i < 200 * 16; i++) assert_true(fabsf(after[i] - before[i]) <= fabsf(before[i]) * 0.004f);
    ember_ebc_read(ebc, 0, "weight", 0, 50, EMBER_DTYPE_F32, other2);
    assert_memory_equal(other, other2, sizeof other);
    // One step touching row 5 of t2 through feature f2.
    int32_t len[NF * 1] = {0, 0, 1, 0, 0};
    int64_t ids[1] = {5};
    ember_kjt k = {.num_features = NF, .batch_size = 1, .lengths = len, .values = ids, .nnz = 1};
    float go[8 + 4 + 16 + 8 + 3] = {0};
    for (int d = 0; d < 16; d++) go[12 + d] = 1.0f;
    assert_int_equal(ember_ebc_backward(ebc, &k, go, NULL), EMBER_OK);
    ember_ebc_read(ebc, 2, "weight", 0, 200, EMBER_DTYPE_F32, before);
    for (int d = 0; d < 16; d++) assert_float_equal(before[5 * 16 + d], after[5 * 16 + d] - 0.3f, 0.01f);
    // Forward reads the same storage.
    float out[8 + 4 + 16 + 8 + 3];
    int32_t len2[NF] = {0, 0, 1, 0, 0};
    ember_kjt k2 = {.num_features = NF, .batch_size = 1, .lengths = len2, .values = ids, .nnz = 1};
    assert_int_equal(ember_ebc_forward(ebc, &k2, out), EMBER_OK);
    for (int d = 0; d < 16; d++) assert_true(out[12 + d] == before[5 * 16 + d]);
    assert_int_equal(ember_ebc_convert_dtype(ebc, 2, EMBER_DTYPE_F32), EMBER_OK);
    ember_ebc_read(ebc, 2, "weight", 0, 200, EMBER_DTYPE_F32, after);
    assert_memory_equal(before, after, sizeof before);
    ember_ebc_destroy(ebc);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// A write of a NaN or an infinity, in any dtype and into any float tensor, is refused with
// EMBER_ERR_NUMERIC naming the table, tensor, row and column; the tensor is as it was.
static void writes_of_non_finite_values_are_refused(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    fixture fx;
    make_config(&fx, &cases[6], EMBER_BOUNDS_ERROR); // adagrad: a per-element state tensor
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_OK);
    float before[50 * 8], after[50 * 8], src[10 * 8];
    uint16_t half[10 * 8];
    for (int i = 0; i < 10 * 8; i++) src[i] = 0.125f * (float)i, half[i] = 0x3c00; // 1.0 in fp16
    const char *tensors[] = {"weight", "momentum1"};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ember_ebc_read(ebc, 0, tensors[k], 0, 50, EMBER_DTYPE_F32, before), EMBER_OK);
        src[3 * 8 + 2] = NAN;
        assert_int_equal(ember_ebc_write(ebc, 0, tensors[k], 20, 30, EMBER_DTYPE_F32, src), EMBER_ERR_NUMERIC);
        char want[96];
        snprintf(want, sizeof want, "table 't0' tensor '%s' row 23 column 2: nan", tensors[k]);
        assert_non_null(strstr(ember_ctx_errmsg(ctx), want));
        src[3 * 8 + 2] = 0, src[9 * 8 + 7] = -INFINITY;
        assert_int_equal(ember_ebc_write(ebc, 0, tensors[k], 20, 30, EMBER_DTYPE_F32, src), EMBER_ERR_NUMERIC);
        assert_non_null(strstr(ember_ctx_errmsg(ctx), "row 29 column 7: -inf"));
        src[9 * 8 + 7] = 0;
        assert_int_equal(ember_ebc_read(ebc, 0, tensors[k], 0, 50, EMBER_DTYPE_F32, after), EMBER_OK);
        assert_memory_equal(before, after, sizeof before);
    }
    // The 16-bit forms, each into a table of its dtype: +Inf in fp16 (0x7c00), NaN in bf16 (0x7fc0).
    assert_int_equal(ember_ebc_convert_dtype(ebc, 0, EMBER_DTYPE_F16), EMBER_OK);
    assert_int_equal(ember_ebc_read(ebc, 0, "weight", 0, 50, EMBER_DTYPE_F32, before), EMBER_OK);
    half[5] = 0x7c00;
    assert_int_equal(ember_ebc_write(ebc, 0, "weight", 0, 10, EMBER_DTYPE_F16, half), EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "row 0 column 5: inf"));
    assert_int_equal(ember_ebc_read(ebc, 0, "weight", 0, 50, EMBER_DTYPE_F32, after), EMBER_OK);
    assert_memory_equal(before, after, sizeof before);
    for (int i = 0; i < 10 * 8; i++) half[i] = 0x3f80; // 1.0 in bf16
    half[17] = 0x7fc0;
    assert_int_equal(ember_ebc_convert_dtype(ebc, 2, EMBER_DTYPE_BF16), EMBER_OK);
    assert_int_equal(ember_ebc_write(ebc, 2, "weight", 0, 5, EMBER_DTYPE_BF16, half), EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "table 't2' tensor 'weight' row 1 column 1: nan"));
    half[17] = 0x3f80;
    assert_int_equal(ember_ebc_write(ebc, 2, "weight", 0, 5, EMBER_DTYPE_BF16, half), EMBER_OK);
    // Finite values (the largest fp32 included) are written.
    src[0] = 3.4028235e38f;
    assert_int_equal(ember_ebc_write(ebc, 1, "weight", 0, 1, EMBER_DTYPE_F32, src), EMBER_OK);
    ember_ebc_destroy(ebc);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// Stochastic rounding is unbiased: many SGD steps of a tiny constant gradient move a bf16
// weight by the expected amount, where nearest rounding would not move it at all.
static void stochastic_rounding_is_unbiased(void **state) {
    (void)state;
    for (int dt = EMBER_DTYPE_F16; dt <= EMBER_DTYPE_BF16; dt++) {
        ember_ctx *ctx = NULL;
        assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.lr = 1.0f;
        const int R = 256, D = 8, K = 200;
        ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
        t.name = "t", t.rows = R, t.dim = D, t.dtype = (ember_dtype)dt, t.init = (ember_init){.kind = EMBER_INIT_ZEROS};
        t.optim = o, t.stochastic_rounding = 1;
        ember_feature_config f = {.name = "f", .table = 0};
        ember_ebc_config cfg = {.tables = &t, .num_tables = 1, .features = &f, .num_features = 1,
                                .bounds = EMBER_BOUNDS_ERROR, .seed = 42};
        ember_ebc *ebc = NULL;
        assert_int_equal(ember_ebc_create(ctx, &cfg, &ebc), EMBER_OK);
        float *ones = malloc(sizeof(float) * (size_t)(R * D));
        for (int i = 0; i < R * D; i++) ones[i] = 1.0f;
        assert_int_equal(ember_ebc_write(ebc, 0, "weight", 0, R, EMBER_DTYPE_F32, ones), EMBER_OK);
        int32_t *len = malloc(sizeof(int32_t) * (size_t)R);
        int64_t *ids = malloc(sizeof(int64_t) * (size_t)R);
        for (int i = 0; i < R; i++) { len[i] = 1; ids[i] = i; }
        ember_kjt k = {.num_features = 1, .batch_size = R, .lengths = len, .values = ids, .nnz = R};
        // Step 1e-4 per update: far below bf16's spacing at 1 (2^-7) and fp16's (2^-10).
        float *go = malloc(sizeof(float) * (size_t)(R * D));
        for (int i = 0; i < R * D; i++) go[i] = 1e-4f;
        for (int s = 0; s < K; s++) assert_int_equal(ember_ebc_backward(ebc, &k, go, NULL), EMBER_OK);
        float *w = malloc(sizeof(float) * (size_t)(R * D));
        ember_ebc_read(ebc, 0, "weight", 0, R, EMBER_DTYPE_F32, w);
        double mean = 0;
        for (int i = 0; i < R * D; i++) mean += w[i];
        mean /= R * D;
        double expect = 1.0 - K * 1e-4;
        // Per element the error of K stochastic roundings has sd <= sqrt(K)*spacing/2; over
        // R*D elements the mean's sd is far below the 2e-4 tolerance (2e-3 for nearest rounding).
        assert_true(fabs(mean - expect) < 2e-4);
        free(ones);
        free(len);
        free(ids);
        free(go);
        free(w);
        ember_ebc_destroy(ebc);
        ember_ctx_destroy(ctx);
    }
}

static void learning_rate_changes_between_steps(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.lr = 1.0f;
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t", t.rows = 2, t.dim = 1, t.init = (ember_init){.kind = EMBER_INIT_ZEROS}, t.optim = o;
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = {.tables = &t, .num_tables = 1, .features = &f, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 1};
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &ebc), EMBER_OK);
    int32_t len[1] = {1};
    int64_t ids[1] = {1};
    ember_kjt k = {.num_features = 1, .batch_size = 1, .lengths = len, .values = ids, .nnz = 1};
    float go[1] = {1};
    assert_int_equal(ember_ebc_backward(ebc, &k, go, NULL), EMBER_OK);
    assert_int_equal(ember_ebc_set_lr(ebc, -1, 0.25f), EMBER_OK);
    assert_int_equal(ember_ebc_backward(ebc, &k, go, NULL), EMBER_OK);
    assert_int_equal(ember_ebc_set_lr(ebc, 0, -1.0f), EMBER_ERR_INVALID_ARG);
    float w[2];
    ember_ebc_read(ebc, 0, "weight", 0, 2, EMBER_DTYPE_F32, w);
    assert_true(w[0] == 0.0f && w[1] == -1.25f);
    ember_ebc_destroy(ebc);
    ember_ctx_destroy(ctx);
}

// The kernels specialise on the row width: 128-column register blocks plus a remainder block
// (D % 16 == 0), a bf16 path for D % 32 == 0, and portable loops otherwise. Every width class,
// dtype, weighting and pooling against the oracle for two steps of row-wise Adagrad (whose
// mean-of-squares is a row reduction), and 1 vs 2 threads bitwise equal.
static void vector_widths_match_oracle(void **state) {
    (void)state;
    static const int32_t widths[] = {16, 32, 48, 128, 160, 256, 20};
    static const int64_t rows[2] = {40, 25};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        for (int dt = EMBER_DTYPE_F32; dt <= EMBER_DTYPE_BF16; dt++) {
            for (int weighted = 0; weighted < 2; weighted++) {
                const int32_t D = widths[wi];
                ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
                o.kind = EMBER_OPT_ROWWISE_ADAGRAD;
                o.lr = 0.05f;
                o.initial_accumulator = 0.01f;
                ember_table_config t[2] = {EMBER_TABLE_CONFIG_DEFAULT, EMBER_TABLE_CONFIG_DEFAULT};
                for (int i = 0; i < 2; i++) {
                    t[i].rows = rows[i], t[i].dim = D, t[i].dtype = (ember_dtype)dt, t[i].optim = o;
                    t[i].init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
                }
                t[0].name = "a";
                t[1].name = "b", t[1].pooling = EMBER_POOL_MEAN;
                ember_feature_config f[3] = {{.name = "x", .table = 0}, {.name = "y", .table = 1},
                                             {.name = "z", .table = 0}};
                ember_ebc_config cfg = {.tables = t, .num_tables = 2, .features = f, .num_features = 3,
                                        .bounds = EMBER_BOUNDS_ERROR, .seed = 17};
                const int64_t frows[3] = {rows[0], rows[1], rows[0]};
                const int is16 = dt != EMBER_DTYPE_F32;
                const double atol = is16 ? 2e-3 : 2e-5, rtol = is16 ? (dt == EMBER_DTYPE_BF16 ? 8e-3 : 1e-3) : 2e-4;
                float *outs[2] = {0};
                unsigned char *snaps[2] = {0};
                size_t sz = 0;
                int64_t n = 0;
                for (int threads = 1; threads <= 2; threads++) {
                    ember_ctx *ctx = NULL;
                    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
                    ember_ctx_set_num_threads(ctx, threads);
                    ember_ebc *ebc = NULL;
                    assert_int_equal(ember_ebc_create(ctx, &cfg, &ebc), EMBER_OK);
                    oracle *orc = oracle_create(&cfg, ebc);
                    test_rng rng = {(uint64_t)(100 + D * 7 + dt * 3 + weighted)};
                    for (int step = 0; step < 2; step++) {
                        gen_kjt g;
                        gen_kjt_make(&g, &rng, 3, 9, frows, 12, 0.4, weighted);
                        n = ember_ebc_output_size(ebc, &g.kjt);
                        float *out = malloc(sizeof(float) * (size_t)n), *go = malloc(sizeof(float) * (size_t)n);
                        double *ref = malloc(sizeof(double) * (size_t)n);
                        for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&rng) * 2 - 1);
                        assert_int_equal(ember_ebc_forward(ebc, &g.kjt, out), EMBER_OK);
                        oracle_forward(orc, &g.kjt, ref);
                        const double fe = rel_err_f(out, ref, n, atol, rtol);
                        if (fe > 1)
                            fprintf(stderr, "D=%d dtype %d weighted %d forward err %.3g\n", D, dt, weighted, fe);
                        assert_true(fe <= 1);
                        assert_int_equal(ember_ebc_backward(ebc, &g.kjt, go, NULL), EMBER_OK);
                        oracle_backward(orc, &g.kjt, go, NULL);
                        for (int tt = 0; tt < 2; tt++) {
                            const int64_t m = rows[tt] * D;
                            float *w = malloc(sizeof(float) * (size_t)m), m1[40];
                            ember_ebc_read(ebc, tt, "weight", 0, rows[tt], EMBER_DTYPE_F32, w);
                            ember_ebc_read(ebc, tt, "momentum1", 0, rows[tt], EMBER_DTYPE_F32, m1);
                            assert_true(rel_err_f(w, orc->t[tt].w, m, atol, rtol) <= 1);
                            assert_true(rel_err_f(m1, orc->t[tt].m1, rows[tt], 2e-5, 2e-4) <= 1);
                            for (int64_t i = 0; i < m; i++) orc->t[tt].w[i] = w[i]; // 16-bit: re-synchronise
                            free(w);
                        }
                        free(outs[threads - 1]);
                        outs[threads - 1] = out;
                        free(go);
                        free(ref);
                        gen_kjt_free(&g);
                    }
                    sz = snapshot(ebc, NULL);
                    snaps[threads - 1] = malloc(sz);
                    snapshot(ebc, snaps[threads - 1]);
                    oracle_destroy(orc);
                    ember_ebc_destroy(ebc);
                    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
                    ember_ctx_destroy(ctx);
                }
                assert_memory_equal(outs[0], outs[1], sizeof(float) * (size_t)n);
                assert_memory_equal(snaps[0], snaps[1], sz);
                for (int k = 0; k < 2; k++) {
                    free(outs[k]);
                    free(snaps[k]);
                }
            }
        }
    }
}

int main(void) {
    const int skip = test_isa_env_check("unit.ebc");
    if (skip) return skip;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_optimizer_and_dtype_matches_oracle),
        cmocka_unit_test(failed_calls_change_nothing),
        cmocka_unit_test(forward_mean_empty_bag_is_zero_and_divides_by_count),
        cmocka_unit_test(kjt_offsets_near_int64_min_are_rejected),
        cmocka_unit_test(backward_duplicate_ids_coalesced),
        cmocka_unit_test(bounds_clamp_and_skip),
        cmocka_unit_test(results_bitwise_equal_across_threads_and_runs),
        cmocka_unit_test(sequence_collection_matches_oracle),
        cmocka_unit_test(bad_configs_are_rejected_with_names),
        cmocka_unit_test(state_dict_round_trip_is_bitwise),
        cmocka_unit_test(dtype_conversion_converts_the_one_storage),
        cmocka_unit_test(writes_of_non_finite_values_are_refused),
        cmocka_unit_test(stochastic_rounding_is_unbiased),
        cmocka_unit_test(learning_rate_changes_between_steps),
        cmocka_unit_test(vector_widths_match_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
