// DLRM dense part: MLP, interaction, BCE, AUC and dense optimizers against the naive oracle
// (tests/support/dlrm), and the oracle's gradients against finite differences.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cross.h"
#include "dense_optim.h"
#include "interaction.h"
#include "loss.h"
#include "mlp.h"
#include "naive_dlrm.h"

static uint64_t lcg = 88172645463325252ull;
static double urand(void) { // uniform in [-1, 1)
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) / 4503599627370496.0 - 1.0;
}

static void expect_close(double got, double want, double rtol, double atol, const char *what, int i) {
    if (fabs(got - want) > atol + rtol * fabs(want)) {
        fail_msg("%s[%d]: got %.9g, want %.9g", what, i, got, want);
    }
}

// Sum over the MLP output of dy * y: a scalar whose gradient is the backward with `dy`.
static double naive_mlp_dot(int32_t in, const int32_t *sizes, int32_t n, bool relu_last, const float *params,
                            int32_t batch, const double *x, const double *dy) {
    int32_t out = sizes[n - 1];
    double *y = calloc((size_t)batch * (size_t)out, sizeof(double)), s = 0.0;
    naive_mlp(in, sizes, n, relu_last, params, batch, x, y, NULL, NULL, NULL);
    for (int32_t i = 0; i < batch * out; i++) s += dy[i] * y[i];
    free(y);
    return s;
}

static void run_mlp_case(bool relu_last) {
    enum { IN = 5, B = 6, N = 3 };
    const int32_t sizes[N] = {7, 4, 3};
    const int64_t np = mlp_num_params(IN, sizes, N);
    assert_int_equal(np, 7 * 5 + 7 + 4 * 7 + 4 + 3 * 4 + 3);
    float *params = malloc(sizeof(float) * (size_t)np), *grads = calloc((size_t)np, sizeof(float));
    float x[B * IN], dy[B * 3], dx[B * IN];
    double xd[B * IN], dyd[B * 3], y_ref[B * 3], dx_ref[B * IN], *dp_ref = calloc((size_t)np, sizeof(double));
    for (int i = 0; i < B * IN; i++) xd[i] = x[i] = (float)urand();
    for (int i = 0; i < B * 3; i++) dyd[i] = dy[i] = (float)urand();
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    mlp m;
    assert_int_equal(mlp_create(ctx, IN, sizes, N, relu_last, 8, params, grads, &m), EMBER_OK);
    mlp_init_params(&m, 7, 1);
    // torch.nn.Linear's bound 1/sqrt(fan_in).
    for (int i = 0; i < 7 * 5; i++) assert_true(fabsf(params[i]) <= 1.0f / sqrtf(5.0f));
    const float *y;
    assert_int_equal(mlp_forward(&m, x, B, &y), EMBER_OK);
    assert_int_equal(mlp_backward(&m, x, B, dy, dx), EMBER_OK);
    naive_mlp(IN, sizes, N, relu_last, params, B, xd, y_ref, dyd, dp_ref, dx_ref);
    for (int i = 0; i < B * 3; i++) expect_close(y[i], y_ref[i], 1e-5, 1e-6, "y", i);
    for (int i = 0; i < np; i++) expect_close(grads[i], dp_ref[i], 1e-4, 1e-6, "dparams", i);
    for (int i = 0; i < B * IN; i++) expect_close(dx[i], dx_ref[i], 1e-4, 1e-6, "dx", i);
    if (relu_last) {
        for (int i = 0; i < B * 3; i++) assert_true(y[i] >= 0.0f);
    }
    // A smaller batch reuses the buffers (no allocation per step).
    assert_int_equal(mlp_forward(&m, x, 2, &y), EMBER_OK);
    assert_int_equal(mlp_backward(&m, x, 2, dy, dx), EMBER_OK);
    naive_mlp(IN, sizes, N, relu_last, params, 2, xd, y_ref, dyd, dp_ref, dx_ref);
    for (int i = 0; i < np; i++) expect_close(grads[i], dp_ref[i], 1e-4, 1e-6, "dparams B=2", i);
    mlp_destroy(ctx, &m);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    free(params);
    free(grads);
    free(dp_ref);
}

static void mlp_matches_naive_with_linear_last_layer(void **state) {
    (void)state;
    run_mlp_case(false);
}

static void mlp_matches_naive_with_relu_everywhere(void **state) {
    (void)state;
    run_mlp_case(true);
}

static void naive_mlp_gradients_match_finite_differences(void **state) {
    (void)state;
    enum { IN = 4, B = 3, N = 2 };
    const int32_t sizes[N] = {5, 2};
    const int64_t np = mlp_num_params(IN, sizes, N);
    float *params = malloc(sizeof(float) * (size_t)np);
    double x[B * IN], dy[B * 2], y[B * 2], dx[B * IN], *dp = calloc((size_t)np, sizeof(double));
    for (int i = 0; i < np; i++) params[i] = (float)(0.7 * urand());
    for (int i = 0; i < B * IN; i++) x[i] = urand();
    for (int i = 0; i < B * 2; i++) dy[i] = urand();
    naive_mlp(IN, sizes, N, false, params, B, x, y, dy, dp, dx);
    const float h = 1.0f / 1024.0f; // exact in float: the perturbation is what was asked
    for (int i = 0; i < np; i++) {
        float p0 = params[i];
        params[i] = p0 + h;
        double up = naive_mlp_dot(IN, sizes, N, false, params, B, x, dy);
        params[i] = p0 - h;
        double down = naive_mlp_dot(IN, sizes, N, false, params, B, x, dy);
        params[i] = p0;
        expect_close(dp[i], (up - down) / (2.0 * h), 1e-3, 1e-5, "fd dparams", i);
    }
    for (int i = 0; i < B * IN; i++) {
        double x0 = x[i];
        x[i] = x0 + 1e-6;
        double up = naive_mlp_dot(IN, sizes, N, false, params, B, x, dy);
        x[i] = x0 - 1e-6;
        double down = naive_mlp_dot(IN, sizes, N, false, params, B, x, dy);
        x[i] = x0;
        expect_close(dx[i], (up - down) / 2e-6, 1e-5, 1e-7, "fd dx", i);
    }
    free(params);
    free(dp);
}

static void interaction_layout_is_dense_then_upper_triangle(void **state) {
    (void)state;
    // F = 2, D = 2: T = [d; e0; e1] = [[1, 2]; [3, 4]; [5, 6]].
    const float dense[2] = {1, 2}, emb[4] = {3, 4, 5, 6};
    float out[5];
    assert_int_equal(interaction_out_dim(2, 2), 2 + 3);
    assert_int_equal(interaction_out_dim(26, 16), 16 + 351); // Criteo: TorchRec's over arch input
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    interaction ia;
    assert_int_equal(interaction_create(ctx, 2, 2, 1, &ia), EMBER_OK);
    assert_int_equal(interaction_forward(&ia, 1, dense, emb, out), EMBER_OK);
    const float want[5] = {1, 2, 1 * 3 + 2 * 4, 1 * 5 + 2 * 6, 3 * 5 + 4 * 6};
    for (int i = 0; i < 5; i++) assert_true(out[i] == want[i]);
    interaction_destroy(&ia);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// One case of B samples, F features of dim D (B may be 0, F 1, D 1) against the oracle; the
// finite-difference check of the oracle itself on the first case only.
static void run_interaction_case(int32_t B, int32_t F, int32_t D, bool fd) {
    const int32_t W = D + (F + 1) * F / 2;
    const size_t nd = (size_t)B * D + 1, ne = (size_t)B * F * D + 1, nw = (size_t)B * W + 1;
    float *dense = malloc(sizeof(float) * nd), *emb = malloc(sizeof(float) * ne), *out = malloc(sizeof(float) * nw),
          *dout = malloc(sizeof(float) * nw), *ddense = malloc(sizeof(float) * nd), *demb = malloc(sizeof(float) * ne);
    double *dd = malloc(sizeof(double) * nd), *ed = malloc(sizeof(double) * ne), *out_ref = malloc(sizeof(double) * nw),
           *dout_d = malloc(sizeof(double) * nw), *ddense_ref = malloc(sizeof(double) * nd),
           *demb_ref = malloc(sizeof(double) * ne);
    for (size_t i = 0; i < nd; i++) dd[i] = dense[i] = (float)urand();
    for (size_t i = 0; i < ne; i++) ed[i] = emb[i] = (float)urand();
    for (size_t i = 0; i < nw; i++) dout_d[i] = dout[i] = (float)urand();
    out[nw - 1] = ddense[nd - 1] = demb[ne - 1] = 42.0f; // past the end: untouched
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    interaction ia;
    assert_int_equal(interaction_create(ctx, F, D, B > 0 ? B : 1, &ia), EMBER_OK);
    assert_int_equal(interaction_forward(&ia, B, dense, emb, out), EMBER_OK);
    assert_int_equal(interaction_backward(&ia, B, dout, ddense, demb), EMBER_OK);
    interaction_destroy(&ia);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    assert_true(out[nw - 1] == 42.0f && ddense[nd - 1] == 42.0f && demb[ne - 1] == 42.0f);
    naive_interaction(B, F, D, dd, ed, out_ref, dout_d, ddense_ref, demb_ref);
    for (int i = 0; i < B * W; i++) expect_close(out[i], out_ref[i], 1e-5, 1e-6, "out", i);
    for (int i = 0; i < B * D; i++) expect_close(ddense[i], ddense_ref[i], 1e-5, 1e-6, "ddense", i);
    for (int i = 0; i < B * F * D; i++) expect_close(demb[i], demb_ref[i], 1e-5, 1e-6, "demb", i);
    // The oracle's backward against finite differences of sum(dout * out).
    for (int i = 0; fd && i < B * F * D; i++) {
        double e0 = ed[i], s[2];
        for (int k = 0; k < 2; k++) {
            ed[i] = e0 + (k ? -1e-6 : 1e-6);
            naive_interaction(B, F, D, dd, ed, out_ref, NULL, NULL, NULL);
            s[k] = 0.0;
            for (int j = 0; j < B * W; j++) s[k] += dout_d[j] * out_ref[j];
        }
        ed[i] = e0;
        expect_close(demb_ref[i], (s[0] - s[1]) / 2e-6, 1e-5, 1e-7, "fd demb", i);
    }
    void *bufs[] = {dense, emb, out, dout, ddense, demb, dd, ed, out_ref, dout_d, ddense_ref, demb_ref};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void interaction_matches_naive_forward_and_backward(void **state) {
    (void)state;
    run_interaction_case(5, 3, 4, true);
    run_interaction_case(0, 3, 4, false);   // empty batch
    run_interaction_case(3, 1, 1, false);   // one feature of dim 1: T is 2 x 1
    run_interaction_case(300, 26, 16, false); // the default model, threads over samples
}

// sum(dy * cross(x0)) by the oracle: the scalar whose gradients the backward gives.
static double naive_cross_dot(int32_t B, int32_t N, int32_t L, int32_t r, const float *params, const double *x0,
                              const double *dy) {
    double *y = malloc(sizeof(double) * ((size_t)B * N + 1)), s = 0.0;
    naive_cross(B, N, L, r, params, x0, y, NULL, NULL, NULL);
    for (int i = 0; i < B * N; i++) s += dy[i] * y[i];
    free(y);
    return s;
}

// One case of the cross net against the oracle: B samples (0 allowed) of width N, L layers of
// rank r; then a smaller batch on the same buffers; with `fd`, the oracle against finite
// differences.
static void run_cross_case(int32_t B, int32_t N, int32_t L, int32_t r, bool fd) {
    const int64_t np = cross_num_params(N, L, r);
    assert_int_equal(np, (int64_t)L * (2 * N * r + N));
    const size_t nx = (size_t)B * N + 1;
    float *params = malloc(sizeof(float) * (size_t)np), *grads = malloc(sizeof(float) * (size_t)np),
          *x0 = malloc(sizeof(float) * nx), *dy = malloc(sizeof(float) * nx), *dx0 = malloc(sizeof(float) * nx);
    double *x0d = malloc(sizeof(double) * nx), *dyd = malloc(sizeof(double) * nx), *yref = malloc(sizeof(double) * nx),
           *dxref = malloc(sizeof(double) * nx), *dpref = malloc(sizeof(double) * (size_t)np);
    for (size_t i = 0; i < nx; i++) x0d[i] = x0[i] = (float)urand();
    for (size_t i = 0; i < nx; i++) dyd[i] = dy[i] = (float)urand();
    for (int64_t i = 0; i < np; i++) grads[i] = 42.0f;
    dx0[nx - 1] = 42.0f;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    cross c;
    assert_int_equal(cross_create(ctx, N, L, r, B > 0 ? B : 1, params, grads, &c), EMBER_OK);
    cross_init_params(&c, 9, 3);
    // TorchRec's initialisation: zero biases, Xavier normal kernels (std sqrt(2 / (N + r))).
    double ss = 0.0;
    int64_t nk = 0;
    for (int32_t l = 0; l < L; l++) {
        const float *v = params + (size_t)l * (size_t)(2 * N * r + N);
        for (int32_t i = 0; i < 2 * N * r; i++, nk++) ss += (double)v[i] * v[i];
        for (int32_t i = 0; i < N; i++) assert_true(v[2 * N * r + i] == 0.0f);
    }
    if (nk >= 1000) expect_close(sqrt(ss / (double)nk), sqrt(2.0 / (N + r)), 0.1, 0.0, "kernel std", 0);
    // Non-zero biases, so that the test sees them.
    for (int32_t l = 0; l < L; l++) {
        float *b = params + (size_t)l * (size_t)(2 * N * r + N) + 2 * N * r;
        for (int32_t i = 0; i < N; i++) b[i] = (float)(0.3 * urand());
    }
    for (int round = 0; round < 2; round++) {
        const int32_t batch = round == 0 ? B : B / 2;
        const float *y;
        memcpy(cross_input(&c), x0, sizeof(float) * (size_t)batch * (size_t)N);
        assert_int_equal(cross_forward(&c, batch, &y), EMBER_OK);
        naive_cross(batch, N, L, r, params, x0d, yref, dyd, dpref, dxref);
        for (int i = 0; i < batch * N; i++) expect_close(y[i], yref[i], 1e-5, 1e-5, "y", i);
        assert_int_equal(cross_backward(&c, batch, dy, dx0), EMBER_OK);
        for (int i = 0; i < batch * N; i++) expect_close(dx0[i], dxref[i], 1e-4, 1e-5, "dx0", i);
        for (int64_t i = 0; i < np; i++) expect_close(grads[i], dpref[i], 1e-4, 1e-5, "dparams", (int)i);
        assert_true(dx0[nx - 1] == 42.0f);
    }
    cross_destroy(&c);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    // The oracle's gradients against central differences of sum(dy * y).
    if (fd) {
        const float h = 1.0f / 1024.0f;
        naive_cross(B, N, L, r, params, x0d, yref, dyd, dpref, dxref);
        for (int64_t i = 0; i < np; i++) {
            const float p0 = params[i];
            params[i] = p0 + h;
            const double up = naive_cross_dot(B, N, L, r, params, x0d, dyd);
            params[i] = p0 - h;
            const double down = naive_cross_dot(B, N, L, r, params, x0d, dyd);
            params[i] = p0;
            expect_close(dpref[i], (up - down) / (2.0 * h), 1e-3, 1e-5, "fd dparams", (int)i);
        }
        for (int i = 0; i < B * N; i++) {
            const double v0 = x0d[i];
            x0d[i] = v0 + 1e-6;
            const double up = naive_cross_dot(B, N, L, r, params, x0d, dyd);
            x0d[i] = v0 - 1e-6;
            const double down = naive_cross_dot(B, N, L, r, params, x0d, dyd);
            x0d[i] = v0;
            expect_close(dxref[i], (up - down) / 2e-6, 1e-5, 1e-7, "fd dx0", i);
        }
    }
    void *bufs[] = {params, grads, x0, dy, dx0, x0d, dyd, yref, dxref, dpref};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void cross_net_matches_naive_forward_and_backward(void **state) {
    (void)state;
    run_cross_case(5, 6, 2, 3, true); // the oracle's gradients checked by finite differences too
    run_cross_case(0, 6, 2, 3, false);  // empty batch: zero gradients
    run_cross_case(4, 1, 1, 1, false);  // width 1, rank 1
    run_cross_case(3, 4, 3, 9, false);  // rank above the width
    run_cross_case(300, 27 * 8, 3, 32, false); // DLRM's [d, e] of 26 features of dim 8, threads
}

static void bce_matches_naive_and_is_stable(void **state) {
    (void)state;
    enum { N = 64 };
    float z[N], y[N], g[N];
    double want = 0.0;
    for (int i = 0; i < N; i++) {
        z[i] = (float)(6.0 * urand());
        y[i] = urand() > 0.0 ? 1.0f : 0.0f;
        want += naive_bce(z[i], y[i]);
    }
    double got = bce_with_logits(N, z, y, 0.25f, g);
    expect_close(got, want, 1e-12, 1e-12, "bce sum", 0);
    for (int i = 0; i < N; i++) expect_close(g[i], 0.25 * naive_bce_grad(z[i], y[i]), 1e-6, 1e-8, "dlogit", i);
    // Large logits: exact values, no overflow.
    const float big[2] = {100.0f, -100.0f}, lab[2] = {0.0f, 1.0f};
    float gb[2];
    expect_close(bce_with_logits(2, big, lab, 1.0f, gb), 200.0, 1e-12, 0.0, "bce big", 0);
    assert_true(gb[0] == 1.0f && gb[1] == -1.0f);
    assert_true(bce_with_logits(2, big, (const float[]){1.0f, 0.0f}, 1.0f, NULL) < 1e-40);
}

static void auc_matches_pair_counting_with_ties(void **state) {
    (void)state;
    enum { N = 300 };
    float s[N], y[N];
    auc_pair scratch[N];
    for (int i = 0; i < N; i++) {
        s[i] = (float)floor(4.0 * urand()); // 8 distinct values: many ties
        y[i] = urand() + 0.3 * s[i] > 0.0 ? 1.0f : 0.0f;
    }
    expect_close(auc_exact(N, s, y, scratch), naive_auc(N, s, y), 1e-12, 1e-12, "auc", 0);
    for (int i = 0; i < N; i++) s[i] = (float)urand();
    expect_close(auc_exact(N, s, y, scratch), naive_auc(N, s, y), 1e-12, 1e-12, "auc untied", 0);
    const float lab[4] = {0, 1, 0, 1}, same[4] = {2, 2, 2, 2}, perfect[4] = {0, 3, 1, 2}, worst[4] = {3, 0, 2, 1};
    assert_true(auc_exact(4, same, lab, scratch) == 0.5);
    assert_true(auc_exact(4, perfect, lab, scratch) == 1.0);
    assert_true(auc_exact(4, worst, lab, scratch) == 0.0);
    assert_true(isnan(auc_exact(2, same, (const float[]){1, 1}, scratch)));
    assert_true(isnan(auc_exact(2, (const float[]){NAN, 1}, lab, scratch)));
}

static void dense_optimizers_match_naive(void **state) {
    (void)state;
    enum { N = 50, STEPS = 6 };
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    for (int kind = 0; kind < 3; kind++) {
        dense_optim_config cfg = {.kind = (dense_optim_kind)kind, .lr = 0.05f};
        dense_optim o;
        assert_int_equal(dense_optim_create(ctx, &cfg, N, &o), EMBER_OK);
        float w[N], g[N];
        double wd[N], gd[N], m1[N] = {0}, m2[N] = {0};
        for (int i = 0; i < N; i++) wd[i] = w[i] = (float)urand();
        for (int t = 1; t <= STEPS; t++) {
            for (int i = 0; i < N; i++) gd[i] = g[i] = (float)(urand() * (i % 3 == 0 ? 1e-3 : 1.0));
            dense_optim_step(&o, w, g);
            naive_dense_step(kind, 0.05, kind == 1 ? 1e-10 : 1e-8, 0.9, 0.999, t, N, wd, gd, m1, m2);
        }
        for (int i = 0; i < N; i++) expect_close(w[i], wd[i], 1e-5, 1e-6, dense_optim_name(o.cfg.kind), i);
        dense_optim_destroy(ctx, &o);
    }
    dense_optim_config bad = {.kind = DENSE_OPT_SGD, .lr = -1.0f};
    dense_optim o;
    assert_int_equal(dense_optim_create(ctx, &bad, 4, &o), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "learning rate"));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mlp_matches_naive_with_linear_last_layer),
        cmocka_unit_test(mlp_matches_naive_with_relu_everywhere),
        cmocka_unit_test(naive_mlp_gradients_match_finite_differences),
        cmocka_unit_test(interaction_layout_is_dense_then_upper_triangle),
        cmocka_unit_test(interaction_matches_naive_forward_and_backward),
        cmocka_unit_test(cross_net_matches_naive_forward_and_backward),
        cmocka_unit_test(bce_matches_naive_and_is_stable),
        cmocka_unit_test(auc_matches_pair_counting_with_ties),
        cmocka_unit_test(dense_optimizers_match_naive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
