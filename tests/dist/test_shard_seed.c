// Named regression scenarios of the sharded collection and the
// analytic communication counts. Usage: test_shard_seed CASE [--scheme dp|tw|cw|rw|twrw|grid]
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
#include "oracle.h"
#include "shard/internal.h"

static int W, R;
static const char *g_case = "", *g_scheme = "rw";

static int32_t g_ranks[16]; // the ranks of plan_for's plan (W <= 4)

static ember_table_plan plan_for(const char *scheme) { return test_plan_named(scheme, W, g_ranks); }

typedef struct env {
    ember_ctx *ctx;
    ember_comm *comm;
    ember_sebc *s;
    ember_table_config t;
    ember_feature_config f;
    ember_ebc_config cfg;
    ember_table_plan plan;
} env;

static void env_open(env *e, const char *scheme, ember_pooling pool, ember_init init, ember_optim_kind opt,
                     ember_grad_convention conv, int64_t rows, int32_t dim) {
    memset(e, 0, sizeof *e);
    assert_int_equal(ember_ctx_create(NULL, &e->ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(e->ctx, MPI_COMM_WORLD, &e->comm), EMBER_OK);
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = opt;
    o.lr = 1.0f;
    e->t = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
    e->t.name = "table", e->t.rows = rows, e->t.dim = dim, e->t.pooling = pool, e->t.init = init, e->t.optim = o;
    e->f = (ember_feature_config){.name = "keys", .table = 0};
    e->cfg = (ember_ebc_config){.tables = &e->t, .num_tables = 1, .features = &e->f, .num_features = 1,
                                .bounds = EMBER_BOUNDS_ERROR, .seed = 5};
    e->plan = plan_for(scheme);
    ember_status st = ember_sebc_create(e->comm, &e->cfg, &e->plan, conv, &e->s);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
}

static void env_close(env *e) {
    ember_sebc_destroy(e->s);
    ember_comm_destroy(e->comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(e->ctx) == 0);
    ember_ctx_destroy(e->ctx);
}

// §1.3: 8 x 4 table of zeros, SGD lr 1, SUM; the 4 keys 0-3 spread over the ranks, one bag
// per key; upstream gradient 0.5. GRAD_SUM hands 0.5 to the update (rows -> -0.5), GRAD_MEAN
// 0.5 / W; rows 4-7 stay 0. Exact equality: these values are exact in fp32.
static void rw_grad_not_scaled(void **state) {
    (void)state;
    for (int conv = 0; conv < 2; conv++) {
        env e;
        env_open(&e, g_scheme, EMBER_POOL_SUM, (ember_init){.kind = EMBER_INIT_ZEROS}, EMBER_OPT_SGD,
                 (ember_grad_convention)conv, 8, 4);
        const int per = 4 / W;
        int32_t len[4] = {1, 1, 1, 1};
        int64_t ids[4];
        for (int i = 0; i < per; i++) ids[i] = R * per + i;
        ember_kjt k = {.num_features = 1, .batch_size = per, .lengths = len, .values = ids, .nnz = per};
        float out[16], go[16];
        for (int i = 0; i < 16; i++) go[i] = 0.5f;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(e.s, &k, go) == EMBER_OK);
        float w[32];
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e.s, 0, "weight", w, -1) == EMBER_OK);
        const float want = conv == EMBER_GRAD_SUM ? -0.5f : -0.5f / (float)W;
        bool ok = true;
        for (int i = 0; i < 32; i++) ok = ok && w[i] == (i < 16 ? want : 0.0f);
        if (!ok) fprintf(stderr, "rank %d %s conv %d: w[0] = %g, want %g\n", R, g_scheme, conv, (double)w[0], (double)want);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
        env_close(&e);
    }
}

// A MEAN bag whose ids live on different ranks' row blocks equals the single-process mean;
// local-mean-then-sum would be off by the number of ranks touched.
static void rw_mean_global_length(void **state) {
    (void)state;
    env e;
    env_open(&e, g_scheme, EMBER_POOL_MEAN, (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1},
             EMBER_OPT_SGD, EMBER_GRAD_MEAN, 8, 4);
    ember_ebc *ref = NULL;
    assert_int_equal(ember_ebc_create(e.ctx, &e.cfg, &ref), EMBER_OK);
    // Rank 0's one bag reads rows 0, 3, 7 (three different blocks once W >= 3), others one row.
    int32_t len[1] = {R == 0 ? 3 : 1};
    int64_t ids0[3] = {0, 3, 7}, ids1[1] = {R % 8};
    ember_kjt k = {.num_features = 1, .batch_size = 1, .lengths = len, .values = R == 0 ? ids0 : ids1, .nnz = len[0]};
    float out[4], want[4];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
    assert_int_equal(ember_ebc_forward(ref, &k, want), EMBER_OK);
    bool ok = true;
    for (int d = 0; d < 4; d++) ok = ok && fabsf(out[d] - want[d]) <= 1e-6f;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    ember_ebc_destroy(ref);
    env_close(&e);
}

// bf16 of a finite float, round to nearest even, written here from the definition (no code shared
// with src/): the bits, and the value they stand for.
static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_round(float x) {
    uint32_t u = (uint32_t)bf16_bits(x) << 16;
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
}

// Rank r's local batch of the dtype scenario: bag 0 = {r % 8, 5}, bag 1 = {2, 2, (r + 3) % 8}
// (a duplicate), and dL_r/dy[b][d] = (1 + b + d + r) 2^-9. Writes 5 ids and 8 gradients.
static void dtype_batch(int r, int32_t len[2], int64_t ids[5], float go[8]) {
    len[0] = 2, len[1] = 3;
    ids[0] = r % 8, ids[1] = 5, ids[2] = 2, ids[3] = 2, ids[4] = (r + 3) % 8;
    for (int b = 0; b < 2; b++)
        for (int d = 0; d < 4; d++) go[b * 4 + d] = (float)(1 + b + d + r) * 0x1p-9f;
}

// The seed bug, and TorchRec's behaviour measured beside it: a data-parallel table converted to
// bf16 showed the converted values in its state dict while the next forward still read the old
// fp32 storage (and a step trained a detached copy). ember converts the one storage on every rank:
// the state dict, the next forward and the next update all see the bf16 values.
// 8 x 4 table, SUM, SGD lr 1, GRAD_SUM. Weight i (row r = i / 4) is v = +-(1 + (1 + i % 15)/16)
// + 3 * 2^-10: its bf16 rounding drops the 3 * 2^-10 (3/8 of an ulp in [1, 2)), so every pooled
// value from fp32 weights differs from the bf16 one by (ids in the bag) * 3 * 2^-10. Every
// quantity below is exact in fp32 and double (sums of a few multiples of 2^-10 below 8), so the
// comparisons are bitwise.
static void dp_dtype_conversion(void **state) {
    (void)state;
    env e;
    env_open(&e, "dp", EMBER_POOL_SUM, (ember_init){.kind = EMBER_INIT_ZEROS}, EMBER_OPT_SGD, EMBER_GRAD_SUM, 8, 4);
    float v[32], b16[32], got[32];
    for (int i = 0; i < 32; i++) {
        v[i] = ((i / 4) % 2 ? -1.0f : 1.0f) * (1.0f + (float)(1 + i % 15) / 16.0f) + 3 * 0x1p-10f;
        b16[i] = bf16_round(v[i]);
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_write(e.s, 0, "weight", v, -1) == EMBER_OK);
    // Oracles: o32 holds the fp32 weights, o16 the bf16-rounded ones.
    ember_ebc *ref = NULL;
    assert_int_equal(ember_ebc_create(e.ctx, &e.cfg, &ref), EMBER_OK);
    assert_int_equal(ember_ebc_write(ref, 0, "weight", 0, 8, EMBER_DTYPE_F32, v), EMBER_OK);
    oracle *o32 = oracle_create(&e.cfg, ref);
    assert_int_equal(ember_ebc_write(ref, 0, "weight", 0, 8, EMBER_DTYPE_F32, b16), EMBER_OK);
    oracle *o16 = oracle_create(&e.cfg, ref);
    ember_ebc_destroy(ref);
    int32_t len[2];
    int64_t ids[5];
    float go[8], out[8];
    double w32[8], w16[8];
    dtype_batch(R, len, ids, go);
    ember_kjt k = {.num_features = 1, .batch_size = 2, .lengths = len, .values = ids, .nnz = 5};
    oracle_forward(o32, &k, w32);
    oracle_forward(o16, &k, w16);
    bool ok = true;
    // First forward, fp32 storage: the fp32 oracle exactly.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
    for (int i = 0; i < 8; i++) ok = ok && out[i] == (float)w32[i];
    if (!ok) fprintf(stderr, "rank %d: fp32 forward %g, oracle %g\n", R, (double)out[0], w32[0]);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);

    // (a) The state dict shows the converted values (and the bf16 bits), on every rank.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_convert_dtype(e.s, 0, EMBER_DTYPE_BF16) == EMBER_OK);
    uint16_t bits[32], bits0[32];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e.s, 0, "weight", got, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read_as(e.s, 0, "weight", EMBER_DTYPE_BF16, bits, -1) == EMBER_OK);
    for (int i = 0; i < 32; i++) ok = ok && got[i] == b16[i] && got[i] != v[i] && bits[i] == bf16_bits(v[i]);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);

    // (b) The second forward reads the converted storage: the bf16 oracle exactly, and not the
    // fp32 one (what a forward through the old storage gives: off by 3 * 2^-10 per id).
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
    for (int i = 0; i < 8; i++) ok = ok && out[i] == (float)w16[i] && fabs((double)out[i] - w32[i]) >= 3 * 0x1p-10;
    if (!ok)
        fprintf(stderr, "rank %d: forward after bf16 conversion %.9g, bf16 oracle %.9g, fp32 oracle %.9g\n", R,
                (double)out[0], w16[0], w32[0]);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);

    // (c) A step updates the bf16 storage: the oracle's SGD step on the bf16 weights over the
    // global batch (every rank's bags, GRAD_SUM), rounded to bf16, bit for bit on every rank.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(e.s, &k, go) == EMBER_OK);
    int32_t glen[8];
    int64_t gids[20];
    float ggo[32];
    for (int r = 0; r < W; r++) dtype_batch(r, glen + 2 * r, gids + 5 * r, ggo + 8 * r);
    ember_kjt gk = {.num_features = 1, .batch_size = 2 * W, .lengths = glen, .values = gids, .nnz = 5 * W};
    oracle_backward(o16, &gk, ggo, NULL);
    oracle_backward(o32, &gk, ggo, NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read_as(e.s, 0, "weight", EMBER_DTYPE_BF16, bits, -1) == EMBER_OK);
    int moved = 0, detached = 0;
    for (int i = 0; i < 32; i++) {
        const float want = (float)o16->t[0].w[i]; // exact: bf16 value minus a multiple of 2^-9
        ok = ok && want == o16->t[0].w[i] && bits[i] == bf16_bits(want);
        moved += bits[i] != bf16_bits(b16[i]);
        // Training a detached fp32 copy and rounding it would give these bits instead.
        detached += bits[i] != bf16_bits((float)o32->t[0].w[i]);
        o16->t[0].w[i] = bf16_round(want); // the storage, for the forward below
    }
    if (!ok) fprintf(stderr, "rank %d: bf16 weights after the step differ from the oracle\n", R);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok && moved > 0 && detached > 0);
    memcpy(bits0, bits, sizeof bits0);
    MPI_Bcast(bits0, 32, MPI_UINT16_T, 0, MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(bits0, bits, sizeof bits) == 0);
    // And the forward after the step reads the updated bf16 storage.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
    oracle_forward(o16, &k, w16);
    for (int i = 0; i < 8; i++) ok = ok && out[i] == (float)w16[i];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
    oracle_destroy(o16);
    oracle_destroy(o32);
    env_close(&e);
}

// Rank r's local batch of the MEAN scenario over a 10-row table: five bags, one feature.
//   bag 0: empty (MEAN gives 0)
//   bag 1: {3, 3, 7 - r % 2}     a duplicate id
//   bag 2: {0, 4, 5, 9, 2}       every row block: at W = 3 (blocks of 4, 3, 3 rows) 2 + 2 + 1 ids,
//                                at W = 2 (5, 5) 3 + 2
//   bag 3: {(r + 6) % 10}
//   bag 4: {1, 8, 8, 1, 3r % 10} duplicates over two blocks
// Weighted, the per-id weights of each bag sum to something else than its id count (4, 3.5,
// 1.5, 3.75 against 3, 5, 1, 5), so dividing by the weight sum is told apart. Gradients
// dL_r/dy[b][d] = 0.1 (1 + (7r + 3b + d) % 5) - 0.25. Returns nnz (14).
static int64_t mean_batch(int r, int weighted, int32_t len[5], int64_t ids[14], float w[14], float go[20]) {
    static const int32_t L[5] = {0, 3, 5, 1, 5};
    static const float WT[14] = {0.5f, 2.0f, 1.5f,  1.0f, -0.5f, 0.25f, 2.0f, 0.75f,
                                 1.5f, -1.0f, 3.0f, 0.25f, 1.0f, 0.5f};
    const int64_t I[14] = {3, 3, 7 - r % 2, 0, 4, 5, 9, 2, (r + 6) % 10, 1, 8, 8, 1, (3 * r) % 10};
    memcpy(len, L, sizeof L);
    memcpy(ids, I, sizeof I);
    if (weighted) memcpy(w, WT, sizeof WT);
    for (int b = 0; b < 5; b++)
        for (int d = 0; d < 4; d++) go[b * 4 + d] = 0.1f * (float)(1 + (7 * r + 3 * b + d) % 5) - 0.25f;
    return 14;
}

// Largest |a - b| / (2e-5 + 1e-4 |b|) over n (docs/semantics.md §7): <= 1 within tolerance.
static double rel_err_ff(const float *a, const float *b, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]) / (2e-5 + 1e-4 * fabs((double)b[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

// MEAN divides a bag's weighted sum by its id count, for every scheme, weighted or not
// (docs/semantics.md §2). TorchRec, measured beside ember, divides a weighted bag by its weight
// sum under row-wise sharding and by its id count under table-wise: here every scheme gives the
// single-process result (and the oracle's, id-count divisor), forward and after one SGD step
// (lr 1, GRAD_SUM, so the global gradient is every rank's, concatenated), with duplicate ids, an
// empty bag, and bags split unevenly over row blocks.
static void mean_divisor_id_count(void **state) {
    (void)state;
    const char *schemes[5] = {"dp", "tw", "cw", "rw", "twrw"};
    for (int si = 0; si < 5; si++) {
        for (int weighted = 0; weighted < 2; weighted++) {
            env e;
            env_open(&e, schemes[si], EMBER_POOL_MEAN, (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1},
                     EMBER_OPT_SGD, EMBER_GRAD_SUM, 10, 4);
            ember_ebc *ref = NULL; // single process, same seed: the same initial weights
            assert_int_equal(ember_ebc_create(e.ctx, &e.cfg, &ref), EMBER_OK);
            oracle *o = oracle_create(&e.cfg, ref);
            float w0[40], wref[40];
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e.s, 0, "weight", w0, -1) == EMBER_OK);
            assert_int_equal(ember_ebc_read(ref, 0, "weight", 0, 10, EMBER_DTYPE_F32, wref), EMBER_OK);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(w0, wref, sizeof w0) == 0);

            int32_t len[5];
            int64_t ids[14];
            float wt[14], go[20], out[20], single[20];
            double want[20];
            const int64_t nnz = mean_batch(R, weighted, len, ids, wt, go);
            ember_kjt k = {.num_features = 1, .batch_size = 5, .lengths = len, .values = ids,
                           .weights = weighted ? wt : NULL, .nnz = nnz};
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
            assert_int_equal(ember_ebc_forward(ref, &k, single), EMBER_OK);
            oracle_forward(o, &k, want);
            const double e_or = rel_err_f(out, want, 20, 2e-5, 1e-4), e_sp = rel_err_ff(out, single, 20);
            bool ok = e_or <= 1 && e_sp <= 1;
            for (int d = 0; d < 4; d++) ok = ok && out[d] == 0.0f; // the empty bag
            // A weighted bag divided by its weight sum is not what came out.
            int64_t j = 0;
            for (int b = 0; b < 5; b++) {
                double wsum = 0, apart = 0;
                for (int q = 0; q < len[b]; q++) wsum += weighted ? wt[j + q] : 1.0;
                for (int d = 0; d < 4 && len[b] > 0; d++)
                    apart = fmax(apart, fabs(out[b * 4 + d] - want[b * 4 + d] * len[b] / wsum));
                if (weighted && len[b] > 0) ok = ok && apart > 1e-3;
                j += len[b];
            }
            if (!ok)
                fprintf(stderr, "rank %d %s weighted %d: forward error %g (oracle), %g (single process)\n", R,
                        schemes[si], weighted, e_or, e_sp);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);

            // One step: the global batch (every rank's bags in rank order) on the single process
            // and the oracle; the sharded weights on every rank against both.
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(e.s, &k, go) == EMBER_OK);
            int32_t glen[20];
            int64_t gids[56];
            float gwt[56], ggo[80], w1[40];
            for (int r = 0; r < W; r++)
                mean_batch(r, weighted, glen + 5 * r, gids + 14 * r, gwt + 14 * r, ggo + 20 * r);
            ember_kjt gk = {.num_features = 1, .batch_size = 5 * W, .lengths = glen, .values = gids,
                            .weights = weighted ? gwt : NULL, .nnz = 14 * W};
            assert_int_equal(ember_ebc_backward(ref, &gk, ggo, NULL), EMBER_OK);
            oracle_backward(o, &gk, ggo, NULL);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e.s, 0, "weight", w1, -1) == EMBER_OK);
            assert_int_equal(ember_ebc_read(ref, 0, "weight", 0, 10, EMBER_DTYPE_F32, wref), EMBER_OK);
            const double wsp = rel_err_ff(w1, wref, 40), wor = rel_err_f(w1, o->t[0].w, 40, 2e-5, 1e-4);
            ok = wsp <= 1 && wor <= 1 && memcmp(w1, w0, sizeof w1) != 0;
            // The forward after the step reads the updated rows.
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
            oracle_forward(o, &k, want);
            ok = ok && rel_err_f(out, want, 20, 2e-5, 1e-4) <= 1;
            if (!ok)
                fprintf(stderr, "rank %d %s weighted %d: weights after a step: error %g (oracle), %g (single "
                        "process)\n", R, schemes[si], weighted, wor, wsp);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
            oracle_destroy(o);
            ember_ebc_destroy(ref);
            env_close(&e);
        }
    }
}

// Rank 1 passes an out-of-range id: every rank returns the same error naming rank 1, nobody
// hangs, and the weights are unchanged everywhere.
static void bad_rank(void **state) {
    (void)state;
    const char *schemes[5] = {"dp", "tw", "cw", "rw", "twrw"};
    for (int si = 0; si < 5; si++) {
        env e;
        env_open(&e, schemes[si], EMBER_POOL_MEAN, (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1},
                 EMBER_OPT_ADAM, EMBER_GRAD_MEAN, 8, 4);
        float before[32], after[32];
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e.s, 0, "weight", before, -1) == EMBER_OK);
        int32_t len[2] = {1, 1};
        int64_t ids[2] = {1, R == 1 % W ? 8 : 2};
        ember_kjt k = {.num_features = 1, .batch_size = 2, .lengths = len, .values = ids, .nnz = 2};
        float out[8], go[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        ember_status st = ember_sebc_forward(e.s, &k, out);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_OUT_OF_RANGE);
        char want[32];
        snprintf(want, sizeof want, "(rank %d)", 1 % W);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(e.ctx), want) != NULL);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(e.ctx), "id 8") != NULL);
        // Backward without a successful forward is refused on every rank, too.
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(e.s, &k, go) == EMBER_ERR_STATE);
        // A NaN gradient on one rank after a good forward.
        ids[1] = 3;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
        if (R == W - 1) go[5] = NAN;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(e.s, &k, go) == EMBER_ERR_NUMERIC);
        // A NaN weight written from the last rank, an infinite state from every rank: refused on
        // every rank, naming the row, the column and the rank that holds the array.
        float w[32];
        memcpy(w, before, sizeof w);
        w[3 * 4 + 1] = NAN;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_write(e.s, 0, "weight", w, W - 1) == EMBER_ERR_NUMERIC);
        snprintf(want, sizeof want, "(rank %d)", W - 1);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(e.ctx), "tensor 'weight' row 3 column 1: nan") != NULL &&
                                            strstr(ember_ctx_errmsg(e.ctx), want) != NULL);
        for (int i = 0; i < 32; i++) w[i] = i == 30 ? INFINITY : 1.0f;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_write(e.s, 0, "momentum1", w, -1) == EMBER_ERR_NUMERIC);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(e.ctx), "tensor 'momentum1' row 7 column 2: inf") != NULL);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(e.s, 0, "weight", after, -1) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof before) == 0);
        // A piece write (a checkpoint load's) restores the bits it is given, NaN included.
        bool kept = true;
        for (int32_t i = 0; i < ember_sebc_num_pieces(e.s, 0); i++) {
            ember_piece pc;
            float row[4], back[4] = {0};
            kept = kept && ember_sebc_piece(e.s, 0, i, &pc) == EMBER_OK;
            const int32_t cols = pc.col_end - pc.col_begin;
            for (int c = 0; c < cols; c++) row[c] = c == 0 ? NAN : 2.0f;
            kept = kept && ember_sebc_piece_write(e.s, 0, i, "weight", pc.row_begin, pc.row_begin + 1, EMBER_DTYPE_F32, row) == EMBER_OK;
            kept = kept && ember_sebc_piece_read(e.s, 0, i, "weight", pc.row_begin, pc.row_begin + 1, EMBER_DTYPE_F32, back) == EMBER_OK;
            kept = kept && isnan(back[0]) && (cols < 2 || back[1] == 2.0f);
        }
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, kept);
        env_close(&e);
    }
}

// A grid plan ember_sebc_create must refuse on every rank, naming the table and the value;
// ember_shard_rank_bytes (local) refuses it the same way.
static void grid_refused(const ember_table_config *t, const ember_table_plan *p, ember_status want,
                         const char *what) {
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    ember_feature_config f = {.name = "keys", .table = 0};
    ember_ebc_config cfg = {.tables = t, .num_tables = 1, .features = &f, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 5};
    ember_sebc *s = NULL;
    ember_status st = ember_sebc_create(comm, &cfg, p, EMBER_GRAD_MEAN, &s);
    if (st != want || !strstr(ember_ctx_errmsg(ctx), "'grid_t'") || !strstr(ember_ctx_errmsg(ctx), what))
        fprintf(stderr, "rank %d: status %d: %s\n", R, (int)st, ember_ctx_errmsg(ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == want && s == NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "'grid_t'") != NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), what) != NULL);
    size_t wb = 0, sb = 0;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_shard_rank_bytes(ctx, t, p, W, 0, &wb, &sb) == want);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), what) != NULL);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

static void grid_bad_plan(void **state) {
    (void)state;
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "grid_t", t.rows = 8, t.dim = 4, t.pooling = EMBER_POOL_MEAN;
    t.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1}, t.optim = o;
    ember_table_plan p;
    int32_t ranks[16];
    memset(&p, 0, sizeof p);
    p.scheme = EMBER_SHARD_GRID;
    p.num_shards = 2;
    p.group_size = 2; // W >= 2
    p.ranks = ranks;
    // A ranks array that does not hold num_shards x group_size entries.
    p.num_ranks = 3;
    ranks[0] = 0, ranks[1] = 1, ranks[2] = 0;
    grid_refused(&t, &p, EMBER_ERR_INVALID_ARG, "3 ranks given, grid_shard reads 4");
    p.num_ranks = 4;
    p.ranks = NULL;
    grid_refused(&t, &p, EMBER_ERR_INVALID_ARG, "(ranks is NULL)");
    p.ranks = ranks;
    // Rank 1 twice in slice 1's group {1, 1}.
    p.ranks[0] = 0, p.ranks[1] = 1, p.ranks[2] = 1, p.ranks[3] = 1;
    grid_refused(&t, &p, EMBER_ERR_INVALID_ARG, "rank 1 twice in the group of grid slice 1");
    // More column slices than columns.
    p.num_shards = 5;
    p.num_ranks = 10;
    for (int i = 0; i < 10; i++) p.ranks[i] = i % 2;
    grid_refused(&t, &p, EMBER_ERR_INVALID_ARG, "grid num_shards 5 outside [1, dim 4]");
    // A group larger than the world, a rank outside it.
    p.num_shards = 2;
    p.group_size = W + 1;
    p.num_ranks = 2 * (W + 1);
    grid_refused(&t, &p, EMBER_ERR_INVALID_ARG, "grid group size");
    p.group_size = 2;
    p.num_ranks = 4;
    p.ranks[0] = 0, p.ranks[1] = W, p.ranks[2] = 0, p.ranks[3] = 1;
    grid_refused(&t, &p, EMBER_ERR_INVALID_ARG, "grid slice 0 row block 1 on rank");
    // Whole-row norms are not split by columns; sequences are not sliced.
    p.ranks[1] = 1;
    t.optim.kind = EMBER_OPT_LAMB;
    grid_refused(&t, &p, EMBER_ERR_UNSUPPORTED, "optimizer lamb");
    t.optim.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    t.pooling = EMBER_POOL_NONE;
    grid_refused(&t, &p, EMBER_ERR_UNSUPPORTED, "sequence");
}

// Bytes sent per rank per step against each scheme's analytic count (docs/sharding.md).
// Control messages: 2 (W-1) int64 in forward (batch sizes, id counts). One feature, B = 2 + r
// bags of 3 ids each, D = 4, unweighted.
static void bytes_match_analytic_count(void **state) {
    (void)state;
    const char *schemes[3] = {"tw", "rw", "dp"};
    for (int si = 0; si < 3; si++) {
        env e;
        env_open(&e, schemes[si], EMBER_POOL_SUM, (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1},
                 EMBER_OPT_SGD, EMBER_GRAD_MEAN, 12, 4);
        const int B = 2 + R, D = 4, L = 3;
        int32_t len[8];
        int64_t ids[24];
        for (int b = 0; b < B; b++) len[b] = L;
        for (int j = 0; j < B * L; j++) ids[j] = (j * 5 + R) % 12;
        ember_kjt k = {.num_features = 1, .batch_size = B, .lengths = len, .values = ids, .nnz = (int64_t)B * L};
        float out[32], go[32];
        for (int i = 0; i < B * D; i++) go[i] = 0.1f;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(e.s, &k, go) == EMBER_OK);
        uint64_t got = ember_sebc_bytes_sent_last_step(e.s);
        uint64_t want = 16u * (uint64_t)(W - 1);
        int64_t Ball = 0;
        for (int r = 0; r < W; r++) Ball += 2 + r;
        if (!strcmp(schemes[si], "tw")) {
            const int owner = W - 1;
            if (R != owner) want += 4u * B + 8u * B * L + 4u * B * D; // lengths, ids; gradients back
            else want += 4u * (uint64_t)(Ball - B) * D;             // pooled rows to every other rank
        } else if (!strcmp(schemes[si], "rw")) {
            // Lengths to every other owner, the ids in its block; each owner returns B_s x D
            // partial rows to every other rank s; gradients B x D to every other owner.
            uint64_t ids_out = 0;
            for (int j = 0; j < B * L; j++) {
                int64_t id = ids[j];
                int q = 0;
                for (int r = 0; r < W; r++) {
                    int64_t r0 = (int64_t)r * (12 / W) + (r < 12 % W ? r : 12 % W);
                    if (id >= r0) q = r;
                }
                if (q != R) ids_out++;
            }
            want += 4u * (uint64_t)B * (W - 1) + 8u * ids_out + 4u * (uint64_t)(Ball - B) * D +
                    4u * (uint64_t)B * D * (W - 1);
        } else {
            // DP: counts (2 int64 to every rank) and this rank's coalesced rows (keys and
            // D floats each) to every other rank.
            int seen[12] = {0}, n = 0;
            for (int j = 0; j < B * L; j++)
                if (!seen[ids[j]]++) n++;
            want += (uint64_t)(W - 1) * (16u + 8u * n + 4u * n * D);
        }
        if (got != want) fprintf(stderr, "rank %d %s: %llu bytes, analytic %llu\n", R, schemes[si],
                                 (unsigned long long)got, (unsigned long long)want);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, got == want);
        env_close(&e);
    }
}

// Bucketize computes each id's destination once: the ids it examines in a step are the local
// batch's nnz whatever the scheme and world size, and the legacy O(W * nnz) path (kept for
// measurement) gives the same outputs.
static void bucketize_examines_each_id_once(void **state) {
    (void)state;
    const char *schemes[6] = {"dp", "tw", "cw", "rw", "twrw", "grid"};
    for (int si = 0; si < 6; si++) {
        env e;
        env_open(&e, schemes[si], EMBER_POOL_SUM, (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1},
                 EMBER_OPT_SGD, EMBER_GRAD_MEAN, 11, 4);
        const int B = 3 + R;
        int32_t len[8];
        int64_t ids[64], nnz = 0;
        for (int b = 0; b < B; b++) {
            len[b] = (b + R) % 4 + 1;
            for (int j = 0; j < len[b]; j++, nnz++) ids[nnz] = (nnz * 7 + R * 3) % 11;
        }
        ember_kjt k = {.num_features = 1, .batch_size = B, .lengths = len, .values = ids, .nnz = nnz};
        float out[32], legacy[32];
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, out) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_ids_examined_last_step(e.s) == nnz);
        ember_sebc_set_reference_bucketize(e.s, 1);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(e.s, &k, legacy) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(out, legacy, sizeof(float) * (size_t)(B * 4)) == 0);
        env_close(&e);
    }
}

// 2D (ember_sebc_create_2d) at W = 2 or 4, groups of W / 2 ranks: what it refuses, on every
// rank alike (a group size that does not divide W, hashed and tiered tables, a reshard, a dtype
// conversion, a write from one root); a bad batch or gradient in the last group only fails every
// rank and changes no replica; a read onto a rank of the last group gives the table.
static void two_d_errors(void **state) {
    (void)state;
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    const int32_t G = W / 2;
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = EMBER_OPT_ADAM;
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "table", t.rows = 8, t.dim = 4, t.optim = o;
    t.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1};
    ember_feature_config f = {.name = "keys", .table = 0};
    ember_ebc_config cfg = {.tables = &t, .num_tables = 1, .features = &f, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 5};
    int32_t ranks[16];
    ember_table_plan plan = test_plan_named("rw", G, ranks);
    ember_sebc *s = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create_2d(comm, &cfg, &plan, EMBER_GRAD_MEAN, 3, &s) ==
                                        EMBER_ERR_INVALID_ARG && s == NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "group size 3 does not divide") != NULL);
    // Group sizes that differ between ranks: named.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create_2d(comm, &cfg, &plan, EMBER_GRAD_MEAN, R == W - 1 ? W : G, &s) ==
                                        EMBER_ERR_INVALID_ARG);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "sharding group size") != NULL);
    t.hash.enabled = 1, t.hash.bucket_rows = 4;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create_2d(comm, &cfg, &plan, EMBER_GRAD_MEAN, G, &s) ==
                                        EMBER_ERR_UNSUPPORTED && s == NULL);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), "a hashed table cannot be replicated") != NULL);
    t.hash.enabled = 0, t.hash.bucket_rows = 0, t.cache_rows = 4;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create_2d(comm, &cfg, &plan, EMBER_GRAD_MEAN, G, &s) ==
                                        EMBER_ERR_UNSUPPORTED && s == NULL);
    t.cache_rows = 0;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create_2d(comm, &cfg, &plan, EMBER_GRAD_MEAN, G, &s) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_group_size(s) == G && ember_sebc_num_groups(s) == 2);
    float before[32], after[32];
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", before, -1) == EMBER_OK);
    int32_t len[2] = {1, 1};
    int64_t ids[2] = {1, R == W - 1 ? 8 : 2};
    ember_kjt k = {.num_features = 1, .batch_size = 2, .lengths = len, .values = ids, .nnz = 2};
    float out[8], go[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_ERR_OUT_OF_RANGE);
    char want[32];
    snprintf(want, sizeof want, "(rank %d)", W - 1);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, strstr(ember_ctx_errmsg(ctx), want) && strstr(ember_ctx_errmsg(ctx), "id 8"));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k, go) == EMBER_ERR_STATE);
    ids[1] = 3;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(s, &k, out) == EMBER_OK);
    if (R == W - 1) go[5] = NAN;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k, go) == EMBER_ERR_NUMERIC);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", after, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof before) == 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_reshard(s, &plan, 0, NULL) == EMBER_ERR_UNSUPPORTED);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_convert_dtype(s, 0, EMBER_DTYPE_BF16) == EMBER_ERR_UNSUPPORTED);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_write(s, 0, "weight", before, 0) == EMBER_ERR_UNSUPPORTED);
    // The failed backward may be repeated: then a step, and the replicas stay equal.
    go[5] = 1;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_backward(s, &k, go) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", after, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof before) != 0);
    float all[32];
    memcpy(all, after, sizeof all);
    MPI_Bcast(all, 32, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(all, after, sizeof all) == 0);
    // Onto one rank of the last group; and a write from every rank reaches every replica.
    float one[32] = {0};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", R == W - 1 ? one : NULL, W - 1) == EMBER_OK);
    if (R == W - 1) MPI_ASSERT_TRUE(MPI_COMM_SELF, memcmp(one, after, sizeof one) == 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_write(s, 0, "weight", before, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", after, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(before, after, sizeof before) == 0);
    ember_sebc_destroy(s);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    if (argc > 1) g_case = argv[1];
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--scheme")) g_scheme = argv[i + 1];
    struct CMUnitTest all[] = {
        cmocka_unit_test(rw_grad_not_scaled), cmocka_unit_test(rw_mean_global_length),
        cmocka_unit_test(dp_dtype_conversion), cmocka_unit_test(mean_divisor_id_count),
        cmocka_unit_test(bad_rank),
        cmocka_unit_test(bytes_match_analytic_count),
        cmocka_unit_test(bucketize_examines_each_id_once), cmocka_unit_test(grid_bad_plan),
        cmocka_unit_test(two_d_errors),
    };
    const int nall = (int)(sizeof all / sizeof all[0]);
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    int n = 0;
    for (int i = 0; i < nall; i++)
        if (!g_case[0] || strstr(all[i].name, g_case)) chosen[n++] = all[i];
    int fails = _cmocka_run_group_tests("seed", chosen, (size_t)n, NULL, NULL);
    MPI_Finalize();
    return fails;
}
