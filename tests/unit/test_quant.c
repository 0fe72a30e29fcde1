// Quantized inference tables (include/ember/quant.h) against the naive oracle
// (tests/support/quant_oracle.c): the row layouts byte for byte on hand-worked rows (FBGEMM's
// reference rule), dequantized rows within each format's bound of the fp32 rows, pooled forward
// within the fp32 bound of the double oracle on the dequantized values (SUM/MEAN, weighted or
// not, empty bags, duplicate ids, one-row tables, dims across every vector width and tail), bit
// for bit equal under every kernel variant this host runs and 1 to 4 threads, fp16 output,
// pruning by array and hash remaps, bounds modes, refusals named, allocation failures; bundles
// saved and loaded bit for bit with their blobs, damage found by the CRC-32, a failed save
// (full disk) leaving the bundle that was there.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember.h"
#include "fail_alloc.h"
#include "gen.h"
#include "isa_env.h"
#include "quant_oracle.h"
#include "state/durable.h"
#include "tmpdir.h"

static ember_ctx *ctxs[EMBER_ISA_COUNT];
static int nctx;

static int setup(void **state) {
    (void)state;
    nctx = test_isa_contexts("unit.quant", ctxs);
    return nctx < 1 ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < nctx; i++) ember_ctx_destroy(ctxs[i]);
    return 0;
}

static const ember_qtype QTYPES[] = {EMBER_QTYPE_FP32, EMBER_QTYPE_FP16, EMBER_QTYPE_INT8, EMBER_QTYPE_INT4,
                                     EMBER_QTYPE_INT2};
#define NQ (int)(sizeof QTYPES / sizeof QTYPES[0])

static void fill_rows(test_rng *r, float *x, int64_t n, int32_t dim) {
    for (int64_t i = 0; i < n; i++) {
        // Rows of different offsets and spreads, some constant.
        const double c = 4.0 * rng_uniform(r) - 2.0, s = rng_int(r, 8) == 0 ? 0.0 : 2.0 * rng_uniform(r);
        for (int32_t d = 0; d < dim; d++) x[i * dim + d] = (float)(c + s * (rng_uniform(r) - 0.5));
    }
}

static void names_and_row_bytes(void **state) {
    (void)state;
    for (int i = 0; i < EMBER_QTYPE_COUNT; i++) {
        ember_qtype t = EMBER_QTYPE_FP32;
        assert_int_equal(ember_qtype_parse(ember_qtype_name((ember_qtype)i), &t), EMBER_OK);
        assert_int_equal(t, i);
        for (int32_t dim = 1; dim < 70; dim++)
            assert_int_equal(ember_qtype_row_bytes((ember_qtype)i, dim), qoracle_row_bytes((ember_qtype)i, dim));
    }
    assert_string_equal(ember_qtype_name((ember_qtype)99), "unknown");
    ember_qtype t = EMBER_QTYPE_INT4;
    assert_int_equal(ember_qtype_parse("int3", &t), EMBER_ERR_INVALID_ARG);
    assert_int_equal(t, EMBER_QTYPE_INT4);
    assert_int_equal(ember_qtype_row_bytes(EMBER_QTYPE_INT8, 0), 0);
    assert_int_equal(ember_qtype_row_bytes((ember_qtype)7, 4), 0);
    for (int i = 0; i < EMBER_QREMAP_COUNT; i++) {
        ember_qremap_kind k = EMBER_QREMAP_NONE;
        assert_int_equal(ember_qremap_kind_parse(ember_qremap_kind_name((ember_qremap_kind)i), &k), EMBER_OK);
        assert_int_equal(k, i);
    }
}

// Rows worked out by hand from FBGEMM's reference rule (quant.h).
static void rows_byte_for_byte(void **state) {
    (void)state;
    ember_ctx *ctx = ctxs[0];
    const float x[4] = {0.0f, 1.0f, 2.0f, 3.0f}, flat[4] = {2.0f, 2.0f, 2.0f, 2.0f};
    unsigned char got[16];
    // int8: scale 3/255, bias 0, inverse 255 / (3 + 1e-8) = 85 in fp32: 0, 85, 170, 255.
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT8, 4, 1, x, got), EMBER_OK);
    const float s8 = 3.0f / 255.0f, zero = 0.0f;
    unsigned char want8[12] = {0x00, 0x55, 0xaa, 0xff};
    memcpy(want8 + 4, &s8, 4);
    memcpy(want8 + 8, &zero, 4);
    assert_memory_equal(got, want8, 12);
    // int4: bias fp16(0) = 0, scale fp16(3/15) = 0x3266 (0.19995), q = lrint(x * 5.0012) = 0, 5, 10, 15.
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT4, 4, 1, x, got), EMBER_OK);
    const unsigned char want4[6] = {0x50, 0xfa, 0x66, 0x32, 0x00, 0x00};
    assert_memory_equal(got, want4, 6);
    // int2: scale 1 (0x3c00), q = 0, 1, 2, 3 packed from bit 0: 0b11100100.
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT2, 4, 1, x, got), EMBER_OK);
    const unsigned char want2[5] = {0xe4, 0x00, 0x3c, 0x00, 0x00};
    assert_memory_equal(got, want2, 5);
    // A constant row: int8 scale 0, bias 2, q 0; int4 scale 1, bias fp16(2) = 0x4000, q 0.
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT8, 4, 1, flat, got), EMBER_OK);
    const float two = 2.0f;
    unsigned char wantf[12] = {0};
    memcpy(wantf + 8, &two, 4);
    assert_memory_equal(got, wantf, 12);
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT4, 4, 1, flat, got), EMBER_OK);
    const unsigned char wantf4[6] = {0x00, 0x00, 0x00, 0x3c, 0x00, 0x40};
    assert_memory_equal(got, wantf4, 6);
    // An odd dim packs a half byte: int4 of 3 elements is 2 + 4 bytes, the last nibble 0.
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT4, 3, 1, x + 1, got), EMBER_OK);
    // lo = 1, range 2, scale fp16(2/15) = 0x3044 (0.13330), q = lrint((x - 1) * 7.5018) = 0, 8, 15.
    const unsigned char want3[6] = {0x80, 0x0f, 0x44, 0x30, 0x00, 0x3c};
    assert_memory_equal(got, want3, 6);
}

// Dequantized rows within each format's bound of the fp32 rows, and the library's element values
// within one rounding (the fused multiply-add's) of the oracle's.
static void rows_within_format_bound(void **state) {
    (void)state;
    ember_ctx *ctx = ctxs[0];
    test_rng r = {11};
    const int32_t dims[] = {1, 2, 3, 7, 16, 33, 64, 128};
    for (int qi = 0; qi < NQ; qi++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            const ember_qtype t = QTYPES[qi];
            const int32_t dim = dims[di];
            const int64_t n = 50;
            const size_t rb = ember_qtype_row_bytes(t, dim);
            float *x = malloc(sizeof(float) * n * dim), *deq = malloc(sizeof(float) * n * dim);
            unsigned char *q = malloc(rb * n);
            double *v = malloc(sizeof(double) * dim);
            fill_rows(&r, x, n, dim);
            assert_int_equal(ember_quantize_rows(ctx, t, dim, n, x, q), EMBER_OK);
            assert_int_equal(ember_dequantize_rows(ctx, t, dim, n, q, deq), EMBER_OK);
            for (int64_t i = 0; i < n; i++) {
                double scale;
                qoracle_decode(t, dim, q + i * rb, v, &scale, NULL);
                const int qmax = t == EMBER_QTYPE_INT8 ? 255 : t == EMBER_QTYPE_INT4 ? 15 : 3;
                for (int32_t d = 0; d < dim; d++) {
                    const double xv = x[i * dim + d];
                    double bound;
                    switch (t) {
                    case EMBER_QTYPE_FP32: bound = 0.0; break;
                    case EMBER_QTYPE_FP16: bound = fabs(xv) * 0x1p-11 + 0x1p-25; break;
                    case EMBER_QTYPE_INT8: bound = fabs(scale) / 2 + 4e-7 * (1 + fabs(xv)); break;
                    default: // half a step, the fp16 scale's rounding over qmax steps, the fp16 bias's
                             // rounding (lo' may even lie above the row's minimum: a negative scale)
                        bound = fabs(scale) * (0.5 + qmax * 0x1p-11) + (fabs(xv) + fabs(v[d])) * 0x1p-11 + 4e-7;
                    }
                    if (!(fabs(v[d] - xv) <= bound))
                        fail_msg("%s dim %d row %lld col %d: %.9g quantized to %.9g (bound %.3g)", ember_qtype_name(t),
                                 (int)dim, (long long)i, (int)d, xv, v[d], bound);
                    // The library's value: fmaf(scale, q, bias), one rounding (the oracle's double sum of
                    // the exact product and the bias is itself within 2^-53 of the exact value).
                    if (!(fabs(deq[i * dim + d] - v[d]) <= 0x1p-24 * fabs(v[d]) + 0x1p-50 * (fabs(scale) * qmax + fabs(v[d])) + 1e-45))
                        fail_msg("%s dequantized %.9g, oracle %.9g", ember_qtype_name(t), (double)deq[i * dim + d], v[d]);
                }
            }
            free(x), free(deq), free(q), free(v);
        }
}

// ---- collections ----------------------------------------------------------------------------

typedef struct qcase {
    int32_t T;
    ember_qtable_config tc[6];
    int32_t F;
    ember_feature_config fc[8];
    int32_t ftab[8];
    ember_bounds_mode bounds;
    unsigned char *data[6];
    // Remaps (kind per table), kept ids and rows.
    ember_qremap_kind kind[6];
    int64_t n[6], *ids[6], *rows[6];
} qcase;

static char names[16][16];

// A collection of the given tables (qtype, dim, rows, pooling) with random quantized rows.
static void case_make(qcase *c, test_rng *r, int32_t T, const ember_qtype *qt, const int32_t *dim,
                      const int64_t *rows, const ember_pooling *pool, int32_t F) {
    memset(c, 0, sizeof *c);
    c->T = T;
    c->F = F;
    for (int32_t t = 0; t < T; t++) {
        snprintf(names[t], sizeof names[t], "t%d", (int)t);
        c->tc[t] = (ember_qtable_config)EMBER_QTABLE_CONFIG_DEFAULT;
        c->tc[t].name = names[t];
        c->tc[t].rows = rows[t];
        c->tc[t].dim = dim[t];
        c->tc[t].qtype = qt[t];
        c->tc[t].pooling = pool[t];
        const size_t rb = ember_qtype_row_bytes(qt[t], dim[t]);
        c->data[t] = malloc(rb * (size_t)rows[t]);
        float *x = malloc(sizeof(float) * (size_t)rows[t] * (size_t)dim[t]);
        fill_rows(r, x, rows[t], dim[t]);
        assert_int_equal(ember_quantize_rows(ctxs[0], qt[t], dim[t], rows[t], x, c->data[t]), EMBER_OK);
        free(x);
    }
    for (int32_t f = 0; f < F; f++) {
        snprintf(names[8 + f], sizeof names[8 + f], "f%d", (int)f);
        c->ftab[f] = f % T;
        c->fc[f] = (ember_feature_config){.name = names[8 + f], .table = f % T};
    }
}

static void case_free(qcase *c) {
    for (int32_t t = 0; t < c->T; t++) free(c->data[t]), free(c->ids[t]), free(c->rows[t]);
}

static ember_qebc *case_create(const qcase *c, ember_ctx *ctx, ember_dtype out_dtype) {
    ember_qebc_config cfg = EMBER_QEBC_CONFIG_DEFAULT;
    cfg.tables = c->tc;
    cfg.num_tables = c->T;
    cfg.features = c->fc;
    cfg.num_features = c->F;
    cfg.bounds = c->bounds;
    cfg.output_dtype = out_dtype;
    ember_qebc *q = NULL;
    assert_int_equal(ember_qebc_create(ctx, &cfg, &q), EMBER_OK);
    for (int32_t t = 0; t < c->T; t++) {
        assert_int_equal(ember_qebc_write_rows(q, t, 0, c->tc[t].rows, c->data[t]), EMBER_OK);
        if (c->kind[t] != EMBER_QREMAP_NONE)
            assert_int_equal(ember_qebc_set_remap(q, t, c->kind[t], c->n[t], c->ids[t], c->rows[t]), EMBER_OK);
    }
    return q;
}

// The forward under every variant and 1 to 4 threads: generic's output within the fp32 bound of
// the oracle, every other run bit for bit equal to it.
static void check_forward(const qcase *c, const ember_kjt *kjt, const char *what) {
    int32_t D = 0;
    for (int32_t f = 0; f < c->F; f++) D += c->tc[c->ftab[f]].dim;
    const size_t n = (size_t)kjt->batch_size * (size_t)D;
    double *want = malloc(sizeof(double) * (n + 1)), *mag = malloc(sizeof(double) * (n + 1));
    float *first = malloc(sizeof(float) * (n + 1)), *got = malloc(sizeof(float) * (n + 1));
    uint16_t *h = malloc(sizeof(uint16_t) * (n + 1));
    qoracle_table ot[6];
    for (int32_t t = 0; t < c->T; t++)
        ot[t] = (qoracle_table){.qtype = c->tc[t].qtype, .dim = c->tc[t].dim, .rows = c->tc[t].rows,
                                .pooling = c->tc[t].pooling, .data = c->data[t], .kind = c->kind[t],
                                .num_embeddings = c->tc[t].num_embeddings, .n = c->n[t], .ids = c->ids[t],
                                .map_rows = c->rows[t]};
    qoracle_forward(ot, c->ftab, c->F, c->bounds, kjt, want, mag);
    int64_t maxlen = 1;
    for (int64_t bag = 0; bag < (int64_t)c->F * kjt->batch_size; bag++)
        if (kjt->lengths[bag] > maxlen) maxlen = kjt->lengths[bag];
    for (int i = 0; i < nctx; i++)
        for (int th = 1; th <= 4; th++) {
            if (i > 0 && th > 1 && th != 3) continue; // variants at 1 and 3 threads, generic at all
            assert_int_equal(ember_ctx_set_num_threads(ctxs[i], th), EMBER_OK);
            ember_qebc *q = case_create(c, ctxs[i], EMBER_DTYPE_F32);
            for (size_t k = 0; k < n; k++) got[k] = NAN;
            if (ember_qebc_forward(q, kjt, got) != EMBER_OK) fail_msg("%s: %s", what, ember_ctx_errmsg(ctxs[i]));
            if (i == 0 && th == 1) {
                memcpy(first, got, sizeof(float) * n);
                for (size_t k = 0; k < n; k++) {
                    const double tol = (double)(maxlen + 2) * 0x1p-23 * mag[k] + 1e-30;
                    if (!(fabs(got[k] - want[k]) <= tol))
                        fail_msg("%s: output %zu is %.9g, oracle %.9g (tolerance %.3g)", what, k, (double)got[k],
                                 want[k], tol);
                }
            } else if (memcmp(first, got, sizeof(float) * n) != 0) {
                fail_msg("%s: %s with %d threads differs from generic with 1", what, ember_isa_name(ember_ctx_isa(ctxs[i])),
                         th);
            }
            ember_qebc_destroy(q);
            // fp16 output: the fp32 sums rounded to nearest even.
            if (th == 1) {
                q = case_create(c, ctxs[i], EMBER_DTYPE_F16);
                assert_int_equal(ember_qebc_forward(q, kjt, h), EMBER_OK);
                for (size_t k = 0; k < n; k++) {
                    const double hv = qoracle_half(h[k]), x = first[k];
                    const double ulp = fabs(x) < 0x1p-14 ? 0x1p-24 : ldexp(1.0, ilogb(x) - 10);
                    if (!(fabs(hv - x) <= ulp / 2))
                        fail_msg("%s: fp16 output %zu is %.9g for %.9g", what, k, hv, x);
                }
                ember_qebc_destroy(q);
            }
            assert_int_equal(ember_ctx_bytes_outstanding(ctxs[i]), 0);
            assert_int_equal(ember_ctx_set_num_threads(ctxs[i], 1), EMBER_OK);
        }
    free(want), free(mag), free(first), free(got), free(h);
}

static void forward_matches_oracle(void **state) {
    (void)state;
    test_rng r = {21};
    const int32_t dims[] = {1, 5, 8, 16, 24, 40, 64, 72, 128, 200};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int qi = 0; qi < NQ; qi++)
            for (int weighted = 0; weighted < 2; weighted++) {
                const ember_qtype qt[3] = {QTYPES[qi], QTYPES[(qi + 2) % NQ], QTYPES[qi]};
                const int32_t dim[3] = {dims[di], dims[(di + 3) % 10], dims[di]};
                const int64_t rows[3] = {1, 37, 300}; // a one-row table
                const ember_pooling pool[3] = {EMBER_POOL_SUM, EMBER_POOL_MEAN, weighted ? EMBER_POOL_MEAN : EMBER_POOL_SUM};
                qcase c;
                case_make(&c, &r, 3, qt, dim, rows, pool, 4);
                int64_t frows[4];
                for (int32_t f = 0; f < 4; f++) frows[f] = rows[c.ftab[f]];
                gen_kjt g;
                gen_kjt_make(&g, &r, 4, 9, frows, 12, 0.3, weighted);
                char what[96];
                snprintf(what, sizeof what, "%s dim %d %s", ember_qtype_name(qt[0]), (int)dim[0],
                         weighted ? "weighted" : "unweighted");
                check_forward(&c, &g.kjt, what);
                gen_kjt_free(&g);
                case_free(&c);
            }
}

// A kept subset of the id space, in random order, on random rows (several ids may share one).
static void make_remap(qcase *c, test_rng *r, int32_t t, ember_qremap_kind kind, int64_t space, int64_t kept) {
    c->kind[t] = kind;
    c->n[t] = kept;
    c->ids[t] = malloc(sizeof(int64_t) * (size_t)(kept + 1));
    c->rows[t] = malloc(sizeof(int64_t) * (size_t)(kept + 1));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)space);
    for (int64_t i = 0; i < space; i++) perm[i] = i;
    for (int64_t i = space - 1; i > 0; i--) {
        const int64_t j = rng_int(r, i + 1), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (int64_t i = 0; i < kept; i++) {
        // Hash remaps take sparse ids: spread the kept ones over the int64 range.
        c->ids[t][i] = kind == EMBER_QREMAP_HASH ? perm[i] * 1000003 - 5000000 : perm[i];
        c->rows[t][i] = rng_int(r, c->tc[t].rows);
    }
    free(perm);
}

static void pruning_array_and_hash(void **state) {
    (void)state;
    test_rng r = {31};
    for (int round = 0; round < 6; round++) {
        const ember_qtype qt[2] = {QTYPES[round % NQ], QTYPES[(round + 3) % NQ]};
        const int32_t dim[2] = {16 + 8 * round, 3 + round};
        const int64_t rows[2] = {20, 1};
        const ember_pooling pool[2] = {round % 2 ? EMBER_POOL_MEAN : EMBER_POOL_SUM, EMBER_POOL_MEAN};
        qcase c;
        case_make(&c, &r, 2, qt, dim, rows, pool, 3);
        c.tc[0].num_embeddings = 100;
        make_remap(&c, &r, 0, EMBER_QREMAP_ARRAY, 100, 40);
        make_remap(&c, &r, 1, EMBER_QREMAP_HASH, 100, 30);
        // KJT ids: table 0 in its id space; table 1's ids half kept (sparse keys), half not.
        gen_kjt g;
        const int64_t frows[3] = {100, 100, 100};
        gen_kjt_make(&g, &r, 3, 11, frows, 10, 0.3, round % 3 == 0);
        for (int64_t bag = 0, j = 0; bag < 3 * 11; bag++)
            for (int32_t k = 0; k < g.lengths[bag]; k++, j++)
                if (bag / 11 == 1) g.values[j] = g.values[j] * 1000003 - 5000000 + (rng_int(&r, 2) ? 0 : 7);
        check_forward(&c, &g.kjt, "pruned");
        gen_kjt_free(&g);
        case_free(&c);
    }
}

static void bounds_modes(void **state) {
    (void)state;
    test_rng r = {41};
    const ember_qtype qt[2] = {EMBER_QTYPE_INT8, EMBER_QTYPE_INT4};
    const int32_t dim[2] = {16, 32};
    const int64_t rows[2] = {10, 10};
    const ember_pooling pool[2] = {EMBER_POOL_MEAN, EMBER_POOL_SUM};
    for (int mode = EMBER_BOUNDS_ERROR; mode <= EMBER_BOUNDS_SKIP; mode++) {
        qcase c;
        case_make(&c, &r, 2, qt, dim, rows, pool, 2);
        c.bounds = (ember_bounds_mode)mode;
        c.tc[1].num_embeddings = 50;
        make_remap(&c, &r, 1, EMBER_QREMAP_ARRAY, 50, 20);
        gen_kjt g;
        const int64_t frows[2] = {10, 50};
        gen_kjt_make(&g, &r, 2, 6, frows, 6, 0.2, 0);
        int64_t bad = 0;
        for (int64_t j = 0; j < g.kjt.nnz; j++)
            if (rng_int(&r, 4) == 0) g.values[j] = rng_int(&r, 2) ? -3 : 1000, bad++;
        if (mode == EMBER_BOUNDS_ERROR && bad > 0) {
            ember_qebc *q = case_create(&c, ctxs[0], EMBER_DTYPE_F32);
            float out[6 * 48];
            for (int k = 0; k < 6 * 48; k++) out[k] = 5.0f;
            assert_int_equal(ember_qebc_forward(q, &g.kjt, out), EMBER_ERR_OUT_OF_RANGE);
            assert_non_null(strstr(ember_ctx_errmsg(ctxs[0]), "feature"));
            for (int k = 0; k < 6 * 48; k++) assert_true(out[k] == 5.0f);
            ember_qebc_destroy(q);
        } else {
            check_forward(&c, &g.kjt, ember_bounds_mode_name((ember_bounds_mode)mode));
        }
        gen_kjt_free(&g);
        case_free(&c);
    }
}

static void refusals_named(void **state) {
    (void)state;
    ember_ctx *ctx = ctxs[0];
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    unsigned char buf[64];
    x[5] = NAN;
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT8, 4, 2, x, buf), EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "row 1 column 1"));
    x[5] = 6;
    assert_int_equal(ember_quantize_rows(ctx, (ember_qtype)9, 4, 2, x, buf), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_quantize_rows(ctx, EMBER_QTYPE_INT8, 0, 2, x, buf), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_dequantize_rows(ctx, EMBER_QTYPE_INT8, 4, 1, NULL, (float *)buf), EMBER_ERR_INVALID_ARG);

    ember_qtable_config tc[2] = {EMBER_QTABLE_CONFIG_DEFAULT, EMBER_QTABLE_CONFIG_DEFAULT};
    tc[0].name = "a", tc[0].rows = 4, tc[0].dim = 4;
    tc[1].name = "b", tc[1].rows = 4, tc[1].dim = 4;
    ember_feature_config fc[1] = {{.name = "f", .table = 1}};
    ember_qebc_config cfg = EMBER_QEBC_CONFIG_DEFAULT;
    cfg.tables = tc, cfg.num_tables = 2, cfg.features = fc, cfg.num_features = 1;
    ember_qebc *q = (ember_qebc *)1;
    tc[1].name = "a";
    assert_int_equal(ember_qebc_create(ctx, &cfg, &q), EMBER_ERR_INVALID_ARG);
    assert_null(q);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "both named 'a'"));
    tc[1].name = "b";
    tc[1].pooling = EMBER_POOL_NONE;
    assert_int_equal(ember_qebc_create(ctx, &cfg, &q), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "table 'b': pooling none"));
    tc[1].pooling = EMBER_POOL_SUM;
    fc[0].table = 2;
    assert_int_equal(ember_qebc_create(ctx, &cfg, &q), EMBER_ERR_INVALID_ARG);
    fc[0].table = 1;
    cfg.output_dtype = EMBER_DTYPE_BF16;
    assert_int_equal(ember_qebc_create(ctx, &cfg, &q), EMBER_ERR_INVALID_ARG);
    cfg.output_dtype = EMBER_DTYPE_F32;
    assert_int_equal(ember_qebc_create(ctx, &cfg, &q), EMBER_OK);
    assert_int_equal(ember_qebc_output_dim(q), 4);
    assert_int_equal(ember_qebc_table_index(q, "b"), 1);
    assert_int_equal(ember_qebc_write_rows(q, 1, 2, 5, buf), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "table 'b': rows [2, 5) outside [0, 4)"));
    assert_int_equal(ember_qebc_quantize_rows(q, 0, 0, 2, (float[]){1, 2, 3, INFINITY, 1, 1, 1, 1}),
                     EMBER_ERR_NUMERIC);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "table 'a' row 0 column 3"));
    // Remaps: an array remap needs an id space; bad ids and rows are named, nothing changes.
    const int64_t ids[3] = {1, 5, 1}, rows[3] = {0, 3, 2};
    assert_int_equal(ember_qebc_set_remap(q, 1, EMBER_QREMAP_ARRAY, 2, ids, rows), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "num_embeddings"));
    assert_int_equal(ember_qebc_set_remap(q, 1, EMBER_QREMAP_HASH, 3, ids, rows), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "id 1 appears twice (entry 2)"));
    const int64_t far[1] = {4};
    assert_int_equal(ember_qebc_set_remap(q, 1, EMBER_QREMAP_HASH, 1, ids, far), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "maps to row 4, outside [0, 4)"));
    assert_int_equal(ember_qebc_remap_kind(q, 1), EMBER_QREMAP_NONE);
    assert_int_equal(ember_qebc_set_remap(q, 1, EMBER_QREMAP_HASH, 2, ids, rows), EMBER_OK);
    assert_int_equal(ember_qebc_remap_kind(q, 1), EMBER_QREMAP_HASH);
    size_t tb = 0, rb = 0;
    assert_int_equal(ember_qebc_table_bytes(q, 1, &tb, &rb), EMBER_OK);
    assert_int_equal(tb, 4 * 12);
    assert_int_equal(rb, 16 * 16);
    // Forward: NULL out with samples, a KJT of the wrong feature count.
    const int32_t len[2] = {1, 0};
    const int64_t vals[1] = {5};
    ember_kjt k = {.num_features = 1, .batch_size = 2, .lengths = len, .values = vals, .nnz = 1};
    assert_int_equal(ember_qebc_forward(q, &k, NULL), EMBER_ERR_INVALID_ARG);
    k.num_features = 2;
    float out[8];
    assert_int_equal(ember_qebc_forward(q, &k, out), EMBER_ERR_INVALID_ARG);
    ember_qebc_destroy(q);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
}

// Every allocation of create, set_remap and forward failing in turn: NOMEM, nothing leaks, the
// collection unchanged and usable.
static void allocation_failures(void **state) {
    (void)state;
    fail_alloc fa = {0};
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.allocator = fail_alloc_hooks(&fa);
    cc.num_threads = 2;
    ember_ctx *ctx = NULL;
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
    ember_qtable_config tc[1] = {EMBER_QTABLE_CONFIG_DEFAULT};
    tc[0].name = "a", tc[0].rows = 8, tc[0].dim = 16, tc[0].num_embeddings = 30;
    ember_feature_config fc[1] = {{.name = "f", .table = 0}};
    ember_qebc_config cfg = EMBER_QEBC_CONFIG_DEFAULT;
    cfg.tables = tc, cfg.num_tables = 1, cfg.features = fc, cfg.num_features = 1;
    cfg.output_dtype = EMBER_DTYPE_F16;
    for (int k = 1; k < 12; k++) {
        ember_qebc *q = NULL;
        fail_alloc_arm(&fa, k);
        const ember_status st = ember_qebc_create(ctx, &cfg, &q);
        if (!fa.hit) {
            assert_int_equal(st, EMBER_OK);
            ember_qebc_destroy(q);
            break;
        }
        assert_int_equal(st, EMBER_ERR_NOMEM);
        assert_null(q);
        assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    }
    fail_alloc_arm(&fa, 0);
    ember_qebc *q = NULL;
    assert_int_equal(ember_qebc_create(ctx, &cfg, &q), EMBER_OK);
    const int64_t ids[2] = {3, 29}, rows[2] = {1, 7};
    fail_alloc_arm(&fa, 1);
    assert_int_equal(ember_qebc_set_remap(q, 0, EMBER_QREMAP_ARRAY, 2, ids, rows), EMBER_ERR_NOMEM);
    assert_int_equal(ember_qebc_remap_kind(q, 0), EMBER_QREMAP_NONE);
    fail_alloc_arm(&fa, 0);
    assert_int_equal(ember_qebc_set_remap(q, 0, EMBER_QREMAP_ARRAY, 2, ids, rows), EMBER_OK);
    const int32_t len[2] = {2, 1};
    const int64_t vals[3] = {3, 29, 4};
    ember_kjt k = {.num_features = 1, .batch_size = 2, .lengths = len, .values = vals, .nnz = 3};
    uint16_t out[32], before[32];
    memset(out, 0x5a, sizeof out);
    memcpy(before, out, sizeof out);
    fail_alloc_arm(&fa, 1);
    assert_int_equal(ember_qebc_forward(q, &k, out), EMBER_ERR_NOMEM);
    assert_memory_equal(out, before, sizeof out);
    fail_alloc_arm(&fa, 0);
    assert_int_equal(ember_qebc_forward(q, &k, out), EMBER_OK);
    ember_qebc_destroy(q);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    assert_int_equal(fa.outstanding, 0);
}


// A bundle round trip: the same tables, remaps and forward bits, the blobs back; a second save
// replaces the first at its commit; a full disk leaves the last good bundle; damage is refused.
static void bundles(void **state) {
    (void)state;
    test_rng r = {51};
    const ember_qtype qt[3] = {EMBER_QTYPE_INT4, EMBER_QTYPE_INT8, EMBER_QTYPE_FP16};
    const int32_t dim[3] = {24, 7, 16};
    const int64_t rows[3] = {30, 5, 12};
    const ember_pooling pool[3] = {EMBER_POOL_SUM, EMBER_POOL_MEAN, EMBER_POOL_SUM};
    qcase c;
    case_make(&c, &r, 3, qt, dim, rows, pool, 4);
    c.tc[0].num_embeddings = 80;
    make_remap(&c, &r, 0, EMBER_QREMAP_ARRAY, 80, 25);
    make_remap(&c, &r, 2, EMBER_QREMAP_HASH, 60, 9);
    c.bounds = EMBER_BOUNDS_SKIP;
    ember_ctx *ctx = ctxs[0];
    ember_qebc *q = case_create(&c, ctx, EMBER_DTYPE_F32);
    gen_kjt g;
    const int64_t frows[4] = {80, 5, 60, 80};
    gen_kjt_make(&g, &r, 4, 7, frows, 6, 0.3, 1);
    for (int64_t j = 0; j < g.kjt.nnz; j++)
        if (rng_int(&r, 5) == 0) g.values[j] = 1000; // out of every id space: skipped (hash: absent)
    const int32_t D = ember_qebc_output_dim(q);
    float *want = malloc(sizeof(float) * 7 * (size_t)D), *got = malloc(sizeof(float) * 7 * (size_t)D);
    assert_int_equal(ember_qebc_forward(q, &g.kjt, want), EMBER_OK);

    char dir[128], path[192];
    snprintf(dir, sizeof dir, "%s/bundle", test_tmpdir);
    const char json[] = "{\"model\": 1}";
    float dense[5] = {1, 2, 3, 4, 5};
    ember_checkpoint_blob blobs[2] = {{"trainer.json", json, sizeof json - 1}, {"dense.params", dense, sizeof dense}};
    assert_int_equal(ember_qebc_save(q, dir, blobs, 2), EMBER_OK);
    ember_qebc *l = NULL;
    assert_int_equal(ember_qebc_load(ctx, dir, &l), EMBER_OK);
    assert_int_equal(ember_qebc_num_tables(l), 3);
    assert_int_equal(ember_qebc_remap_kind(l, 0), EMBER_QREMAP_ARRAY);
    assert_int_equal(ember_qebc_remap_kind(l, 2), EMBER_QREMAP_HASH);
    assert_int_equal(ember_qebc_forward(l, &g.kjt, got), EMBER_OK);
    assert_memory_equal(got, want, sizeof(float) * 7 * (size_t)D);
    for (int32_t t = 0; t < 3; t++) {
        const size_t rb = ember_qtype_row_bytes(qt[t], dim[t]);
        unsigned char *a = malloc(rb * (size_t)rows[t]);
        assert_int_equal(ember_qebc_read_rows(l, t, 0, rows[t], a), EMBER_OK);
        assert_memory_equal(a, c.data[t], rb * (size_t)rows[t]);
        free(a);
    }
    ember_qebc_destroy(l);
    size_t n = 0;
    char text[64] = {0};
    assert_int_equal(ember_qebc_read_blob(ctx, dir, "trainer.json", text, sizeof text, &n), EMBER_OK);
    assert_int_equal(n, sizeof json - 1);
    assert_string_equal(text, json);
    float back[5];
    assert_int_equal(ember_qebc_read_blob(ctx, dir, "dense.params", back, sizeof back, NULL), EMBER_OK);
    assert_memory_equal(back, dense, sizeof dense);
    assert_int_equal(ember_qebc_read_blob(ctx, dir, "nope", NULL, 0, &n), EMBER_ERR_INVALID_ARG);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "has no blob 'nope'"));

    // A second save: generation 2 replaces generation 1's data file.
    assert_int_equal(ember_qebc_save(q, dir, blobs, 1), EMBER_OK);
    struct stat sb;
    snprintf(path, sizeof path, "%s/q1.bin", dir);
    assert_int_not_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/q2.bin", dir);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(ember_qebc_read_blob(ctx, dir, "dense.params", NULL, 0, &n), EMBER_ERR_INVALID_ARG);
    // A full disk during the third: an I/O error naming the file, generation 2 loads as before.
    ember__dfile_fail_after(100, ENOSPC);
    assert_int_equal(ember_qebc_save(q, dir, blobs, 2), EMBER_ERR_IO);
    ember__dfile_fail_after(-1, 0);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "q3.bin"));
    snprintf(path, sizeof path, "%s/q3.bin", dir);
    assert_int_not_equal(stat(path, &sb), 0);
    assert_int_equal(ember_qebc_load(ctx, dir, &l), EMBER_OK);
    assert_int_equal(ember_qebc_forward(l, &g.kjt, got), EMBER_OK);
    assert_memory_equal(got, want, sizeof(float) * 7 * (size_t)D);
    ember_qebc_destroy(l);
    // A failed first save into a directory it made removes the directory.
    snprintf(path, sizeof path, "%s/fresh", test_tmpdir);
    ember__dfile_fail_after(10, ENOSPC);
    assert_int_equal(ember_qebc_save(q, path, NULL, 0), EMBER_ERR_IO);
    ember__dfile_fail_after(-1, 0);
    assert_int_not_equal(stat(path, &sb), 0);
    // A damaged byte in the rows: the CRC-32 names the table.
    snprintf(path, sizeof path, "%s/q2.bin", dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 3, SEEK_SET);
    const int ch = fgetc(f);
    fseek(f, 3, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
    l = (ember_qebc *)1;
    assert_int_equal(ember_qebc_load(ctx, dir, &l), EMBER_ERR_FORMAT);
    assert_null(l);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "table 't0' rows fails its CRC-32"));
    // Not a bundle; no directory.
    assert_int_equal(ember_qebc_load(ctx, test_tmpdir, &l), EMBER_ERR_FORMAT);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "no bundle.json"));
    snprintf(path, sizeof path, "%s/none/deeper", test_tmpdir);
    assert_int_equal(ember_qebc_save(q, path, NULL, 0), EMBER_ERR_IO);
    const ember_checkpoint_blob bad[1] = {{"a b", json, 1}};
    assert_int_equal(ember_qebc_save(q, dir, bad, 1), EMBER_ERR_INVALID_ARG);
    ember_qebc_destroy(q);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    free(want), free(got);
    gen_kjt_free(&g);
    case_free(&c);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_and_row_bytes),
        cmocka_unit_test(rows_byte_for_byte),
        cmocka_unit_test(rows_within_format_bound),
        cmocka_unit_test(forward_matches_oracle),
        cmocka_unit_test(pruning_array_and_hash),
        cmocka_unit_test(bounds_modes),
        cmocka_unit_test(refusals_named),
        cmocka_unit_test(allocation_failures),
        cmocka_unit_test_setup_teardown(bundles, test_tmpdir_make, test_tmpdir_remove),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
