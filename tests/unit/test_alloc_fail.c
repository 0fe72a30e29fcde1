// Allocation-failure injection, single process: every public call sequence that allocates
// (context, collection create / forward / backward / state dict / dtype conversion, planner and
// the memory check's bytes per rank, KJT validation, LFQ create / forward / backward / decoding)
// is run with its k-th allocation failing, for every k it reaches. Each must return EMBER_ERR_NOMEM with a message, change nothing (tables, optimizer
// state, steps, outputs, the LFQ's saved forward), stay usable (an unarmed rerun gives the clean
// run's bits) and leak nothing (support/fail_alloc.h). The distributed sequences (sharded
// collection, checkpoints, LFQ with a communicator) are in tests/dist/test_alloc_fail.c.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember.h"
#include "fail_alloc.h"
#include "gen.h"

typedef struct env {
    fail_alloc fa;
    ember_ctx *ctx;
} env;

static void env_open(env *e) {
    memset(e, 0, sizeof *e);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.allocator = fail_alloc_hooks(&e->fa);
    cc.num_threads = 1;
    cc.log_level = EMBER_LOG_ERROR;
    assert_int_equal(ember_ctx_create(&cc, &e->ctx), EMBER_OK);
}

static void env_close(env *e) {
    assert_int_equal(ember_ctx_bytes_outstanding(e->ctx), 0);
    ember_ctx_destroy(e->ctx);
    assert_int_equal(e->fa.blocks, 0);
}

static int64_t sweep(env *e, const fail_sequence *q, void *fx) {
    fail_sweep_result r = fail_alloc_sweep(q, fx, e->ctx, &e->fa, MPI_COMM_NULL, 0);
    printf("  %-34s %3lld allocation sites\n", q->name, (long long)r.sites);
    assert_true(r.ok);
    return r.sites;
}

// ---- The context itself ---------------------------------------------------------------------------

static void ctx_create_out_of_memory(void **state) {
    (void)state;
    fail_alloc fa = {0};
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.allocator = fail_alloc_hooks(&fa);
    cc.log_level = EMBER_LOG_ERROR;
    ember_ctx *ctx = (ember_ctx *)&fa; // not NULL: the failed create must set it
    fail_alloc_arm(&fa, 1);
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_ERR_NOMEM);
    assert_true(fa.hit);
    assert_null(ctx);
    assert_int_equal(fa.blocks, 0);
    fail_alloc_arm(&fa, 0);
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
    assert_int_equal(fa.count, 1); // the context is its only allocation
    void *p = ember_ctx_alloc(ctx, 100);
    assert_non_null(p);
    fail_alloc_arm(&fa, 1);
    assert_null(ember_ctx_alloc(ctx, 100));
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 100);
    ember_ctx_free(ctx, p);
    assert_int_equal(ember_ctx_bytes_outstanding(ctx), 0);
    ember_ctx_destroy(ctx);
    assert_int_equal(fa.blocks, 0);
}

// ---- Local collections ----------------------------------------------------------------------------

// Pooled: four tables of every dtype, optimizers with per-row and element-wise state, a one-row
// table, and a row wider than the initialiser's stack buffer (1030 > 1024: a heap row).
#define NT 4
#define NF 5
static const char *const TNAMES[NT] = {"a", "b", "c", "wide"};
static const int64_t ROWS[NT] = {20, 7, 1, 3};
static const int32_t DIMS[NT] = {8, 4, 3, 1030};
static const ember_pooling POOLS[NT] = {EMBER_POOL_SUM, EMBER_POOL_MEAN, EMBER_POOL_SUM, EMBER_POOL_MEAN};
static const ember_dtype DTYPES[NT] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16, EMBER_DTYPE_F32};
static const ember_optim_kind OPTS[NT] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM, EMBER_OPT_SGD, EMBER_OPT_LAMB};
static const char *const FNAMES[NF] = {"fa", "fb", "fc", "fa2", "fw"};
static const int32_t FTAB[NF] = {0, 1, 2, 0, 3};
// Sequence (pooling NONE): two tables of one dim.
#define ST 2
static const int64_t SROWS[ST] = {11, 5};
static const ember_optim_kind SOPTS[ST] = {EMBER_OPT_PARTIAL_ROWWISE_ADAM, EMBER_OPT_ADAGRAD};

typedef struct ebc_fx {
    env *e;
    int sequence;           // the NONE collection
    int hints;              // create with workspace hints
    int weighted;           // the KJT carries weights (backward: grad_weights too)
    int offsets_only;       // the KJT carries offsets only (else lengths only)
    int convert;            // dtype conversion: 1 table a fp32 -> bf16, 2 table b fp16 -> fp32
    ember_table_config tc[NT];
    ember_feature_config fc[NF];
    ember_ebc_config cfg;
    gen_kjt g;
    ember_kjt kjt;
    ember_ebc *ebc;
    float *out, *grad, *gw;
    int64_t nout;
} ebc_fx;

static void ebc_config(ebc_fx *f) {
    const int T = f->sequence ? ST : NT, F = f->sequence ? ST : NF;
    for (int t = 0; t < T; t++) {
        ember_table_config c = EMBER_TABLE_CONFIG_DEFAULT;
        c.name = TNAMES[t];
        c.rows = f->sequence ? SROWS[t] : ROWS[t];
        c.dim = f->sequence ? 4 : DIMS[t];
        c.pooling = f->sequence ? EMBER_POOL_NONE : POOLS[t];
        c.dtype = f->sequence ? EMBER_DTYPE_F32 : DTYPES[t];
        c.optim.kind = f->sequence ? SOPTS[t] : OPTS[t];
        c.optim.lr = 0.05f;
        c.optim.initial_accumulator = 0.1f;
        c.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
        f->tc[t] = c;
    }
    for (int i = 0; i < F; i++)
        f->fc[i] = (ember_feature_config){.name = FNAMES[i], .table = f->sequence ? i : FTAB[i]};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = f->tc;
    cfg.num_tables = T;
    cfg.features = f->fc;
    cfg.num_features = F;
    cfg.seed = 11;
    if (f->hints) {
        cfg.max_batch_size = 6;
        cfg.max_nnz = 40;
    }
    f->cfg = cfg;
}

// The KJT, outputs filled with a pattern and gradients, for a batch of 6.
static void ebc_inputs(ebc_fx *f) {
    const int F = f->cfg.num_features, B = 6;
    int64_t rows[NF];
    for (int i = 0; i < F; i++) rows[i] = f->tc[f->fc[i].table].rows;
    test_rng r = {5};
    gen_kjt_make(&f->g, &r, F, B, rows, 3, 0.3, f->weighted);
    f->kjt = f->g.kjt;
    if (f->offsets_only) f->kjt.lengths = NULL;
    else f->kjt.offsets = NULL;
    int32_t D = 0;
    for (int i = 0; i < F; i++) D += f->tc[f->fc[i].table].dim;
    f->nout = f->sequence ? f->kjt.nnz * 4 : (int64_t)B * D;
    f->out = malloc(sizeof(float) * (size_t)(f->nout + 1));
    f->grad = malloc(sizeof(float) * (size_t)(f->nout + 1));
    f->gw = malloc(sizeof(float) * (size_t)(f->kjt.nnz + 1));
    for (int64_t i = 0; i < f->nout; i++) {
        f->out[i] = -7.0f;
        f->grad[i] = (float)rng_uniform(&r) - 0.5f;
    }
    for (int64_t i = 0; i < f->kjt.nnz; i++) f->gw[i] = -3.0f;
}

static void ebc_inputs_free(ebc_fx *f) {
    gen_kjt_free(&f->g);
    free(f->out);
    free(f->grad);
    free(f->gw);
    f->out = f->grad = f->gw = NULL;
}

// Every tensor of every table in its native dtype, the steps and dtypes, and the outputs.
static void ebc_snap(void *fx, snap_bytes *z) {
    ebc_fx *f = fx;
    const int32_t exists = f->ebc != NULL;
    snap_add(z, &exists, sizeof exists);
    if (f->out) snap_add(z, f->out, sizeof(float) * (size_t)f->nout);
    if (f->gw) snap_add(z, f->gw, sizeof(float) * (size_t)f->kjt.nnz);
    if (!exists) return;
    for (int32_t t = 0; t < ember_ebc_num_tables(f->ebc); t++) {
        const ember_table_config *tc = ember_ebc_table(f->ebc, t);
        const int64_t step = ember_ebc_step(f->ebc, t);
        snap_add(z, &step, sizeof step);
        snap_add(z, &tc->dtype, sizeof tc->dtype);
        for (int32_t k = 0; k < ember_ebc_num_tensors(f->ebc, t); k++) {
            ember_tensor_info ti;
            assert_int_equal(ember_ebc_tensor_info(f->ebc, t, k, &ti), EMBER_OK);
            const size_t n = (size_t)ti.rows * (size_t)ti.cols * ember_dtype_size(ti.dtype);
            unsigned char *buf = malloc(n);
            assert_int_equal(ember_ebc_read(f->ebc, t, ti.name, 0, ti.rows, ti.dtype, buf), EMBER_OK);
            snap_add(z, buf, n);
            free(buf);
        }
    }
}

static void ebc_make(ebc_fx *f) {
    ebc_config(f);
    assert_int_equal(ember_ebc_create(f->e->ctx, &f->cfg, &f->ebc), EMBER_OK);
}

static void ebc_teardown(void *fx) {
    ebc_fx *f = fx;
    ember_ebc_destroy(f->ebc);
    f->ebc = NULL;
    ebc_inputs_free(f);
}

static void create_setup(void *fx) {
    ebc_fx *f = fx;
    ebc_config(f);
    f->ebc = NULL;
}
static ember_status create_run(void *fx) {
    ebc_fx *f = fx;
    return ember_ebc_create(f->e->ctx, &f->cfg, &f->ebc);
}

// A collection that has trained two steps (optimizer state and steps not at their start).
static void trained_setup(void *fx) {
    ebc_fx *f = fx;
    ebc_make(f);
    ebc_inputs(f);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ember_ebc_forward(f->ebc, &f->kjt, f->out), EMBER_OK);
        assert_int_equal(ember_ebc_backward(f->ebc, &f->kjt, f->grad, NULL), EMBER_OK);
    }
    // A fresh collection of the same state: its workspace unsized, as a first call finds it.
    ember_ebc *fresh = NULL;
    assert_int_equal(ember_ebc_create(f->e->ctx, &f->cfg, &fresh), EMBER_OK);
    for (int32_t t = 0; t < ember_ebc_num_tables(f->ebc); t++) {
        for (int32_t k = 0; k < ember_ebc_num_tensors(f->ebc, t); k++) {
            ember_tensor_info ti;
            assert_int_equal(ember_ebc_tensor_info(f->ebc, t, k, &ti), EMBER_OK);
            float *buf = malloc(sizeof(float) * (size_t)(ti.rows * ti.cols));
            assert_int_equal(ember_ebc_read(f->ebc, t, ti.name, 0, ti.rows, EMBER_DTYPE_F32, buf), EMBER_OK);
            assert_int_equal(ember_ebc_write(fresh, t, ti.name, 0, ti.rows, EMBER_DTYPE_F32, buf), EMBER_OK);
            free(buf);
        }
        assert_int_equal(ember_ebc_set_step(fresh, t, ember_ebc_step(f->ebc, t)), EMBER_OK);
    }
    ember_ebc_destroy(f->ebc);
    f->ebc = fresh;
    for (int64_t i = 0; i < f->nout; i++) f->out[i] = -7.0f;
}

static ember_status forward_run(void *fx) {
    ebc_fx *f = fx;
    return ember_ebc_forward(f->ebc, &f->kjt, f->out);
}
static ember_status backward_run(void *fx) {
    ebc_fx *f = fx;
    return ember_ebc_backward(f->ebc, &f->kjt, f->grad, f->weighted ? f->gw : NULL);
}
static ember_status state_dict_run(void *fx) {
    ebc_fx *f = fx;
    // Read a tensor, write it back changed, through both dtypes of a 16-bit table.
    float buf[8 * 20];
    uint16_t h[4 * 7];
    ember_status st = ember_ebc_read(f->ebc, 0, "momentum1", 0, 20, EMBER_DTYPE_F32, buf);
    for (int i = 0; i < 20; i++) buf[i] += 1.0f;
    if (st == EMBER_OK) st = ember_ebc_write(f->ebc, 0, "momentum1", 0, 20, EMBER_DTYPE_F32, buf);
    if (st == EMBER_OK) st = ember_ebc_read(f->ebc, 1, "weight", 2, 7, EMBER_DTYPE_F16, h);
    if (st == EMBER_OK) st = ember_ebc_write(f->ebc, 1, "weight", 0, 5, EMBER_DTYPE_F16, h);
    if (st == EMBER_OK) st = ember_ebc_set_step(f->ebc, 2, 9);
    return st;
}
static ember_status convert_run(void *fx) {
    ebc_fx *f = fx;
    return f->convert == 1 ? ember_ebc_convert_dtype(f->ebc, 0, EMBER_DTYPE_BF16)
                           : ember_ebc_convert_dtype(f->ebc, 1, EMBER_DTYPE_F32);
}

static void ebc_sequences(void **state) {
    (void)state;
    env e;
    env_open(&e);
    static const struct {
        const char *name;
        int sequence, hints, weighted, offsets_only, convert;
        void (*setup)(void *);
        ember_status (*run)(void *);
        int64_t min_sites;
    } cases[] = {
        {"ebc_create", 0, 0, 0, 0, 0, create_setup, create_run, 9},
        {"ebc_create (workspace hints)", 0, 1, 0, 0, 0, create_setup, create_run, 10},
        {"ebc_create (sequence)", 1, 0, 0, 0, 0, create_setup, create_run, 8},
        {"ebc_forward (lengths)", 0, 0, 0, 0, 0, trained_setup, forward_run, 1},
        {"ebc_forward (offsets, weights)", 0, 0, 1, 1, 0, trained_setup, forward_run, 0},
        {"ebc_forward (sequence)", 1, 0, 0, 0, 0, trained_setup, forward_run, 1},
        {"ebc_backward", 0, 0, 0, 0, 0, trained_setup, backward_run, 4},
        {"ebc_backward (grad_weights)", 0, 0, 1, 1, 0, trained_setup, backward_run, 4},
        {"ebc_backward (sequence)", 1, 0, 0, 0, 0, trained_setup, backward_run, 4},
        {"ebc_read/write/set_step", 0, 0, 0, 0, 0, trained_setup, state_dict_run, 0},
        {"ebc_convert_dtype (fp32 -> bf16)", 0, 0, 0, 0, 1, trained_setup, convert_run, 2},
        {"ebc_convert_dtype (fp16 -> fp32)", 0, 0, 0, 0, 2, trained_setup, convert_run, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ebc_fx f;
        memset(&f, 0, sizeof f);
        f.e = &e;
        f.sequence = cases[i].sequence;
        f.hints = cases[i].hints;
        f.weighted = cases[i].weighted;
        f.offsets_only = cases[i].offsets_only;
        f.convert = cases[i].convert;
        const fail_sequence q = {cases[i].name, cases[i].setup, cases[i].run, ebc_snap, ebc_teardown};
        assert_true(sweep(&e, &q, &f) >= cases[i].min_sites);
    }
    env_close(&e);
}

// ---- The planner -------------------------------------------------------------------------------

typedef struct plan_fx {
    env *e;
    ember_table_config tc[6];
    ember_feature_config fc[6];
    ember_ebc_config cfg;
    ember_plan_config pc;
    ember_table_plan plan[6];
    size_t storage[5];
    double step[5];
    size_t weight_bytes[6], state_bytes[6]; // ember_shard_rank_bytes
} plan_fx;

static void plan_setup(void *fx) {
    plan_fx *f = fx;
    static const char *const names[6] = {"p0", "p1", "p2", "p3", "p4", "p5"};
    static const int64_t rows[6] = {100000, 40, 5000, 64, 20000, 300};
    static const int32_t dims[6] = {64, 8, 32, 128, 16, 64};
    for (int t = 0; t < 6; t++) {
        ember_table_config c = EMBER_TABLE_CONFIG_DEFAULT;
        c.name = names[t];
        c.rows = rows[t];
        c.dim = dims[t];
        f->tc[t] = c;
        f->fc[t] = (ember_feature_config){.name = names[t], .table = t};
    }
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = f->tc;
    cfg.num_tables = 6;
    cfg.features = f->fc;
    cfg.num_features = 6;
    f->cfg = cfg;
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = 5;
    pc.batch_size = 64;
    pc.allow = 0x3f; // every scheme, grid included
    f->pc = pc;
    memset(f->plan, 0, sizeof f->plan);
    memset(f->storage, 0, sizeof f->storage);
    memset(f->step, 0, sizeof f->step);
    memset(f->weight_bytes, 0, sizeof f->weight_bytes);
    memset(f->state_bytes, 0, sizeof f->state_bytes);
}

static ember_status plan_run(void *fx) {
    plan_fx *f = fx;
    ember_plan_release(f->e->ctx, f->plan, 6); // a rerun replaces the plan
    ember_plan_stats stats = {.storage_bytes = f->storage, .step_bytes = f->step};
    return ember_plan_create(f->e->ctx, &f->cfg, &f->pc, f->plan, &stats);
}

static void plan_snap(void *fx, snap_bytes *z) {
    plan_fx *f = fx;
    for (int t = 0; t < 6; t++) {
        const ember_table_plan *p = &f->plan[t];
        snap_add(z, &p->scheme, sizeof p->scheme);
        snap_add(z, &p->num_shards, sizeof p->num_shards);
        snap_add(z, &p->group_size, sizeof p->group_size);
        snap_add(z, &p->num_ranks, sizeof p->num_ranks);
        const int32_t has = p->ranks != NULL;
        snap_add(z, &has, sizeof has);
        if (p->ranks) snap_add(z, p->ranks, sizeof(int32_t) * (size_t)p->num_ranks);
    }
    snap_add(z, f->storage, sizeof f->storage);
    snap_add(z, f->step, sizeof f->step);
    snap_add(z, f->weight_bytes, sizeof f->weight_bytes);
    snap_add(z, f->state_bytes, sizeof f->state_bytes);
}

static void plan_teardown(void *fx) {
    plan_fx *f = fx;
    ember_plan_release(f->e->ctx, f->plan, 6);
}

// The memory check's bytes of rank 3 for table p0 in four column slices, two of them on rank 3.
static ember_status rank_bytes_run(void *fx) {
    plan_fx *f = fx;
    int32_t ranks[4] = {3, 1, 3, 0};
    const ember_table_plan p = {.scheme = EMBER_SHARD_COLUMN_WISE, .num_shards = 4, .num_ranks = 4, .ranks = ranks};
    return ember_shard_rank_bytes(f->e->ctx, &f->tc[0], &p, 5, 3, &f->weight_bytes[0], &f->state_bytes[0]);
}

static void rank_bytes_setup(void *fx) {
    plan_fx *f = fx;
    plan_setup(f);
    memset(f->weight_bytes, 0xab, sizeof f->weight_bytes); // a failed call leaves them as they are
    memset(f->state_bytes, 0xab, sizeof f->state_bytes);
}

static void plan_sequence(void **state) {
    (void)state;
    env e;
    env_open(&e);
    plan_fx f;
    memset(&f, 0, sizeof f);
    f.e = &e;
    const fail_sequence q = {"plan_create", plan_setup, plan_run, plan_snap, plan_teardown};
    assert_true(sweep(&e, &q, &f) >= 2); // the scratch and at least one ranks array
    const fail_sequence rb = {"shard_rank_bytes", rank_bytes_setup, rank_bytes_run, plan_snap, plan_teardown};
    assert_true(sweep(&e, &rb, &f) >= 1);
    env_close(&e);
}

// ---- KJT validation (allocates nothing) ------------------------------------------------------

typedef struct kjt_fx {
    env *e;
    gen_kjt g;
    int64_t oor;
} kjt_fx;

static void kjt_setup(void *fx) {
    kjt_fx *f = fx;
    test_rng r = {3};
    static const int64_t rows[3] = {10, 4, 7};
    gen_kjt_make(&f->g, &r, 3, 5, rows, 4, 0.2, 1);
    f->oor = -1;
}
static ember_status kjt_run(void *fx) {
    kjt_fx *f = fx;
    static const int64_t rows[3] = {10, 4, 7};
    return ember_kjt_validate(f->e->ctx, &f->g.kjt, 3, rows, EMBER_BOUNDS_SKIP, &f->oor);
}
static void kjt_snap(void *fx, snap_bytes *z) {
    kjt_fx *f = fx;
    snap_add(z, &f->oor, sizeof f->oor);
}
static void kjt_teardown(void *fx) { gen_kjt_free(&((kjt_fx *)fx)->g); }

static void kjt_sequence(void **state) {
    (void)state;
    env e;
    env_open(&e);
    kjt_fx f;
    memset(&f, 0, sizeof f);
    f.e = &e;
    const fail_sequence q = {"kjt_validate", kjt_setup, kjt_run, kjt_snap, kjt_teardown};
    assert_int_equal(sweep(&e, &q, &f), 0);
    env_close(&e);
}

// ---- LFQ --------------------------------------------------------------------------------------

typedef struct lfq_fx {
    env *e;
    int what;               // 0 create, 1 training forward (workspace growth), 2 backward, 3 eval + decode
    ember_lfq_config cfg;
    ember_lfq *q;
    float *x, *out, *gout, *gx, *codes;
    int64_t *idx;
    ember_lfq_losses losses;
} lfq_fx;

enum { LB = 3, LN = 5, LDIM = 6, LK = 16, LC = 2, LDD = 4 };

static void lfq_buffers(lfq_fx *f) {
    const size_t n = (size_t)2 * LB * LN * LDIM; // room for the larger batch
    f->x = malloc(sizeof(float) * n);
    f->out = malloc(sizeof(float) * n);
    f->gout = malloc(sizeof(float) * n);
    f->gx = malloc(sizeof(float) * n);
    f->codes = malloc(sizeof(float) * (size_t)2 * LB * LN * LDIM);
    f->idx = malloc(sizeof(int64_t) * (size_t)2 * LB * LN * LC);
    test_rng r = {9};
    for (size_t i = 0; i < n; i++) {
        f->x[i] = (float)rng_uniform(&r) * 2 - 1;
        f->gout[i] = (float)rng_uniform(&r) - 0.5f;
        f->out[i] = f->gx[i] = f->codes[i] = -9.0f;
    }
    for (size_t i = 0; i < (size_t)2 * LB * LN * LC; i++) f->idx[i] = -1;
    memset(&f->losses, 0, sizeof f->losses);
}

static void lfq_setup(void *fx) {
    lfq_fx *f = fx;
    ember_lfq_config c = EMBER_LFQ_CONFIG_DEFAULT;
    c.dim = LDIM;
    c.codebook_size = LK;
    c.num_codebooks = LC;
    c.commitment_loss_weight = 0.25;
    c.spherical = true;
    c.frac_per_sample_entropy = 0.5; // the subsampling scratch too
    c.seed = 3;
    c.max_tokens = f->what == 0 ? 4 : 0;
    f->cfg = c;
    f->q = NULL;
    lfq_buffers(f);
    if (f->what == 0) return;
    assert_int_equal(ember_lfq_create(f->e->ctx, &f->cfg, &f->q), EMBER_OK);
    // A saved training forward of B x N tokens for the backward (and for the larger forward to keep).
    assert_int_equal(ember_lfq_forward(f->q, f->x, LB, LN, NULL, true, f->out, f->idx, &f->losses), EMBER_OK);
}

static ember_status lfq_run(void *fx) {
    lfq_fx *f = fx;
    switch (f->what) {
    case 0: return ember_lfq_create(f->e->ctx, &f->cfg, &f->q);
    case 1: return ember_lfq_forward(f->q, f->x, 2 * LB, LN, NULL, true, f->out, f->idx, &f->losses);
    case 2: return ember_lfq_backward(f->q, f->gout, 1.0, f->gx);
    default: {
        ember_status st = ember_lfq_forward(f->q, f->x, 2 * LB, LN, NULL, false, f->out, f->idx, NULL);
        if (st == EMBER_OK) st = ember_lfq_indices_to_codes(f->q, f->idx, 2 * LB * LN, true, f->codes);
        return st;
    }
    }
}

// Parameters, gradients, outputs and losses; and what the saved forward gives to a backward
// (from zeroed gradients, restored afterwards: the snapshot changes nothing it reads).
static void lfq_snap(void *fx, snap_bytes *z) {
    lfq_fx *f = fx;
    const size_t n = (size_t)2 * LB * LN * LDIM;
    const int32_t exists = f->q != NULL;
    snap_add(z, &exists, sizeof exists);
    snap_add(z, f->out, sizeof(float) * n);
    snap_add(z, f->gx, sizeof(float) * n);
    snap_add(z, f->codes, sizeof(float) * n);
    snap_add(z, f->idx, sizeof(int64_t) * (size_t)2 * LB * LN * LC);
    snap_add(z, &f->losses, sizeof f->losses);
    if (!exists) return;
    int64_t np = 0;
    const void *params = ember_lfq_params(f->q, &np);
    snap_add(z, params, sizeof(float) * (size_t)np);
    snap_add(z, ember_lfq_grads(f->q, NULL), sizeof(float) * (size_t)np);
    if (f->what == 0) return;
    float *gx = calloc(n, sizeof(float)), *keep = malloc(sizeof(float) * (size_t)(np + 1));
    float *grads = ember_lfq_grads(f->q, NULL);
    memcpy(keep, grads, sizeof(float) * (size_t)np);
    assert_int_equal(ember_lfq_zero_grad(f->q), EMBER_OK);
    assert_int_equal(ember_lfq_backward(f->q, f->gout, 1.0, gx), EMBER_OK);
    snap_add(z, gx, sizeof(float) * n);
    snap_add(z, grads, sizeof(float) * (size_t)np);
    memcpy(grads, keep, sizeof(float) * (size_t)np); // the snapshot leaves the gradients as it found them
    free(gx);
    free(keep);
}

static void lfq_teardown(void *fx) {
    lfq_fx *f = fx;
    ember_lfq_destroy(f->q);
    f->q = NULL;
    free(f->x);
    free(f->out);
    free(f->gout);
    free(f->gx);
    free(f->codes);
    free(f->idx);
}

static void lfq_sequences(void **state) {
    (void)state;
    env e;
    env_open(&e);
    static const struct {
        const char *name;
        int64_t min_sites;
    } cases[] = {{"lfq_create", 7}, {"lfq_forward (training, grows)", 1}, {"lfq_backward", 0},
                 {"lfq_forward (eval) + indices_to_codes", 0}};
    for (int w = 0; w < 4; w++) {
        lfq_fx f;
        memset(&f, 0, sizeof f);
        f.e = &e;
        f.what = w;
        const fail_sequence q = {cases[w].name, lfq_setup, lfq_run, lfq_snap, lfq_teardown};
        assert_true(sweep(&e, &q, &f) >= cases[w].min_sites);
    }
    env_close(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ctx_create_out_of_memory),
        cmocka_unit_test(ebc_sequences),
        cmocka_unit_test(plan_sequence),
        cmocka_unit_test(kjt_sequence),
        cmocka_unit_test(lfq_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
