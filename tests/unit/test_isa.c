// Kernel variants (ember_isa): every variant this host runs gives the generic variant's bits,
// on a matrix of optimizers x storage dtypes x rounding x pooling x weights x bounds modes, with
// row widths that hit every vector path (multiples of 16 and 8 up to 128, wider rows, odd widths:
// a 13-wide table puts the later features' columns off 16-byte alignment),
// one-row tables, empty bags and duplicate ids. Compared: forward outputs, per-id weight
// gradients, and every tensor of every table (native bits) after several steps; and the
// coalesce + apply path of the data-parallel scheme; a table changes dtype halfway. A variant the
// host cannot run is skipped with the reason printed; where SIMDe is available, the AVX-512
// variant's code also runs emulated (tests/support/isa/avx512_emulated.c) on hosts without AVX-512. The last batch of
// each run has hot rows (a third of the ids on row 0: long segments).
//
// With EMBER_TEST_BACKEND=cuda (unit.backend.cuda) the same matrix compares the cuda backend
// with the cpu's generic variant instead, and a second cuda run with the first (run to run);
// without a usable GPU (or a build without the backend) it exits 77 with the reason.
#define _POSIX_C_SOURCE 200809L // setenv, strdup
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#ifdef EMBER_TEST_CUDA
#include <cuda_runtime.h>
#endif

#include "ember.h"
#include "gen.h"
#include "tbe/cpu/isa/isa.h" // to install the emulated AVX-512 table on a collection

#ifdef EMBER_TEST_AVX512_EMULATED
extern const ember__tbe_kernels ember__tbe_kernels_avx512_emulated;
#endif

#define NT 10
#define NF 12
static const int64_t ROWS[NT] = {300, 1, 50, 120, 7, 64, 1000, 20, 2, 33};
static const int32_t DIMS[NT] = {128, 64, 24, 136, 8, 100, 32, 256, 13, 4};
static const int32_t FTAB[NF] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 6};
#define SEQ_DIM 48
#define STEPS 3
#define BATCH 24

typedef struct variant {
    const char *name;
    ember_isa isa;                 // the context's variant
    const ember__tbe_kernels *kern; // installed on the collection instead (emulation), or NULL
    ember_backend backend;
} variant;

static variant variants[EMBER_ISA_COUNT + 1];
static int nvariants;

// The variants to compare against generic: each one the host runs, and the emulated AVX-512.
static void find_variants(void) {
    nvariants = 0;
    const char *be = getenv("EMBER_TEST_BACKEND");
    if (be && strcmp(be, "cuda") == 0) {
        variants[nvariants++] = (variant){"generic", EMBER_ISA_GENERIC, NULL, EMBER_BACKEND_CPU};
        variants[nvariants++] = (variant){"cuda", EMBER_ISA_GENERIC, NULL, EMBER_BACKEND_CUDA};
        variants[nvariants++] = (variant){"cuda (second run)", EMBER_ISA_GENERIC, NULL, EMBER_BACKEND_CUDA};
        return;
    }
    for (int i = EMBER_ISA_GENERIC; i < EMBER_ISA_COUNT; i++) {
        char why[160];
        if (ember_isa_supported((ember_isa)i, why, sizeof why)) {
            variants[nvariants++] = (variant){ember_isa_name((ember_isa)i), (ember_isa)i, NULL, EMBER_BACKEND_CPU};
        } else {
            printf("unit.isa: %s: skipped on this host: %s\n", ember_isa_name((ember_isa)i), why);
#ifdef EMBER_TEST_AVX512_EMULATED
            // The emulation itself uses the host's AVX2 and F16C.
            if (i == EMBER_ISA_AVX512 && ember_isa_supported(EMBER_ISA_AVX2, NULL, 0)) {
                variants[nvariants++] = (variant){"avx512 (emulated by SIMDe)", EMBER_ISA_GENERIC,
                                                  &ember__tbe_kernels_avx512_emulated, EMBER_BACKEND_CPU};
                printf("unit.isa: avx512: its code runs emulated by SIMDe instead\n");
            }
#endif
        }
    }
}

typedef struct tcase {
    ember_optim_kind opt;
    ember_dtype dtype;
    int sr;
    ember_pooling pool;
    int weighted;
    ember_weight_decay_mode wd;
    ember_bounds_mode bounds;
} tcase;

// Everything one run produced, as bytes.
typedef struct trace {
    unsigned char *data;
    size_t n, cap;
} trace;

static void put(trace *t, const void *p, size_t bytes) {
    if (t->n + bytes > t->cap) {
        t->cap = (t->n + bytes) * 2;
        t->data = realloc(t->data, t->cap);
        assert_non_null(t->data);
    }
    memcpy(t->data + t->n, p, bytes);
    t->n += bytes;
}

typedef struct fixture {
    ember_table_config tables[NT];
    ember_feature_config features[NF];
    char names[NT + NF][8];
    ember_ebc_config cfg;
} fixture;

static void make_config(fixture *fx, const tcase *c) {
    memset(fx, 0, sizeof *fx);
    for (int t = 0; t < NT; t++) {
        snprintf(fx->names[t], 8, "t%d", t);
        ember_table_config *tc = &fx->tables[t];
        tc->name = fx->names[t];
        tc->rows = ROWS[t];
        tc->dim = c->pool == EMBER_POOL_NONE ? SEQ_DIM : DIMS[t];
        tc->pooling = c->pool;
        tc->dtype = c->dtype;
        tc->init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = c->opt;
        o.lr = c->opt == EMBER_OPT_SGD ? 0.3f : 0.05f;
        o.weight_decay_mode = c->wd;
        o.weight_decay = c->wd ? 0.1f : 0.0f;
        o.initial_accumulator = 0.01f;
        o.eta = 0.5f;
        o.momentum = 0.8f;
        tc->optim = o;
        tc->stochastic_rounding = c->sr;
    }
    for (int f = 0; f < NF; f++) {
        snprintf(fx->names[NT + f], 8, "f%d", f);
        fx->features[f] = (ember_feature_config){.name = fx->names[NT + f], .table = FTAB[f]};
    }
    fx->cfg = (ember_ebc_config){.tables = fx->tables, .num_tables = NT, .features = fx->features, .num_features = NF,
                                 .bounds = c->bounds, .seed = 77};
}

static int quiet_log_calls;
static void quiet_log(void *user, ember_log_level level, const char *msg) {
    (void)user;
    (void)level;
    (void)msg;
    quiet_log_calls++;
}

static ember_ebc *make_ebc(const variant *v, fixture *fx, ember_ctx **ctx) {
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.isa = v->isa;
    cc.num_threads = 2;
    cc.log = quiet_log; // the CLAMP cases warn on every call
    assert_int_equal(ember_ctx_create(&cc, ctx), EMBER_OK);
    ember_ebc *ebc = NULL;
    fx->cfg.backend = v->backend;
    assert_int_equal(ember_ebc_create(*ctx, &fx->cfg, &ebc), EMBER_OK);
    if (v->kern) ember__cpu_set_kernels(ebc, v->kern);
    return ebc;
}

static void put_tables(trace *tr, const ember_ebc *ebc) {
    for (int t = 0; t < NT; t++) {
        for (int s = 0; s < ember_ebc_num_tensors(ebc, t); s++) {
            ember_tensor_info info;
            assert_int_equal(ember_ebc_tensor_info(ebc, t, s, &info), EMBER_OK);
            const size_t es = ember_dtype_size(info.dtype);
            const size_t bytes = (size_t)info.rows * (size_t)info.cols * es;
            void *buf = malloc(bytes);
            assert_int_equal(ember_ebc_read(ebc, t, info.name, 0, info.rows, info.dtype, buf), EMBER_OK);
            put(tr, buf, bytes);
            free(buf);
        }
    }
}

// A batch of step `step`: ids outside their tables where the bounds mode accepts them.
static void make_batch(gen_kjt *g, const tcase *c, int step) {
    test_rng r = {0x5eed0000u + (uint64_t)step};
    int64_t rows[NF];
    for (int f = 0; f < NF; f++) rows[f] = ROWS[FTAB[f]];
    gen_kjt_make(g, &r, NF, BATCH, rows, 12, 0.3, c->weighted);
    if (step == STEPS - 1) // hot rows: long segments
        for (int64_t j = 0; j < g->kjt.nnz; j += 3) g->values[j] = 0;
    if (c->bounds != EMBER_BOUNDS_ERROR)
        for (int64_t j = 0; j < g->kjt.nnz; j += 7) g->values[j] = j % 2 ? -3 : 5000;
    g->kjt.lengths = NULL; // offsets only
}

// Forward, backward (with per-id weight gradients) for STEPS batches, then every tensor.
static void run_steps(const variant *v, const tcase *c, trace *tr) {
    fixture fx;
    make_config(&fx, c);
    ember_ctx *ctx;
    ember_ebc *ebc = make_ebc(v, &fx, &ctx);
    for (int step = 0; step < STEPS; step++) {
        // Halfway, table 2 changes dtype (fp32 -> bf16 -> fp16 -> fp32; not with stochastic
        // rounding, which 16-bit storage alone has): the re-laid-out storage trains on alike.
        if (step == 1 && !c->sr) {
            const ember_dtype to = c->dtype == EMBER_DTYPE_F32 ? EMBER_DTYPE_BF16
                                   : c->dtype == EMBER_DTYPE_BF16 ? EMBER_DTYPE_F16
                                                                  : EMBER_DTYPE_F32;
            assert_int_equal(ember_ebc_convert_dtype(ebc, 2, to), EMBER_OK);
        }
        gen_kjt g;
        make_batch(&g, c, step);
        const int64_t n = ember_ebc_output_size(ebc, &g.kjt);
        float *out = malloc(sizeof(float) * (size_t)(n ? n : 1)), *grad = malloc(sizeof(float) * (size_t)(n ? n : 1));
        float *gw = malloc(sizeof(float) * (size_t)(g.kjt.nnz ? g.kjt.nnz : 1));
        assert_int_equal(ember_ebc_forward(ebc, &g.kjt, out), EMBER_OK);
        put(tr, out, sizeof(float) * (size_t)n);
        test_rng r = {0xabcdu + (uint64_t)step};
        for (int64_t i = 0; i < n; i++) grad[i] = (float)(rng_uniform(&r) - 0.5);
        assert_int_equal(ember_ebc_backward(ebc, &g.kjt, grad, c->weighted ? gw : NULL), EMBER_OK);
        if (c->weighted) put(tr, gw, sizeof(float) * (size_t)g.kjt.nnz);
        free(out);
        free(grad);
        free(gw);
        gen_kjt_free(&g);
    }
    put_tables(tr, ebc);
    ember_ebc_destroy(ebc);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
}

// The data-parallel scheme's path: coalesce a batch's gradient, then apply it (every other row
// with a given whole-row sum of squares, as column-wise shards pass).
static void run_apply(const variant *v, const tcase *c, trace *tr) {
    fixture fx;
    make_config(&fx, c);
    ember_ctx *ctx;
    ember_ebc *ebc = make_ebc(v, &fx, &ctx);
    for (int step = 0; step < STEPS; step++) {
        gen_kjt g;
        make_batch(&g, c, step);
        const int64_t n = ember_ebc_output_size(ebc, &g.kjt);
        float *grad = malloc(sizeof(float) * (size_t)(n ? n : 1));
        test_rng r = {0x1234u + (uint64_t)step};
        for (int64_t i = 0; i < n; i++) grad[i] = (float)(rng_uniform(&r) - 0.5);
        ember__sparse_grad sg;
        assert_int_equal(ember__ebc_coalesce(ebc, &g.kjt, grad, &sg), EMBER_OK);
        put(tr, sg.grad, sizeof(float) * (size_t)sg.goff[sg.n]);
        float *ss = malloc(sizeof(float) * (size_t)(sg.n ? sg.n : 1));
        assert_int_equal(ember__ebc_row_sumsq(ebc, &sg, ss), EMBER_OK);
        for (int64_t k = 0; k < sg.n; k += 2) ss[k] = -1.0f;
        assert_int_equal(ember__ebc_apply(ebc, sg.key, sg.goff, sg.grad, sg.n, ss), EMBER_OK);
        free(ss);
        free(grad);
        gen_kjt_free(&g);
    }
    put_tables(tr, ebc);
    ember_ebc_destroy(ebc);
    ember_ctx_destroy(ctx);
}

static const char *dtype_name(ember_dtype d) { return d == EMBER_DTYPE_F32 ? "fp32" : d == EMBER_DTYPE_F16 ? "fp16" : "bf16"; }

// Runs `fn` under every variant and compares the traces with generic's, byte for byte.
static int compare_variants(void (*fn)(const variant *, const tcase *, trace *), const tcase *c, const char *what) {
    trace ref = {0};
    fn(&variants[0], c, &ref);
    int bad = 0;
    for (int v = 1; v < nvariants; v++) {
        trace got = {0};
        fn(&variants[v], c, &got);
        if (got.n != ref.n || memcmp(got.data, ref.data, ref.n) != 0) {
            size_t i = 0;
            while (i < ref.n && i < got.n && got.data[i] == ref.data[i]) i++;
            printf("unit.isa: %s differs from generic: %s opt %d %s%s pool %d weighted %d wd %d bounds %d, "
                   "first at byte %zu of %zu\n",
                   variants[v].name, what, (int)c->opt, dtype_name(c->dtype), c->sr ? " sr" : "", (int)c->pool,
                   c->weighted, (int)c->wd, (int)c->bounds, i, ref.n);
            bad++;
        }
        free(got.data);
    }
    free(ref.data);
    return bad;
}

static const ember_optim_kind OPTS[] = {EMBER_OPT_SGD,  EMBER_OPT_ADAGRAD, EMBER_OPT_ROWWISE_ADAGRAD,
                                        EMBER_OPT_ADAM, EMBER_OPT_PARTIAL_ROWWISE_ADAM, EMBER_OPT_LAMB,
                                        EMBER_OPT_PARTIAL_ROWWISE_LAMB, EMBER_OPT_LARS_SGD};
static const struct { ember_dtype dt; int sr; } STORES[] = {
    {EMBER_DTYPE_F32, 0}, {EMBER_DTYPE_BF16, 0}, {EMBER_DTYPE_F16, 0}, {EMBER_DTYPE_BF16, 1}, {EMBER_DTYPE_F16, 1}};

// Every optimizer x storage x weighted, cycling the weight-decay and bounds modes.
static void matrix(ember_pooling pool, void (*fn)(const variant *, const tcase *, trace *), const char *what) {
    int bad = 0, n = 0;
    for (size_t o = 0; o < sizeof OPTS / sizeof OPTS[0]; o++)
        for (size_t s = 0; s < sizeof STORES / sizeof STORES[0]; s++)
            for (int w = 0; w < 2; w++, n++) {
                const tcase c = {OPTS[o], STORES[s].dt, STORES[s].sr, pool, w, (ember_weight_decay_mode)(n % 3),
                                 (ember_bounds_mode)((n / 3) % 3)};
                bad += compare_variants(fn, &c, what);
            }
    assert_int_equal(bad, 0);
}

static void variants_match_generic_sum(void **state) { (void)state; matrix(EMBER_POOL_SUM, run_steps, "train"); }
static void variants_match_generic_mean(void **state) { (void)state; matrix(EMBER_POOL_MEAN, run_steps, "train"); }
static void variants_match_generic_sequence(void **state) { (void)state; matrix(EMBER_POOL_NONE, run_steps, "train"); }
static void variants_match_generic_coalesce_apply(void **state) {
    (void)state;
    matrix(EMBER_POOL_MEAN, run_apply, "coalesce+apply");
}

#ifdef EMBER_TEST_CUDA
// A host array copied to a new device buffer (NULL for n == 0 bytes).
static void *to_device(const void *p, size_t bytes) {
    void *d = NULL;
    if (!bytes) return NULL;
    assert_int_equal(cudaMalloc(&d, bytes), cudaSuccess);
    assert_int_equal(cudaMemcpy(d, p, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

// ember_ebc_forward_device/backward_device (device memory) give the host calls' bits on the same
// batches; their device-side checks refuse bad offsets, ids outside a table (ERROR), non-finite
// weights and gradients before anything changes.
static void device_calls_match_host_calls(void **state) {
    (void)state;
    if (variants[nvariants - 1].backend != EMBER_BACKEND_CUDA) skip();
    for (int weighted = 0; weighted < 2; weighted++) {
        const tcase c = {EMBER_OPT_ADAM, EMBER_DTYPE_BF16, 1, EMBER_POOL_MEAN, weighted, EMBER_WD_NONE,
                         EMBER_BOUNDS_ERROR};
        fixture fa, fb;
        make_config(&fa, &c);
        make_config(&fb, &c);
        ember_ctx *ca, *cb;
        ember_ebc *host = make_ebc(&variants[0], &fa, &ca), *dev = make_ebc(&variants[1], &fb, &cb);
        for (int step = 0; step < STEPS; step++) {
            gen_kjt g;
            make_batch(&g, &c, step);
            const int64_t n = ember_ebc_output_size(host, &g.kjt);
            const size_t nb = (size_t)(n ? n : 1) * sizeof(float);
            float *oa = malloc(nb), *ob = malloc(nb), *grad = malloc(nb);
            test_rng r = {0xabcdu + (uint64_t)step};
            for (int64_t i = 0; i < n; i++) grad[i] = (float)(rng_uniform(&r) - 0.5);
            const size_t nf = (size_t)NF * BATCH + 1, nz = (size_t)g.kjt.nnz;
            ember_kjt dk = g.kjt;
            dk.offsets = to_device(g.kjt.offsets, nf * sizeof(int64_t));
            dk.values = to_device(g.kjt.values, nz * sizeof(int64_t));
            dk.weights = weighted ? to_device(g.kjt.weights, nz * sizeof(float)) : NULL;
            float *dout, *dgrad = to_device(grad, nb);
            assert_int_equal(cudaMalloc((void **)&dout, nb), cudaSuccess);
            assert_int_equal(ember_ebc_forward(host, &g.kjt, oa), EMBER_OK);
            assert_int_equal(ember_ebc_forward_device(dev, &dk, dout), EMBER_OK);
            assert_int_equal(cudaMemcpy(ob, dout, nb, cudaMemcpyDeviceToHost), cudaSuccess);
            assert_memory_equal(oa, ob, (size_t)n * sizeof(float));
            // Refused on the device, nothing changed: then the good call, compared below.
            ember_kjt bad = dk;
            bad.nnz = dk.nnz + 1; // offsets no longer end at nnz
            assert_int_equal(ember_ebc_backward_device(dev, &bad, dgrad), EMBER_ERR_INVALID_ARG);
            if (nz) {
                int64_t *vals = malloc(nz * sizeof(int64_t));
                memcpy(vals, g.kjt.values, nz * sizeof(int64_t));
                vals[nz - 1] = 1 << 20;
                bad = dk;
                bad.values = to_device(vals, nz * sizeof(int64_t));
                assert_int_equal(ember_ebc_backward_device(dev, &bad, dgrad), EMBER_ERR_OUT_OF_RANGE);
                assert_int_equal(ember_ebc_forward_device(dev, &bad, dout), EMBER_ERR_OUT_OF_RANGE);
                cudaFree((void *)bad.values);
                free(vals);
            }
            if (n) {
                const float nan = grad[n / 2];
                grad[n / 2] = (float)NAN;
                assert_int_equal(cudaMemcpy(dgrad, grad, nb, cudaMemcpyHostToDevice), cudaSuccess);
                assert_int_equal(ember_ebc_backward_device(dev, &dk, dgrad), EMBER_ERR_NUMERIC);
                grad[n / 2] = nan;
                assert_int_equal(cudaMemcpy(dgrad, grad, nb, cudaMemcpyHostToDevice), cudaSuccess);
            }
            assert_int_equal(ember_ebc_backward(host, &g.kjt, grad, NULL), EMBER_OK);
            assert_int_equal(ember_ebc_backward_device(dev, &dk, dgrad), EMBER_OK);
            cudaFree((void *)dk.offsets);
            cudaFree((void *)dk.values);
            cudaFree((void *)dk.weights);
            cudaFree(dout);
            cudaFree(dgrad);
            free(oa);
            free(ob);
            free(grad);
            gen_kjt_free(&g);
        }
        trace ta = {0}, tb = {0};
        put_tables(&ta, host);
        put_tables(&tb, dev);
        assert_int_equal(ta.n, tb.n);
        assert_memory_equal(ta.data, tb.data, ta.n);
        free(ta.data);
        free(tb.data);
        ember_ebc_destroy(host);
        ember_ebc_destroy(dev);
        ember_ctx_destroy(ca);
        ember_ctx_destroy(cb);
    }
}
#else
static void device_calls_match_host_calls(void **state) {
    (void)state;
    skip();
}
#endif

// A backend that cannot run here is refused with its reason, never run; tiered tables stay on the
// cpu; the device-memory calls refuse a cpu collection.
static void backend_choice(void **state) {
    (void)state;
    const tcase c = {EMBER_OPT_SGD, EMBER_DTYPE_F32, 0, EMBER_POOL_SUM, 0, EMBER_WD_NONE, EMBER_BOUNDS_ERROR};
    fixture fx;
    make_config(&fx, &c);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
    char why[256];
    ember_ebc *ebc = NULL;
    fx.cfg.backend = EMBER_BACKEND_CUDA;
    if (!ember_backend_supported(EMBER_BACKEND_CUDA, why, sizeof why)) {
        assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_ERR_UNSUPPORTED);
        assert_null(ebc);
        assert_non_null(strstr(ember_ctx_errmsg(ctx), "cuda"));
    }
    fx.tables[3].cache_rows = 10;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_ERR_UNSUPPORTED);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "cpu backend only"));
    fx.tables[3].cache_rows = 0;
    fx.cfg.backend = EMBER_BACKEND_CPU;
    assert_int_equal(ember_ebc_create(ctx, &fx.cfg, &ebc), EMBER_OK);
    const int64_t offsets[NF * 2 + 1] = {0};
    const int64_t values[1] = {0};
    const ember_kjt kjt = {.num_features = NF, .batch_size = 2, .offsets = offsets, .values = values};
    float out[1];
    assert_int_equal(ember_ebc_forward_device(ebc, &kjt, out), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_ebc_backward_device(ebc, &kjt, out), EMBER_ERR_UNSUPPORTED);
    ember_ebc_destroy(ebc);
    assert_false(ember_backend_supported((ember_backend)7, why, sizeof why));
    ember_ctx_destroy(ctx);
}

static void isa_names_round_trip(void **state) {
    (void)state;
    for (int i = 0; i < EMBER_ISA_COUNT; i++) {
        ember_isa back;
        assert_int_equal(ember_isa_parse(ember_isa_name((ember_isa)i), &back), EMBER_OK);
        assert_int_equal(back, i);
    }
    ember_isa x;
    assert_int_equal(ember_isa_parse("sse9", &x), EMBER_ERR_INVALID_ARG);
    assert_true(ember_isa_supported(EMBER_ISA_GENERIC, NULL, 0));
    assert_true(ember_isa_supported(ember_isa_best(), NULL, 0));
    assert_non_null(ember_cpu_name());
}

// A context never runs a variant the CPU lacks: creating one is an error, not a fallback; a
// bad EMBER_ISA value is an error too; a good one is honoured.
static void context_variant_choice(void **state) {
    (void)state;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.log = quiet_log;
    ember_ctx *ctx = NULL;
    for (int i = EMBER_ISA_GENERIC; i < EMBER_ISA_COUNT; i++) {
        cc.isa = (ember_isa)i;
        const ember_status st = ember_ctx_create(&cc, &ctx);
        if (ember_isa_supported((ember_isa)i, NULL, 0)) {
            assert_int_equal(st, EMBER_OK);
            assert_int_equal(ember_ctx_isa(ctx), i);
            ember_ctx_destroy(ctx);
        } else {
            assert_int_equal(st, EMBER_ERR_UNSUPPORTED);
            assert_null(ctx);
        }
    }
    cc.isa = EMBER_ISA_AUTO;
    const char *old = getenv("EMBER_ISA");
    char *saved = old ? strdup(old) : NULL;
    setenv("EMBER_ISA", "avx9000", 1);
    quiet_log_calls = 0;
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_ERR_INVALID_ARG);
    assert_int_equal(quiet_log_calls, 1);
    setenv("EMBER_ISA", "generic", 1);
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
    assert_int_equal(ember_ctx_isa(ctx), EMBER_ISA_GENERIC);
    ember_ctx_destroy(ctx);
    if (saved) setenv("EMBER_ISA", saved, 1);
    else unsetenv("EMBER_ISA");
    free(saved);
    cc.isa = (ember_isa)17;
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_ERR_INVALID_ARG);
}

int main(void) {
    find_variants();
    if (variants[nvariants - 1].backend != EMBER_BACKEND_CPU) {
        char why[256];
        if (!ember_backend_supported(variants[nvariants - 1].backend, why, sizeof why)) {
            printf("unit.backend.%s: skipped: %s\n", ember_backend_name(variants[nvariants - 1].backend), why);
            return 77;
        }
        printf("unit.backend.%s: comparing with the cpu backend (generic variant), and run to run\n",
               ember_backend_name(variants[nvariants - 1].backend));
    }
    printf("unit.isa: comparing %d variant(s) with generic on %s (%s)\n", nvariants - 1, ember_cpu_name(),
           ember_cpu_features());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(isa_names_round_trip),
        cmocka_unit_test(context_variant_choice),
        cmocka_unit_test(variants_match_generic_sum),
        cmocka_unit_test(variants_match_generic_mean),
        cmocka_unit_test(variants_match_generic_sequence),
        cmocka_unit_test(variants_match_generic_coalesce_apply),
        cmocka_unit_test(device_calls_match_host_calls),
        cmocka_unit_test(backend_choice),
    };
    // EMBER_TEST_FILTER: only the cases matching it (the device check runs one under racecheck).
    const char *filter = getenv("EMBER_TEST_FILTER");
    if (filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
