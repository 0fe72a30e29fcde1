// Hashed tables against a naive model: a plain per-bucket id map written from docs/hashed.md
// (no code shared with src/) translates ids to rows, and the naive oracle (tests/support) pools
// and updates those rows in double precision. Ids are arbitrary int64 (negative, huge,
// duplicates), the capacity is far below the distinct ids so rows are evicted every step.
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
#include "oracle.h"

#define CAP 32   // rows of the hashed table
#define BR 4     // rows per bucket
#define NB (CAP / BR)
#define B 5
#define MAXLEN 4
#define NPOOL 96 // distinct ids the batches draw from

// ---- the naive id map -------------------------------------------------------------------
typedef struct naive {
    int64_t id[CAP], last[CAP], uses[CAP], pin[CAP], occ[CAP];
    int64_t cid[CAP], ccnt[CAP], clast[CAP]; // BR candidates per bucket
    int64_t min_count, ttl, call;
    ember_evict_policy pol;
} naive;

static int64_t bucket_of(int64_t x) {
    uint64_t z = (uint64_t)x + 0x9e3779b97f4a7c15ull; // splitmix64 (docs/hashed.md)
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (int64_t)(z % NB);
}

static int dead(const naive *n, int r, int64_t now) {
    return n->pol == EMBER_EVICT_TTL && n->occ[r] && now - n->last[r] > n->ttl;
}

// Rows for ids[k] (-1 absent); fresh[k] = 1 when the id got a new row in this call.
static void naive_map(naive *n, const int64_t *ids, int64_t k, int64_t now, int train, int64_t *rows, int *fresh) {
    n->call++;
    for (int64_t j = 0; j < k; j++) {
        const int64_t x = ids[j], b = bucket_of(x);
        int64_t r = -1;
        fresh[j] = 0;
        for (int s = 0; s < BR; s++)
            if (n->occ[b * BR + s] && n->id[b * BR + s] == x) r = b * BR + s;
        if (r >= 0 && dead(n, (int)r, now) && n->pin[r] != n->call) r = -1;
        if (r < 0 && train) {
            int admit = 1;
            if (n->min_count > 1) {
                int c = -1;
                for (int s = 0; s < BR; s++)
                    if (n->ccnt[b * BR + s] > 0 && n->cid[b * BR + s] == x) c = s;
                if (c < 0) { // a new candidate replaces the least recently seen (empty first)
                    c = 0;
                    for (int s = 1; s < BR; s++) {
                        const int64_t i = b * BR + s, v = b * BR + c;
                        if (n->ccnt[v] > 0 && (n->ccnt[i] == 0 || n->clast[i] < n->clast[v])) c = s;
                    }
                    n->cid[b * BR + c] = x, n->ccnt[b * BR + c] = 0;
                }
                n->ccnt[b * BR + c]++;
                n->clast[b * BR + c] = now;
                admit = n->ccnt[b * BR + c] >= n->min_count;
                if (admit) n->ccnt[b * BR + c] = 0;
            }
            if (admit) {
                for (int s = 0; s < BR; s++)
                    if (dead(n, (int)(b * BR + s), now) && n->pin[b * BR + s] != n->call) n->occ[b * BR + s] = 0;
                int64_t v = -1;
                for (int s = 0; s < BR && v < 0; s++)
                    if (!n->occ[b * BR + s]) v = b * BR + s;
                if (v < 0) {
                    for (int s = 0; s < BR; s++) {
                        const int64_t i = b * BR + s;
                        if (n->pin[i] == n->call) continue;
                        if (v < 0) { v = i; continue; }
                        const int lfu = n->pol == EMBER_EVICT_LFU;
                        if ((lfu && n->uses[i] < n->uses[v]) ||
                            ((!lfu || n->uses[i] == n->uses[v]) && n->last[i] < n->last[v]))
                            v = i;
                    }
                }
                if (v >= 0) {
                    n->id[v] = x, n->uses[v] = 0, n->last[v] = now, n->occ[v] = 1;
                    r = v;
                    fresh[j] = 1;
                }
            }
        }
        if (r >= 0 && train) n->pin[r] = n->call;
        rows[j] = r;
    }
    // Every occurrence of an id that has a row now reads it and is a use.
    for (int64_t j = 0; j < k; j++) {
        if (!train) continue;
        const int64_t b = bucket_of(ids[j]);
        if (rows[j] < 0)
            for (int s = 0; s < BR; s++)
                if (n->occ[b * BR + s] && n->id[b * BR + s] == ids[j] && n->pin[b * BR + s] == n->call) rows[j] = b * BR + s;
        if (rows[j] >= 0) n->uses[rows[j]]++, n->last[rows[j]] = now;
    }
}

// ---- the test ------------------------------------------------------------------------------
typedef struct setup {
    ember_ctx *ctx;
    ember_ebc *e, *probe; // probe: a dense table of the same name, whose row R is id R's start
    ember_table_config t;
    ember_feature_config f[2];
    ember_ebc_config cfg;
    oracle *o;
    naive n;
    int64_t pool[NPOOL];
} setup;

static void make(setup *s, ember_optim_kind opt, ember_pooling pool, ember_evict_policy pol, int64_t min_count) {
    memset(s, 0, sizeof *s);
    assert_int_equal(ember_ctx_create(NULL, &s->ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "h", t.rows = CAP, t.dim = 6, t.pooling = pool;
    t.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
    t.optim.kind = opt, t.optim.lr = 0.1f, t.optim.initial_accumulator = 0.2f;
    t.hash = (ember_hash_config){.enabled = 1, .bucket_rows = BR, .min_count = min_count, .policy = pol,
                                 .ttl_steps = 3};
    s->t = t;
    s->f[0] = (ember_feature_config){.name = "a", .table = 0};
    s->f[1] = (ember_feature_config){.name = "b", .table = 0};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = &s->t, cfg.num_tables = 1, cfg.features = s->f, cfg.num_features = 2, cfg.seed = 4;
    s->cfg = cfg;
    assert_int_equal(ember_ebc_create(s->ctx, &s->cfg, &s->e), EMBER_OK);
    ember_table_config d = t;
    d.hash.enabled = 0, d.rows = 1000;
    ember_ebc_config pc = cfg;
    pc.tables = &d;
    assert_int_equal(ember_ebc_create(s->ctx, &pc, &s->probe), EMBER_OK);
    s->o = oracle_create(&s->cfg, s->e);
    s->o->bounds = EMBER_BOUNDS_SKIP;
    s->n.min_count = min_count, s->n.ttl = 3, s->n.pol = pol;
    test_rng r = {77};
    for (int i = 0; i < NPOOL; i++) { // small ids (checked against the probe), negative and huge ones
        s->pool[i] = i % 3 == 0 ? rng_int(&r, 1000) : i % 3 == 1 ? -(int64_t)(rng_next(&r) >> 2) : (int64_t)(rng_next(&r) >> 1);
    }
}

static void destroy(setup *s) {
    oracle_destroy(s->o);
    ember_ebc_destroy(s->e);
    ember_ebc_destroy(s->probe);
    ember_ctx_destroy(s->ctx);
}

// A fresh row in the oracle: weights the id's initial values, optimizer state as new.
static void oracle_fresh(setup *s, int64_t row, int64_t id) {
    oracle_table *ot = &s->o->t[0];
    const int D = s->t.dim;
    float w[6];
    if (id >= 0 && id < 1000) assert_int_equal(ember_ebc_read(s->probe, 0, "weight", id, id + 1, EMBER_DTYPE_F32, w), EMBER_OK);
    else assert_int_equal(ember_ebc_read(s->e, 0, "weight", row, row + 1, EMBER_DTYPE_F32, w), EMBER_OK);
    for (int d = 0; d < D; d++) ot->w[row * D + d] = w[d];
    const double a = s->t.optim.kind == EMBER_OPT_ADAGRAD || s->t.optim.kind == EMBER_OPT_ROWWISE_ADAGRAD
                         ? s->t.optim.initial_accumulator : 0.0;
    const int m1c = s->t.optim.kind == EMBER_OPT_ROWWISE_ADAGRAD ? 1 : D;
    if (ot->m1) for (int d = 0; d < m1c; d++) ot->m1[row * m1c + d] = a;
    if (ot->m2) for (int d = 0; d < D; d++) ot->m2[row * D + d] = 0.0; // Adam: [rows, dim]
}

static void compare_state(setup *s) {
    int64_t ids[CAP * 3];
    assert_int_equal(ember_ebc_read(s->e, 0, "ids", 0, CAP, EMBER_DTYPE_I64, ids), EMBER_OK);
    float w[CAP * 6];
    assert_int_equal(ember_ebc_read(s->e, 0, "weight", 0, CAP, EMBER_DTYPE_F32, w), EMBER_OK);
    for (int r = 0; r < CAP; r++) {
        assert_int_equal(ids[3 * r + 2], s->n.occ[r] ? s->n.uses[r] : 0);
        if (!s->n.occ[r]) continue;
        assert_int_equal(ids[3 * r], s->n.id[r]);
        assert_int_equal(ids[3 * r + 1], s->n.last[r]);
        assert_true(rel_err_f(w + r * 6, s->o->t[0].w + r * 6, 6, 1e-5, 1e-4) <= 1.0);
    }
}

static void run(setup *s, int steps, uint64_t seed, int eval_every) {
    test_rng r = {seed};
    for (int step = 0; step < steps; step++) {
        const int train = !eval_every || step % eval_every != eval_every - 1;
        ember_ebc_set_training(s->e, train);
        gen_kjt g;
        const int64_t rows[2] = {NPOOL, NPOOL};
        gen_kjt_make(&g, &r, 2, B, rows, MAXLEN, 0.3, 0);
        for (int64_t j = 0; j < g.kjt.nnz; j++) g.values[j] = s->pool[g.values[j]];
        const int64_t nnz = g.kjt.nnz, now = ember_ebc_step(s->e, 0) + 1;
        int64_t *mrow = malloc(sizeof(int64_t) * (size_t)(nnz + 1));
        int *fresh = malloc(sizeof(int) * (size_t)(nnz + 1));
        const int64_t n = ember_ebc_output_size(s->e, &g.kjt);
        float *out = calloc((size_t)n + 1, 4), *go = malloc(4 * ((size_t)n + 1));
        double *ref = calloc((size_t)n + 1, 8);
        assert_int_equal(ember_ebc_forward(s->e, &g.kjt, out), EMBER_OK);
        naive_map(&s->n, g.values, nnz, now, train, mrow, fresh);
        for (int64_t j = 0; j < nnz; j++) {
            if (fresh[j]) oracle_fresh(s, mrow[j], g.values[j]);
        }
        ember_kjt mk = g.kjt;
        mk.values = mrow;
        oracle_forward(s->o, &mk, ref);
        assert_true(rel_err_f(out, ref, n, 1e-5, 1e-4) <= 1.0);
        if (train) {
            for (int64_t i = 0; i < n; i++) go[i] = (float)(rng_uniform(&r) - 0.5);
            assert_int_equal(ember_ebc_backward(s->e, &g.kjt, go, NULL), EMBER_OK);
            oracle_backward(s->o, &mk, go, NULL);
        }
        compare_state(s);
        free(mrow), free(fresh), free(out), free(go), free(ref);
        gen_kjt_free(&g);
    }
}

static void policies_and_admission_match_the_naive_model(void **state) {
    (void)state;
    const ember_optim_kind opts[] = {EMBER_OPT_SGD, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM};
    for (int pol = EMBER_EVICT_LRU; pol <= EMBER_EVICT_TTL; pol++)
        for (int mc = 1; mc <= 3; mc += 2)
            for (int k = 0; k < 3; k++) {
                setup s;
                make(&s, opts[k], (k + pol) % 2 ? EMBER_POOL_MEAN : EMBER_POOL_SUM, (ember_evict_policy)pol, mc);
                run(&s, 16, 100 + (uint64_t)(pol * 10 + mc * 3 + k), 5);
                ember_hash_stats hs;
                assert_int_equal(ember_ebc_hash_stats(s.e, 0, &hs), EMBER_OK);
                assert_true(hs.admitted > 0);
                if (mc == 1) assert_true(hs.evicted > 0); // far more ids than rows
                if (pol == EMBER_EVICT_TTL) assert_true(hs.absent > 0);
                destroy(&s);
            }
}

// Written "ids" + weights + state + step restore the table: both go on identically.
static void state_dict_round_trip(void **state) {
    (void)state;
    setup s;
    make(&s, EMBER_OPT_ROWWISE_ADAGRAD, EMBER_POOL_SUM, EMBER_EVICT_LFU, 2);
    run(&s, 6, 5, 0);
    ember_ebc *c;
    assert_int_equal(ember_ebc_create(s.ctx, &s.cfg, &c), EMBER_OK);
    int64_t ids[CAP * 3];
    float buf[CAP * 6];
    assert_int_equal(ember_ebc_read(s.e, 0, "ids", 0, CAP, EMBER_DTYPE_I64, ids), EMBER_OK);
    assert_int_equal(ember_ebc_write(c, 0, "ids", 0, CAP, EMBER_DTYPE_I64, ids), EMBER_OK);
    assert_int_equal(ember_ebc_read(s.e, 0, "weight", 0, CAP, EMBER_DTYPE_F32, buf), EMBER_OK);
    assert_int_equal(ember_ebc_write(c, 0, "weight", 0, CAP, EMBER_DTYPE_F32, buf), EMBER_OK);
    assert_int_equal(ember_ebc_read(s.e, 0, "momentum1", 0, CAP, EMBER_DTYPE_F32, buf), EMBER_OK);
    assert_int_equal(ember_ebc_write(c, 0, "momentum1", 0, CAP, EMBER_DTYPE_F32, buf), EMBER_OK);
    assert_int_equal(ember_ebc_set_step(c, 0, ember_ebc_step(s.e, 0)), EMBER_OK);
    int64_t cand[CAP * 3];
    assert_int_equal(ember_ebc_read(s.e, 0, "candidates", 0, CAP, EMBER_DTYPE_I64, cand), EMBER_OK);
    assert_int_equal(ember_ebc_write(c, 0, "candidates", 0, CAP, EMBER_DTYPE_I64, cand), EMBER_OK);
    // Bad maps are refused and change nothing: an id outside its row's bucket, an id twice.
    int64_t bad[CAP * 3];
    memcpy(bad, ids, sizeof bad);
    int r0 = -1, r1 = -1; // two occupied rows of different buckets
    for (int r = 0; r < CAP; r++) {
        if (ids[3 * r + 2] == 0) continue;
        if (r0 < 0) r0 = r;
        else if (r1 < 0 && r / BR != r0 / BR) r1 = r;
    }
    assert_true(r0 >= 0 && r1 >= 0);
    bad[3 * r1] = ids[3 * r0]; // r0's id in another bucket's row
    assert_int_equal(ember_ebc_write(c, 0, "ids", 0, CAP, EMBER_DTYPE_I64, bad), EMBER_ERR_INVALID_ARG);
    assert_int_equal(ember_ebc_write(c, 0, "ids", 0, CAP, EMBER_DTYPE_F32, ids), EMBER_ERR_INVALID_ARG);
    int64_t again[CAP * 3];
    assert_int_equal(ember_ebc_read(c, 0, "ids", 0, CAP, EMBER_DTYPE_I64, again), EMBER_OK);
    assert_memory_equal(again, ids, sizeof ids);
    // Both go on with the same batches: bitwise the same.
    test_rng r = {9};
    for (int step = 0; step < 6; step++) {
        gen_kjt g;
        const int64_t rows[2] = {NPOOL, NPOOL};
        gen_kjt_make(&g, &r, 2, B, rows, MAXLEN, 0.3, 0);
        for (int64_t j = 0; j < g.kjt.nnz; j++) g.values[j] = s.pool[g.values[j]];
        const int64_t n = ember_ebc_output_size(s.e, &g.kjt);
        float *o1 = calloc((size_t)n + 1, 4), *o2 = calloc((size_t)n + 1, 4);
        assert_int_equal(ember_ebc_forward(s.e, &g.kjt, o1), EMBER_OK);
        assert_int_equal(ember_ebc_forward(c, &g.kjt, o2), EMBER_OK);
        assert_memory_equal(o1, o2, 4 * (size_t)n);
        assert_int_equal(ember_ebc_backward(s.e, &g.kjt, o1, NULL), EMBER_OK);
        assert_int_equal(ember_ebc_backward(c, &g.kjt, o1, NULL), EMBER_OK);
        free(o1), free(o2);
        gen_kjt_free(&g);
    }
    assert_int_equal(ember_ebc_read(s.e, 0, "weight", 0, CAP, EMBER_DTYPE_F32, buf), EMBER_OK);
    float buf2[CAP * 6];
    assert_int_equal(ember_ebc_read(c, 0, "weight", 0, CAP, EMBER_DTYPE_F32, buf2), EMBER_OK);
    assert_memory_equal(buf, buf2, sizeof buf);
    ember_ebc_destroy(c);
    destroy(&s);
}

// Every admitted id sits in a row of its bucket (the documented splitmix64 mod buckets): the
// property that lets the sharded layer route ids by bucket (tested in tests/dist).
static void admitted_ids_sit_in_their_bucket(void **state) {
    (void)state;
    setup s;
    make(&s, EMBER_OPT_SGD, EMBER_POOL_SUM, EMBER_EVICT_LRU, 1);
    run(&s, 8, 3, 0);
    int64_t ids[CAP * 3];
    assert_int_equal(ember_ebc_read(s.e, 0, "ids", 0, CAP, EMBER_DTYPE_I64, ids), EMBER_OK);
    for (int r = 0; r < CAP; r++)
        if (ids[3 * r + 2] > 0) assert_int_equal(bucket_of(ids[3 * r]), r / BR);
    destroy(&s);
}

static void bad_configs_are_refused(void **state) {
    (void)state;
    ember_ctx *ctx;
    assert_int_equal(ember_ctx_create(NULL, &ctx), EMBER_OK);
    ember_table_config t = EMBER_TABLE_CONFIG_DEFAULT;
    t.name = "h", t.rows = 30, t.dim = 4;
    t.hash = (ember_hash_config){.enabled = 1, .bucket_rows = 4, .policy = EMBER_EVICT_LRU};
    ember_feature_config f = {.name = "f", .table = 0};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = &t, cfg.num_tables = 1, cfg.features = &f, cfg.num_features = 1;
    ember_ebc *e = NULL;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_ERR_INVALID_ARG); // 4 does not divide 30
    t.rows = 32, t.hash.policy = EMBER_EVICT_TTL;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_ERR_INVALID_ARG); // ttl_steps 0
    t.hash.policy = EMBER_EVICT_LRU, t.cache_rows = 8;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_ERR_UNSUPPORTED); // hashed and tiered
    t.cache_rows = 0;
    assert_int_equal(ember_ebc_create(ctx, &cfg, &e), EMBER_OK);
    ember_hash_stats hs;
    ember_tier_stats ts;
    assert_int_equal(ember_ebc_hash_stats(e, 0, &hs), EMBER_OK);
    assert_int_equal(ember_ebc_tier_stats(e, 0, &ts), EMBER_ERR_INVALID_ARG);
    // Any int64 is an id; no id is out of range.
    int32_t len[1] = {3};
    int64_t v[3] = {INT64_MIN, -1, INT64_MAX};
    ember_kjt k = {.num_features = 1, .batch_size = 1, .lengths = len, .values = v, .nnz = 3};
    float out[4];
    assert_int_equal(ember_ebc_forward(e, &k, out), EMBER_OK);
    ember_ebc_destroy(e);
    ember_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policies_and_admission_match_the_naive_model),
        cmocka_unit_test(state_dict_round_trip),
        cmocka_unit_test(admitted_ids_sit_in_their_bucket),
        cmocka_unit_test(bad_configs_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
