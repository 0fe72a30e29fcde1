// Variable batch size per feature (VBE, include/ember/kjt.h).
//   local                  the unsharded collection on VBE KJTs against the naive oracle on the
//                          equivalent ordinary batch: outputs in both layouts, dL/dw, training
//   train --scheme S [--pipelined] [--ckpt]
//                          the sharded collection, every rank a VBE batch of its own (unequal
//                          samples and bags, a feature whose bags repeat over three samples),
//                          equals the single-process collection
//                          trained on the expanded global batch (steps alternate with the
//                          per-feature layout, whose equivalent is the padded batch); with the
//                          prefetch and split backward, and across a checkpoint into another plan
//   errors                 bad VBE input on one rank fails every rank and changes nothing
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
#include "oracle.h"
#include "plans.h"
#include "tmpdir.h"

#define NT 5
#define NF 6
#define K 4
static const int64_t ROWS[NT] = {7, 1, 50, 13, 20};
static const int32_t DIMS[NT] = {4, 3, 8, 5, 4};
static const int32_t FTAB[NF] = {0, 1, 2, 3, 4, 2};

static const char *g_scheme = "mixed";
static int g_pipelined = 0, g_ckpt = 0;
static int W, R;

static ember_shard_scheme scheme_of(const char *s, int t) {
    ember_shard_scheme sc;
    if (ember_shard_scheme_parse(s, &sc) == EMBER_OK) return sc;
    return (ember_shard_scheme)(t % EMBER_SHARD_COUNT); // mixed: every scheme in one collection
}

typedef struct setup {
    ember_table_config tables[NT];
    ember_feature_config features[NF];
    ember_table_plan plan[NT];
    int32_t ranks[NT][8];
    ember_ebc_config cfg;
    char names[NT + NF][8];
    int32_t fcol[NF];
    int D;
} setup;

static void make_setup(setup *su, ember_pooling pool, ember_optim_kind opt, int shift) {
    memset(su, 0, sizeof *su);
    for (int t = 0; t < NT; t++) {
        snprintf(su->names[t], 8, "t%d", t);
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = opt;
        o.lr = opt == EMBER_OPT_SGD ? 0.5f : 0.05f;
        ember_table_config *tc = &su->tables[t];
        *tc = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc->name = su->names[t], tc->rows = ROWS[t], tc->dim = DIMS[t], tc->pooling = pool;
        tc->init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f}, tc->optim = o;
        const ember_shard_scheme sc = (ember_shard_scheme)((scheme_of(g_scheme, t) + shift) % EMBER_SHARD_COUNT);
        su->plan[t] = test_plan_for(sc, t, DIMS[t], W, su->ranks[t]);
    }
    for (int f = 0; f < NF; f++) {
        snprintf(su->names[NT + f], 8, "f%d", f);
        su->features[f] = (ember_feature_config){.name = su->names[NT + f], .table = FTAB[f]};
        su->fcol[f] = su->D;
        su->D += DIMS[FTAB[f]];
    }
    su->cfg = (ember_ebc_config){.tables = su->tables, .num_tables = NT, .features = su->features, .num_features = NF,
                                 .bounds = EMBER_BOUNDS_ERROR, .seed = 77};
}

// Rank q's batch of step k: 2 + q samples; feature f has a third as many bags (f % 3 == 0: a
// user's feature, repeated over the candidates of a request), one per sample (1; feature 4 reads
// them in order, as a feature that is not deduplicated), or one less (2).
static void make_batch(gen_vbe *v, int k, int q, int weighted) {
    const int32_t B = 2 + q;
    int32_t bsz[NF];
    int64_t rows[NF];
    for (int f = 0; f < NF; f++) {
        bsz[f] = f % 3 == 0 ? (B + 2) / 3 : f % 3 == 1 ? B : B - 1;
        rows[f] = ROWS[FTAB[f]];
    }
    test_rng r = {(uint64_t)(1000 * k + 17 * q + 5)};
    gen_vbe_make(v, &r, NF, B, bsz, rows, 3, 0.3, weighted, 1u << 4); // feature 4: every sample its own bag
}

// Step k's layout: inverse indices on even steps, each feature's own bags on odd ones; the
// ordinary batch it equals (expanded, or padded).
static int with_inverse(int k) { return k % 2 == 0; }
static const ember_kjt *vbe_input(const gen_vbe *v, int k) { return with_inverse(k) ? &v->kjt : &v->kjt_bags; }
static const gen_kjt *equivalent(const gen_vbe *v, int k) { return with_inverse(k) ? &v->expanded : &v->padded; }

// The global batch: the ranks' ordinary batches concatenated, feature-major, ranks in order.
static void concat(const gen_kjt *const *parts, int n, gen_kjt *out) {
    int32_t G = 0;
    int64_t nnz = 0;
    const int weighted = n > 0 && parts[0]->weights != NULL;
    for (int q = 0; q < n; q++) {
        G += parts[q]->kjt.batch_size;
        nnz += parts[q]->kjt.nnz;
    }
    out->lengths = malloc(sizeof(int32_t) * (size_t)(NF * G + 1));
    out->offsets = malloc(sizeof(int64_t) * (size_t)(NF * G + 1));
    out->values = malloc(sizeof(int64_t) * (size_t)(nnz + 1));
    out->weights = weighted ? malloc(sizeof(float) * (size_t)(nnz + 1)) : NULL;
    int64_t i = 0, m = 0;
    out->offsets[0] = 0;
    for (int f = 0; f < NF; f++)
        for (int q = 0; q < n; q++) {
            const gen_kjt *p = parts[q];
            const int32_t B = p->kjt.batch_size;
            for (int32_t b = 0; b < B; b++, i++) {
                const int64_t a = p->offsets[(int64_t)f * B + b], len = p->lengths[(int64_t)f * B + b];
                out->lengths[i] = (int32_t)len;
                memcpy(out->values + m, p->values + a, sizeof(int64_t) * (size_t)len);
                if (weighted) memcpy(out->weights + m, p->weights + a, sizeof(float) * (size_t)len);
                m += len;
                out->offsets[i + 1] = m;
            }
        }
    out->kjt = (ember_kjt){.num_features = NF, .batch_size = G, .lengths = out->lengths, .offsets = out->offsets,
                           .values = out->values, .weights = out->weights, .nnz = nnz};
}

// A VBE batch's output (or gradient) in its layout from the rows [.., D] of its ordinary batch.
static int64_t to_layout(const setup *su, const gen_vbe *v, int inv, const float *rows, float *out) {
    if (inv) {
        memcpy(out, rows, sizeof(float) * (size_t)v->B * (size_t)su->D);
        return (int64_t)v->B * su->D;
    }
    int64_t n = 0;
    for (int f = 0; f < NF; f++) {
        const int32_t Df = DIMS[FTAB[f]];
        for (int32_t b = 0; b < v->bsz[f]; b++, n += Df)
            memcpy(out + n, rows + (int64_t)b * su->D + su->fcol[f], sizeof(float) * (size_t)Df);
    }
    return n;
}

static double max_rel(const float *a, const float *b, int64_t n, double atol) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + 1e-4 * fabs((double)b[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static void expect_ok(ember_ctx *ctx, ember_status st) {
    if (st != EMBER_OK) fprintf(stderr, "rank %d: %s\n", R, ember_ctx_errmsg(ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
}

// K steps of the sharded collection on VBE batches against one process on the equivalent
// global batch; then every tensor, gathered, against it (tolerance as test_shard's: the two
// differ in the order of sums across ranks and over a bag's samples).
// Counts the forwards that could not take their prefetch (the digests of a VBE batch differed).
static int g_redone = 0;
static void count_redone(void *user, ember_log_level level, const char *msg) {
    (void)user;
    if (strstr(msg, "input dist redone")) g_redone++;
    else if (level >= EMBER_LOG_WARN) fprintf(stderr, "%s\n", msg);
}

static void run_combo(ember_pooling pool, ember_optim_kind opt, int weighted, ember_grad_convention conv) {
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.log = count_redone, cc.log_level = EMBER_LOG_INFO;
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    setup su;
    make_setup(&su, pool, opt, 0);
    ember_sebc *s = NULL;
    ember_ebc *ref = NULL;
    expect_ok(ctx, ember_sebc_create(comm, &su.cfg, su.plan, conv, &s));
    assert_int_equal(ember_ebc_create(ctx, &su.cfg, &ref), EMBER_OK);
    gen_vbe batch[K + 1][8];
    for (int k = 0; k <= K; k++)
        for (int q = 0; q < W; q++) make_batch(&batch[k][q], k, q, weighted);
    test_rng rng = {99};
    bool ok = true;
    // The pipelined step forwards the next batch after its backward: its output waits here.
    float *next_out = NULL;
    for (int k = 0; k < K; k++) {
        const int inv = with_inverse(k);
        if (g_ckpt && k == 2) {
            // Save, rebuild under another plan (every table two schemes further), load, go on.
            char path[96];
            snprintf(path, sizeof path, "vbe_ckpt_%s_np%d", g_scheme, W);
            expect_ok(ctx, ember_checkpoint_save(s, path, NULL));
            ember_sebc_destroy(s);
            s = NULL;
            make_setup(&su, pool, opt, 2);
            expect_ok(ctx, ember_sebc_create(comm, &su.cfg, su.plan, conv, &s));
            expect_ok(ctx, ember_checkpoint_load(s, path, NULL));
            if (R == 0) test_remove_tree(path);
        }
        const gen_vbe *mine = &batch[k][R];
        const gen_kjt *parts[8];
        int64_t b0 = 0;
        for (int q = 0; q < W; q++) {
            parts[q] = equivalent(&batch[k][q], k);
            if (q < R) b0 += parts[q]->kjt.batch_size;
        }
        gen_kjt g;
        concat(parts, W, &g);
        const int64_t nglob = (int64_t)g.kjt.batch_size * su.D, nrows = (int64_t)parts[R]->kjt.batch_size * su.D;
        float *out_ref = malloc(sizeof(float) * (size_t)(nglob + 1)), *G = malloc(sizeof(float) * (size_t)(nglob + 1));
        float *want = malloc(sizeof(float) * (size_t)(nrows + 1)), *gl = malloc(sizeof(float) * (size_t)(nrows + 1));
        float *out = next_out ? next_out : malloc(sizeof(float) * (size_t)(nrows + 1));
        next_out = NULL;
        for (int64_t i = 0; i < nglob; i++) G[i] = (float)(rng_uniform(&rng) * 2 - 1);
        assert_int_equal(ember_ebc_forward(ref, &g.kjt, out_ref), EMBER_OK);
        if (!g_pipelined || k == 0) expect_ok(ctx, ember_sebc_forward(s, vbe_input(mine, k), out));
        const int64_t n = to_layout(&su, mine, inv, out_ref + b0 * su.D, want);
        const double e = max_rel(out, want, n, 2e-5);
        if (e > 1) fprintf(stderr, "rank %d step %d: forward err %.3g\n", R, k, e);
        ok = ok && e <= 1;
        // The single process trains on G; rank r's gradient is its rows of G (times W under MEAN:
        // J = (1/W) sum_r L_r), in its batch's layout.
        to_layout(&su, mine, inv, G + b0 * su.D, gl);
        if (conv == EMBER_GRAD_MEAN)
            for (int64_t i = 0; i < n; i++) gl[i] *= (float)W;
        assert_int_equal(ember_ebc_backward(ref, &g.kjt, G, NULL), EMBER_OK);
        if (g_pipelined && k + 1 < K) {
            // The next batch's input dist starts before this backward; its forward takes it.
            const gen_vbe *nx = &batch[k + 1][R];
            expect_ok(ctx, ember_sebc_prefetch(s, vbe_input(nx, k + 1)));
            expect_ok(ctx, ember_sebc_backward_start(s, vbe_input(mine, k), gl));
            expect_ok(ctx, ember_sebc_backward_finish(s));
            next_out = malloc(sizeof(float) * (size_t)((int64_t)(nx->B + nx->Bp) * su.D + 1));
            expect_ok(ctx, ember_sebc_forward(s, vbe_input(nx, k + 1), next_out));
        } else {
            expect_ok(ctx, ember_sebc_backward(s, vbe_input(mine, k), gl));
        }
        free(out_ref);
        free(G);
        free(want);
        free(out);
        free(gl);
        gen_kjt_free(&g);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok && g_redone == 0); // every prefetch taken
    for (int t = 0; t < NT; t++)
        for (int ti = 0; ti < ember_ebc_num_tensors(ref, t); ti++) {
            ember_tensor_info info;
            ember_ebc_tensor_info(ref, t, ti, &info);
            const int64_t n = info.rows * info.cols;
            float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
            ember_ebc_read(ref, t, info.name, 0, info.rows, EMBER_DTYPE_F32, b);
            expect_ok(ctx, ember_sebc_read(s, t, info.name, a, -1));
            const double e = max_rel(a, b, n, 2e-5);
            if (e > 1) fprintf(stderr, "rank %d: table %d %s err %.3g\n", R, t, info.name, e);
            ok = ok && e <= 1;
            free(a);
            free(b);
        }
    if (!ok)
        fprintf(stderr, "rank %d: FAILED scheme %s pool %d opt %d weighted %d conv %d\n", R, g_scheme, (int)pool,
                (int)opt, weighted, (int)conv);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    for (int k = 0; k <= K; k++)
        for (int q = 0; q < W; q++) gen_vbe_free(&batch[k][q]);
    ember_sebc_destroy(s);
    ember_ebc_destroy(ref);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

static void train(void **state) {
    (void)state;
    static const ember_optim_kind opts[] = {EMBER_OPT_SGD, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM};
    for (int p = 0; p < 2; p++)
        for (int o = 0; o < 3; o++)
            for (int w = 0; w < 2; w++)
                run_combo(p ? EMBER_POOL_MEAN : EMBER_POOL_SUM, opts[o], w, (ember_grad_convention)((o + w) % 2));
}

// The unsharded collection against the naive oracle on the equivalent ordinary batch.
static void local(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    for (int p = 0; p < 2; p++) {
        setup su;
        W = 1;
        make_setup(&su, p ? EMBER_POOL_MEAN : EMBER_POOL_SUM, p ? EMBER_OPT_ADAM : EMBER_OPT_ROWWISE_ADAGRAD, 0);
        ember_ebc *ebc = NULL;
        assert_int_equal(ember_ebc_create(ctx, &su.cfg, &ebc), EMBER_OK);
        oracle *o = oracle_create(&su.cfg, ebc);
        test_rng rng = {7};
        for (int k = 0; k < K; k++) {
            gen_vbe v;
            make_batch(&v, k, 3, 1);
            const int inv = with_inverse(k);
            const gen_kjt *eq = equivalent(&v, k);
            const int64_t rows = (int64_t)eq->kjt.batch_size * su.D, n = ember_ebc_output_size(ebc, vbe_input(&v, k));
            double *want = malloc(sizeof(double) * (size_t)(rows + 1));
            double *gw_want = malloc(sizeof(double) * (size_t)(eq->kjt.nnz + 1));
            float *rowsf = malloc(sizeof(float) * (size_t)(rows + 1)), *wantf = malloc(sizeof(float) * (size_t)(n + 1));
            float *out = malloc(sizeof(float) * (size_t)(n + 1)), *G = malloc(sizeof(float) * (size_t)(rows + 1));
            float *gl = malloc(sizeof(float) * (size_t)(n + 1)), *gw = malloc(sizeof(float) * (size_t)(v.kjt.nnz + 1));
            oracle_forward(o, &eq->kjt, want);
            for (int64_t i = 0; i < rows; i++) rowsf[i] = (float)want[i];
            assert_int_equal(to_layout(&su, &v, inv, rowsf, wantf), n);
            assert_int_equal(ember_ebc_forward(ebc, vbe_input(&v, k), out), EMBER_OK);
            assert_true(max_rel(out, wantf, n, 1e-5) <= 1);
            // Padded rows of the per-feature layout carry no gradient in the oracle (empty bags).
            for (int64_t i = 0; i < rows; i++) G[i] = (float)(rng_uniform(&rng) * 2 - 1);
            to_layout(&su, &v, inv, G, gl);
            oracle_backward(o, &eq->kjt, G, gw_want);
            assert_int_equal(ember_ebc_backward(ebc, vbe_input(&v, k), gl, gw), EMBER_OK);
            // A VBE id's dL/dw sums those of its copies in the expanded batch.
            double *gsum = calloc((size_t)(v.kjt.nnz + 1), sizeof(double));
            for (int64_t j = 0; j < eq->kjt.nnz; j++) gsum[inv ? v.src[j] : j] += gw_want[j];
            for (int64_t j = 0; j < v.kjt.nnz; j++)
                assert_true(fabs(gw[j] - gsum[j]) <= 1e-5 + 1e-4 * fabs(gsum[j]));
            free(gsum);
            free(want);
            free(gw_want);
            free(rowsf);
            free(wantf);
            free(out);
            free(G);
            free(gl);
            free(gw);
            gen_vbe_free(&v);
        }
        for (int t = 0; t < NT; t++) {
            float *w = malloc(sizeof(float) * (size_t)(ROWS[t] * DIMS[t]));
            assert_int_equal(ember_ebc_read(ebc, t, "weight", 0, ROWS[t], EMBER_DTYPE_F32, w), EMBER_OK);
            assert_true(rel_err_f(w, o->t[t].w, ROWS[t] * DIMS[t], 1e-5, 1e-4) <= 1);
            free(w);
        }
        oracle_destroy(o);
        ember_ebc_destroy(ebc);
    }
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// Every rank's status is `want`, and (on the ranks named by `mine`) the message holds `text`.
static void expect_all(ember_ctx *ctx, ember_status st, ember_status want, int mine, const char *text) {
    if (st != want || (mine && text && !strstr(ember_ctx_errmsg(ctx), text)))
        fprintf(stderr, "rank %d: status %d (want %d): %s\n", R, (int)st, (int)want, ember_ctx_errmsg(ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == want && (!mine || !text || strstr(ember_ctx_errmsg(ctx), text)));
}

// Bad VBE input on one rank: every rank fails with the same status, nothing changes.
static void errors(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    setup su;
    make_setup(&su, EMBER_POOL_SUM, EMBER_OPT_ADAM, 0);
    ember_sebc *s = NULL;
    expect_ok(ctx, ember_sebc_create(comm, &su.cfg, su.plan, EMBER_GRAD_MEAN, &s));
    gen_vbe v;
    make_batch(&v, 0, R, 1);
    const int last = R == W - 1;
    float *out = malloc(sizeof(float) * (size_t)(v.B + v.Bp + 1) * (size_t)su.D);
    float *g = calloc((size_t)(v.B + v.Bp + 1) * (size_t)su.D, sizeof(float));
    // An inverse index outside its feature's bags, on the last rank.
    ember_kjt k = v.kjt;
    int32_t *inv = malloc(sizeof(int32_t) * (size_t)(NF * v.B));
    memcpy(inv, v.inv, sizeof(int32_t) * (size_t)(NF * v.B));
    if (last) inv[NF * v.B - 1] = v.bsz[NF - 1];
    k.inverse_indices = inv;
    expect_all(ctx, ember_sebc_forward(s, &k, out), EMBER_ERR_INVALID_ARG, last, "feature 'f5' sample");
    // A negative batch size, on rank 0; inverse indices without batch sizes, on every rank.
    int32_t bsz[NF];
    memcpy(bsz, v.bsz, sizeof bsz);
    if (R == 0) bsz[1] = -1;
    k = v.kjt;
    k.feature_batch_sizes = bsz;
    expect_all(ctx, ember_sebc_forward(s, &k, out), EMBER_ERR_INVALID_ARG, R == 0, "negative batch size");
    k = v.expanded.kjt;
    k.inverse_indices = v.inv;
    expect_all(ctx, ember_sebc_forward(s, &k, out), EMBER_ERR_INVALID_ARG, 1, "inverse_indices without");
    expect_all(ctx, ember_sebc_prefetch(s, &k), EMBER_ERR_INVALID_ARG, 1, "inverse_indices without");
    // A bag no sample reads (feature 1's bag 1), on the last rank.
    memcpy(inv, v.inv, sizeof(int32_t) * (size_t)(NF * v.B));
    if (last)
        for (int32_t b = 0; b < v.B; b++) inv[v.B + b] = 0;
    k = v.kjt;
    k.inverse_indices = inv;
    expect_all(ctx, ember_sebc_forward(s, &k, out), EMBER_ERR_INVALID_ARG, last, "feature 'f1' bag 1: no sample");
    // A good forward; then backwards that are not its batch, or whose gradient is not finite:
    // refused everywhere, the tables unchanged.
    float *before = malloc(sizeof(float) * 50 * 8), *after = malloc(sizeof(float) * 50 * 8);
    expect_ok(ctx, ember_sebc_read(s, 2, "weight", before, -1));
    expect_ok(ctx, ember_sebc_forward(s, &v.kjt, out));
    memcpy(inv, v.inv, sizeof(int32_t) * (size_t)(NF * v.B));
    if (R == 0) { // feature 1 has a bag per sample: two samples swap theirs
        inv[v.B] = v.inv[v.B + 1];
        inv[v.B + 1] = v.inv[v.B];
    }
    k = v.kjt;
    k.inverse_indices = inv;
    expect_all(ctx, ember_sebc_backward(s, &k, g), EMBER_ERR_INVALID_ARG, R == 0, "not the preceding forward's");
    expect_all(ctx, ember_sebc_backward(s, &v.kjt_bags, g), EMBER_ERR_INVALID_ARG, 1, "batch sizes or inverse");
    expect_all(ctx, ember_sebc_backward(s, &v.expanded.kjt, g), EMBER_ERR_INVALID_ARG, 1, "the other not");
    if (last) g[su.D + 1] = NAN;
    expect_all(ctx, ember_sebc_backward(s, &v.kjt, g), EMBER_ERR_NUMERIC, last, "grad_out[1][1]");
    expect_ok(ctx, ember_sebc_read(s, 2, "weight", after, -1));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof(float) * 50 * DIMS[2]) == 0);
    g[su.D + 1] = 0;
    expect_ok(ctx, ember_sebc_backward(s, &v.kjt, g));
    // The per-feature layout names the bag of a non-finite gradient.
    expect_ok(ctx, ember_sebc_forward(s, &v.kjt_bags, out));
    if (last) g[DIMS[FTAB[0]] * v.bsz[0] + 2] = INFINITY; // feature 1, bag 0, column 2
    expect_all(ctx, ember_sebc_backward(s, &v.kjt_bags, g), EMBER_ERR_NUMERIC, last, "feature 'f1' bag 0 column 2");
    free(before);
    free(after);
    ember_sebc_destroy(s);
    // A sequence collection refuses VBE (its outputs are per id); so does the unsharded one.
    for (int t = 0; t < NT; t++) {
        su.tables[t].pooling = EMBER_POOL_NONE, su.tables[t].dim = 4;
        su.plan[t] = (ember_table_plan){.scheme = EMBER_SHARD_ROW_WISE};
    }
    expect_ok(ctx, ember_sebc_create(comm, &su.cfg, su.plan, EMBER_GRAD_MEAN, &s));
    expect_all(ctx, ember_sebc_forward(s, &v.kjt, out), EMBER_ERR_UNSUPPORTED, 1, "sequence collection");
    ember_ebc *ebc = NULL;
    assert_int_equal(ember_ebc_create(ctx, &su.cfg, &ebc), EMBER_OK);
    assert_int_equal(ember_ebc_forward(ebc, &v.kjt, out), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_ebc_output_size(ebc, &v.kjt), v.kjt.nnz * 4);
    ember_ebc_destroy(ebc);
    ember_sebc_destroy(s);
    // The public validator: a VBE KJT's own checks, then the ordinary ones on its bags.
    const int64_t rows[NF] = {ROWS[0], ROWS[1], ROWS[2], ROWS[3], ROWS[4], ROWS[2]};
    assert_int_equal(ember_kjt_validate(ctx, &v.kjt, NF, rows, EMBER_BOUNDS_ERROR, NULL), EMBER_OK);
    assert_int_equal(ember_kjt_validate(ctx, &v.kjt_bags, NF, rows, EMBER_BOUNDS_ERROR, NULL), EMBER_OK);
    k = v.kjt;
    k.nnz += 1;
    assert_int_equal(ember_kjt_validate(ctx, &k, NF, rows, EMBER_BOUNDS_ERROR, NULL), EMBER_ERR_INVALID_ARG);
    const int64_t small[NF] = {1, 1, 1, 1, 1, 1};
    assert_int_equal(ember_kjt_validate(ctx, &v.kjt, NF, small, EMBER_BOUNDS_ERROR, NULL), EMBER_ERR_OUT_OF_RANGE);
    free(inv);
    free(out);
    free(g);
    gen_vbe_free(&v);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    const char *what = argc > 1 ? argv[1] : "train";
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--scheme") && i + 1 < argc) g_scheme = argv[++i];
        else if (!strcmp(argv[i], "--pipelined")) g_pipelined = 1;
        else if (!strcmp(argv[i], "--ckpt")) g_ckpt = 1;
    const struct CMUnitTest all[] = {cmocka_unit_test(train), cmocka_unit_test(local), cmocka_unit_test(errors)};
    const int pick = !strcmp(what, "local") ? 1 : !strcmp(what, "errors") ? 2 : 0;
    const struct CMUnitTest tests[] = {all[pick]};
    const int fails = cmocka_run_group_tests(tests, NULL, NULL);
    MPI_Finalize();
    return fails;
}
