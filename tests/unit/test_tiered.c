// Tiered tables against the same tables in RAM: with a cache much smaller than the table (rows
// are evicted and written back every step) outputs, grad weights, weights and optimizer state
// are bitwise equal, for every optimizer, dtype, pooling, bounds mode and policy. A batch the
// cache cannot hold changes nothing; a disk without room fails at creation.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <signal.h>

#include <cmocka.h>

#include "ember.h"
#include "gen.h"
#include "tmpdir.h"

// Table 0 (300 rows) is read by two features; table 1 has one row; table 2 is in RAM in both.
#define NT 3
#define NF 4
static const int64_t ROWS[NT] = {300, 1, 40};
static const int32_t DIMS[NT] = {8, 4, 5};
static const int32_t ODD_DIMS[NT] = {5, 3, 3}; // 16-bit rows of an odd byte count of 4s
static const int32_t *g_dims = DIMS;
static const int32_t FTAB[NF] = {0, 1, 0, 2};
#define B 6
#define MAXLEN 4
#define CACHE0 (2 * B * MAXLEN) // the most distinct rows one batch can touch in table 0

typedef struct pair {
    ember_ctx *ctx;
    ember_ebc *ram, *tier;
    ember_table_config t[NT];
    ember_feature_config f[NF];
    char fname[NF][8];
} pair;

static void make_pair(pair *p, ember_optim_kind opt, ember_dtype dt, ember_pooling pool, ember_bounds_mode bounds,
                      ember_evict_policy policy, int64_t cache0) {
    memset(p, 0, sizeof *p);
    assert_int_equal(ember_ctx_create(NULL, &p->ctx), EMBER_OK);
    static const char *names[NT] = {"big", "one", "ram"};
    for (int t = 0; t < NT; t++) {
        ember_table_config c = EMBER_TABLE_CONFIG_DEFAULT;
        c.name = names[t];
        c.rows = ROWS[t];
        c.dim = pool == EMBER_POOL_NONE ? 4 : g_dims[t];
        c.pooling = pool;
        c.dtype = dt;
        c.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
        c.optim.kind = opt;
        c.optim.lr = 0.05f;
        c.optim.initial_accumulator = 0.1f;
        p->t[t] = c;
    }
    for (int f = 0; f < NF; f++) {
        snprintf(p->fname[f], sizeof p->fname[f], "f%d", f);
        p->f[f] = (ember_feature_config){.name = p->fname[f], .table = FTAB[f]};
    }
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = p->t, cfg.num_tables = NT, cfg.features = p->f, cfg.num_features = NF;
    cfg.bounds = bounds, cfg.seed = 99, cfg.ssd_dir = test_tmpdir;
    assert_int_equal(ember_ebc_create(p->ctx, &cfg, &p->ram), EMBER_OK);
    ember_table_config tt[NT];
    memcpy(tt, p->t, sizeof tt);
    tt[0].cache_rows = cache0, tt[0].cache_policy = policy;
    tt[1].cache_rows = 1, tt[1].cache_policy = policy;
    cfg.tables = tt;
    assert_int_equal(ember_ebc_create(p->ctx, &cfg, &p->tier), EMBER_OK);
}

static void free_pair(pair *p) {
    ember_ebc_destroy(p->ram);
    ember_ebc_destroy(p->tier);
    ember_ctx_destroy(p->ctx);
}

// Every tensor of every table, read through the state dict, is bitwise the same.
static void assert_same_tables(const pair *p) {
    for (int t = 0; t < NT; t++) {
        for (int k = 0; k < ember_ebc_num_tensors(p->ram, t); k++) {
            ember_tensor_info ti;
            assert_int_equal(ember_ebc_tensor_info(p->ram, t, k, &ti), EMBER_OK);
            const size_t n = (size_t)ti.rows * (size_t)ti.cols;
            float *a = malloc(4 * n), *b = malloc(4 * n);
            assert_int_equal(ember_ebc_read(p->ram, t, ti.name, 0, ti.rows, EMBER_DTYPE_F32, a), EMBER_OK);
            assert_int_equal(ember_ebc_read(p->tier, t, ti.name, 0, ti.rows, EMBER_DTYPE_F32, b), EMBER_OK);
            if (memcmp(a, b, 4 * n) != 0) fail_msg("table %d tensor %s differs", t, ti.name);
            free(a), free(b);
        }
        assert_int_equal(ember_ebc_step(p->ram, t), ember_ebc_step(p->tier, t));
    }
}

// ids: uniform, or skewed (half the ids from the first 10 rows), with out-of-range ones for
// CLAMP/SKIP.
static void make_batch(gen_kjt *g, test_rng *r, int weighted, int skew, int oob) {
    int64_t rows[NF];
    for (int f = 0; f < NF; f++) rows[f] = ROWS[FTAB[f]];
    gen_kjt_make(g, r, NF, B, rows, MAXLEN, 0.2, weighted);
    for (int64_t j = 0; j < g->kjt.nnz; j++) {
        if (skew && rng_int(r, 2) == 0) g->values[j] %= 10;
        if (oob && rng_int(r, 10) == 0) g->values[j] = rng_int(r, 2) ? -3 : 1000;
    }
}

// prefetch: after each forward, the next batch's rows are prefetched (ember_ebc_prefetch) and,
// with poke, rows are written through the state dict in between.
static void run_steps_ex(pair *p, int steps, int weighted, int skew, int oob, uint64_t seed, int prefetch, int poke) {
    test_rng r = {seed};
    gen_kjt g, next;
    if (steps > 0) make_batch(&g, &r, weighted, skew, oob);
    for (int s = 0; s < steps; s++) {
        const int64_t n = ember_ebc_output_size(p->ram, &g.kjt);
        float *o1 = calloc((size_t)n + 1, 4), *o2 = calloc((size_t)n + 1, 4), *go = malloc(4 * ((size_t)n + 1));
        float *gw1 = calloc((size_t)g.kjt.nnz + 1, 4), *gw2 = calloc((size_t)g.kjt.nnz + 1, 4);
        assert_int_equal(ember_ebc_forward(p->ram, &g.kjt, o1), EMBER_OK);
        assert_int_equal(ember_ebc_forward(p->tier, &g.kjt, o2), EMBER_OK);
        assert_memory_equal(o1, o2, 4 * (size_t)n);
        if (s + 1 < steps) {
            make_batch(&next, &r, weighted, skew, oob);
            if (prefetch) assert_int_equal(ember_ebc_prefetch(p->tier, &next.kjt), EMBER_OK);
            if (poke && next.kjt.nnz > 0 && next.values[0] >= 0 && next.values[0] < ROWS[FTAB[0]]) {
                float w[16];
                for (int d = 0; d < 16; d++) w[d] = 0.125f * (float)(s + d);
                const int64_t row = next.values[0];
                assert_int_equal(ember_ebc_write(p->ram, 0, "weight", row, row + 1, EMBER_DTYPE_F32, w), EMBER_OK);
                assert_int_equal(ember_ebc_write(p->tier, 0, "weight", row, row + 1, EMBER_DTYPE_F32, w), EMBER_OK);
            }
        }
        for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&r) - 0.5);
        assert_int_equal(ember_ebc_backward(p->ram, &g.kjt, go, weighted ? gw1 : NULL), EMBER_OK);
        assert_int_equal(ember_ebc_backward(p->tier, &g.kjt, go, weighted ? gw2 : NULL), EMBER_OK);
        assert_memory_equal(gw1, gw2, 4 * (size_t)g.kjt.nnz);
        free(o1), free(o2), free(go), free(gw1), free(gw2);
        gen_kjt_free(&g);
        if (s + 1 < steps) g = next;
    }
}

static void run_steps(pair *p, int steps, int weighted, int skew, int oob, uint64_t seed) {
    run_steps_ex(p, steps, weighted, skew, oob, seed, 0, 0);
}

static void every_optimizer_dtype_and_policy_equals_ram(void **state) {
    (void)state;
    for (int opt = 0; opt < EMBER_OPT_COUNT; opt++) {
        for (int dt = 0; dt < 3; dt++) {
            const ember_pooling pool = (ember_pooling)((opt + dt) % 3);
            const ember_evict_policy pol = (ember_evict_policy)((opt + dt) % 2);
            pair p;
            make_pair(&p, (ember_optim_kind)opt, (ember_dtype)dt, pool, EMBER_BOUNDS_ERROR, pol, CACHE0);
            run_steps_ex(&p, 12, pool != EMBER_POOL_NONE && dt == 0, opt % 2, 0, 1000 + (uint64_t)opt * 7 + (uint64_t)dt,
                         (opt + dt) % 3 != 0, 0);
            assert_same_tables(&p);
            ember_tier_stats st;
            assert_int_equal(ember_ebc_tier_stats(p.tier, 0, &st), EMBER_OK);
            assert_true(st.evictions > 0);   // the cache is far smaller than the table
            assert_true(st.rows_written > 0);
            assert_true(st.hits > 0);
            free_pair(&p);
        }
    }
}

// Tiered tables of odd dims in fp16 and bf16: a row's weights end 2 bytes off a float boundary,
// so the row's scratch after them must not be used as floats in place (the sanitized pass checks
// alignment); the numbers equal the in-RAM twin's, every optimizer.
static void odd_dims_in_16_bits_equal_ram(void **state) {
    (void)state;
    g_dims = ODD_DIMS;
    for (int opt = 0; opt < EMBER_OPT_COUNT; opt++) {
        for (int dt = 1; dt < 3; dt++) {
            pair p;
            make_pair(&p, (ember_optim_kind)opt, (ember_dtype)dt, (ember_pooling)(opt % 2), EMBER_BOUNDS_ERROR,
                      (ember_evict_policy)(opt % 2), CACHE0);
            run_steps_ex(&p, 8, opt % 2, 1, 0, 500 + (uint64_t)opt * 3 + (uint64_t)dt, opt % 3 == 0, 0);
            assert_same_tables(&p);
            ember_tier_stats st;
            assert_int_equal(ember_ebc_tier_stats(p.tier, 0, &st), EMBER_OK);
            assert_true(st.evictions > 0);
            free_pair(&p);
        }
    }
    g_dims = DIMS;
}

// The prefetch of the next batch (ember_ebc_prefetch), with state-dict writes between it and the
// forward: the same numbers as in RAM.
static void prefetch_with_writes_between_equals_ram(void **state) {
    (void)state;
    for (int pol = EMBER_EVICT_LRU; pol <= EMBER_EVICT_LFU; pol++) {
        pair p;
        make_pair(&p, EMBER_OPT_ADAM, EMBER_DTYPE_BF16, EMBER_POOL_SUM, EMBER_BOUNDS_SKIP, (ember_evict_policy)pol, CACHE0);
        run_steps_ex(&p, 16, 0, 1, 1, 31 + (uint64_t)pol, 1, 1);
        assert_same_tables(&p);
        // The prefetches asked for rows the files held (the others the forwards make).
        int64_t prefetched = 0;
        ember_tier_stats st;
        for (int32_t t = 0; ember_ebc_tier_stats(p.tier, t, &st) == EMBER_OK; t++) prefetched += st.prefetched;
        assert_true(prefetched > 0);
        // A prefetch whose batch never comes: the next forward of another batch is still right.
        gen_kjt g;
        test_rng r = {99};
        make_batch(&g, &r, 0, 0, 0);
        assert_int_equal(ember_ebc_prefetch(p.tier, &g.kjt), EMBER_OK);
        gen_kjt_free(&g);
        run_steps(&p, 3, 0, 0, 0, 100);
        assert_same_tables(&p);
        // Bad input is refused as forward refuses it; the destroy joins a pending prefetch.
        ember_kjt bad = {.num_features = NF + 1, .batch_size = 0, .nnz = 0};
        assert_int_equal(ember_ebc_prefetch(p.tier, &bad), EMBER_ERR_INVALID_ARG);
        make_batch(&g, &r, 0, 0, 0);
        assert_int_equal(ember_ebc_prefetch(p.tier, &g.kjt), EMBER_OK);
        gen_kjt_free(&g);
        free_pair(&p);
    }
}

static void bounds_modes_equal_ram(void **state) {
    (void)state;
    for (int bm = EMBER_BOUNDS_CLAMP; bm <= EMBER_BOUNDS_SKIP; bm++) {
        pair p;
        make_pair(&p, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_DTYPE_F32, EMBER_POOL_MEAN, (ember_bounds_mode)bm,
                  EMBER_EVICT_LRU, CACHE0);
        run_steps(&p, 10, 1, 0, 1, 77 + (uint64_t)bm);
        assert_same_tables(&p);
        free_pair(&p);
    }
}

// State dict writes land in the cache or the file, whichever holds the row; reads agree.
static void state_dict_round_trip(void **state) {
    (void)state;
    pair p;
    make_pair(&p, EMBER_OPT_ADAM, EMBER_DTYPE_F16, EMBER_POOL_SUM, EMBER_BOUNDS_ERROR, EMBER_EVICT_LFU, CACHE0);
    run_steps(&p, 5, 0, 1, 0, 5);
    float *w = malloc(sizeof(float) * 300 * 8);
    for (int i = 0; i < 300 * 8; i++) w[i] = (float)i / 64.0f;
    assert_int_equal(ember_ebc_write(p.ram, 0, "momentum1", 0, 300, EMBER_DTYPE_F32, w), EMBER_OK);
    assert_int_equal(ember_ebc_write(p.tier, 0, "momentum1", 0, 300, EMBER_DTYPE_F32, w), EMBER_OK);
    assert_int_equal(ember_ebc_write(p.ram, 0, "weight", 10, 290, EMBER_DTYPE_F32, w), EMBER_OK);
    assert_int_equal(ember_ebc_write(p.tier, 0, "weight", 10, 290, EMBER_DTYPE_F32, w), EMBER_OK);
    assert_same_tables(&p);
    run_steps(&p, 5, 0, 0, 0, 6);
    assert_same_tables(&p);
    const void *data;
    size_t stride;
    assert_int_equal(ember_ebc_weights_view(p.tier, 0, &data, &stride), EMBER_ERR_UNSUPPORTED);
    assert_int_equal(ember_ebc_convert_dtype(p.tier, 0, EMBER_DTYPE_F32), EMBER_ERR_UNSUPPORTED);
    free(w);
    free_pair(&p);
}

// A batch with more distinct rows than the cache fails and changes nothing.
static void batch_larger_than_cache_is_refused(void **state) {
    (void)state;
    pair p;
    make_pair(&p, EMBER_OPT_SGD, EMBER_DTYPE_F32, EMBER_POOL_SUM, EMBER_BOUNDS_ERROR, EMBER_EVICT_LRU, 8);
    int32_t len[NF * B] = {0};
    int64_t vals[20];
    for (int i = 0; i < 20; i++) vals[i] = i * 3;
    len[0] = 20; // feature 0, bag 0: 20 distinct rows of table 0
    ember_kjt k = {.num_features = NF, .batch_size = B, .lengths = len, .values = vals, .nnz = 20};
    float out[B * (8 + 4 + 8 + 5)] = {0}; // also the backward's (finite) gradient
    assert_int_equal(ember_ebc_forward(p.tier, &k, out), EMBER_ERR_UNSUPPORTED);
    assert_non_null(strstr(ember_ctx_errmsg(p.ctx), "'big'"));
    assert_int_equal(ember_ebc_backward(p.tier, &k, out, NULL), EMBER_ERR_UNSUPPORTED);
    run_steps(&p, 0, 0, 0, 0, 1);
    assert_same_tables(&p);
    free_pair(&p);
}

// A disk without room for the table: creation reserves the whole file, so it fails there with
// EMBER_ERR_IO naming the table and the directory, leaks nothing, and training never meets a
// full disk.
static void full_disk_fails_at_creation(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "big", t.rows = 100000, t.dim = 16, t.cache_rows = 100;
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = &t, cfg.num_tables = 1, cfg.features = &f, cfg.num_features = 1, cfg.ssd_dir = test_tmpdir;
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1 << 20; // files may not grow past 1 MB: the table needs 6.4
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    ember_ebc *e = NULL;
    const ember_status st = ember_ebc_create(ctx, &cfg, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    assert_int_equal(st, EMBER_ERR_IO);
    assert_null(e);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "'big'"));
    assert_non_null(strstr(ember_ctx_errmsg(ctx), test_tmpdir));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_OK);
    ember_ebc_destroy(e);
    ember_ctx_destroy(ctx);
}

static void bad_configs_are_refused(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "t", t.rows = 100, t.dim = 4, t.cache_rows = 10;
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = &t, cfg.num_tables = 1, cfg.features = &f, cfg.num_features = 1;
    ember_ebc *e = NULL;
    cfg.ssd_dir = "/nonexistent/dir";
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_ERR_IO);
    assert_non_null(strstr(ember_ctx_errmsg(ctx), "/nonexistent/dir"));
    cfg.ssd_dir = test_tmpdir;
    t.stochastic_rounding = 1, t.dtype = EMBER_DTYPE_F16;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_ERR_UNSUPPORTED);
    t.stochastic_rounding = 0;
    t.cache_policy = EMBER_EVICT_TTL;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_ERR_INVALID_ARG);
    t.cache_policy = EMBER_EVICT_LRU;
    t.cache_rows = -1;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_ERR_INVALID_ARG);
    assert_null(e);
    ember_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_optimizer_dtype_and_policy_equals_ram),
        cmocka_unit_test(prefetch_with_writes_between_equals_ram),
        cmocka_unit_test(odd_dims_in_16_bits_equal_ram),
        cmocka_unit_test(bounds_modes_equal_ram),
        cmocka_unit_test(state_dict_round_trip),
        cmocka_unit_test(batch_larger_than_cache_is_refused),
        cmocka_unit_test(full_disk_fails_at_creation),
        cmocka_unit_test(bad_configs_are_refused),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_make, test_tmpdir_remove);
}
