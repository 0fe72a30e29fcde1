// Allocation-failure injection under mpiexec -n W (support/fail_alloc.h): every collective call
// sequence of the sharded collection (create under every scheme and a mix, forward, backward,
// state dict reads and writes, dtype conversion), checkpoints (save, load with resharding and
// dtype conversion; inspection) and LFQ with a communicator runs with its k-th allocation
// failing on one rank while the others allocate normally, for every k that rank reaches (each
// rank in turn for the mix of every scheme and for LFQ; one rank, rotating, for the others). Every rank must return EMBER_ERR_NOMEM (nobody hangs, nobody returns OK), the
// state (every tensor of every table, steps, dtypes, outputs, the checkpoint directory) must be
// bitwise as before, an unarmed rerun must give the clean run's bits, and nothing may leak.
#define _DEFAULT_SOURCE // scandir, alphasort
#include <dirent.h>
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
#include "mpi_assert.h"
#include "shard/internal.h" // ember__piece: a piece's step, read without communication
#include "tmpdir.h"

static int W, R;

typedef struct env {
    fail_alloc fa;
    ember_ctx *ctx;
    ember_comm *comm;
} env;

static void env_open(env *e) {
    memset(e, 0, sizeof *e);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.allocator = fail_alloc_hooks(&e->fa);
    cc.num_threads = 1;
    cc.log_level = EMBER_LOG_ERROR;
    assert_int_equal(ember_ctx_create(&cc, &e->ctx), EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_comm_create(e->ctx, MPI_COMM_WORLD, &e->comm) == EMBER_OK);
}

static void env_close(env *e) {
    ember_comm_destroy(e->comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(e->ctx) == 0);
    ember_ctx_destroy(e->ctx);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, e->fa.blocks == 0);
}

// A collective sequence with the failure on rank `victim`, or on each rank in turn (victim -1);
// returns the most sites any victim met.
static int64_t sweep_ranks(env *e, const fail_sequence *q, void *fx, int victim) {
    int64_t most = 0;
    char line[256];
    int n = snprintf(line, sizeof line, "  %-44s", q->name);
    const double t0 = MPI_Wtime();
    for (int v = victim < 0 ? 0 : victim; v < (victim < 0 ? W : victim + 1); v++) {
        fail_sweep_result r = fail_alloc_sweep(q, fx, e->ctx, &e->fa, MPI_COMM_WORLD, v);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, r.ok);
        if (r.sites > most) most = r.sites;
        n += snprintf(line + n, sizeof line - (size_t)n, " r%d:%3lld", v, (long long)r.sites);
    }
    if (R == 0) printf("%s allocation sites (%.2f s)\n", line, MPI_Wtime() - t0);
    return most;
}

// A local sequence, swept on every rank at once (each rank its own victim).
static int64_t sweep_local(env *e, const fail_sequence *q, void *fx) {
    fail_sweep_result r = fail_alloc_sweep(q, fx, e->ctx, &e->fa, MPI_COMM_NULL, 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, r.ok);
    int64_t most = r.sites;
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (R == 0) printf("  %-44s %3lld allocation sites (local, every rank)\n", q->name, (long long)most);
    return most;
}

// ---- Collections ----------------------------------------------------------------------------------

// Pooled: four tables of every dtype, per-row and element-wise optimizer state (row-wise Adagrad
// on a column-sliced table exchanges row sums), a one-row table; five features, two on table a.
#define NT 4
#define NF 5
static const char *const TNAMES[NT] = {"a", "b", "c", "d"};
static const int64_t ROWS[NT] = {13, 9, 1, 11};
static const int32_t DIMS[NT] = {6, 4, 3, 5};
static const ember_pooling POOLS[NT] = {EMBER_POOL_SUM, EMBER_POOL_MEAN, EMBER_POOL_SUM, EMBER_POOL_MEAN};
static const ember_dtype DTYPES[NT] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16, EMBER_DTYPE_F32};
// The checkpoint the load sequences read holds other dtypes: loading converts three tables.
static const ember_dtype CK_DTYPES[NT] = {EMBER_DTYPE_BF16, EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_F32};
static const ember_optim_kind OPTS[NT] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM, EMBER_OPT_SGD,
                                          EMBER_OPT_ADAGRAD};
static const char *const FNAMES[NF] = {"fa", "fb", "fc", "fa2", "fd"};
static const int32_t FTAB[NF] = {0, 1, 2, 0, 3};
// Sequence collections (pooling NONE): two tables of dim 4.
#define ST 2
static const int64_t SROWS[ST] = {11, 5};
static const ember_optim_kind SOPTS[ST] = {EMBER_OPT_PARTIAL_ROWWISE_ADAM, EMBER_OPT_ADAGRAD};

// Layouts: every table under one scheme (the enum's order), a mix, and two sequence mixes.
enum { L_MIXED = EMBER_SHARD_COUNT, L_SEQ_RW_DP, L_SEQ_TW_TWRW, L_COUNT };
static const char *const LNAMES[L_COUNT] = {"dp", "tw", "cw", "rw", "twrw", "grid", "mixed", "seq rw+dp",
                                            "seq tw+twrw"};

static int is_sequence(int layout) { return layout >= L_SEQ_RW_DP; }

static ember_shard_scheme scheme_of(int layout, int t) {
    static const ember_shard_scheme mixed[NT] = {EMBER_SHARD_COLUMN_WISE, EMBER_SHARD_DATA_PARALLEL,
                                                 EMBER_SHARD_TABLE_ROW_WISE, EMBER_SHARD_GRID};
    if (layout < EMBER_SHARD_COUNT) return (ember_shard_scheme)layout;
    if (layout == L_MIXED) return mixed[t];
    if (layout == L_SEQ_RW_DP) return t == 0 ? EMBER_SHARD_ROW_WISE : EMBER_SHARD_DATA_PARALLEL;
    return t == 0 ? EMBER_SHARD_TABLE_WISE : EMBER_SHARD_TABLE_ROW_WISE;
}

// Table t under scheme s (ranks: the caller's buffer of 16). Column-sliced schemes put two slices
// of one row block on one rank whenever W allows it (grid always: each rank holds two blocks).
static ember_table_plan plan_of(ember_shard_scheme s, int t, int32_t dim, int32_t *ranks) {
    ember_table_plan p;
    memset(&p, 0, sizeof p);
    p.scheme = s;
    p.ranks = ranks;
    switch (s) {
    case EMBER_SHARD_TABLE_WISE: ranks[0] = (t + 1) % W; break;
    case EMBER_SHARD_COLUMN_WISE:
        p.num_shards = dim < 3 ? dim : 3;
        for (int i = 0; i < p.num_shards; i++) ranks[i] = (t + i) % W;
        break;
    case EMBER_SHARD_TABLE_ROW_WISE:
        p.group_size = W;
        for (int i = 0; i < W; i++) ranks[i] = W - 1 - i;
        break;
    case EMBER_SHARD_GRID:
        p.num_shards = 2;
        p.group_size = W;
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < W; k++) ranks[c * W + k] = (k + c) % W;
        break;
    default: break;
    }
    p.num_ranks = ember_table_plan_ranks_needed(&p);
    if (!p.num_ranks) p.ranks = NULL;
    return p;
}

typedef struct coll_cfg {
    ember_table_config tc[NT];
    ember_feature_config fc[NF];
    ember_table_plan plan[NT];
    int32_t ranks[NT][16];
    ember_ebc_config cfg;
} coll_cfg;

static void coll_config(coll_cfg *c, int layout, const ember_dtype *dtypes) {
    const int seq = is_sequence(layout), T = seq ? ST : NT, F = seq ? ST : NF;
    for (int t = 0; t < T; t++) {
        ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
        tc.name = TNAMES[t];
        tc.rows = seq ? SROWS[t] : ROWS[t];
        tc.dim = seq ? 4 : DIMS[t];
        tc.pooling = seq ? EMBER_POOL_NONE : POOLS[t];
        tc.dtype = seq ? EMBER_DTYPE_F32 : dtypes[t];
        tc.optim.kind = seq ? SOPTS[t] : OPTS[t];
        tc.optim.lr = 0.05f;
        tc.optim.initial_accumulator = 0.1f;
        tc.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.5f, .b = 0.5f};
        c->tc[t] = tc;
        c->plan[t] = plan_of(scheme_of(layout, t), t, tc.dim, c->ranks[t]);
    }
    for (int i = 0; i < F; i++) c->fc[i] = (ember_feature_config){.name = FNAMES[i], .table = seq ? i : FTAB[i]};
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = c->tc;
    cfg.num_tables = T;
    cfg.features = c->fc;
    cfg.num_features = F;
    cfg.seed = 17;
    c->cfg = cfg;
}

// Distinct values in every tensor, a function of (seed, table, tensor, global row and column), written
// through the pieces (which size no workspace), and steps 3 + t.
static void fill(ember_sebc *s, uint64_t seed) {
    for (int32_t t = 0; t < ember_sebc_num_tables(s); t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t); i++) {
            ember_piece p;
            assert_int_equal(ember_sebc_piece(s, t, i, &p), EMBER_OK);
            for (int32_t k = 0; k < nt; k++) {
                const int per_row = ti[k].cols != tc->dim;
                const int32_t c0 = per_row ? 0 : p.col_begin, c1 = per_row ? 1 : p.col_end;
                float *v = malloc(sizeof(float) * (size_t)((p.row_end - p.row_begin) * (c1 - c0)));
                size_t n = 0;
                for (int64_t r = p.row_begin; r < p.row_end; r++) {
                    for (int32_t c = c0; c < c1; c++) {
                        test_rng g = {seed * 1000003u + (uint64_t)t * 7919u + (uint64_t)k * 104729u +
                                      (uint64_t)r * 131u + (uint64_t)c};
                        const double u = rng_uniform(&g);
                        v[n++] = (float)(k ? u : 2 * u - 1);
                    }
                }
                assert_int_equal(ember_sebc_piece_write(s, t, i, ti[k].name, p.row_begin, p.row_end, EMBER_DTYPE_F32, v),
                                 EMBER_OK);
                free(v);
            }
        }
        assert_int_equal(ember_sebc_set_step(s, t, 3 + t), EMBER_OK);
    }
}

// Every piece this rank holds: every tensor of it in its native dtype, its step and dtype, read
// in place (no communication: the ranks' pieces together are the whole state).
static void snap_pieces(ember_sebc *s, snap_bytes *z) {
    for (int32_t t = 0; t < ember_sebc_num_tables(s); t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        snap_add(z, &tc->dtype, sizeof tc->dtype);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t); i++) {
            ember_piece p;
            ember_ebc *e = NULL;
            int32_t lt = 0;
            assert_int_equal(ember_sebc_piece(s, t, i, &p), EMBER_OK);
            assert_true(ember__piece(s, t, i, &e, &lt));
            const int64_t step = ember_ebc_step(e, lt);
            snap_add(z, &step, sizeof step);
            snap_add(z, &ember_ebc_table(e, lt)->dtype, sizeof(ember_dtype));
            for (int32_t k = 0; k < nt; k++) {
                const ember_dtype dt = k == 0 ? tc->dtype : EMBER_DTYPE_F32;
                const int32_t cols = ti[k].cols == tc->dim ? p.col_end - p.col_begin : 1;
                const size_t n = (size_t)(p.row_end - p.row_begin) * (size_t)cols * ember_dtype_size(dt);
                unsigned char *buf = malloc(n + 1);
                assert_int_equal(ember_sebc_piece_read(s, t, i, ti[k].name, p.row_begin, p.row_end, dt, buf), EMBER_OK);
                snap_add(z, buf, n);
                free(buf);
            }
        }
    }
}

// ---- Checkpoint directories ----------------------------------------------------------------------

static char scratch[64];

static void scratch_path(char *dst, size_t cap, const char *name) { snprintf(dst, cap, "%s/%s", scratch, name); }

// Rank 0 runs a shell command on the scratch directory; everyone waits for it.
static void shell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void shell(const char *fmt, ...) {
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = R == 0 ? system(cmd) : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    assert_int_equal(rc, 0);
}

// The names and bytes of every file in dir, in name order.
static void snap_dir(const char *dir, snap_bytes *z) {
    struct dirent **list = NULL;
    const int n = scandir(dir, &list, NULL, alphasort);
    assert_true(n >= 0);
    char path[512];
    for (int i = 0; i < n; i++) {
        snap_add(z, list[i]->d_name, strlen(list[i]->d_name) + 1);
        snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
        FILE *f = fopen(path, "rb");
        if (f) {
            char buf[4096];
            size_t got;
            while ((got = fread(buf, 1, sizeof buf, f)) > 0) snap_add(z, buf, got);
            fclose(f);
        }
        free(list[i]);
    }
    free(list);
}

static const ember_checkpoint_blob BLOBS[2] = {{.name = "dense.params", .data = "0123456789abcdef", .bytes = 16},
                                               {.name = "empty", .data = NULL, .bytes = 0}};

// A collection under `layout` with `dtypes`, filled from `seed`, saved into dir (records of 48 bytes:
// pieces cut into many, loaders patch rows from several).
static void save_checkpoint(env *e, int layout, const ember_dtype *dtypes, uint64_t seed, const char *dir) {
    coll_cfg c;
    coll_config(&c, layout, dtypes);
    ember_sebc *s = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(e->comm, &c.cfg, c.plan, EMBER_GRAD_MEAN, &s) == EMBER_OK);
    fill(s, seed);
    const ember_checkpoint_options o = {.chunk_bytes = 48, .blobs = BLOBS, .num_blobs = 2};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(s, dir, &o) == EMBER_OK);
    ember_sebc_destroy(s);
}

// ---- The sharded collection's sequences ------------------------------------------------------------

enum {
    S_CREATE,
    S_FORWARD,
    S_BACKWARD,
    S_READ_ALL,   // row-wise state of table a (per row in every column slice), onto every rank
    S_READ_ROOT,  // table b's fp16 weight, native bits, onto rank 0
    S_WRITE_ALL,  // table a's weight from every rank
    S_WRITE_ROOT, // table b's fp16 weight, native bits, from the last rank
    S_CONVERT_A,  // table a fp32 -> bf16
    S_CONVERT_B,  // table b fp16 -> fp32
    S_PIECES,     // piece reads and writes, steps: no allocation
    S_SAVE,
    S_LOAD,
    S_PREFETCH,   // prefetch of the batch, then its forward (which takes the prefetch)
    S_SPLIT,      // backward_start, backward_finish
};

typedef struct sebc_fx {
    env *e;
    int layout, what;
    coll_cfg c;
    ember_sebc *s;
    gen_kjt g;
    float *out, *grad;
    int64_t nout;
    unsigned char *buf; // read/write array
    size_t buf_bytes;
    char dir[160];      // S_SAVE: the directory saved into; S_LOAD: the checkpoint
    char prev[160];     // S_SAVE: the checkpoint it starts from
} sebc_fx;

static void sebc_inputs(sebc_fx *f) {
    const int seq = is_sequence(f->layout), F = f->c.cfg.num_features, B = 3 + R; // unequal batches
    int64_t rows[NF];
    for (int i = 0; i < F; i++) rows[i] = f->c.tc[f->c.fc[i].table].rows;
    test_rng r = {100 + (uint64_t)R};
    gen_kjt_make(&f->g, &r, F, B, rows, 3, 0.3, f->layout % 2);
    int32_t D = 0;
    for (int i = 0; i < F; i++) D += f->c.tc[f->c.fc[i].table].dim;
    f->nout = seq ? f->g.kjt.nnz * 4 : (int64_t)B * D;
    f->out = malloc(sizeof(float) * (size_t)(f->nout + 1));
    f->grad = malloc(sizeof(float) * (size_t)(f->nout + 1));
    for (int64_t i = 0; i < f->nout; i++) {
        f->out[i] = -7.0f;
        f->grad[i] = (float)rng_uniform(&r) - 0.5f;
    }
}

static void sebc_setup(void *fx) {
    sebc_fx *f = fx;
    coll_config(&f->c, f->layout, DTYPES);
    f->s = NULL;
    if (f->what == S_CREATE) return;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD,
                    ember_sebc_create(f->e->comm, &f->c.cfg, f->c.plan, EMBER_GRAD_MEAN, &f->s) == EMBER_OK);
    fill(f->s, 1);
    if (f->what == S_FORWARD || f->what == S_BACKWARD || f->what == S_PREFETCH || f->what == S_SPLIT) sebc_inputs(f);
    if (f->what == S_BACKWARD || f->what == S_SPLIT)
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_forward(f->s, &f->g.kjt, f->out) == EMBER_OK);
    if (f->what >= S_READ_ALL && f->what <= S_WRITE_ROOT) {
        const int t = f->what == S_READ_ALL || f->what == S_WRITE_ALL ? 0 : 1;
        f->buf_bytes = (size_t)f->c.tc[t].rows * (size_t)f->c.tc[t].dim * 4;
        f->buf = malloc(f->buf_bytes);
        test_rng r = {77};
        for (size_t i = 0; i < f->buf_bytes / 2; i++) ((uint16_t *)(void *)f->buf)[i] = (uint16_t)(rng_next(&r) & 0x3bff);
        if (f->what == S_WRITE_ALL)
            for (size_t i = 0; i < f->buf_bytes / 4; i++) ((float *)(void *)f->buf)[i] = (float)rng_uniform(&r);
    }
    if (f->what == S_SAVE) shell("rm -rf '%s' && cp -r '%s' '%s'", f->dir, f->prev, f->dir);
}

static ember_status sebc_run(void *fx) {
    sebc_fx *f = fx;
    ember_sebc *s = f->s;
    switch (f->what) {
    case S_CREATE: return ember_sebc_create(f->e->comm, &f->c.cfg, f->c.plan, EMBER_GRAD_MEAN, &f->s);
    case S_FORWARD: return ember_sebc_forward(s, &f->g.kjt, f->out);
    case S_BACKWARD: return ember_sebc_backward(s, &f->g.kjt, f->grad);
    case S_READ_ALL: return ember_sebc_read(s, 0, "momentum1", (float *)(void *)f->buf, -1);
    case S_READ_ROOT: return ember_sebc_read_as(s, 1, "weight", EMBER_DTYPE_F16, f->buf, 0);
    case S_WRITE_ALL: return ember_sebc_write(s, 0, "weight", (const float *)(void *)f->buf, -1);
    case S_WRITE_ROOT: return ember_sebc_write_as(s, 1, "weight", EMBER_DTYPE_F16, f->buf, W - 1);
    case S_CONVERT_A: return ember_sebc_convert_dtype(s, 0, EMBER_DTYPE_BF16);
    case S_CONVERT_B: return ember_sebc_convert_dtype(s, 1, EMBER_DTYPE_F32);
    case S_PIECES: {
        ember_status st = EMBER_OK;
        for (int32_t i = 0; st == EMBER_OK && i < ember_sebc_num_pieces(s, 0); i++) {
            ember_piece p;
            float v[64];
            st = ember_sebc_piece(s, 0, i, &p);
            if (st == EMBER_OK) st = ember_sebc_piece_read(s, 0, i, "weight", p.row_begin, p.row_begin + 1, EMBER_DTYPE_F32, v);
            v[0] += 1.0f;
            if (st == EMBER_OK) st = ember_sebc_piece_write(s, 0, i, "weight", p.row_begin, p.row_begin + 1, EMBER_DTYPE_F32, v);
        }
        int64_t step = 0;
        if (st == EMBER_OK) st = ember_sebc_step(s, 0, &step);
        if (st == EMBER_OK) st = ember_sebc_set_step(s, 0, step + 1);
        return st;
    }
    case S_PREFETCH: {
        ember_status st = ember_sebc_prefetch(s, &f->g.kjt);
        return st == EMBER_OK ? ember_sebc_forward(s, &f->g.kjt, f->out) : st;
    }
    case S_SPLIT: {
        ember_status st = ember_sebc_backward_start(s, &f->g.kjt, f->grad);
        return st == EMBER_OK ? ember_sebc_backward_finish(s) : st;
    }
    case S_SAVE: {
        const ember_checkpoint_options o = {.chunk_bytes = 48, .blobs = BLOBS, .num_blobs = 2};
        return ember_checkpoint_save(s, f->dir, &o);
    }
    default: {
        const ember_checkpoint_options o = {.chunk_bytes = 64};
        return ember_checkpoint_load(s, f->dir, &o);
    }
    }
}

static void sebc_snap(void *fx, snap_bytes *z) {
    sebc_fx *f = fx;
    const int32_t exists = f->s != NULL;
    snap_add(z, &exists, sizeof exists);
    if (f->out) snap_add(z, f->out, sizeof(float) * (size_t)f->nout);
    if (f->buf) snap_add(z, f->buf, f->buf_bytes);
    if (f->what == S_SAVE) { // after rank 0's clean-up of the generation a save replaced
        MPI_Barrier(MPI_COMM_WORLD);
        snap_dir(f->dir, z);
    }
    if (exists) snap_pieces(f->s, z);
}

static void sebc_teardown(void *fx) {
    sebc_fx *f = fx;
    ember_sebc_destroy(f->s);
    f->s = NULL;
    if (f->out) gen_kjt_free(&f->g);
    free(f->out);
    free(f->grad);
    free(f->buf);
    f->out = f->grad = NULL;
    f->buf = NULL;
}

static const char *const WHAT[] = {"sebc_create",     "sebc_forward",   "sebc_backward",     "sebc_read (root -1)",
                                   "sebc_read_as (root 0)", "sebc_write (root -1)", "sebc_write_as (root W-1)",
                                   "sebc_convert_dtype (a)", "sebc_convert_dtype (b)", "sebc pieces and steps",
                                   "checkpoint_save",  "checkpoint_load", "sebc_prefetch + sebc_forward",
                                   "sebc_backward_start + finish"};

// The sequence `what` on a collection of `layout`, failing on each rank in turn for the mix (every
// scheme at once) and on one rank, rotating with the layout, for the others.
static int64_t sweep_sebc(env *e, int layout, int what, const char *dir, const char *prev) {
    sebc_fx f;
    memset(&f, 0, sizeof f);
    f.e = e;
    f.layout = layout;
    f.what = what;
    if (dir) snprintf(f.dir, sizeof f.dir, "%s", dir);
    if (prev) snprintf(f.prev, sizeof f.prev, "%s", prev);
    char name[96];
    snprintf(name, sizeof name, "%s, %s", WHAT[what], LNAMES[layout]);
    const fail_sequence q = {name, sebc_setup, sebc_run, sebc_snap, sebc_teardown};
    return sweep_ranks(e, &q, &f, layout == L_MIXED ? -1 : layout % W);
}

static void sebc_create_every_layout(void **state) {
    (void)state;
    env e;
    env_open(&e);
    for (int l = 0; l < L_COUNT; l++) assert_true(sweep_sebc(&e, l, S_CREATE, NULL, NULL) >= 10);
    env_close(&e);
}

static void sebc_forward_every_layout(void **state) {
    (void)state;
    env e;
    env_open(&e);
    for (int l = 0; l < L_COUNT; l++) assert_true(sweep_sebc(&e, l, S_FORWARD, NULL, NULL) >= 4);
    for (int l = 0; l < L_COUNT; l++) assert_true(sweep_sebc(&e, l, S_PREFETCH, NULL, NULL) >= 4);
    env_close(&e);
}

static void sebc_backward_every_layout(void **state) {
    (void)state;
    env e;
    env_open(&e);
    for (int l = 0; l < L_COUNT; l++) assert_true(sweep_sebc(&e, l, S_BACKWARD, NULL, NULL) >= 1);
    for (int l = 0; l < L_COUNT; l++) assert_true(sweep_sebc(&e, l, S_SPLIT, NULL, NULL) >= 1);
    env_close(&e);
}

static void sebc_state_dict(void **state) {
    (void)state;
    env e;
    env_open(&e);
    static const int layouts[] = {EMBER_SHARD_DATA_PARALLEL, EMBER_SHARD_COLUMN_WISE, EMBER_SHARD_ROW_WISE,
                                  EMBER_SHARD_GRID, L_MIXED};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        for (int w = S_READ_ALL; w <= S_PIECES; w++) sweep_sebc(&e, layouts[i], w, NULL, NULL);
    env_close(&e);
}

static void checkpoint_save_and_load(void **state) {
    (void)state;
    env e;
    env_open(&e);
    char ck[160], prev[160], work[160];
    // Loads read a checkpoint of other dtypes and values, saved under column-wise sharding (three
    // slices: every column-sliced loader patches rows).
    scratch_path(ck, sizeof ck, "ck");
    save_checkpoint(&e, EMBER_SHARD_COLUMN_WISE, CK_DTYPES, 2, ck);
    scratch_path(work, sizeof work, "work");
    // Saves replace a checkpoint of the same layout and other values (the mix: every piece kind;
    // a save allocates alike whatever the layout).
    scratch_path(prev, sizeof prev, "prev");
    save_checkpoint(&e, L_MIXED, DTYPES, 3, prev);
    assert_true(sweep_sebc(&e, L_MIXED, S_SAVE, work, prev) >= 3);
    static const int layouts[] = {EMBER_SHARD_GRID, L_MIXED, EMBER_SHARD_DATA_PARALLEL};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        assert_true(sweep_sebc(&e, layouts[i], S_LOAD, ck, NULL) >= 4);
    env_close(&e);
}

// ---- Checkpoint inspection (local) -----------------------------------------------------------------

typedef struct inspect_fx {
    env *e;
    int what; // 0 open, 1 verify, 2 read a blob
    char dir[160];
    ember_checkpoint *c;
    unsigned char blob[32];
} inspect_fx;

static void inspect_setup(void *fx) {
    inspect_fx *f = fx;
    f->c = NULL;
    memset(f->blob, 0xee, sizeof f->blob);
    if (f->what > 0) assert_int_equal(ember_checkpoint_open(f->e->ctx, f->dir, &f->c), EMBER_OK);
}

static ember_status inspect_run(void *fx) {
    inspect_fx *f = fx;
    switch (f->what) {
    case 0: return ember_checkpoint_open(f->e->ctx, f->dir, &f->c);
    case 1: return ember_checkpoint_verify(f->c);
    default: return ember_checkpoint_read_blob(f->c, "dense.params", f->blob, sizeof f->blob, NULL);
    }
}

static void inspect_snap(void *fx, snap_bytes *z) {
    inspect_fx *f = fx;
    const int32_t exists = f->c != NULL;
    snap_add(z, &exists, sizeof exists);
    snap_add(z, f->blob, sizeof f->blob);
    if (!f->c) return;
    const int64_t g = ember_checkpoint_generation(f->c);
    const int32_t n = ember_checkpoint_num_tables(f->c);
    snap_add(z, &g, sizeof g);
    snap_add(z, &n, sizeof n);
    for (int32_t i = 0; i < n; i++) {
        ember_checkpoint_table t;
        assert_int_equal(ember_checkpoint_table_info(f->c, i, &t), EMBER_OK);
        snap_add(z, t.name, strlen(t.name));
        snap_add(z, &t.rows, sizeof t.rows);
        snap_add(z, &t.step, sizeof t.step);
        snap_add(z, &t.num_records, sizeof t.num_records);
        snap_add(z, &t.bytes, sizeof t.bytes);
    }
}

static void inspect_teardown(void *fx) {
    inspect_fx *f = fx;
    ember_checkpoint_close(f->c);
    f->c = NULL;
}

static void checkpoint_inspect(void **state) {
    (void)state;
    env e;
    env_open(&e);
    inspect_fx f;
    memset(&f, 0, sizeof f);
    f.e = &e;
    scratch_path(f.dir, sizeof f.dir, "inspect");
    save_checkpoint(&e, L_MIXED, DTYPES, 4, f.dir);
    static const char *const names[3] = {"checkpoint_open", "checkpoint_verify", "checkpoint_read_blob"};
    for (f.what = 0; f.what < 3; f.what++) {
        const fail_sequence q = {names[f.what], inspect_setup, inspect_run, inspect_snap, inspect_teardown};
        assert_true(sweep_local(&e, &q, &f) >= (f.what == 0 ? 4 : f.what == 1 ? 1 : 0));
    }
    env_close(&e);
}

// ---- LFQ with a communicator -----------------------------------------------------------------------

enum { LN = 5, LDIM = 6, LK = 16, LC = 2 };

typedef struct lfq_fx {
    env *e;
    int what;            // 0 create (local), 1 training forward growing the workspace, 2 backward
    ember_lfq_config cfg;
    ember_lfq *q;
    int32_t B;           // the larger batch of the run: 2 + R tokens rows more than the setup's
    float *x, *out, *gout, *gx;
    int64_t *idx;
    uint8_t *mask;
    ember_lfq_losses losses;
    size_t n;            // floats of the largest batch
} lfq_fx;

static void lfq_setup(void *fx) {
    lfq_fx *f = fx;
    ember_lfq_config c = EMBER_LFQ_CONFIG_DEFAULT;
    c.dim = LDIM;
    c.codebook_size = LK;
    c.num_codebooks = LC;
    c.commitment_loss_weight = 0.25;
    c.frac_per_sample_entropy = 0.5;
    c.dist_mean = EMBER_LFQ_MEAN_TOKENS;
    c.seed = 3;
    c.comm = f->e->comm;
    c.max_tokens = f->what == 0 ? 4 : 0;
    f->cfg = c;
    f->q = NULL;
    f->B = 4 + R; // unequal batches
    f->n = (size_t)f->B * LN * LDIM;
    f->x = malloc(sizeof(float) * f->n);
    f->out = malloc(sizeof(float) * f->n);
    f->gout = malloc(sizeof(float) * f->n);
    f->gx = malloc(sizeof(float) * f->n);
    f->idx = malloc(sizeof(int64_t) * (size_t)f->B * LN * LC);
    f->mask = malloc((size_t)f->B * LN);
    test_rng r = {200 + (uint64_t)R};
    for (size_t i = 0; i < f->n; i++) {
        f->x[i] = (float)rng_uniform(&r) * 2 - 1;
        f->gout[i] = (float)rng_uniform(&r) - 0.5f;
        f->out[i] = f->gx[i] = -9.0f;
    }
    for (size_t i = 0; i < (size_t)f->B * LN * LC; i++) f->idx[i] = -1;
    for (size_t i = 0; i < (size_t)f->B * LN; i++) f->mask[i] = (uint8_t)(i % 3 != 1);
    memset(&f->losses, 0, sizeof f->losses);
    if (f->what == 0) return;
    assert_int_equal(ember_lfq_create(f->e->ctx, &f->cfg, &f->q), EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD,
                    ember_lfq_forward(f->q, f->x, 2, LN, f->mask, true, f->out, f->idx, &f->losses) == EMBER_OK);
}

static ember_status lfq_run(void *fx) {
    lfq_fx *f = fx;
    switch (f->what) {
    case 0: return ember_lfq_create(f->e->ctx, &f->cfg, &f->q);
    case 1: return ember_lfq_forward(f->q, f->x, f->B, LN, f->mask, true, f->out, f->idx, &f->losses);
    default: return ember_lfq_backward(f->q, f->gout, 1.0, f->gx);
    }
}

// Parameters, gradients, outputs, losses, and what a backward of the saved forward gives (from
// zeroed gradients, restored afterwards). Collective when a forward is saved.
static void lfq_snap(void *fx, snap_bytes *z) {
    lfq_fx *f = fx;
    const int32_t exists = f->q != NULL;
    snap_add(z, &exists, sizeof exists);
    snap_add(z, f->out, sizeof(float) * f->n);
    snap_add(z, f->gx, sizeof(float) * f->n);
    snap_add(z, f->idx, sizeof(int64_t) * (size_t)f->B * LN * LC);
    snap_add(z, &f->losses, sizeof f->losses);
    if (!exists) return;
    int64_t np = 0;
    float *params = ember_lfq_params(f->q, &np), *grads = ember_lfq_grads(f->q, NULL);
    snap_add(z, params, sizeof(float) * (size_t)np);
    snap_add(z, grads, sizeof(float) * (size_t)np);
    if (f->what == 0) return;
    float *gx = calloc(f->n, sizeof(float)), *keep = malloc(sizeof(float) * (size_t)(np + 1));
    memcpy(keep, grads, sizeof(float) * (size_t)np);
    assert_int_equal(ember_lfq_zero_grad(f->q), EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_lfq_backward(f->q, f->gout, 1.0, gx) == EMBER_OK);
    snap_add(z, gx, sizeof(float) * f->n);
    snap_add(z, grads, sizeof(float) * (size_t)np);
    memcpy(grads, keep, sizeof(float) * (size_t)np);
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
    free(f->idx);
    free(f->mask);
}

static void lfq_with_comm(void **state) {
    (void)state;
    env e;
    env_open(&e);
    lfq_fx f;
    memset(&f, 0, sizeof f);
    f.e = &e;
    const fail_sequence create = {"lfq_create (with comm)", lfq_setup, lfq_run, lfq_snap, lfq_teardown};
    assert_true(sweep_local(&e, &create, &f) >= 7);
    f.what = 1;
    const fail_sequence fwd = {"lfq_forward (training, grows)", lfq_setup, lfq_run, lfq_snap, lfq_teardown};
    assert_true(sweep_ranks(&e, &fwd, &f, -1) >= 1);
    f.what = 2;
    const fail_sequence bwd = {"lfq_backward", lfq_setup, lfq_run, lfq_snap, lfq_teardown};
    sweep_ranks(&e, &bwd, &f, -1);
    env_close(&e);
}

// ---- The communicator ------------------------------------------------------------------------------

typedef struct comm_fx {
    env *e;
    ember_comm *c;
} comm_fx;

static void comm_setup(void *fx) { ((comm_fx *)fx)->c = NULL; }
static ember_status comm_run(void *fx) {
    comm_fx *f = fx;
    return ember_comm_create(f->e->ctx, MPI_COMM_WORLD, &f->c);
}
static void comm_snap(void *fx, snap_bytes *z) {
    comm_fx *f = fx;
    const int32_t exists = f->c != NULL;
    snap_add(z, &exists, sizeof exists);
}
static void comm_teardown(void *fx) {
    comm_fx *f = fx;
    ember_comm_destroy(f->c);
    f->c = NULL;
}

// ember_comm_create agrees on its allocations before it duplicates the communicator: a failure
// on any one rank, and on every rank at once, fails every rank alike (4 sites: the object, the
// counts, the watchdog's two arrays).
static void comm_create_fails_alike(void **state) {
    (void)state;
    env e;
    env_open(&e);
    comm_fx f = {&e, NULL};
    const fail_sequence q = {"comm_create", comm_setup, comm_run, comm_snap, comm_teardown};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, sweep_ranks(&e, &q, &f, -1) == 4);
    fail_sweep_result r = fail_alloc_sweep(&q, &f, e.ctx, &e.fa, MPI_COMM_WORLD, -1);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, r.ok && r.sites == 4);
    env_close(&e);
}

// The checkpoints live in memory where the system has a tmpfs (/dev/shm): a sweep saves a
// hundred times, and fsync on a disk would make that seconds.
static int scratch_setup(void **state) {
    (void)state;
    int rc = 0;
    if (R == 0) {
        snprintf(scratch, sizeof scratch, "/dev/shm/ember_alloc_XXXXXX");
        if (!mkdtemp(scratch)) {
            snprintf(scratch, sizeof scratch, "/tmp/ember_alloc_XXXXXX");
            rc = mkdtemp(scratch) ? 0 : -1;
        }
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(scratch, sizeof scratch, MPI_CHAR, 0, MPI_COMM_WORLD);
    return rc;
}

static int scratch_teardown(void **state) {
    (void)state;
    MPI_Barrier(MPI_COMM_WORLD);
    return R == 0 ? test_remove_tree(scratch) : 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    const char *only = argc > 1 ? argv[1] : "";
    struct CMUnitTest all[] = {
        cmocka_unit_test(comm_create_fails_alike),
        cmocka_unit_test(sebc_create_every_layout),
        cmocka_unit_test(sebc_forward_every_layout),
        cmocka_unit_test(sebc_backward_every_layout),
        cmocka_unit_test(sebc_state_dict),
        cmocka_unit_test(checkpoint_save_and_load),
        cmocka_unit_test(checkpoint_inspect),
        cmocka_unit_test(lfq_with_comm),
    };
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!only[0] || strstr(all[i].name, only)) chosen[n++] = all[i];
    int fails = _cmocka_run_group_tests("alloc_fail", chosen, (size_t)n, scratch_setup, scratch_teardown);
    MPI_Finalize();
    return fails;
}
