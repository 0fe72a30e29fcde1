// LFQ behaviour, single process (float64 unless a test says otherwise): gradients against
// central finite differences of a naive oracle, the intended mask semantics, seeded
// subsampling, forward/backward state, determinism, the workspace, decoding, and bad input
// (clear status, a message naming the value, nothing modified).
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
#include "lfq_golden.h"
#include "lfq_oracle.h"
#include "lfq_util.h"

static ember_ctx *ctx_new(void) {
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    return ctx;
}

// Every module destroyed: nothing may remain allocated on the context.
static void ctx_done(ember_ctx *ctx) {
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

static ember_lfq *lfq_new(ember_ctx *ctx, const ember_lfq_config *cfg) {
    ember_lfq *q = NULL;
    ember_status st = ember_lfq_create(ctx, cfg, &q);
    if (st != EMBER_OK) fprintf(stderr, "create: %s\n", ember_ctx_errmsg(ctx));
    assert_int_equal(st, EMBER_OK);
    return q;
}

static double *param64(ember_lfq *q, ember_lfq_param_id id) { return ember_lfq_param(q, id, NULL); }
static double *grad64(ember_lfq *q, ember_lfq_param_id id) { return ember_lfq_grad(q, id, NULL); }

// ---- gradients against finite differences of the oracle -------------------------------------

static const struct fd_case {
    const char *name;
    int32_t dim, K, C;
    double scale, tau, w_e, w_c, gamma, clamp;
    ember_lfq_projection proj;
    bool bias, spherical, softplus, masked;
} fd_cases[] = {
    // name                               dim  K   C scale tau  w_e  w_c  gamma clamp proj                bias sph  sp   mask
    {"2 codebooks x 4 bits",                8, 16, 2, 1.0, 1.0, 0.1, 0.25, 1.0, 0.0, EMBER_LFQ_PROJ_NONE,   0, 0, 0, 0},
    {"K 256, tau 3",                        8, 256,1, 1.0, 3.0, 0.1, 0.25, 1.0, 0.0, EMBER_LFQ_PROJ_NONE,   0, 0, 0, 0},
    {"spherical, tau 10",                   6, 64, 1, 1.0, 10., 0.1, 0.25, 1.0, 0.0, EMBER_LFQ_PROJ_NONE,   0, 1, 0, 0},
    {"soft clamp 1.5, scale 0.5",           8, 16, 2, 0.5, 2.0, 0.1, 0.25, 1.0, 1.5, EMBER_LFQ_PROJ_NONE,   0, 0, 0, 0},
    {"softplus, gamma 1.5",                 8, 16, 2, 1.0, 1.0, 0.3, 0.25, 1.5, 0.0, EMBER_LFQ_PROJ_NONE,   0, 0, 1, 0},
    {"projection with bias, mask",         12, 16, 2, 1.0, 1.0, 0.1, 0.25, 1.0, 0.0, EMBER_LFQ_PROJ_LINEAR, 1, 0, 0, 1},
    {"projection without bias",             5, 32, 1, 1.0, 2.0, 0.1, 0.0,  1.0, 0.0, EMBER_LFQ_PROJ_LINEAR, 0, 0, 0, 0},
    {"projection, clamp, sphere, mask",    10, 16, 2, 1.0, 4.0, 0.2, 0.25, 1.0, 2.0, EMBER_LFQ_PROJ_LINEAR, 1, 1, 0, 1},
};

static ember_lfq_config fd_config(const struct fd_case *c, uint64_t seed) {
    ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
    cfg.dim = c->dim;
    cfg.codebook_size = c->K;
    cfg.num_codebooks = c->C;
    cfg.codebook_scale = c->scale;
    cfg.inv_temperature = c->tau;
    cfg.entropy_loss_weight = c->w_e;
    cfg.commitment_loss_weight = c->w_c;
    cfg.diversity_gamma = c->gamma;
    cfg.soft_clamp_input_value = c->clamp;
    cfg.projection = c->proj;
    cfg.projection_has_bias = c->bias;
    cfg.spherical = c->spherical;
    cfg.softplus_entropy_loss = c->softplus;
    cfg.dtype = EMBER_DTYPE_F64;
    cfg.seed = seed;
    return cfg;
}

static void entropy_gradient_matches_finite_differences(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    const int32_t B = 3, N = 4;
    for (size_t ci = 0; ci < sizeof fd_cases / sizeof fd_cases[0]; ci++) {
        const struct fd_case *fc = &fd_cases[ci];
        ember_lfq_config cfg = fd_config(fc, 100 + ci);
        ember_lfq *q = lfq_new(ctx, &cfg);
        const ember_lfq_config *rc = ember_lfq_get_config(q);
        lfq_ref_config ref = lfq_ref_from(rc, ember_lfq_codebook_dim(q));
        const int64_t nx = (int64_t)B * N * rc->dim, CD = (int64_t)ref.C * ref.D;
        double *x = malloc((size_t)nx * sizeof *x), *out = malloc((size_t)nx * sizeof *out);
        double *gx = malloc((size_t)nx * sizeof *gx), *fx = malloc((size_t)nx * sizeof *fx);
        lfq_fill_uniform(x, nx, 7 + ci, -1, 1);
        uint8_t mask[12];
        for (int t = 0; t < B * N; t++) mask[t] = (uint8_t)(t % 3 != 1);
        const uint8_t *m = fc->masked ? mask : NULL;

        ember_lfq_losses L;
        assert_int_equal(ember_lfq_forward(q, x, B, N, m, true, out, NULL, &L), EMBER_OK);
        assert_int_equal(ember_lfq_backward(q, NULL, 1.0, gx), EMBER_OK);

        // Forward against the oracle.
        double *w = param64(q, EMBER_LFQ_PROJ_IN_WEIGHT), *b = param64(q, EMBER_LFQ_PROJ_IN_BIAS);
        lfq_ref_slice slice = {B, N, x, m};
        lfq_ref_losses R;
        lfq_ref_aux(&ref, w, b, 1, &slice, &R);
        assert_true(lfq_rel_scalar(L.aux, R.aux, 1e-3) < 1e-12);
        assert_true(lfq_rel_scalar(L.per_sample_entropy, R.pse, 1e-3) < 1e-12);
        assert_true(lfq_rel_scalar(L.codebook_entropy, R.cbe, 1e-3) < 1e-12);
        assert_true(lfq_rel_scalar(L.commitment, R.commit, 1e-3) < 1e-12);

        // Backward against central differences of the oracle (input, project_in).
        double fw[256], fb[32];
        assert_true(CD * rc->dim <= 256 && CD <= 32);
        lfq_ref_fd(&ref, w, b, 1, &slice, x, nx, 1e-6, fx, fw, fb);
        double ex = lfq_rel_to_max(gx, fx, nx), ew = 0, eb = 0;
        if (ref.proj) ew = lfq_rel_to_max(grad64(q, EMBER_LFQ_PROJ_IN_WEIGHT), fw, CD * rc->dim);
        if (ref.bias) eb = lfq_rel_to_max(grad64(q, EMBER_LFQ_PROJ_IN_BIAS), fb, CD);
        printf("fd %-34s grad x %.2e  W_in %.2e  b_in %.2e\n", fc->name, ex, ew, eb);
        assert_true(ex < 1e-6 && ew < 1e-6 && eb < 1e-6);

        ember_lfq_destroy(q);
        free(x);
        free(out);
        free(gx);
        free(fx);
    }
    ctx_done(ctx);
}

// ---- masks ----------------------------------------------------------------------------------

// The intended (7c7c69f) semantics: a masked batch gives exactly the losses and gradients of the
// batch made of its selected tokens alone; unselected tokens get no aux gradient. (Upstream
// HEAD's regression would make CBE equal PSE.)
static void masked_forward_equals_forward_on_selected_tokens(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = fd_config(&fd_cases[5], 3); // projection with bias, C = 2, K = 16
    ember_lfq *qa = lfq_new(ctx, &cfg), *qb = lfq_new(ctx, &cfg);
    const int32_t B = 2, N = 5, dim = cfg.dim;
    const uint8_t mask[10] = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1};
    double x[10 * 12], xs[10 * 12], out[10 * 12], gx[10 * 12], gs[10 * 12];
    lfq_fill_uniform(x, B * N * dim, 11, -1, 1);
    int n = 0;
    for (int t = 0; t < B * N; t++)
        if (mask[t]) memcpy(xs + (n++) * dim, x + t * dim, sizeof(double) * (size_t)dim);

    ember_lfq_losses La, Lb;
    assert_int_equal(ember_lfq_forward(qa, x, B, N, mask, true, out, NULL, &La), EMBER_OK);
    assert_int_equal(ember_lfq_backward(qa, NULL, 1.0, gx), EMBER_OK);
    assert_int_equal(ember_lfq_forward(qb, xs, 1, n, NULL, true, out, NULL, &Lb), EMBER_OK);
    assert_int_equal(ember_lfq_backward(qb, NULL, 1.0, gs), EMBER_OK);
    assert_int_equal(La.tokens, n);
    assert_int_equal(La.entropy_tokens, n);
    assert_true(lfq_rel_scalar(La.per_sample_entropy, Lb.per_sample_entropy, 0) < 1e-14);
    assert_true(lfq_rel_scalar(La.codebook_entropy, Lb.codebook_entropy, 0) < 1e-14);
    assert_true(lfq_rel_scalar(La.commitment, Lb.commitment, 0) < 1e-14);
    assert_true(fabs(La.codebook_entropy - La.per_sample_entropy) > 0.1);
    int k = 0;
    for (int t = 0; t < B * N; t++) {
        for (int i = 0; i < dim; i++) {
            if (mask[t])
                assert_true(fabs(gx[t * dim + i] - gs[k * dim + i]) <= 1e-15);
            else
                assert_true(gx[t * dim + i] == 0.0);
        }
        k += mask[t];
    }
    int64_t ng = 0;
    const double *ga = ember_lfq_grads(qa, &ng), *gb = ember_lfq_grads(qb, NULL);
    assert_true(lfq_rel_to_max(ga, gb, ng) < 1e-13);

    // Without a communicator both distributed-mean modes are the local token mean.
    cfg.dist_mean = EMBER_LFQ_MEAN_TOKENS;
    ember_lfq *qc = lfq_new(ctx, &cfg);
    ember_lfq_losses Lc;
    assert_int_equal(ember_lfq_forward(qc, x, B, N, mask, true, out, NULL, &Lc), EMBER_OK);
    assert_true(Lc.aux == La.aux && Lc.codebook_entropy == La.codebook_entropy);

    // A mask selecting nothing: every mean over an empty set is 0, and so is the aux gradient.
    const uint8_t none[10] = {0};
    assert_int_equal(ember_lfq_forward(qa, x, B, N, none, true, out, NULL, &La), EMBER_OK);
    assert_true(La.aux == 0 && La.tokens == 0 && La.codebook_entropy == 0);
    assert_int_equal(ember_lfq_backward(qa, NULL, 1.0, gx), EMBER_OK);
    for (int i = 0; i < B * N * dim; i++) assert_true(gx[i] == 0.0);

    ember_lfq_destroy(qa);
    ember_lfq_destroy(qb);
    ember_lfq_destroy(qc);
    ctx_done(ctx);
}

// ---- frac_per_sample_entropy < 1 ------------------------------------------------------------

static void subsampled_entropy_is_seeded_and_differentiable(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = fd_config(&fd_cases[0], 5);
    cfg.frac_per_sample_entropy = 0.45;
    cfg.seed = 42;
    ember_lfq *q = lfq_new(ctx, &cfg);
    const int32_t B = 4, N = 5, dim = cfg.dim;
    const int64_t nx = (int64_t)B * N * dim;
    double x[160], out[160], gx[160], fd[160];
    lfq_fill_uniform(x, nx, 21, -1, 1);
    ember_lfq_losses L1, L2, L3;
    assert_int_equal(ember_lfq_forward(q, x, B, N, NULL, true, out, NULL, &L1), EMBER_OK);
    assert_int_equal(L1.entropy_tokens, 9); // floor(20 * 0.45)
    assert_int_equal(L1.tokens, 20);
    assert_int_equal(ember_lfq_forward(q, x, B, N, NULL, true, out, NULL, &L2), EMBER_OK);
    assert_true(L2.per_sample_entropy != L1.per_sample_entropy); // the stream moved on
    assert_int_equal(ember_lfq_set_seed(q, 42), EMBER_OK);
    assert_int_equal(ember_lfq_forward(q, x, B, N, NULL, true, out, NULL, &L3), EMBER_OK);
    assert_true(L3.aux == L1.aux && L3.per_sample_entropy == L1.per_sample_entropy);

    // The subset is fixed by the seed, so the loss is differentiable in x: central differences
    // of the module's own aux, restarting the stream before every forward.
    assert_int_equal(ember_lfq_set_seed(q, 42), EMBER_OK);
    assert_int_equal(ember_lfq_forward(q, x, B, N, NULL, true, out, NULL, &L1), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, NULL, 1.0, gx), EMBER_OK);
    const double h = 1e-6;
    for (int64_t i = 0; i < nx; i++) {
        double keep = x[i], up, down;
        x[i] = keep + h;
        assert_int_equal(ember_lfq_set_seed(q, 42), EMBER_OK);
        assert_int_equal(ember_lfq_forward(q, x, B, N, NULL, true, out, NULL, &L2), EMBER_OK);
        up = L2.aux;
        x[i] = keep - h;
        assert_int_equal(ember_lfq_set_seed(q, 42), EMBER_OK);
        assert_int_equal(ember_lfq_forward(q, x, B, N, NULL, true, out, NULL, &L2), EMBER_OK);
        down = L2.aux;
        x[i] = keep;
        fd[i] = (up - down) / (2 * h);
    }
    double e = lfq_rel_to_max(gx, fd, nx);
    printf("fd subsampled entropy (frac 0.45)        grad x %.2e\n", e);
    assert_true(e < 1e-6);
    ember_lfq_destroy(q);
    ctx_done(ctx);
}

// ---- state, determinism, workspace ------------------------------------------------------------

static void eval_forward_and_temperature_changes_keep_the_pending_backward(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = fd_config(&fd_cases[5], 9);
    ember_lfq *q = lfq_new(ctx, &cfg);
    const int32_t B = 2, N = 3, dim = cfg.dim;
    const int64_t nx = (int64_t)B * N * dim;
    double x1[72], x2[72], out[72], g1[72], g2[72], go[72];
    lfq_fill_uniform(x1, nx, 1, -1, 1);
    lfq_fill_uniform(x2, nx, 2, -1, 1);
    lfq_fill_uniform(go, nx, 3, -1, 1);
    int64_t ng = 0;
    ember_lfq_grads(q, &ng);
    double *ref = malloc((size_t)ng * sizeof *ref);

    assert_int_equal(ember_lfq_forward(q, x1, B, N, NULL, true, out, NULL, NULL), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, go, 0.5, g1), EMBER_OK);
    memcpy(ref, ember_lfq_grads(q, NULL), (size_t)ng * sizeof *ref);

    assert_int_equal(ember_lfq_zero_grad(q), EMBER_OK);
    assert_int_equal(ember_lfq_forward(q, x1, B, N, NULL, true, out, NULL, NULL), EMBER_OK);
    assert_int_equal(ember_lfq_forward(q, x2, B, N, NULL, false, out, NULL, NULL), EMBER_OK);
    assert_int_equal(ember_lfq_set_inv_temperature(q, 7.0), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, go, 0.5, g2), EMBER_OK);
    assert_memory_equal(g1, g2, sizeof(double) * (size_t)nx);
    assert_memory_equal(ref, ember_lfq_grads(q, NULL), sizeof(double) * (size_t)ng);
    assert_true(ember_lfq_get_config(q)->inv_temperature == 7.0);

    // A second backward of the same forward accumulates again; zero_grad clears.
    assert_int_equal(ember_lfq_backward(q, go, 0.5, g2), EMBER_OK);
    const double *g = ember_lfq_grads(q, NULL);
    for (int64_t i = 0; i < ng; i++) assert_true(fabs(g[i] - 2 * ref[i]) <= 1e-14 * (1 + fabs(ref[i])));
    assert_int_equal(ember_lfq_zero_grad(q), EMBER_OK);
    for (int64_t i = 0; i < ng; i++) assert_true(g[i] == 0.0);
    free(ref);
    ember_lfq_destroy(q);
    ctx_done(ctx);
}

static void results_are_bitwise_deterministic(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = fd_config(&fd_cases[7], 77);
    ember_lfq *qa = lfq_new(ctx, &cfg), *qb = lfq_new(ctx, &cfg);
    int64_t ng = 0;
    assert_memory_equal(ember_lfq_params(qa, &ng), ember_lfq_params(qb, NULL), (size_t)ng * sizeof(double));
    const int32_t B = 3, N = 4, dim = cfg.dim;
    const int64_t nx = (int64_t)B * N * dim;
    double x[120], go[120], oa[120], ob[120], ga[120], gb[120];
    int64_t ia[24], ib[24];
    lfq_fill_uniform(x, nx, 5, -2, 2);
    lfq_fill_uniform(go, nx, 6, -1, 1);
    ember_lfq_losses La, Lb;
    for (int rep = 0; rep < 2; rep++) {
        assert_int_equal(ember_lfq_forward(qa, x, B, N, NULL, true, oa, ia, &La), EMBER_OK);
        assert_int_equal(ember_lfq_backward(qa, go, 1.0, ga), EMBER_OK);
        assert_int_equal(ember_lfq_forward(qb, x, B, N, NULL, true, ob, ib, &Lb), EMBER_OK);
        assert_int_equal(ember_lfq_backward(qb, go, 1.0, gb), EMBER_OK);
        assert_memory_equal(oa, ob, sizeof oa);
        assert_memory_equal(ia, ib, sizeof ia);
        assert_memory_equal(ga, gb, sizeof ga);
        assert_memory_equal(&La, &Lb, sizeof La);
        assert_memory_equal(ember_lfq_grads(qa, NULL), ember_lfq_grads(qb, NULL), (size_t)ng * sizeof(double));
    }
    ember_lfq_destroy(qa);
    ember_lfq_destroy(qb);
    ctx_done(ctx);
}

static void workspace_grows_to_the_largest_batch_only(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = fd_config(&fd_cases[0], 1);
    ember_lfq *q = lfq_new(ctx, &cfg), *fresh = lfq_new(ctx, &cfg);
    double x[32 * 8], out[32 * 8], out2[32 * 8], g[32 * 8], g2[32 * 8];
    lfq_fill_uniform(x, 32 * 8, 4, -1, 1);
    assert_int_equal(ember_lfq_forward(q, x, 1, 2, NULL, true, out, NULL, NULL), EMBER_OK);
    size_t small = ember_ctx_bytes_outstanding(ctx);
    assert_int_equal(ember_lfq_forward(q, x, 4, 8, NULL, true, out, NULL, NULL), EMBER_OK);
    size_t large = ember_ctx_bytes_outstanding(ctx);
    assert_true(large > small);
    ember_lfq_losses L1, L2;
    assert_int_equal(ember_lfq_forward(q, x, 2, 3, NULL, true, out, NULL, &L1), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, NULL, 1.0, g), EMBER_OK);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), large);
    assert_int_equal(ember_lfq_forward(fresh, x, 2, 3, NULL, true, out2, NULL, &L2), EMBER_OK);
    assert_int_equal(ember_lfq_backward(fresh, NULL, 1.0, g2), EMBER_OK);
    assert_memory_equal(out, out2, sizeof(double) * 2 * 3 * 8);
    assert_memory_equal(g, g2, sizeof(double) * 2 * 3 * 8);
    assert_true(L1.aux == L2.aux);
    ember_lfq_destroy(q);
    ember_lfq_destroy(fresh);

    // max_tokens sizes it at creation: no growth up to that many tokens.
    cfg.max_tokens = 32;
    q = lfq_new(ctx, &cfg);
    size_t before = ember_ctx_bytes_outstanding(ctx);
    assert_int_equal(ember_lfq_forward(q, x, 4, 8, NULL, true, out, NULL, NULL), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, NULL, 1.0, g), EMBER_OK);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), before);
    ember_lfq_destroy(q);
    ctx_done(ctx);
}

// ---- decoding and dtypes ----------------------------------------------------------------------

static void indices_to_codes_inverts_quantisation(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
    cfg.codebook_size = 8;
    cfg.num_codebooks = 2;
    cfg.codebook_scale = 2.0;
    cfg.spherical = true;
    cfg.dtype = EMBER_DTYPE_F64;
    ember_lfq *q = lfq_new(ctx, &cfg);
    assert_int_equal(ember_lfq_get_config(q)->dim, 6);
    assert_int_equal(ember_lfq_codebook_dim(q), 3);
    int64_t idx[2 * 8], back[2 * 8];
    for (int i = 0; i < 16; i++) idx[i] = (i * 5 + 3) % 8;
    double codes[8 * 6], out[8 * 6];
    assert_int_equal(ember_lfq_indices_to_codes(q, idx, 8, true, codes), EMBER_OK);
    for (int i = 0; i < 48; i++) assert_true(fabs(fabs(codes[i]) - 2.0 / sqrt(3.0)) < 1e-15);
    assert_true(codes[0] < 0 && codes[1] > 0 && codes[2] > 0); // idx 3 = 0b011, MSB first
    assert_int_equal(ember_lfq_forward(q, codes, 2, 4, NULL, false, out, back, NULL), EMBER_OK);
    assert_memory_equal(idx, back, sizeof idx);
    assert_memory_equal(codes, out, sizeof codes); // eval output of a code is the code itself
    ember_lfq_destroy(q);

    // With projections: project_out = false gives the [n, C*D] corners, true projects them.
    ember_lfq_config pc = fd_config(&fd_cases[5], 2);
    q = lfq_new(ctx, &pc);
    double corners[8 * 8], projected[8 * 12];
    assert_int_equal(ember_lfq_indices_to_codes(q, idx, 8, false, corners), EMBER_OK);
    assert_int_equal(ember_lfq_indices_to_codes(q, idx, 8, true, projected), EMBER_OK);
    const double *W = param64(q, EMBER_LFQ_PROJ_OUT_WEIGHT), *b = param64(q, EMBER_LFQ_PROJ_OUT_BIAS);
    for (int t = 0; t < 8; t++)
        for (int o = 0; o < 12; o++) {
            double want = b[o];
            for (int j = 0; j < 8; j++) want += W[o * 8 + j] * corners[t * 8 + j];
            assert_true(fabs(projected[t * 12 + o] - want) < 1e-14);
        }
    ember_lfq_destroy(q);
    ctx_done(ctx);
}

static void float32_agrees_with_float64(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    for (size_t ci = 0; ci < sizeof fd_cases / sizeof fd_cases[0]; ci++) {
        ember_lfq_config c64 = fd_config(&fd_cases[ci], 31), c32 = c64;
        c32.dtype = EMBER_DTYPE_F32;
        ember_lfq *a = lfq_new(ctx, &c64), *b = lfq_new(ctx, &c32);
        int64_t np = 0;
        double *p64 = ember_lfq_params(a, &np);
        float *p32 = ember_lfq_params(b, NULL);
        for (int64_t i = 0; i < np; i++) p64[i] = (double)p32[i]; // same values in both
        const int32_t B = 3, N = 4, dim = c64.dim;
        const int64_t nx = (int64_t)B * N * dim;
        double x[160], go[160], o64[160], g64[160], tmp[160];
        float x32[160], go32[160], o32[160], g32[160];
        lfq_fill_uniform(x, nx, 3, -1, 1);
        lfq_fill_uniform(go, nx, 4, -0.1, 0.1);
        for (int64_t i = 0; i < nx; i++) {
            x32[i] = (float)x[i];
            x[i] = x32[i];
            go32[i] = (float)go[i];
            go[i] = go32[i];
        }
        uint8_t mask[12];
        for (int t = 0; t < 12; t++) mask[t] = (uint8_t)(t % 3 != 1);
        const uint8_t *m = fd_cases[ci].masked ? mask : NULL;
        ember_lfq_losses La, Lb;
        assert_int_equal(ember_lfq_forward(a, x, B, N, m, true, o64, NULL, &La), EMBER_OK);
        assert_int_equal(ember_lfq_backward(a, go, 1.0, g64), EMBER_OK);
        assert_int_equal(ember_lfq_forward(b, x32, B, N, m, true, o32, NULL, &Lb), EMBER_OK);
        assert_int_equal(ember_lfq_backward(b, go32, 1.0, g32), EMBER_OK);
        assert_true(lfq_rel_scalar(Lb.aux, La.aux, 1e-2) < 1e-5);
        assert_true(lfq_rel_scalar(Lb.codebook_entropy, La.codebook_entropy, 0) < 1e-5);
        lfq_buf_to_f64(o32, nx, EMBER_DTYPE_F32, tmp);
        assert_true(lfq_rel_to_max(tmp, o64, nx) < 1e-5);
        lfq_buf_to_f64(g32, nx, EMBER_DTYPE_F32, tmp);
        double eg = lfq_rel_to_max(tmp, g64, nx);
        double *gp = malloc((size_t)(np > 0 ? np : 1) * sizeof *gp);
        lfq_buf_to_f64(ember_lfq_grads(b, NULL), np, EMBER_DTYPE_F32, gp);
        double ep = np > 0 ? lfq_rel_to_max(gp, ember_lfq_grads(a, NULL), np) : 0;
        free(gp);
        assert_true(eg < 5e-5 && ep < 5e-5);
        ember_lfq_destroy(a);
        ember_lfq_destroy(b);
    }
    ctx_done(ctx);
}

// ---- configuration --------------------------------------------------------------------------

static void config_defaults_and_derived_sizes(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
    cfg.dim = 8; // codebook_size 0: 2^8, no projections (dim == C * D)
    ember_lfq *q = lfq_new(ctx, &cfg);
    const ember_lfq_config *rc = ember_lfq_get_config(q);
    assert_int_equal(rc->codebook_size, 256);
    assert_int_equal(rc->num_codebooks, 1);
    assert_int_equal(rc->projection, EMBER_LFQ_PROJ_NONE);
    assert_true(rc->inv_temperature == 100.0 && rc->codebook_scale == 1.0);
    assert_true(rc->entropy_loss_weight == 0.1 && rc->commitment_loss_weight == 0.0);
    assert_true(rc->diversity_gamma == 1.0 && rc->entropy_loss_offset == 5.0);
    assert_true(rc->frac_per_sample_entropy == 1.0);
    int64_t n = -1;
    assert_null(ember_lfq_params(q, &n));
    assert_int_equal(n, 0);
    assert_null(ember_lfq_param(q, EMBER_LFQ_PROJ_IN_WEIGHT, &n));
    ember_lfq_destroy(q);

    cfg = (ember_lfq_config)EMBER_LFQ_CONFIG_DEFAULT;
    cfg.dim = 16;
    cfg.codebook_size = 16;
    cfg.num_codebooks = 2; // C * D = 8 != 16: projections with bias
    q = lfq_new(ctx, &cfg);
    rc = ember_lfq_get_config(q);
    assert_int_equal(rc->projection, EMBER_LFQ_PROJ_LINEAR);
    static const int64_t numel[EMBER_LFQ_NUM_PARAMS] = {8 * 16, 8, 16 * 8, 16};
    int64_t total = 0;
    for (int id = 0; id < EMBER_LFQ_NUM_PARAMS; id++) {
        void *p = ember_lfq_param(q, (ember_lfq_param_id)id, &n);
        assert_non_null(p);
        assert_int_equal(n, numel[id]);
        assert_ptr_equal(p, (char *)ember_lfq_params(q, NULL) + total * (int64_t)sizeof(float));
        total += n;
    }
    // torch.nn.Linear's initialisation bounds: 1/sqrt(fan_in).
    const float *w = ember_lfq_param(q, EMBER_LFQ_PROJ_IN_WEIGHT, NULL);
    const float *wo = ember_lfq_param(q, EMBER_LFQ_PROJ_OUT_WEIGHT, NULL);
    for (int i = 0; i < 128; i++) {
        assert_true(fabsf(w[i]) <= 0.25f);
        assert_true(fabsf(wo[i]) <= 1.0f / sqrtf(8.0f));
    }
    assert_string_equal(ember_lfq_param_name(EMBER_LFQ_PROJ_OUT_BIAS), "project_out.bias");
    assert_null(ember_lfq_param_name(EMBER_LFQ_NUM_PARAMS));
    ember_lfq_destroy(q);

    cfg.projection_has_bias = false;
    q = lfq_new(ctx, &cfg);
    assert_null(ember_lfq_param(q, EMBER_LFQ_PROJ_IN_BIAS, &n));
    assert_int_equal(n, 0);
    assert_non_null(ember_lfq_grad(q, EMBER_LFQ_PROJ_OUT_WEIGHT, &n));
    assert_int_equal(n, 16 * 8);
    ember_lfq_destroy(q);
    ctx_done(ctx);
}

// Each row: one bad setting, the status, and text the message must contain.
static void create_rejects_bad_configs_naming_the_value(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    static const struct {
        int field;
        double value;
        ember_status st;
        const char *text;
    } rows[] = {
        {0, 100, EMBER_ERR_INVALID_ARG, "codebook_size 100 is not a power of two (suggested 128)"},
        {0, 1, EMBER_ERR_INVALID_ARG, "codebook_size 1 outside"},
        {0, -4, EMBER_ERR_INVALID_ARG, "codebook_size -4"},
        {1, 0.5, EMBER_ERR_INVALID_ARG, "soft_clamp_input_value 0.5 must be >= codebook_scale 1"},
        {2, NAN, EMBER_ERR_INVALID_ARG, "codebook_scale = nan"},
        {3, -0.1, EMBER_ERR_INVALID_ARG, "entropy_loss_weight = -0.1"},
        {4, 1.5, EMBER_ERR_INVALID_ARG, "frac_per_sample_entropy = 1.5"},
        {5, -1, EMBER_ERR_INVALID_ARG, "inv_temperature = -1"},
        {6, 0, EMBER_ERR_INVALID_ARG, "projection NONE needs dim (12)"},
        {7, 0, EMBER_ERR_INVALID_ARG, "either dim or codebook_size"},
        {8, 9, EMBER_ERR_INVALID_ARG, "unknown dtype 9"},
        {9, INFINITY, EMBER_ERR_INVALID_ARG, "commitment_loss_weight = inf"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
        cfg.dim = 12;
        cfg.codebook_size = 16;
        switch (rows[i].field) {
        case 0: cfg.codebook_size = (int32_t)rows[i].value; break;
        case 1: cfg.soft_clamp_input_value = rows[i].value; break;
        case 2: cfg.codebook_scale = rows[i].value; break;
        case 3: cfg.entropy_loss_weight = rows[i].value; break;
        case 4: cfg.frac_per_sample_entropy = rows[i].value; break;
        case 5: cfg.inv_temperature = rows[i].value; break;
        case 6: cfg.projection = EMBER_LFQ_PROJ_NONE; break;
        case 7: cfg.dim = 0; cfg.codebook_size = 0; break;
        case 8: cfg.dtype = (ember_dtype)rows[i].value; break;
        case 9: cfg.commitment_loss_weight = rows[i].value; break;
        }
        ember_lfq *q = (ember_lfq *)&cfg; // must come back NULL
        ember_status st = ember_lfq_create(ctx, &cfg, &q);
        if (st != rows[i].st || !strstr(ember_ctx_errmsg(ctx), rows[i].text))
            fprintf(stderr, "row %zu: %s: %s\n", i, ember_status_name(st), ember_ctx_errmsg(ctx));
        assert_int_equal(st, rows[i].st);
        assert_non_null(strstr(ember_ctx_errmsg(ctx), rows[i].text));
        assert_null(q);
        assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    }
    ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
    ember_lfq *q = NULL;
    assert_int_equal(ember_lfq_create(NULL, &cfg, &q), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_lfq_create(ctx, NULL, &q), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "cfg is NULL"));
    assert_int_equal(ember_lfq_create(ctx, &cfg, NULL), EMBER_ERR_INVALID_ARG);
    ember_lfq_destroy(NULL);
    ctx_done(ctx);
}

// ---- bad input to forward, backward and decoding: status, message, nothing modified ----------

static void bad_input_is_rejected_and_changes_nothing(void **state) {
    (void)state;
    ember_ctx *ctx = ctx_new();
    ember_lfq_config cfg = fd_config(&fd_cases[5], 8);
    ember_lfq *q = lfq_new(ctx, &cfg);
    const int32_t B = 2, N = 3, dim = cfg.dim;
    const int64_t nx = (int64_t)B * N * dim;
    double x[72], out[72], gx[72], go[72];
    int64_t idx[12];
    lfq_fill_uniform(x, nx, 1, -1, 1);
    lfq_fill_uniform(go, nx, 2, -1, 1);
    int64_t np = 0;
    ember_lfq_params(q, &np);
    const size_t pbytes = (size_t)np * sizeof(double);
    double *params0 = malloc(pbytes), *grads0 = malloc(pbytes);
    memcpy(params0, ember_lfq_params(q, NULL), pbytes);

    // Backward before any training forward.
    assert_int_equal(ember_lfq_backward(q, go, 1.0, gx), EMBER_ERR_STATE);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "no training forward"));

    // A valid step, so that there is saved state and non-zero gradients to keep.
    ember_lfq_losses L0, L = {0};
    assert_int_equal(ember_lfq_forward(q, x, B, N, NULL, true, out, idx, &L0), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, go, 1.0, gx), EMBER_OK);
    memcpy(grads0, ember_lfq_grads(q, NULL), pbytes);

    double out_s[72], gx_s[72];
    int64_t idx_s[12];
    for (int i = 0; i < 72; i++) out_s[i] = gx_s[i] = -12345.0;
    for (int i = 0; i < 12; i++) idx_s[i] = -7;
    memcpy(out, out_s, sizeof out);
    memcpy(gx, gx_s, sizeof gx);
    memcpy(idx, idx_s, sizeof idx);
    ember_lfq_losses Ls;
    memset(&Ls, 0x5a, sizeof Ls);
    L = Ls;
    double bad[72];
    memcpy(bad, x, sizeof bad);
    bad[1 * N * dim + 2 * dim + 5] = NAN; // b = 1, n = 2, feature 5
    static const struct {
        int which;
        ember_status st;
        const char *text;
    } rows[] = {
        {0, EMBER_ERR_NUMERIC, "x[b=1, n=2, 5] = nan is not finite"},
        {1, EMBER_ERR_INVALID_ARG, "x is NULL"},
        {2, EMBER_ERR_INVALID_ARG, "out is NULL"},
        {3, EMBER_ERR_INVALID_ARG, "B = 0, N = 3"},
        {4, EMBER_ERR_INVALID_ARG, "B = 2, N = -1"},
    };
    for (int train = 0; train < 2; train++) {
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            const void *xi = rows[i].which == 0 ? bad : rows[i].which == 1 ? NULL : x;
            void *oi = rows[i].which == 2 ? NULL : out;
            int32_t Bi = rows[i].which == 3 ? 0 : B, Ni = rows[i].which == 4 ? -1 : N;
            ember_status st = ember_lfq_forward(q, xi, Bi, Ni, NULL, train, oi, idx, &L);
            assert_int_equal(st, rows[i].st);
            if (!strstr(ember_ctx_errmsg(ctx), rows[i].text)) fprintf(stderr, "%s\n", ember_ctx_errmsg(ctx));
            assert_non_null(strstr(ember_ctx_errmsg(ctx), rows[i].text));
            assert_memory_equal(out, out_s, sizeof out);
            assert_memory_equal(idx, idx_s, sizeof idx);
            assert_memory_equal(&L, &Ls, sizeof L);
            assert_memory_equal(ember_lfq_params(q, NULL), params0, pbytes);
            assert_memory_equal(ember_lfq_grads(q, NULL), grads0, pbytes);
        }
    }
    assert_int_equal(ember_lfq_forward(NULL, x, B, N, NULL, true, out, idx, &L), EMBER_ERR_INVALID_ARG);

    // Backward: non-finite upstream gradients; the saved state survived the rejected forwards.
    double bad_go[72];
    memcpy(bad_go, go, sizeof bad_go);
    bad_go[7] = INFINITY;
    assert_int_equal(ember_lfq_backward(q, bad_go, 1.0, gx), EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "grad_out[b=0, n=0, 7] = inf"));
    assert_int_equal(ember_lfq_backward(q, go, NAN, gx), EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "grad_aux = nan"));
    assert_memory_equal(gx, gx_s, sizeof gx);
    assert_memory_equal(ember_lfq_grads(q, NULL), grads0, pbytes);
    assert_int_equal(ember_lfq_backward(NULL, go, 1.0, gx), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_lfq_zero_grad(q), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, go, 1.0, gx), EMBER_OK);
    assert_memory_equal(ember_lfq_grads(q, NULL), grads0, pbytes); // same step as before

    // Decoding: an index outside [0, K).
    double codes[3 * 12];
    for (int i = 0; i < 36; i++) codes[i] = 9.0;
    int64_t bad_idx[6] = {1, 2, 3, 16, 0, 0};
    assert_int_equal(ember_lfq_indices_to_codes(q, bad_idx, 3, true, codes), EMBER_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "indices[1, 1] = 16 outside [0, 16)"));
    for (int i = 0; i < 36; i++) assert_true(codes[i] == 9.0);
    assert_int_equal(ember_lfq_indices_to_codes(q, NULL, 3, true, codes), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_lfq_indices_to_codes(q, bad_idx, -1, true, codes), EMBER_ERR_INVALID_ARG);

    // Setters.
    assert_int_equal(ember_lfq_set_inv_temperature(q, 0.0), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "0 must be finite and > 0"));
    assert_int_equal(ember_lfq_set_comm(NULL, NULL), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_lfq_set_comm(q, NULL), EMBER_OK);
    assert_int_equal(ember_lfq_backward(q, go, 1.0, gx), EMBER_ERR_STATE); // set_comm drops the state
    assert_int_equal(ember_lfq_allreduce_grads(q, EMBER_GRAD_MEAN), EMBER_OK);       // no comm: no-op

    free(params0);
    free(grads0);
    ember_lfq_destroy(q);
    ctx_done(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(entropy_gradient_matches_finite_differences),
        cmocka_unit_test(masked_forward_equals_forward_on_selected_tokens),
        cmocka_unit_test(subsampled_entropy_is_seeded_and_differentiable),
        cmocka_unit_test(eval_forward_and_temperature_changes_keep_the_pending_backward),
        cmocka_unit_test(results_are_bitwise_deterministic),
        cmocka_unit_test(workspace_grows_to_the_largest_batch_only),
        cmocka_unit_test(indices_to_codes_inverts_quantisation),
        cmocka_unit_test(float32_agrees_with_float64),
        cmocka_unit_test(config_defaults_and_derived_sizes),
        cmocka_unit_test(create_rejects_bad_configs_naming_the_value),
        cmocka_unit_test(bad_input_is_rejected_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
