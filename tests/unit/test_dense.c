// Dense products (include/ember/dense.h) against the naive oracle (tests/support/dense_oracle.c):
// bit for bit against the fmaf-chain oracle, and within the fp32 error bound of the double one,
// under every kernel variant this host runs and thread counts 1 to 4. Shapes: every (ta, tb)
// over a cartesian grid of small sizes, one dimension swept through every micro-tile, k-slice
// and block edge of every variant with the other two fixed, the DLRM and DCN layer products
// (forward, input gradient, weight gradient), batched products with strides (the dot
// interaction and its gradient), NaN/Inf propagation, column sums. Leading dimensions above the
// row width; the padding of C must come back untouched. Bad arguments are refused with a message
// naming them; a failed allocation is EMBER_ERR_NOMEM with C untouched; nothing leaks.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dense_oracle.h"
#include "ember.h"
#include "fail_alloc.h"
#include "gen.h"
#include "isa_env.h"

// The variants this host runs, one context each (threads set per run).
static ember_ctx *ctxs[EMBER_ISA_COUNT];
static int nctx;

static int setup(void **state) {
    (void)state;
    nctx = test_isa_contexts("unit.dense", ctxs);
    return nctx < 1 ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < nctx; i++) ember_ctx_destroy(ctxs[i]);
    return 0;
}

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

// The promise: equal bits, except that a NaN may be any NaN.
static int same(float a, float b) { return bits(a) == bits(b) || (isnan(a) && isnan(b)); }

static float *falloc(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(p);
    return p;
}

static void fill(test_rng *r, float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = (float)(2.0 * rng_uniform(r) - 1.0);
}

// One test case: `count` products of one shape, with the leading dimensions padded.
typedef struct gcase {
    int ta, tb;
    int64_t M, N, K;
    int pad;          // added to every leading dimension
    int bias, relu, accumulate;
    int64_t count;    // 0: ember_gemm (one product); >= 1: ember_gemm_batched
    int shared_b;     // batched: stride_b = 0
    int threads;      // highest thread count to run (1..4)
    const char *what;
} gcase;

// A case's operands and the oracle's answer. Specials: 0 none, 1 NaN/Inf sprinkled in A and B.
typedef struct operands {
    int64_t lda, ldb, ldc, sa, sb, sc, items;
    float *A, *B, *C0, *bias, *want;
} operands;

static void make_operands(const gcase *c, uint64_t seed, int specials, operands *o) {
    test_rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    o->items = c->count > 0 ? c->count : 1;
    const int64_t arows = c->ta ? c->K : c->M, awid = c->ta ? c->M : c->K;
    const int64_t brows = c->tb ? c->N : c->K, bwid = c->tb ? c->K : c->N;
    o->lda = awid + c->pad + (awid == 0);
    o->ldb = bwid + c->pad + (bwid == 0);
    o->ldc = c->N + c->pad + (c->N == 0);
    o->sa = arows * o->lda + c->pad;
    o->sb = c->shared_b ? 0 : brows * o->ldb + 2 * c->pad;
    o->sc = c->M * o->ldc + c->pad;
    const int64_t na = (o->items - 1) * o->sa + arows * o->lda;
    const int64_t nb = (o->items - 1) * o->sb + brows * o->ldb;
    const int64_t nc = (o->items - 1) * o->sc + c->M * o->ldc;
    o->A = falloc(na), o->B = falloc(nb), o->C0 = falloc(nc), o->want = falloc(nc);
    o->bias = c->bias ? falloc(c->N) : NULL;
    fill(&r, o->A, na);
    fill(&r, o->B, nb);
    fill(&r, o->C0, nc);
    if (o->bias) fill(&r, o->bias, c->N);
    if (specials) {
        const float sp[4] = {NAN, INFINITY, -INFINITY, 0.0f};
        for (int i = 0; i < 3 && na > 0; i++) o->A[rng_int(&r, na)] = sp[rng_int(&r, 4)];
        for (int i = 0; i < 3 && nb > 0; i++) o->B[rng_int(&r, nb)] = sp[rng_int(&r, 4)];
        if (c->accumulate && nc > 0) o->C0[rng_int(&r, nc)] = NAN;
        if (o->bias && c->N > 0) o->bias[rng_int(&r, c->N)] = INFINITY;
    }
    memcpy(o->want, o->C0, sizeof(float) * (size_t)(nc > 0 ? nc : 0));
    for (int64_t i = 0; i < o->items; i++)
        dense_oracle_gemm(c->ta, c->tb, c->M, c->N, c->K, o->A + i * o->sa, o->lda, o->B + i * o->sb, o->ldb,
                          o->want + i * o->sc, o->ldc, o->bias, c->relu, c->accumulate);
    o->sa = c->count > 0 ? o->sa : 0;
}

static void free_operands(operands *o) {
    free(o->A), free(o->B), free(o->C0), free(o->want), free(o->bias);
}

static void describe(const gcase *c, char *s, size_t cap) {
    snprintf(s, cap, "%s ta=%d tb=%d M=%lld N=%lld K=%lld pad=%d bias=%d relu=%d acc=%d count=%lld%s",
             c->what ? c->what : "", c->ta, c->tb, (long long)c->M, (long long)c->N, (long long)c->K, c->pad,
             c->bias, c->relu, c->accumulate, (long long)c->count, c->shared_b ? " shared B" : "");
}

// The double reference: every element within the fp32 chain's bound (finite inputs only).
static void check_bound(const gcase *c, const operands *o) {
    const int64_t n = c->M * c->N;
    if (n == 0) return;
    double *ref = malloc(sizeof(double) * (size_t)n), *bound = malloc(sizeof(double) * (size_t)n);
    assert_non_null(ref);
    assert_non_null(bound);
    for (int64_t i = 0; i < o->items; i++) {
        dense_oracle_gemm64(c->ta, c->tb, c->M, c->N, c->K, o->A + i * o->sa, o->lda, o->B + i * o->sb, o->ldb,
                            o->C0 + i * o->sc, o->ldc, o->bias, c->relu, c->accumulate, ref, bound);
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t j = 0; j < c->N; j++) {
                const double got = o->want[i * o->sc + m * o->ldc + j], e = fabs(got - ref[m * c->N + j]);
                if (!(e <= bound[m * c->N + j])) {
                    char d[200];
                    describe(c, d, sizeof d);
                    fail_msg("%s: item %lld (%lld, %lld): fp32 %.9g vs double %.17g: error %g above bound %g", d,
                             (long long)i, (long long)m, (long long)j, got, ref[m * c->N + j], e,
                             bound[m * c->N + j]);
                }
            }
    }
    free(ref);
    free(bound);
}

// Runs the case on every variant and thread count: C (padding included) must be the oracle's.
static void run_case(const gcase *c, uint64_t seed, int specials) {
    operands o;
    make_operands(c, seed, specials, &o);
    if (!specials) check_bound(c, &o);
    const int64_t nc = (o.items - 1) * o.sc + c->M * o.ldc;
    float *C = falloc(nc);
    const ember_gemm_epilogue ep = {.bias = o.bias, .relu = c->relu, .accumulate = c->accumulate};
    for (int v = 0; v < nctx; v++)
        for (int nt = 1; nt <= c->threads; nt++) {
            // Every thread count on the best variant; one more than 1 on the others (the split
            // is the front end's, the same for every variant).
            if (nt > 1 && v < nctx - 1 && nt != 2 + (int)(seed % (uint64_t)(c->threads - 1))) continue;
            ember_ctx *ctx = ctxs[v];
            assert_int_equal(ember_ctx_set_num_threads(ctx, nt), EMBER_OK);
            memcpy(C, o.C0, sizeof(float) * (size_t)(nc > 0 ? nc : 0));
            ember_status st;
            if (c->count == 0) {
                // Every epilogue: through the pointer, and NULL for the default one.
                const int none = !c->bias && !c->relu && !c->accumulate;
                st = ember_gemm(ctx, (ember_transpose)c->ta, (ember_transpose)c->tb, c->M, c->N, c->K, o.A, o.lda,
                                o.B, o.ldb, C, o.ldc, none && (seed & 1) ? NULL : &ep);
            } else {
                st = ember_gemm_batched(ctx, (ember_transpose)c->ta, (ember_transpose)c->tb, c->M, c->N, c->K, o.A,
                                        o.lda, o.sa, o.B, o.ldb, o.sb, C, o.ldc, o.sc, c->count, &ep);
            }
            if (st != EMBER_OK) {
                char d[200];
                describe(c, d, sizeof d);
                fail_msg("%s: %s threads %d: status %s: %s", d, ember_isa_name(ember_ctx_isa(ctx)), nt,
                         ember_status_name(st), ember_ctx_errmsg(ctx));
            }
            for (int64_t i = 0; i < nc; i++) {
                if (same(C[i], o.want[i])) continue;
                char d[200];
                describe(c, d, sizeof d);
                const int64_t item = o.sc ? i / o.sc : 0, w = i - item * o.sc;
                fail_msg("%s: %s threads %d: item %lld row %lld col %lld: got %.9g (0x%08x), oracle %.9g (0x%08x)", d,
                         ember_isa_name(ember_ctx_isa(ctx)), nt, (long long)item, (long long)(w / o.ldc),
                         (long long)(w % o.ldc), C[i], bits(C[i]), o.want[i], bits(o.want[i]));
            }
            assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
        }
    free(C);
    free_operands(&o);
}

static const int64_t SMALL[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 64};
#define NSMALL ((int)(sizeof SMALL / sizeof SMALL[0]))

// Every (ta, tb) x M x N x K of the small sizes; the epilogue and padding cycle with the case.
static void small_grid_every_transpose(void **state) {
    (void)state;
    uint64_t id = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int i = 0; i < NSMALL; i++)
                for (int j = 0; j < NSMALL; j++)
                    for (int k = 0; k < NSMALL; k++, id++) {
                        const gcase c = {.ta = ta, .tb = tb, .M = SMALL[i], .N = SMALL[j], .K = SMALL[k],
                                         .pad = (int)(id % 3), .bias = (int)(id >> 1 & 1), .relu = (int)(id >> 2 & 1),
                                         .accumulate = (int)(id & 1), .threads = 1, .what = "grid"};
                        run_case(&c, id, 0);
                    }
}

// The edges of every variant's tiles (rows 4/6/8, up to 12 shared evenly for 16 columns or
// fewer; columns 8/16/24/32/48/64), k slices (96 to 512) and blocks (rows 64/96/117/120, columns
// 256/384/480/512), each swept in one dimension with the other two fixed (and rows again under
// at most 16 columns), on 1 to 4 threads.
static const int64_t EDGES[] = {4,   5,   6,   7,   8,   9,   12,  13,  14,  23,  24,  25,  32,  47,  48,
                                49,  63,  65,  95,  96,  97,  119, 120, 121, 127, 128, 129, 170, 171, 191,
                                192, 193, 239, 240, 241, 255, 256, 257, 367, 383, 384, 385, 479, 480, 481,
                                511, 512, 513, 1025};
#define NEDGES ((int)(sizeof EDGES / sizeof EDGES[0]))

static void edges_of_tiles_slices_and_blocks(void **state) {
    (void)state;
    uint64_t id = 1000000;
    for (int dim = 0; dim < 4; dim++)
        for (int e = 0; e < NEDGES; e++)
            for (int t = 0; t < 4; t++, id++) {
                gcase c = {.ta = t >> 1, .tb = t & 1, .M = 29, .N = 37, .K = 23, .pad = (int)(id % 2) * 3,
                           .bias = (int)(id % 3 == 0), .relu = (int)(id % 2), .accumulate = (int)(id % 5 < 2),
                           .threads = 4, .what = "edge"};
                if (dim == 0) c.M = EDGES[e];
                if (dim == 1) c.N = EDGES[e];
                if (dim == 2) c.K = EDGES[e];
                if (dim == 3) c.M = EDGES[e], c.N = 2 + e % 15;
                // Several blocks of rows with K sliced or columns cut at their edges, in some cases.
                if (e % 7 == 3 && dim != 0) c.M += 250;
                run_case(&c, id, 0);
            }
}

// N = 1 (the matrix-vector path: rows in vector lanes, transposed 16 x 16 for an untransposed
// A) swept in M and K; and few rows of C with B read in place (no packing), swept in N and K.
static void gemv_and_few_rows(void **state) {
    (void)state;
    uint64_t id = 1500000;
    for (int e = 0; e < NEDGES; e++)
        for (int t = 0; t < 4; t++, id += 2) {
            const gcase m = {.ta = t >> 1, .tb = t & 1, .M = EDGES[e], .N = 1, .K = 1 + EDGES[(e * 7) % NEDGES] % 70,
                             .pad = (int)(id % 3), .bias = (int)(id % 3 == 1), .relu = (int)(id % 2),
                             .accumulate = (int)(id % 5 < 2), .threads = 3, .what = "gemv M"};
            const gcase k = {.ta = t >> 1, .tb = t & 1, .M = 1 + EDGES[(e * 5) % NEDGES] % 90, .N = 1, .K = EDGES[e],
                             .pad = (int)(id % 2), .bias = (int)(id % 3 == 0), .relu = (int)(id % 4 == 1),
                             .accumulate = (int)(id % 3 == 2), .threads = 2, .what = "gemv K"};
            run_case(&m, id, 0);
            run_case(&k, id + 1, 0);
        }
    static const int64_t few[] = {1, 2, 5, 6, 7, 8, 12, 24, 25, 32, 33};
    for (size_t i = 0; i < sizeof few / sizeof few[0]; i++)
        for (int e = 0; e < NEDGES; e += 2, id++) {
            const gcase c = {.ta = (int)(id & 1), .tb = 0, .M = few[i], .N = EDGES[e], .K = 1 + (int64_t)(id * 37 % 600),
                             .pad = (int)(id % 3), .bias = (int)(id % 2), .relu = (int)(id % 3 == 0),
                             .accumulate = (int)(id % 4 == 1), .threads = 2, .what = "few rows"};
            run_case(&c, id, 0);
        }
}

// K = 1 (the rank-1 path: rows of C in runs of 512, columns in chunks of 512, a transposed B
// gathered first) swept in M and N with every epilogue; then the one-step chain's signed zeros:
// fma(a, b, +0) is +0 for an exact -0 product but -0 for a negative product that underflows.
static void rank1_products(void **state) {
    (void)state;
    static const int64_t Ms[] = {1, 2, 5, 17, 511, 512, 513, 1100};
    static const int64_t Ns[] = {2, 7, 8, 15, 16, 17, 33, 64, 511, 512, 513, 1030};
    uint64_t id = 1800000;
    for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof Ns[0]; j++, id++) {
            const gcase c = {.ta = (int)(id & 1), .tb = (int)(id >> 1 & 1), .M = Ms[i], .N = Ns[j], .K = 1,
                             .pad = (int)(id % 3), .bias = (int)(id % 3 == 1), .relu = (int)(id % 4 >= 2),
                             .accumulate = (int)(id % 5 < 2), .threads = 3, .what = "rank1"};
            run_case(&c, id, 0);
        }
    const float A[3] = {-0.0f, -1e-30f, 2.0f}, B[17] = {1.0f, 1e-30f, -0.0f, 3.0f, -1e-30f, 0.0f, 1.0f, 1.0f,
                                                        1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, -0.0f};
    for (int v = 0; v < nctx; v++) {
        float C[3 * 17], want[3 * 17];
        assert_int_equal(ember_gemm(ctxs[v], EMBER_NO_TRANS, EMBER_NO_TRANS, 3, 17, 1, A, 1, B, 17, C, 17, NULL),
                         EMBER_OK);
        dense_oracle_gemm(0, 0, 3, 17, 1, A, 1, B, 17, want, 17, NULL, 0, 0);
        for (int k = 0; k < 3 * 17; k++)
            if (bits(C[k]) != bits(want[k]))
                fail_msg("rank1 signed zeros %s: element %d: 0x%08x, the chain gives 0x%08x",
                         ember_isa_name(ember_ctx_isa(ctxs[v])), k, bits(C[k]), bits(want[k]));
        assert_int_equal(bits(C[0]), 0u);          // -0 x 1: +0
        assert_int_equal(bits(C[17 + 1]), bits(-0.0f)); // -1e-30 x 1e-30 underflows: -0
    }
}

// M = 1 with B untransposed (the vector-matrix path: groups of up to 8 vectors of columns, the
// last under a mask, threads over runs of 256 columns) swept in N and K; the batched form too.
static void vecmat_products(void **state) {
    (void)state;
    static const int64_t Ns[] = {2, 15, 16, 17, 33, 112, 127, 128, 129, 255, 256, 257, 300, 513, 1030};
    static const int64_t Ks[] = {2, 3, 31, 700, 2048};
    uint64_t id = 1900000;
    for (size_t j = 0; j < sizeof Ns / sizeof Ns[0]; j++)
        for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++, id++) {
            const gcase c = {.ta = (int)(id & 1), .tb = 0, .M = 1, .N = Ns[j], .K = Ks[k], .pad = (int)(id % 3),
                             .bias = (int)(id % 3 == 1), .relu = (int)(id % 4 >= 2), .accumulate = (int)(id % 5 < 2),
                             .count = (int64_t)(id % 4 == 3) * 3, .threads = 3, .what = "vecmat"};
            run_case(&c, id, 0);
        }
}

// The DLRM default (bottom 13-64-16, top 367-64-32-1) and DCN-v2 layers (bottom 13-512-256-128,
// top 1024-1024-512-256-1, the cross layer's 3456 x 512 low rank) at a small batch: forward
// y = x W^T, input gradient dx = g W, weight gradient dW = g^T x.
static void dlrm_and_dcn_layers(void **state) {
    (void)state;
    static const int64_t dlrm[][2] = {{13, 64}, {64, 16}, {367, 64}, {64, 32}, {32, 1}};
    static const int64_t dcn[][2] = {{13, 512}, {512, 256}, {256, 128}, {1024, 1024}, {1024, 512},
                                     {512, 256}, {256, 1},  {3456, 512}, {512, 3456}};
    uint64_t id = 2000000;
    for (int set = 0; set < 2; set++) {
        const int64_t(*L)[2] = set ? dcn : dlrm;
        const int n = set ? (int)(sizeof dcn / sizeof dcn[0]) : (int)(sizeof dlrm / sizeof dlrm[0]);
        const int64_t B = set ? 12 : 200;
        for (int l = 0; l < n; l++, id += 3) {
            const int64_t in = L[l][0], out = L[l][1];
            const gcase fwd = {.ta = 0, .tb = 1, .M = B, .N = out, .K = in, .bias = 1, .relu = out > 1,
                               .threads = 4, .what = "layer fwd"};
            const gcase dx = {.ta = 0, .tb = 0, .M = B, .N = in, .K = out, .threads = 4, .what = "layer dx"};
            const gcase dw = {.ta = 1, .tb = 0, .M = out, .N = in, .K = B, .accumulate = (int)(l & 1),
                              .threads = 4, .what = "layer dW"};
            run_case(&fwd, id, 0);
            run_case(&dx, id + 1, 0);
            run_case(&dw, id + 2, 0);
        }
    }
}

// The dot interaction per sample: Z = T T^T (T [27][16]) and its gradient dT = dZ T + dZ^T T,
// as strided batches; a shared B (stride 0); a batch of a few large products (threads split
// each product's blocks) and of many small ones (threads split the products). Calls under 2^20
// multiply-adds run on one thread, so the threaded cases are larger than that.
static void batched_interaction_and_strides(void **state) {
    (void)state;
    const gcase cases[] = {
        {.ta = 0, .tb = 1, .M = 27, .N = 27, .K = 16, .count = 128, .threads = 4, .what = "Z = T T^T"},
        {.ta = 0, .tb = 0, .M = 27, .N = 16, .K = 27, .count = 128, .threads = 4, .what = "dT = dZ T"},
        {.ta = 1, .tb = 0, .M = 27, .N = 16, .K = 27, .count = 128, .accumulate = 1, .threads = 4, .what = "dT += dZ^T T"},
        {.ta = 0, .tb = 1, .M = 27, .N = 27, .K = 16, .count = 1, .pad = 2, .threads = 2, .what = "one"},
        {.ta = 1, .tb = 1, .M = 5, .N = 9, .K = 3, .count = 7, .pad = 1, .bias = 1, .relu = 1, .threads = 3},
        {.ta = 0, .tb = 0, .M = 300, .N = 70, .K = 130, .count = 2, .pad = 1, .bias = 1, .threads = 4,
         .what = "few large"},
        {.ta = 0, .tb = 0, .M = 40, .N = 33, .K = 20, .count = 64, .shared_b = 1, .threads = 4, .what = "shared B"},
        {.ta = 1, .tb = 1, .M = 0, .N = 4, .K = 4, .count = 3, .threads = 1},
        {.ta = 0, .tb = 1, .M = 6, .N = 5, .K = 0, .count = 3, .bias = 1, .threads = 1, .what = "K = 0"},
        {.ta = 0, .tb = 1, .M = 6, .N = 5, .K = 4, .count = 0, .threads = 1, .what = "count = 0 as gemm"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], 3000000 + i, 0);
}

// The dot interaction (ember_dot_interaction_*) bit for bit against its definition composed from
// the oracle's products: Z_b = T_b T_b^T, out = [dense, upper triangle of Z_b]; dT_b = S_b T_b
// (S_b the symmetric triangle of dout, zero diagonal), ddense = dout's dense slice + row 0 of
// it. Every variant and 1 to 3 threads; an empty batch, one feature of dim 1, the default model.
static void dot_interaction_case(int64_t B, int32_t F, int32_t D, uint64_t seed) {
    const int64_t R = F + 1, W = ember_dot_interaction_width(F, D);
    assert_int_equal(W, D + R * F / 2);
    test_rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    float *dense = falloc(B * D), *emb = falloc(B * F * D), *dout = falloc(B * W);
    fill(&r, dense, B * D);
    fill(&r, emb, B * F * D);
    fill(&r, dout, B * W);
    // The definition, through the oracle.
    float *t = falloc(B * R * D), *z = falloc(B * R * R), *want = falloc(B * W);
    float *want_dd = falloc(B * D), *want_de = falloc(B * F * D);
    for (int64_t b = 0; b < B; b++) {
        float *tb = t + b * R * D, *zb = z + b * R * R;
        memcpy(tb, dense + b * D, sizeof(float) * (size_t)D);
        memcpy(tb + D, emb + b * F * D, sizeof(float) * (size_t)(F * D));
        dense_oracle_gemm(0, 1, R, R, D, tb, D, tb, D, zb, R, NULL, 0, 0);
        int64_t k = D;
        memcpy(want + b * W, dense + b * D, sizeof(float) * (size_t)D);
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = i + 1; j < R; j++) want[b * W + k++] = zb[i * R + j];
        k = D;
        for (int64_t i = 0; i < R; i++) {
            zb[i * R + i] = 0.0f;
            for (int64_t j = i + 1; j < R; j++, k++) zb[i * R + j] = zb[j * R + i] = dout[b * W + k];
        }
        dense_oracle_gemm(0, 0, F, D, R, zb + R, R, tb, D, want_de + b * F * D, D, NULL, 0, 0);
        memcpy(want_dd + b * D, dout + b * W, sizeof(float) * (size_t)D);
        dense_oracle_gemm(0, 0, 1, D, R, zb, R, tb, D, want_dd + b * D, D, NULL, 0, 1);
    }
    float *out = falloc(B * W), *dd = falloc(B * D), *de = falloc(B * F * D);
    float *tt = falloc(B * R * D);
    for (int v = 0; v < nctx; v++) {
        for (int threads = 1; threads <= 3; threads++) {
            assert_int_equal(ember_ctx_set_num_threads(ctxs[v], threads), EMBER_OK);
            assert_int_equal(ember_dot_interaction_forward(ctxs[v], B, F, D, dense, emb, out, tt), EMBER_OK);
            assert_int_equal(ember_dot_interaction_backward(ctxs[v], B, F, D, tt, dout, dd, de), EMBER_OK);
            for (int64_t i = 0; i < B * W; i++)
                if (!same(out[i], want[i]))
                    fail_msg("%s B %lld F %d D %d threads %d: out[%lld] %a, want %a", ember_isa_name(ember_ctx_isa(ctxs[v])),
                             (long long)B, (int)F, (int)D, threads, (long long)i, (double)out[i], (double)want[i]);
            for (int64_t i = 0; i < B * D; i++) assert_true(same(dd[i], want_dd[i]));
            for (int64_t i = 0; i < B * F * D; i++) assert_true(same(de[i], want_de[i]));
            assert_int_equal(ember_ctx_bytes_outstanding(ctxs[v]), 0);
        }
    }
    free(dense), free(emb), free(dout), free(t), free(z), free(want), free(want_dd), free(want_de);
    free(out), free(dd), free(de), free(tt);
}

static void dot_interaction_matches_its_definition(void **state) {
    (void)state;
    dot_interaction_case(5, 3, 4, 41);
    dot_interaction_case(0, 3, 4, 42);
    dot_interaction_case(3, 1, 1, 43);
    dot_interaction_case(300, 26, 16, 44);
    // The vector kernels' edges: column tails (D not a multiple of 8 or 16, D over 16), rows in
    // groups of 8 with a remainder, the pairs of a row spanning two or three blocks of j.
    dot_interaction_case(7, 40, 20, 45);
    dot_interaction_case(4, 16, 9, 46);
    dot_interaction_case(2, 8, 33, 47);
    dot_interaction_case(3, 15, 1, 48);
    // More rows than the vector backward gathers at once (its other path).
    dot_interaction_case(2, 520, 17, 49);
    assert_int_equal(ember_dot_interaction_width(-1, 4), -1);
}

// NaN and Inf in A, B, C and the bias reach the outputs of their rows and columns as the
// oracle's chains carry them (NaN for NaN, whatever its payload); relu keeps NaN.
static void nan_and_inf_propagate(void **state) {
    (void)state;
    uint64_t id = 4000000;
    for (int t = 0; t < 4; t++)
        for (int e = 0; e < 8; e++, id++) {
            const gcase c = {.ta = t >> 1, .tb = t & 1, .M = 19 + 13 * e, .N = 21 + 11 * e, .K = 5 + 37 * e,
                             .bias = e & 1, .relu = e >> 1 & 1, .accumulate = e >> 2 & 1, .threads = 2,
                             .what = "specials"};
            run_case(&c, id, 1);
        }
    // The relu of NaN is NaN, of -0 and of negatives +0.
    const float A[4] = {NAN, 1.0f, -2.0f, 0.0f}, B[1] = {1.0f};
    float C[4] = {5, 5, 5, 5};
    const float bias[1] = {-0.0f};
    const ember_gemm_epilogue ep = {.bias = bias, .relu = 1};
    for (int v = 0; v < nctx; v++) {
        assert_int_equal(ember_gemm(ctxs[v], EMBER_NO_TRANS, EMBER_NO_TRANS, 4, 1, 1, A, 1, B, 1, C, 1, &ep), EMBER_OK);
        assert_true(isnan(C[0]));
        assert_int_equal(bits(C[1]), bits(1.0f));
        assert_int_equal(bits(C[2]), 0u);
        assert_int_equal(bits(C[3]), 0u);
    }
}

// The column sums: bitwise the oracle's row-order adds, every variant, 1 to 3 threads.
static void colsum_rows_in_order(void **state) {
    (void)state;
    static const int64_t Ms[] = {0, 1, 2, 3, 17, 1000};
    static const int64_t Ns[] = {0, 1, 15, 16, 17, 63, 64, 65, 257, 600};
    uint64_t id = 5000000;
    for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof Ns[0]; j++)
            for (int acc = 0; acc < 2; acc++, id++) {
                const int64_t M = Ms[i], N = Ns[j], lda = N + (int64_t)(id % 3) + (N == 0);
                test_rng r = {id};
                float *A = falloc(M * lda), *out0 = falloc(N), *want = falloc(N), *out = falloc(N);
                fill(&r, A, M * lda);
                fill(&r, out0, N);
                if (M > 2 && N > 1) A[lda + 1] = NAN, A[2 * lda] = -0.0f;
                memcpy(want, out0, sizeof(float) * (size_t)N);
                dense_oracle_colsum(M, N, A, lda, want, acc);
                for (int v = 0; v < nctx; v++)
                    for (int nt = 1; nt <= 3; nt++) {
                        assert_int_equal(ember_ctx_set_num_threads(ctxs[v], nt), EMBER_OK);
                        memcpy(out, out0, sizeof(float) * (size_t)N);
                        assert_int_equal(ember_colsum(ctxs[v], M, N, A, lda, out, acc), EMBER_OK);
                        for (int64_t n = 0; n < N; n++)
                            if (!same(out[n], want[n]))
                                fail_msg("colsum M=%lld N=%lld acc=%d %s threads %d: column %lld: %.9g vs %.9g",
                                         (long long)M, (long long)N, acc, ember_isa_name(ember_ctx_isa(ctxs[v])), nt,
                                         (long long)n, out[n], want[n]);
                        assert_int_equal(ember_ctx_bytes_outstanding(ctxs[v]), 0);
                    }
                free(A), free(out0), free(want), free(out);
            }
}

// Called from the threads of a caller's parallel region (a context each): the same bits.
static void inside_a_parallel_region(void **state) {
    (void)state;
    const int64_t M = 150, N = 70, K = 300;
    test_rng r = {42};
    float *A = falloc(M * K), *B = falloc(K * N), *want = falloc(M * N);
    fill(&r, A, M * K);
    fill(&r, B, K * N);
    dense_oracle_gemm(0, 0, M, N, K, A, K, B, N, want, N, NULL, 0, 0);
    int bad = 0;
#pragma omp parallel num_threads(2) reduction(+ : bad)
    {
        ember_ctx *ctx = NULL;
        ember_ctx_config cfg = EMBER_CTX_CONFIG_DEFAULT;
        cfg.num_threads = 2;
        float *C = malloc(sizeof(float) * (size_t)(M * N));
        if (ember_ctx_create(&cfg, &ctx) != EMBER_OK || !C) {
            bad++;
        } else {
            if (ember_gemm(ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, M, N, K, A, K, B, N, C, N, NULL) != EMBER_OK) bad++;
            for (int64_t i = 0; i < M * N; i++) bad += !same(C[i], want[i]);
            bad += ember_ctx_bytes_outstanding(ctx) != 0;
        }
        ember_ctx_destroy(ctx);
        free(C);
    }
    assert_int_equal(bad, 0);
    free(A), free(B), free(want);
}

// ---- refusals ---------------------------------------------------------------------------------

static float g_A[64], g_B[64], g_C[64], g_out[8];

static void expect_refusal(ember_ctx *ctx, ember_status st, const char *needle1, const char *needle2) {
    assert_int_equal(st, EMBER_ERR_INVALID_ARG);
    const char *msg = ember_ctx_errmsg(ctx);
    if (!strstr(msg, needle1) || (needle2 && !strstr(msg, needle2)))
        fail_msg("message '%s' lacks '%s'%s%s", msg, needle1, needle2 ? " or " : "", needle2 ? needle2 : "");
    for (int i = 0; i < 64; i++) assert_int_equal(bits(g_C[i]), bits(7.0f)); // C untouched
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_clear_error(ctx);
}

static void bad_arguments_named(void **state) {
    (void)state;
    ember_ctx *ctx = ctxs[nctx - 1];
    for (int i = 0; i < 64; i++) g_A[i] = g_B[i] = 1.0f, g_C[i] = 7.0f;
    const ember_transpose N_ = EMBER_NO_TRANS, T_ = EMBER_TRANS;
    assert_int_equal(ember_gemm(NULL, N_, N_, 1, 1, 1, g_A, 1, g_B, 1, g_C, 1, NULL), EMBER_ERR_INVALID_ARG);
    expect_refusal(ctx, ember_gemm(ctx, (ember_transpose)2, N_, 2, 2, 2, g_A, 2, g_B, 2, g_C, 2, NULL), "ta is 2", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, (ember_transpose)-1, 2, 2, 2, g_A, 2, g_B, 2, g_C, 2, NULL), "tb is -1", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, -1, 2, 2, g_A, 2, g_B, 2, g_C, 2, NULL), "M is -1", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, -2, 2, g_A, 2, g_B, 2, g_C, 2, NULL), "N is -2", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 2, -3, g_A, 2, g_B, 2, g_C, 2, NULL), "K is -3", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 4, 2, 5, g_A, 3, g_B, 2, g_C, 2, NULL), "lda is 3", "K");
    expect_refusal(ctx, ember_gemm(ctx, T_, N_, 4, 2, 5, g_A, 3, g_B, 2, g_C, 2, NULL), "lda is 3", "M");
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 6, 2, g_A, 2, g_B, 5, g_C, 6, NULL), "ldb is 5", "N");
    expect_refusal(ctx, ember_gemm(ctx, N_, T_, 2, 3, 6, g_A, 6, g_B, 4, g_C, 3, NULL), "ldb is 4", "K");
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 3, 2, g_A, 2, g_B, 3, g_C, 2, NULL), "ldc is 2", "N");
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 0, 2, g_A, 2, g_B, 1, g_C, 0, NULL), "ldc is 0", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 2, 2, NULL, 2, g_B, 2, g_C, 2, NULL), "A is NULL", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 2, 2, g_A, 2, NULL, 2, g_C, 2, NULL), "B is NULL", NULL);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 2, 2, g_A, 2, g_B, 2, NULL, 2, NULL), "C is NULL", NULL);
    const float *odd = (const float *)((const char *)g_B + 2);
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 2, 2, g_A, 2, odd, 2, g_C, 2, NULL), "B (", "not aligned");
    const ember_gemm_epilogue ep = {.bias = odd};
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, 2, 2, 2, g_A, 2, g_B, 2, g_C, 2, &ep), "ep->bias", "not aligned");
    expect_refusal(ctx, ember_gemm(ctx, N_, N_, INT64_MAX / 2, 1, 1, g_A, 4, g_B, 1, g_C, 1, NULL), "A spans", NULL);
    // Empty operands may be NULL.
    assert_int_equal(ember_gemm(ctx, N_, N_, 0, 2, 0, NULL, 1, NULL, 2, NULL, 2, NULL), EMBER_OK);
    assert_int_equal(ember_gemm(ctx, N_, N_, 2, 0, 2, g_A, 2, NULL, 1, NULL, 1, NULL), EMBER_OK);
    // Batched.
    expect_refusal(ctx, ember_gemm_batched(ctx, N_, N_, 2, 2, 2, g_A, 2, 4, g_B, 2, 4, g_C, 2, 4, -1, NULL),
                   "count is -1", NULL);
    expect_refusal(ctx, ember_gemm_batched(ctx, N_, N_, 2, 2, 2, g_A, 2, -4, g_B, 2, 4, g_C, 2, 4, 2, NULL),
                   "stride_a is -4", NULL);
    expect_refusal(ctx, ember_gemm_batched(ctx, N_, N_, 2, 2, 2, g_A, 2, 4, g_B, 2, 4, g_C, 2, 3, 2, NULL),
                   "stride_c 3", "overlap");
    expect_refusal(ctx, ember_gemm_batched(ctx, N_, N_, 2, 2, 2, g_A, 2, 4, g_B, 2, 4, g_C, 2, 0, 2, NULL),
                   "stride_c 0", "overlap");
    // Column sums.
    expect_refusal(ctx, ember_colsum(ctx, -1, 2, g_A, 2, g_out, 0), "M is -1", NULL);
    expect_refusal(ctx, ember_colsum(ctx, 2, 3, g_A, 2, g_out, 0), "lda is 2", NULL);
    expect_refusal(ctx, ember_colsum(ctx, 2, 3, g_A, 3, NULL, 0), "out is NULL", NULL);
    assert_int_equal(ember_colsum(NULL, 1, 1, g_A, 1, g_out, 0), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_colsum(ctx, 0, 3, NULL, 3, g_out, 0), EMBER_OK);
    for (int n = 0; n < 3; n++) assert_int_equal(bits(g_out[n]), 0u); // M = 0: +0
    // The dot interaction.
    assert_int_equal(ember_dot_interaction_forward(NULL, 1, 1, 1, g_A, g_A, g_B, g_B), EMBER_ERR_INVALID_ARG);
    expect_refusal(ctx, ember_dot_interaction_forward(ctx, -1, 2, 2, g_A, g_A, g_B, g_B), "batch is -1", NULL);
    expect_refusal(ctx, ember_dot_interaction_forward(ctx, 1, 0, 2, g_A, g_A, g_B, g_B), "num_sparse 0", NULL);
    expect_refusal(ctx, ember_dot_interaction_forward(ctx, 1, 2, 2, g_A, NULL, g_B, g_B), "emb is NULL", NULL);
    float *odd_out = (float *)((char *)g_B + 2);
    expect_refusal(ctx, ember_dot_interaction_backward(ctx, 1, 2, 2, g_A, g_A, g_B, odd_out), "demb (", "not aligned");
    expect_refusal(ctx, ember_dot_interaction_backward(ctx, INT64_MAX / 4, 2, 2, g_A, g_A, g_B, g_B), "spans", NULL);
    expect_refusal(ctx, ember_dot_interaction_backward(ctx, 1, 70000, 1, g_A, g_A, g_B, g_B), "pairs", NULL);
    assert_int_equal(ember_dot_interaction_forward(ctx, 0, 2, 2, NULL, NULL, NULL, NULL), EMBER_OK);
}

// A failed allocation of the packing buffers: EMBER_ERR_NOMEM, C untouched, nothing leaked;
// the next call succeeds.
static void packing_allocation_failure(void **state) {
    (void)state;
    fail_alloc fa = {0};
    ember_ctx_config cfg = EMBER_CTX_CONFIG_DEFAULT;
    cfg.allocator = fail_alloc_hooks(&fa);
    cfg.num_threads = 2;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(&cfg, &ctx), EMBER_OK);
    const int64_t M = 64, N = 100, K = 700;
    test_rng r = {7};
    float *A = falloc(M * K), *B = falloc(K * N), *C = falloc(M * N), *want = falloc(M * N);
    fill(&r, A, M * K);
    fill(&r, B, K * N);
    for (int64_t i = 0; i < M * N; i++) C[i] = 3.0f;
    fail_alloc_arm(&fa, 1);
    assert_int_equal(ember_gemm(ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, M, N, K, A, K, B, N, C, N, NULL), EMBER_ERR_NOMEM);
    assert_true(fa.hit);
    for (int64_t i = 0; i < M * N; i++) assert_int_equal(bits(C[i]), bits(3.0f));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    assert_int_equal(ember_gemm(ctx, EMBER_NO_TRANS, EMBER_NO_TRANS, M, N, K, A, K, B, N, C, N, NULL), EMBER_OK);
    dense_oracle_gemm(0, 0, M, N, K, A, K, B, N, want, N, NULL, 0, 0);
    for (int64_t i = 0; i < M * N; i++) assert_true(same(C[i], want[i]));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    // The dot interaction's scratch (forward) and its pairs' index and scratch (backward): each
    // failure refused, the outputs untouched, nothing leaked.
    const int64_t Bi = 300, Fi = 5, Di = 4, Wi = Di + (Fi + 1) * Fi / 2;
    float *t = falloc(Bi * (Fi + 1) * Di), *out = falloc(Bi * Wi), *dd = falloc(Bi * Di);
    for (int64_t i = 0; i < Bi * Wi; i++) out[i] = 3.0f;
    for (int64_t i = 0; i < Bi * Di; i++) dd[i] = 3.0f;
    fail_alloc_arm(&fa, 1);
    assert_int_equal(ember_dot_interaction_forward(ctx, Bi, Fi, Di, A, A, out, t), EMBER_ERR_NOMEM);
    for (int64_t i = 0; i < Bi * Wi; i++) assert_int_equal(bits(out[i]), bits(3.0f));
    assert_int_equal(ember_dot_interaction_forward(ctx, Bi, Fi, Di, A, A, out, t), EMBER_OK);
    for (int n = 1; n <= 2; n++) {
        fail_alloc_arm(&fa, n);
        assert_int_equal(ember_dot_interaction_backward(ctx, Bi, Fi, Di, t, out, dd, B), EMBER_ERR_NOMEM);
        for (int64_t i = 0; i < Bi * Di; i++) assert_int_equal(bits(dd[i]), bits(3.0f));
        assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    }
    assert_int_equal(ember_dot_interaction_backward(ctx, Bi, Fi, Di, t, out, dd, B), EMBER_OK);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    assert_int_equal(fa.outstanding, 0);
    free(A), free(B), free(C), free(want), free(t), free(out), free(dd);
}

int main(int argc, char **argv) {
    // A test name (or a glob) as the argument runs only the matching tests.
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_grid_every_transpose),
        cmocka_unit_test(edges_of_tiles_slices_and_blocks),
        cmocka_unit_test(gemv_and_few_rows),
        cmocka_unit_test(rank1_products),
        cmocka_unit_test(vecmat_products),
        cmocka_unit_test(dlrm_and_dcn_layers),
        cmocka_unit_test(batched_interaction_and_strides),
        cmocka_unit_test(dot_interaction_matches_its_definition),
        cmocka_unit_test(nan_and_inf_propagate),
        cmocka_unit_test(colsum_rows_in_order),
        cmocka_unit_test(inside_a_parallel_region),
        cmocka_unit_test(bad_arguments_named),
        cmocka_unit_test(packing_allocation_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
