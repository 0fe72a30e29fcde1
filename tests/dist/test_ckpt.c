// Checkpoint directories (include/ember/state.h) under mpiexec -n W:
//   reshard_every_world_size  a checkpoint saved by W ranks under one plan loads bitwise into
//                             every world size 1..W under other plans (and back), every scheme,
//                             fp32/fp16/bf16 weights, per-row and element-wise optimizer state,
//                             a one-row table, records cut much smaller than a piece
//   bounded_memory            a table many times the chunk saves and loads with the peak of the
//                             context's allocations under 2 chunks (+ the manifest's records)
//   commit_protocol           failures: missing/foreign directories, a full disk on the last
//                             rank and at the manifest (the previous checkpoint stays, nothing is
//                             left; a directory the save created is removed, one that existed
//                             before stays), a damaged record, other shapes and optimizers (named in
//                             words); blobs (one claiming 40 TB: refused, not allocated);
//                             records overlapping over a gap; leftovers of killed saves
//                             removed by the next one
//   deltas                    incremental checkpoints: a full save, training (duplicate ids,
//                             empty bags; a hashed table's admissions and candidates, a tiered
//                             table's evictions), writes and a dtype change, two deltas on top:
//                             the chain loads bitwise as a full save of the same state into
//                             every world size 1..W under other plans; the deltas are smaller,
//                             verify, keep their base's files until a full save removes them;
//                             a delta without a mark, or onto another checkpoint, is refused
//   verify_checks_what_load_checks
//                             manifests damaged where no CRC-32 sees (a dim of 2^31 - 1, a
//                             dtype changed, an optimizer tensor or a hashed table's ids
//                             removed, no tables, a blob name twice or a path): they open;
//                             verify and load refuse each, naming it and its value; a tensor of
//                             2^64 elements (its area check wrapped) refused at open
#define _DEFAULT_SOURCE // mkdtemp
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "ember.h"
#include "gen.h"
#include "mpi_assert.h"
#include "state/durable.h"
#include "tmpdir.h"

static int W, R;

// ---- A counting allocator: the peak of the bytes outstanding -------------------------------------

typedef struct counter {
    size_t now, peak;
} counter;

static void *count_alloc(void *user, size_t size) {
    counter *c = user;
    unsigned char *p = aligned_alloc(64, ((size + 64 + 63) / 64) * 64);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    c->now += size;
    if (c->now > c->peak) c->peak = c->now;
    return p + 64;
}

static void count_free(void *user, void *ptr) {
    if (!ptr) return;
    counter *c = user;
    unsigned char *p = (unsigned char *)ptr - 64;
    size_t size;
    memcpy(&size, p, sizeof size);
    c->now -= size;
    free(p);
}

// ---- Collections ----------------------------------------------------------------------------------

enum { T = 5, SCHEMES = 6 };
static const char *const NAMES[T] = {"w32", "h16", "b16", "one", "grid"};
static const int64_t ROWS[T] = {41, 29, 17, 1, 33};
static const int32_t DIMS[T] = {6, 5, 4, 3, 8};
static const ember_dtype DTYPES[T] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16, EMBER_DTYPE_F32,
                                      EMBER_DTYPE_F32};
static const ember_optim_kind OPTS[T] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM, EMBER_OPT_ADAGRAD, EMBER_OPT_SGD,
                                         EMBER_OPT_PARTIAL_ROWWISE_ADAM};

// Table t (of dim columns) under scheme s on w ranks (ranks: the caller's buffer of 16).
static ember_table_plan plan_of(int s, int t, int w, int32_t dim, int32_t *ranks) {
    ember_table_plan p;
    memset(&p, 0, sizeof p);
    p.ranks = ranks;
    switch (s % SCHEMES) {
    case 0: p.scheme = EMBER_SHARD_DATA_PARALLEL; break;
    case 1: p.scheme = EMBER_SHARD_TABLE_WISE; ranks[0] = t % w; break;
    case 2:
        p.scheme = EMBER_SHARD_COLUMN_WISE;
        p.num_shards = 2 + t % 2 <= dim ? 2 + t % 2 : dim;
        for (int i = 0; i < p.num_shards; i++) ranks[i] = (t + i) % w;
        break;
    case 3: p.scheme = EMBER_SHARD_ROW_WISE; break;
    case 4:
        p.scheme = EMBER_SHARD_TABLE_ROW_WISE;
        p.group_size = w;
        for (int i = 0; i < w; i++) ranks[i] = w - 1 - i;
        break;
    default:
        p.scheme = EMBER_SHARD_GRID;
        p.num_shards = 2;
        p.group_size = w;
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < w; k++) ranks[c * w + k] = (k + c) % w;
    }
    p.num_ranks = ember_table_plan_ranks_needed(&p);
    if (!p.num_ranks) p.ranks = NULL;
    return p;
}

typedef struct coll {
    ember_ctx *ctx;
    ember_comm *comm;
    ember_sebc *s;
    counter mem;
} coll;

// The five tables on `comm`, table t under scheme (shift + t) (or all under `only` >= 0).
static ember_status coll_open(coll *c, MPI_Comm comm, int shift) {
    memset(c, 0, sizeof *c);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.allocator = (ember_allocator){.alloc = count_alloc, .free = count_free, .user = &c->mem};
    if (ember_ctx_create(&cc, &c->ctx) != EMBER_OK || ember_comm_create(c->ctx, comm, &c->comm) != EMBER_OK)
        return EMBER_ERR_INVALID_ARG;
    int w = 0;
    MPI_Comm_size(comm, &w);
    ember_table_config tc[T];
    ember_feature_config fc[T];
    ember_table_plan plan[T];
    int32_t ranks[T][16];
    for (int t = 0; t < T; t++) {
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = OPTS[t];
        tc[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc[t].name = NAMES[t], tc[t].rows = ROWS[t], tc[t].dim = DIMS[t], tc[t].dtype = DTYPES[t];
        tc[t].init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1}, tc[t].optim = o;
        fc[t] = (ember_feature_config){.name = NAMES[t], .table = t};
        plan[t] = plan_of(shift + t, t, w, DIMS[t], ranks[t]);
    }
    ember_ebc_config cfg = {.tables = tc, .num_tables = T, .features = fc, .num_features = T,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 7};
    return ember_sebc_create(c->comm, &cfg, plan, EMBER_GRAD_MEAN, &c->s);
}

static void coll_close(coll *c) {
    ember_sebc_destroy(c->s);
    ember_comm_destroy(c->comm);
    ember_ctx_destroy(c->ctx);
}

// Every tensor of every table as stored (native dtype), gathered on every rank, plus the steps.
typedef struct snapshot {
    unsigned char *data[T][EMBER_MAX_TENSORS];
    size_t bytes[T][EMBER_MAX_TENSORS];
    int64_t step[T];
} snapshot;

static ember_status snap(ember_sebc *s, snapshot *z) {
    memset(z, 0, sizeof *z);
    ember_status st = EMBER_OK;
    for (int t = 0; t < ember_sebc_num_tables(s) && t < T && st == EMBER_OK; t++) {
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(ember_sebc_table(s, t), ti);
        for (int k = 0; k < n && st == EMBER_OK; k++) {
            const ember_dtype dt = ti[k].dtype; // the weight's storage dtype, fp32 state, int64 ids
            z->bytes[t][k] = (size_t)ti[k].rows * (size_t)ti[k].cols * ember_dtype_size(dt);
            z->data[t][k] = malloc(z->bytes[t][k]);
            st = ember_sebc_read_as(s, t, ti[k].name, dt, z->data[t][k], -1);
        }
        if (st == EMBER_OK) st = ember_sebc_step(s, t, &z->step[t]);
    }
    return st;
}

static bool snap_equal(const snapshot *a, const snapshot *b) {
    for (int t = 0; t < T; t++) {
        if (a->step[t] != b->step[t]) return false;
        for (int k = 0; k < EMBER_MAX_TENSORS; k++)
            if (a->bytes[t][k] != b->bytes[t][k] || (a->bytes[t][k] && memcmp(a->data[t][k], b->data[t][k], a->bytes[t][k])))
                return false;
    }
    return true;
}

static void snap_free(snapshot *z) {
    for (int t = 0; t < T; t++)
        for (int k = 0; k < EMBER_MAX_TENSORS; k++) free(z->data[t][k]);
}

// Distinct values in every tensor (rounded into 16-bit weights by the write) and steps 100 + t.
static ember_status fill(ember_sebc *s, uint64_t seed) {
    test_rng rng = {seed};
    ember_status st = EMBER_OK;
    for (int t = 0; t < T && st == EMBER_OK; t++) {
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(ember_sebc_table(s, t), ti);
        for (int k = 0; k < n && st == EMBER_OK; k++) {
            const size_t cnt = (size_t)ti[k].rows * (size_t)ti[k].cols;
            float *v = malloc(sizeof(float) * cnt);
            for (size_t i = 0; i < cnt; i++) v[i] = (float)(k ? rng_uniform(&rng) : rng_uniform(&rng) * 2 - 1);
            st = ember_sebc_write(s, t, ti[k].name, v, -1);
            free(v);
        }
        if (st == EMBER_OK) st = ember_sebc_set_step(s, t, 100 + t);
    }
    return st;
}

// A directory every rank knows: made by rank 0 under the test's scratch directory.
static void shared_dir(char *dst, size_t cap, const char *name) {
    char base[64] = "";
    if (R == 0) snprintf(base, sizeof base, "%s", test_tmpdir);
    MPI_Bcast(base, sizeof base, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(dst, cap, "%s/%s", base, name);
}

static int scratch_setup(void **state) {
    int rc = R == 0 ? test_tmpdir_make(state) : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

static int scratch_teardown(void **state) {
    MPI_Barrier(MPI_COMM_WORLD);
    return R == 0 ? test_tmpdir_remove(state) : 0;
}

static void reshard_every_world_size(void **state) {
    (void)state;
    coll a;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, coll_open(&a, MPI_COMM_WORLD, 2) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, fill(a.s, 11) == EMBER_OK);
    snapshot ref;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &ref) == EMBER_OK);
    char dir[128];
    shared_dir(dir, sizeof dir, "reshard");
    // Records of at most 40 bytes: every piece is cut into many, and a loader's piece of other
    // columns patches rows from several records.
    ember_checkpoint_options small = {.chunk_bytes = 40};
    ember_status st = ember_checkpoint_save(a.s, dir, &small);
    if (st != EMBER_OK) fprintf(stderr, "rank %d: %s\n", R, ember_ctx_errmsg(a.ctx));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK);
    for (int w = 1; w <= W; w++) {
        for (int shift = 0; shift < SCHEMES; shift += 1) {
            // Into w ranks under every rotation of the schemes, then saved there and loaded back
            // into the W-rank collection (refilled first, so the load must change everything).
            MPI_Comm sub;
            MPI_Comm_split(MPI_COMM_WORLD, R < w ? 0 : MPI_UNDEFINED, R, &sub);
            bool ok = true;
            char back[160];
            snprintf(back, sizeof back, "%s_back_%d_%d", dir, w, shift);
            if (sub != MPI_COMM_NULL) {
                coll b;
                ok = coll_open(&b, sub, shift) == EMBER_OK;
                st = ok ? ember_checkpoint_load(b.s, dir, shift % 2 ? &small : NULL) : EMBER_ERR_INVALID_ARG;
                if (st != EMBER_OK) fprintf(stderr, "rank %d (w %d, shift %d): %s\n", R, w, shift, ember_ctx_errmsg(b.ctx));
                snapshot z;
                ok = ok && st == EMBER_OK && snap(b.s, &z) == EMBER_OK;
                if (ok) {
                    if (!snap_equal(&ref, &z)) {
                        fprintf(stderr, "rank %d: loaded under w %d, shift %d: not bitwise the saved state\n", R, w, shift);
                        ok = false;
                    }
                    snap_free(&z);
                }
                ok = ok && ember_checkpoint_save(b.s, back, shift % 3 ? &small : NULL) == EMBER_OK;
                coll_close(&b);
                MPI_Comm_free(&sub);
            }
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, fill(a.s, 99) == EMBER_OK);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, back, NULL) == EMBER_OK);
            snapshot z;
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &z) == EMBER_OK);
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap_equal(&ref, &z));
            snap_free(&z);
        }
    }
    snap_free(&ref);
    coll_close(&a);
}

// ---- Bounded memory ---------------------------------------------------------------------------

static void bounded_memory(void **state) {
    (void)state;
    enum { BIG_ROWS = 120000, BIG_DIM = 16 };
    const size_t chunk = 256 << 10;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    counter mem = {0, 0};
    cc.allocator = (ember_allocator){.alloc = count_alloc, .free = count_free, .user = &mem};
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    assert_int_equal(ember_ctx_create(&cc, &ctx), EMBER_OK);
    assert_int_equal(ember_comm_create(ctx, MPI_COMM_WORLD, &comm), EMBER_OK);
    ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
    o.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
    tc.name = "big", tc.rows = BIG_ROWS, tc.dim = BIG_DIM;
    tc.init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1}, tc.optim = o;
    ember_feature_config fc = {.name = "f", .table = 0};
    ember_ebc_config cfg = {.tables = &tc, .num_tables = 1, .features = &fc, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 3};
    int32_t ranks[16];
    ember_table_plan rw = plan_of(3, 0, W, DIMS[0], ranks);
    ember_sebc *s = NULL, *s2 = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(comm, &cfg, &rw, EMBER_GRAD_MEAN, &s) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_set_step(s, 0, 5) == EMBER_OK);
    char dir[128];
    shared_dir(dir, sizeof dir, "big");
    ember_checkpoint_options opts = {.chunk_bytes = chunk};
    const size_t table_bytes = mem.now; // the collection: this rank's piece and its buffers
    mem.peak = mem.now;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(s, dir, &opts) == EMBER_OK);
    const size_t save_extra = mem.peak - table_bytes;
    // Loaded into column slices on other ranks: records of other columns, patched chunk by chunk.
    ember_table_plan cw = {.scheme = EMBER_SHARD_COLUMN_WISE, .num_shards = 3, .num_ranks = 3, .ranks = ranks};
    for (int i = 0; i < 3; i++) ranks[i] = (i + 1) % W;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(comm, &cfg, &cw, EMBER_GRAD_MEAN, &s2) == EMBER_OK);
    const size_t before_load = mem.now;
    mem.peak = mem.now;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(s2, dir, &opts) == EMBER_OK);
    const size_t load_extra = mem.peak - before_load;
    // The bound: two chunks, plus the manifest's text and records (a few hundred bytes a record).
    const size_t bound = 2 * chunk + (64 << 10);
    const double piece_mib = (double)BIG_ROWS * (BIG_DIM + 1) * 4.0 / W / (1 << 20);
    if (R == 0)
        printf("bounded_memory: W %d, table %.1f MiB (%.1f MiB per rank), chunk %zu KiB: peak extra %zu KiB saving, "
               "%zu KiB loading (bound %zu KiB)\n",
               W, (double)BIG_ROWS * (BIG_DIM + 1) * 4.0 / (1 << 20), piece_mib, chunk >> 10, save_extra >> 10,
               load_extra >> 10, bound >> 10);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, save_extra <= bound && load_extra <= bound);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, piece_mib * (1 << 20) > 4.0 * (double)chunk); // several chunks per piece
    // And the values arrived (compared through the gathering state dict, outside the measure).
    float *x = malloc(sizeof(float) * BIG_ROWS * BIG_DIM), *y = malloc(sizeof(float) * BIG_ROWS * BIG_DIM);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "weight", x, -1) == EMBER_OK &&
                                        ember_sebc_read(s2, 0, "weight", y, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(x, y, sizeof(float) * BIG_ROWS * BIG_DIM) == 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_read(s, 0, "momentum1", x, -1) == EMBER_OK &&
                                        ember_sebc_read(s2, 0, "momentum1", y, -1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, memcmp(x, y, sizeof(float) * BIG_ROWS) == 0);
    int64_t step = 0;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_step(s2, 0, &step) == EMBER_OK && step == 5);
    free(x);
    free(y);
    ember_sebc_destroy(s);
    ember_sebc_destroy(s2);
    ember_comm_destroy(comm);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_bytes_outstanding(ctx) == 0);
    ember_ctx_destroy(ctx);
}

// ---- Commit protocol and errors -------------------------------------------------------------------

static bool has(const ember_ctx *ctx, const char *text) {
    const bool yes = strstr(ember_ctx_errmsg(ctx), text) != NULL;
    if (!yes) fprintf(stderr, "rank %d: message \"%s\" lacks \"%s\"\n", R, ember_ctx_errmsg(ctx), text);
    return yes;
}

// Names in dir matching a suffix or a prefix (counted by rank 0, broadcast).
static int count_names(const char *dir, const char *prefix, const char *suffix) {
    int n = 0;
    if (R == 0) {
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));) {
            const size_t l = strlen(e->d_name), s = strlen(suffix);
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && l >= s && strcmp(e->d_name + l - s, suffix) == 0) n++;
        }
        if (d) closedir(d);
    }
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return n;
}

// Whether path is a directory (rank 0 looks; every rank gets the answer).
static int dir_exists(const char *path) {
    struct stat sb;
    int yes = R == 0 && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    MPI_Bcast(&yes, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return yes;
}

static void touch(const char *dir, const char *name, const char *text) {
    if (R != 0) return;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static long file_size(const char *dir, const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void commit_protocol(void **state) {
    (void)state;
    coll a;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, coll_open(&a, MPI_COMM_WORLD, 1) == EMBER_OK);
    ember_ctx *ctx = a.ctx;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, fill(a.s, 5) == EMBER_OK);
    snapshot ref, z;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &ref) == EMBER_OK);
    char dir[128], empty[128];
    shared_dir(dir, sizeof dir, "ck");
    shared_dir(empty, sizeof empty, "empty");
    if (R == 0) mkdir(empty, 0777);

    // Nothing there, or not a checkpoint: the path and the reason, on every rank.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, dir, NULL) == EMBER_ERR_IO);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "/ck': cannot open: No such file or directory"));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, empty, NULL) == EMBER_ERR_FORMAT);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "has no manifest.json"));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, "no/such/dir", NULL) == EMBER_ERR_IO);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "cannot create directory 'no/such/dir': No such file or directory"));

    // Blobs: checked on every rank before anything is written.
    const double dense[3] = {1.5, -2.25, 3.0};
    const char json[] = "{\"step\": 7}";
    ember_checkpoint_blob blobs[3] = {{.name = "dense.params", .data = dense, .bytes = sizeof dense},
                                      {.name = "trainer.json", .data = json, .bytes = sizeof json - 1},
                                      {.name = "bad/name", .data = json, .bytes = 1}};
    ember_checkpoint_options bad = {.blobs = blobs, .num_blobs = 3}, good = {.blobs = blobs, .num_blobs = 2};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &bad) == EMBER_ERR_INVALID_ARG);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "blob 2 name 'bad/name'"));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &good) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, count_names(dir, "g1-r", ".bin") >= 1 && count_names(dir, "", ".partial") == 0);
    {
        ember_checkpoint *c = NULL;
        double back[3] = {0};
        char text[64] = "";
        size_t n = 0;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(ctx, dir, &c) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_generation(c) == 1 && ember_checkpoint_world_size(c) == W &&
                                            ember_checkpoint_num_tables(c) == T && ember_checkpoint_num_blobs(c) == 2);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_read_blob(c, "dense.params", back, sizeof back, &n) == EMBER_OK &&
                                            n == sizeof dense && memcmp(back, dense, sizeof dense) == 0);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_read_blob(c, "trainer.json", text, sizeof text, &n) == EMBER_OK &&
                                            n == strlen(json) && memcmp(text, json, n) == 0);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_read_blob(c, "trainer.json", text, 3, &n) == EMBER_ERR_INVALID_ARG);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_read_blob(c, "nope", text, 3, &n) == EMBER_ERR_INVALID_ARG &&
                                            has(ctx, "has no blob 'nope'"));
        ember_checkpoint_table info;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_table_info(c, 1, &info) == EMBER_OK &&
                                            strcmp(info.name, "h16") == 0 && info.rows == 29 && info.dim == 5 &&
                                            info.optim == EMBER_OPT_ADAM && info.dtype == EMBER_DTYPE_F16 &&
                                            info.step == 101 && info.bytes == 29 * 5 * (2 + 4 + 4));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_verify(c) == EMBER_OK);
        ember_checkpoint_close(c);
    }
    // A manifest claiming a blob far larger than its file (a few digits more): verify refuses it
    // at the file's end without allocating the claim (fuzz_checkpoint found it allocating 40 TB).
    {
        char path[256], *text = NULL;
        long len = 0;
        snprintf(path, sizeof path, "%s/manifest.json", dir);
        if (R == 0) {
            FILE *f = fopen(path, "rb");
            fseek(f, 0, SEEK_END);
            len = ftell(f);
            rewind(f);
            text = calloc((size_t)len + 1, 1);
            assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
            fclose(f);
            char *at = strstr(text, "\"bytes\":\t11,"); // trainer.json, the one odd size
            assert_non_null(at);
            f = fopen(path, "wb");
            fwrite(text, 1, (size_t)(at - text), f);
            fputs("\"bytes\":\t40000000000011,", f);
            fputs(at + strlen("\"bytes\":\t11,"), f);
            fclose(f);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        ember_checkpoint *c = NULL;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(ctx, dir, &c) == EMBER_OK);
        const size_t before = a.mem.now;
        a.mem.peak = before;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_verify(c) == EMBER_ERR_FORMAT &&
                                            has(ctx, "ends before blob 'trainer.json'") &&
                                            a.mem.peak - before < ((size_t)1 << 20));
        ember_checkpoint_close(c);
        MPI_Barrier(MPI_COMM_WORLD);
        if (R == 0) { // the checkpoint as it was, for what follows
            FILE *f = fopen(path, "wb");
            fwrite(text, 1, (size_t)len, f);
            fclose(f);
            free(text);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    // A full disk on the last rank while it writes its records: every rank fails with the reason,
    // nothing of the new generation remains, and the previous checkpoint loads as it was.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, fill(a.s, 6) == EMBER_OK);
    if (R == W - 1) ember__dfile_fail_after(50, ENOSPC);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &good) == EMBER_ERR_IO);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "No space left on device") && has(ctx, "previous checkpoint is kept"));
    ember__dfile_fail_after(-1, 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, count_names(dir, "g2-", "") == 0 && count_names(dir, "", ".partial") == 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, dir, NULL) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &z) == EMBER_OK && snap_equal(&ref, &z));
    snap_free(&z);

    // A full disk at the commit itself (rank 0's manifest, after every record is durable).
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, fill(a.s, 7) == EMBER_OK);
    long data0 = file_size(dir, "g1-r0.bin");
    MPI_Bcast(&data0, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    if (R == 0) ember__dfile_fail_after(data0 + 10, ENOSPC); // same records as generation 1
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &good) == EMBER_ERR_IO);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "manifest.json' failed: No space left on device"));
    ember__dfile_fail_after(-1, 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, count_names(dir, "g2-", "") == 0 && count_names(dir, "", ".partial") == 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, dir, NULL) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &z) == EMBER_OK && snap_equal(&ref, &z));
    snap_free(&z);

    // A failed save into a directory that it created leaves no directory behind (a full disk while
    // the records are written, and at the commit); a directory that existed before stays as it was.
    char fresh[128];
    shared_dir(fresh, sizeof fresh, "fresh");
    if (R == W - 1) ember__dfile_fail_after(50, ENOSPC);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, fresh, &good) == EMBER_ERR_IO &&
                                        has(ctx, "No space left on device"));
    ember__dfile_fail_after(-1, 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, !dir_exists(fresh));
    if (R == 0) ember__dfile_fail_after(data0 + 10, ENOSPC); // every record durable, then the manifest
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, fresh, &good) == EMBER_ERR_IO &&
                                        has(ctx, "manifest.json' failed: No space left on device"));
    ember__dfile_fail_after(-1, 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, !dir_exists(fresh));
    if (R == W - 1) ember__dfile_fail_after(50, ENOSPC);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, empty, &good) == EMBER_ERR_IO);
    ember__dfile_fail_after(-1, 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, dir_exists(empty) && count_names(empty, "", "") == 2); // "." and ".." alone

    // What killed saves leave behind goes at the next commit; other files stay.
    touch(dir, "g7-r0.bin.partial", "torn");
    touch(dir, "g7-r9.bin", "torn");
    touch(dir, "manifest.json.partial", "{");
    touch(dir, "notes.txt", "mine");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &good) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, count_names(dir, "g7-", "") == 0 && count_names(dir, "", ".partial") == 0 &&
                                        count_names(dir, "g1-", "") == 0 && count_names(dir, "g8-", ".bin") >= 1 &&
                                        count_names(dir, "notes.txt", "") == 1);

    // A damaged record: refused with its CRC, naming table and rows.
    if (R == 0) {
        char path[256];
        snprintf(path, sizeof path, "%s/g8-r0.bin", dir);
        FILE *f = fopen(path, "r+b");
        fseek(f, 10, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 10, SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, dir, NULL) == EMBER_ERR_FORMAT);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "fails its CRC-32"));
    {
        ember_checkpoint *c = NULL;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(ctx, dir, &c) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_verify(c) == EMBER_ERR_FORMAT && has(ctx, "fails its CRC-32"));
        ember_checkpoint_close(c);
    }

    // Another shape or optimizer under the same name: refused before any table changes, in words.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, NULL) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &ref) == EMBER_OK);
    {
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
        tc.name = "w32", tc.rows = 40, tc.dim = 6, tc.init = (ember_init){.kind = EMBER_INIT_ZEROS}, tc.optim = o;
        ember_feature_config fc = {.name = "f", .table = 0};
        ember_ebc_config cfg = {.tables = &tc, .num_tables = 1, .features = &fc, .num_features = 1,
                                .bounds = EMBER_BOUNDS_ERROR, .seed = 1};
        ember_table_plan dp = {.scheme = EMBER_SHARD_DATA_PARALLEL};
        ember_sebc *o1 = NULL;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(a.comm, &cfg, &dp, EMBER_GRAD_MEAN, &o1) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(o1, dir, NULL) == EMBER_ERR_FORMAT);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "table 'w32' rows: 41 in checkpoint"));
        ember_sebc_destroy(o1);
        tc.rows = 41;
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(a.comm, &cfg, &dp, EMBER_GRAD_MEAN, &o1) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(o1, dir, NULL) == EMBER_ERR_FORMAT);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, has(ctx, "optimizer: rowwise_adagrad in checkpoint") && has(ctx, ", sgd here"));
        ember_sebc_destroy(o1);
        tc.name = "absent";
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(a.comm, &cfg, &dp, EMBER_GRAD_MEAN, &o1) == EMBER_OK);
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(o1, dir, NULL) == EMBER_ERR_FORMAT &&
                                            has(ctx, "table 'absent' is not in checkpoint"));
        ember_sebc_destroy(o1);
    }
    // A manifest that is not one: refused, the collection unchanged.
    touch(empty, "manifest.json", "{\"format\": \"ember-checkpoint\", \"version\": 4}");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, empty, NULL) == EMBER_ERR_FORMAT &&
                                        has(ctx, "'version' is not 2 or 3"));
    touch(empty, "manifest.json", "{\"format\": \"ember-checkpoint\", ");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, empty, NULL) == EMBER_ERR_FORMAT &&
                                        has(ctx, "not valid JSON"));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &z) == EMBER_OK && snap_equal(&ref, &z));
    snap_free(&z);
    snap_free(&ref);

    // Records that overlap where others leave a gap of the same area: refused (fuzz_checkpoint's
    // check; the area alone passed them, and a load left the gap's rows as they were).
    char tiles[128];
    shared_dir(tiles, sizeof tiles, "tiles");
    static const char tiled[] =
        "{\"format\": \"ember-checkpoint\", \"version\": 2, \"generation\": 1, \"world_size\": 1, \"blobs\": [],"
        " \"tables\": [{\"name\": \"t\", \"rows\": 2, \"dim\": 1, \"optimizer\": \"sgd\", \"dtype\": \"fp32\","
        " \"step\": 0, \"tensors\": [{\"name\": \"weight\", \"cols\": 1, \"dtype\": \"fp32\", \"records\": ["
        "{\"file\": \"g1-r0.bin\", \"offset\": 0, \"rows\": [0, 1], \"cols\": [0, 1], \"bytes\": 4, \"crc32\": 558161692},"
        "{\"file\": \"g1-r0.bin\", \"offset\": 4, \"rows\": [%d, %d], \"cols\": [0, 1], \"bytes\": 4, \"crc32\": 558161692}"
        "]}]}]}";
    for (int second = 1; second >= 0; second--) { // rows [1, 2): the tensor once; [0, 1): row 0 twice, row 1 never
        if (R == 0) {
            mkdir(tiles, 0777);
            char text[sizeof tiled + 8], path[256];
            snprintf(text, sizeof text, tiled, second, second + 1);
            touch(tiles, "manifest.json", text);
            snprintf(path, sizeof path, "%s/g1-r0.bin", tiles);
            FILE *f = fopen(path, "wb");
            const float zeros[2] = {0.0f, 0.0f};
            fwrite(zeros, sizeof zeros, 1, f);
            fclose(f);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        ember_checkpoint *c = NULL;
        const ember_status st = ember_checkpoint_open(ctx, tiles, &c);
        if (second) {
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_OK && ember_checkpoint_verify(c) == EMBER_OK);
        } else {
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, st == EMBER_ERR_FORMAT && c == NULL &&
                                                has(ctx, "'weight' records do not cover the tensor exactly once"));
        }
        ember_checkpoint_close(c);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    coll_close(&a);
}

// ---- Verify checks what a load checks -------------------------------------------------------------

// Table `name` of a manifest, its tensor k, blob i.
static cJSON *m_table(cJSON *root, const char *name) {
    cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(root, "tables")) {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring, name) == 0) return t;
    }
    fail_msg("no table '%s' in the manifest", name);
    return NULL;
}
static cJSON *m_tensors(cJSON *root, const char *table) {
    return cJSON_GetObjectItemCaseSensitive(m_table(root, table), "tensors");
}
static cJSON *m_tensor(cJSON *root, const char *table, int k) { return cJSON_GetArrayItem(m_tensors(root, table), k); }
static cJSON *m_blob(cJSON *root, int i) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "blobs"), i);
}
static void m_set(cJSON *o, const char *key, const char *text) {
    assert_non_null(cJSON_SetValuestring(cJSON_GetObjectItemCaseSensitive(o, key), text));
}

// The damages of a manifest that its CRCs do not see and every load refuses (as fuzz_checkpoint
// mutates its seeds): each made on the saved manifest, with what the refusal names.
static void dim_huge(cJSON *r) {
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(m_table(r, "w32"), "dim"), 2147483647.0);
}
static void table_dtype(cJSON *r) { m_set(m_table(r, "h16"), "dtype", "bf16"); }
static void tensor_dtype(cJSON *r) { m_set(m_tensor(r, "b16", 0), "dtype", "fp16"); }
static void no_state(cJSON *r) { cJSON_DeleteItemFromArray(m_tensors(r, "h16"), 1); }
static void no_tables(cJSON *r) { cJSON_ReplaceItemInObjectCaseSensitive(r, "tables", cJSON_CreateArray()); }
static void blob_twice(cJSON *r) { m_set(m_blob(r, 1), "name", "dense.params"); }
static void blob_bad_name(cJSON *r) { m_set(m_blob(r, 1), "name", "../trainer.json"); }
static void no_ids(cJSON *r) { cJSON_DeleteItemFromArray(m_tensors(r, "hashed"), 2); }
static void ids_fp64(cJSON *r) { m_set(m_tensor(r, "hashed", 2), "dtype", "fp64"); }

typedef struct damage {
    const char *what;
    void (*make)(cJSON *root);
    const char *names[2]; // in the refusal: what is wrong, and its value
} damage;

// Rank 0 writes dir/manifest.json: `saved` as it is (make NULL) or damaged by make. Every rank returns after.
static void put_manifest(const char *dir, const char *saved, void (*make)(cJSON *root)) {
    if (R == 0) {
        cJSON *root = cJSON_Parse(saved);
        assert_non_null(root);
        if (make) make(root);
        char *text = cJSON_Print(root);
        assert_non_null(text);
        touch(dir, "manifest.json", text);
        cJSON_free(text);
        cJSON_Delete(root);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

// Rank 0's copy of dir/manifest.json (malloc'd; NULL elsewhere).
static char *get_manifest(const char *dir) {
    if (R != 0) return NULL;
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    rewind(f);
    char *text = calloc((size_t)n + 1, 1);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return text;
}

// Each damage: the checkpoint opens (its structure is whole: ember ckpt info lists it), verify
// refuses it with EMBER_ERR_FORMAT naming the table, tensor or blob and the value, and a load
// into the collection that saved it refuses it the same way, before any table changes.
static void refuse_damages(coll *a, const char *dir, const damage *d, int n) {
    char *saved = get_manifest(dir);
    snapshot before, after;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a->s, &before) == EMBER_OK);
    for (int i = 0; i < n; i++) {
        put_manifest(dir, saved, d[i].make);
        ember_checkpoint *c = NULL;
        const ember_status open_st = ember_checkpoint_open(a->ctx, dir, &c);
        if (open_st != EMBER_OK) fprintf(stderr, "rank %d: %s: open: %s\n", R, d[i].what, ember_ctx_errmsg(a->ctx));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD, open_st == EMBER_OK);
        const ember_status vst = ember_checkpoint_verify(c);
        if (vst != EMBER_ERR_FORMAT) fprintf(stderr, "rank %d: %s: verify %s\n", R, d[i].what, ember_status_name(vst));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD,
                        vst == EMBER_ERR_FORMAT && has(a->ctx, d[i].names[0]) && has(a->ctx, d[i].names[1]));
        ember_checkpoint_close(c);
        const ember_status lst = ember_checkpoint_load(a->s, dir, NULL);
        if (lst != EMBER_ERR_FORMAT) fprintf(stderr, "rank %d: %s: load %s\n", R, d[i].what, ember_status_name(lst));
        MPI_ASSERT_TRUE(MPI_COMM_WORLD,
                        lst == EMBER_ERR_FORMAT && has(a->ctx, d[i].names[0]) && has(a->ctx, d[i].names[1]));
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a->s, &after) == EMBER_OK && snap_equal(&before, &after));
    snap_free(&before);
    snap_free(&after);
    put_manifest(dir, saved, NULL); // as saved: verifies and loads
    ember_checkpoint *c = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(a->ctx, dir, &c) == EMBER_OK &&
                                        ember_checkpoint_verify(c) == EMBER_OK);
    ember_checkpoint_close(c);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a->s, dir, NULL) == EMBER_OK);
    free(saved);
}

static void verify_checks_what_load_checks(void **state) {
    (void)state;
    coll a;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, coll_open(&a, MPI_COMM_WORLD, 3) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, fill(a.s, 21) == EMBER_OK);
    char dir[128];
    shared_dir(dir, sizeof dir, "damaged");
    const double dense[2] = {1.0, 2.0};
    const ember_checkpoint_blob blobs[2] = {{.name = "dense.params", .data = dense, .bytes = sizeof dense},
                                            {.name = "trainer.json", .data = "{}", .bytes = 2}};
    ember_checkpoint_options o = {.chunk_bytes = 64, .blobs = blobs, .num_blobs = 2};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &o) == EMBER_OK);
    static const damage plain[] = {
        {"a table's dim 2^31 - 1", dim_huge, {"table 'w32' (dim 2147483647,", "tensor 'weight' has 6 columns"}},
        {"a table's dtype changed", table_dtype,
         {"table 'h16' (dim 5, bf16, adam)", "tensor 'weight' is fp16, not bf16"}},
        {"a tensor's dtype changed", tensor_dtype,
         {"table 'b16' (dim 4, bf16, adagrad)", "tensor 'weight' is fp16, not bf16"}},
        {"an optimizer tensor removed", no_state, {"table 'h16' (dim 5, fp16, adam)", "'momentum1' is missing"}},
        {"no tables", no_tables, {"manifest.json: 'tables' is empty", "at least one table"}},
        {"a blob name twice", blob_twice, {"blob 'dense.params'", "appears twice (blobs 0 and 1)"}},
        {"a blob name a path", blob_bad_name, {"blob '../trainer.json'", "is not 1 to 127 letters"}},
    };
    refuse_damages(&a, dir, plain, (int)(sizeof plain / sizeof plain[0]));
    coll_close(&a);

    // A hashed table (its "ids" and "candidates": ember_table_tensors of the table the manifest
    // describes, hashed because it holds them): verifies and loads as saved; without its ids, or
    // with them in another dtype, refused.
    coll h;
    memset(&h, 0, sizeof h);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_ctx_create(NULL, &h.ctx) == EMBER_OK &&
                                        ember_comm_create(h.ctx, MPI_COMM_WORLD, &h.comm) == EMBER_OK);
    ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
    tc.name = "hashed", tc.rows = 8, tc.dim = 4, tc.optim.kind = EMBER_OPT_ROWWISE_ADAGRAD;
    tc.hash = (ember_hash_config){.enabled = 1, .bucket_rows = 2, .min_count = 2, .policy = EMBER_EVICT_LRU};
    ember_feature_config fc = {.name = "f", .table = 0};
    ember_ebc_config cfg = {.tables = &tc, .num_tables = 1, .features = &fc, .num_features = 1,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 5};
    int32_t rank0 = 0;
    ember_table_plan tw = {.scheme = EMBER_SHARD_TABLE_WISE, .num_ranks = 1, .ranks = &rank0};
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_create(h.comm, &cfg, &tw, EMBER_GRAD_MEAN, &h.s) == EMBER_OK);
    char hdir[128];
    shared_dir(hdir, sizeof hdir, "damaged_hashed");
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(h.s, hdir, NULL) == EMBER_OK);
    static const damage hashed[] = {
        {"a hashed table's ids removed", no_ids,
         {"table 'hashed' (dim 4, fp32, rowwise_adagrad, hashed)", "'ids' is missing"}},
        {"a hashed table's ids in fp64", ids_fp64, {"table 'hashed'", "tensor 'ids' is fp64, not int64"}},
    };
    refuse_damages(&h, hdir, hashed, (int)(sizeof hashed / sizeof hashed[0]));

    // A tensor whose area wraps 64 bits (2^61 rows x 8 columns) and no record: open refuses it
    // (the area check passed it: 0 records of area 0), so verify and load never see it.
    char wrap[128];
    shared_dir(wrap, sizeof wrap, "wrap");
    if (R == 0) mkdir(wrap, 0777);
    touch(wrap, "manifest.json",
          "{\"format\": \"ember-checkpoint\", \"version\": 2, \"generation\": 1, \"world_size\": 1, \"blobs\": [],"
          " \"tables\": [{\"name\": \"hashed\", \"rows\": 2305843009213693952, \"dim\": 8, \"optimizer\": \"sgd\","
          " \"dtype\": \"fp32\", \"step\": 0, \"tensors\": [{\"name\": \"weight\", \"cols\": 8, \"dtype\": \"fp32\","
          " \"records\": []}]}]}");
    MPI_Barrier(MPI_COMM_WORLD);
    ember_checkpoint *c = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(h.ctx, wrap, &c) == EMBER_ERR_FORMAT && c == NULL &&
                                        has(h.ctx, "table 'hashed': 'weight' is larger than 2^60 bytes"));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(h.s, wrap, NULL) == EMBER_ERR_FORMAT &&
                                        has(h.ctx, "'weight' is larger than 2^60 bytes"));
    coll_close(&h);
}

// ---- Incremental checkpoints -----------------------------------------------------------------------

// Five tables of every kind a delta must follow: row-wise Adagrad, fp16 Adam (converted to bf16
// between the deltas), hashed (admission after 2 sightings: candidates change), tiered (a cache of
// a quarter of its rows), one row. All SUM; table t under scheme (shift + t), a tiered table
// table-wise where that would make it data-parallel.
enum { DT = 5 };
static const int64_t DROWS[DT] = {4000, 97, 64, 160, 1};
static const int32_t DDIMS[DT] = {8, 6, 4, 4, 3};

static ember_status delta_open(coll *c, MPI_Comm comm, int shift, const char *ssd) {
    memset(c, 0, sizeof *c);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    if (ember_ctx_create(&cc, &c->ctx) != EMBER_OK || ember_comm_create(c->ctx, comm, &c->comm) != EMBER_OK)
        return EMBER_ERR_INVALID_ARG;
    int w = 0;
    MPI_Comm_size(comm, &w);
    static const char *const names[DT] = {"plain", "half", "hashed", "tiered", "one"};
    static const ember_optim_kind opts[DT] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM, EMBER_OPT_ADAGRAD,
                                              EMBER_OPT_SGD, EMBER_OPT_SGD};
    ember_table_config tc[DT];
    ember_feature_config fc[DT];
    ember_table_plan plan[DT];
    int32_t ranks[DT][16];
    for (int t = 0; t < DT; t++) {
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = opts[t];
        o.lr = 0.05f;
        tc[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc[t].name = names[t], tc[t].rows = DROWS[t], tc[t].dim = DDIMS[t], tc[t].pooling = EMBER_POOL_SUM;
        tc[t].dtype = t == 1 ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
        tc[t].init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1}, tc[t].optim = o;
        if (t == 2) tc[t].hash = (ember_hash_config){.enabled = 1, .bucket_rows = 8, .min_count = 2};
        if (t == 3) tc[t].cache_rows = DROWS[t] / 4;
        fc[t] = (ember_feature_config){.name = names[t], .table = t};
        int scheme = shift + t;
        if (t == 3 && scheme % SCHEMES == 0) scheme++; // a tiered table is not data-parallel
        plan[t] = plan_of(scheme, t, w, DDIMS[t], ranks[t]);
    }
    ember_ebc_config cfg = {.tables = tc, .num_tables = DT, .features = fc, .num_features = DT,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 3, .ssd_dir = ssd};
    return ember_sebc_create(c->comm, &cfg, plan, EMBER_GRAD_SUM, &c->s);
}

// `steps` training steps of this rank's seeded batches (duplicate ids, empty bags; the hashed
// table's ids from a space of 200 keys).
static ember_status delta_train(ember_sebc *s, uint64_t seed, int steps) {
    const int64_t ids[DT] = {DROWS[0], DROWS[1], 200, DROWS[3], DROWS[4]};
    enum { B = 6 };
    const int32_t D = ember_sebc_output_dim(s);
    float *out = malloc(sizeof(float) * B * (size_t)D), *grad = malloc(sizeof(float) * B * (size_t)D);
    ember_status st = EMBER_OK;
    for (int i = 0; i < steps && st == EMBER_OK; i++) {
        test_rng rng = {seed * 1000003u + (uint64_t)R * 7919u + (uint64_t)i};
        gen_kjt g;
        gen_kjt_make(&g, &rng, DT, B, ids, 4, 0.3, 0);
        for (int j = 0; j < B * D; j++) grad[j] = (float)(rng_uniform(&rng) - 0.5);
        st = ember_sebc_forward(s, &g.kjt, out);
        if (st == EMBER_OK) st = ember_sebc_backward(s, &g.kjt, grad);
        gen_kjt_free(&g);
    }
    free(out);
    free(grad);
    return st;
}

// Bytes of the files of generation g in dir (rank 0 counts; every rank gets it).
static long generation_bytes(const char *dir, int g) {
    long n = 0;
    char name[64];
    for (int r = 0; r < W; r++) {
        snprintf(name, sizeof name, "g%d-r%d.bin", g, r);
        const long b = R == 0 ? file_size(dir, name) : 0;
        n += b > 0 ? b : 0;
    }
    MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return n;
}

// The first record of "plain"'s weight (the base's) made a row list of one row.
static void base_row_list(cJSON *r) {
    cJSON *rec = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m_tensor(r, "plain", 0), "records"), 0);
    const int cols = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rec, "cols"), 1)->valueint -
                     cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rec, "cols"), 0)->valueint;
    cJSON_AddNumberToObject(rec, "count", 1);
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(rec, "bytes"), 8 + 4 * cols);
}
// The last record of "plain"'s weight (a delta's) in a file of generation 0.
static void before_chain(cJSON *r) {
    cJSON *recs = cJSON_GetObjectItemCaseSensitive(m_tensor(r, "plain", 0), "records");
    m_set(cJSON_GetArrayItem(recs, cJSON_GetArraySize(recs) - 1), "file", "g0-r0.bin");
}

static void deltas(void **state) {
    (void)state;
    char dir[128], full[128], ssd[128];
    shared_dir(dir, sizeof dir, "delta");
    shared_dir(full, sizeof full, "delta_full");
    shared_dir(ssd, sizeof ssd, "");
    coll a;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, delta_open(&a, MPI_COMM_WORLD, 0, ssd) == EMBER_OK);
    ember_ctx *ctx = a.ctx;
    const ember_checkpoint_options small = {.chunk_bytes = 64}, delta = {.chunk_bytes = 64, .delta = 1};

    // No mark yet: refused on every rank, nothing written.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &delta) == EMBER_ERR_INVALID_ARG &&
                                        has(ctx, "save a full checkpoint first") && !dir_exists(dir));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, delta_train(a.s, 1, 3) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &small) == EMBER_OK);
    const long g1 = generation_bytes(dir, 1);

    // Two deltas: after training, and after more training, a write and a dtype change.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, delta_train(a.s, 2, 2) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &delta) == EMBER_OK);
    const long g2 = generation_bytes(dir, 2);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, delta_train(a.s, 3, 2) == EMBER_OK);
    const float row[8] = {0.5f, -0.25f, 1, 2, 3, 4, 5, 6}; // row 123 of "plain", through the pieces holding it
    bool wrote = true;
    for (int32_t i = 0; i < ember_sebc_num_pieces(a.s, 0); i++) {
        ember_piece p;
        wrote = wrote && ember_sebc_piece(a.s, 0, i, &p) == EMBER_OK;
        if (wrote && p.row_begin <= 123 && 123 < p.row_end)
            wrote = ember_sebc_piece_write(a.s, 0, i, "weight", 123, 124, EMBER_DTYPE_F32, row + p.col_begin) == EMBER_OK;
    }
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, wrote);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_sebc_convert_dtype(a.s, 1, EMBER_DTYPE_BF16) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &delta) == EMBER_OK);
    const long g3 = generation_bytes(dir, 3);
    if (R == 0) printf("deltas: W %d, full save %ld bytes, deltas %ld and %ld bytes\n", W, g1, g2, g3);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, g2 > 0 && g2 < g1 / 2);
    // The base's files stay (the chain names them).
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, generation_bytes(dir, 1) == g1 && generation_bytes(dir, 2) == g2);
    ember_checkpoint *c = NULL;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(ctx, dir, &c) == EMBER_OK &&
                                        ember_checkpoint_generation(c) == 3 &&
                                        ember_checkpoint_base_generation(c) == 1 && ember_checkpoint_verify(c) == EMBER_OK);
    ember_checkpoint_close(c);
    // The chain's structure as open checks it: a row list where the tensor's first generation
    // tiles it, a record in a file older than the chain.
    char *saved = get_manifest(dir);
    put_manifest(dir, saved, base_row_list);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(ctx, dir, &c) == EMBER_ERR_FORMAT &&
                                        has(ctx, "records of its first generation hold a row list"));
    put_manifest(dir, saved, before_chain);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_open(ctx, dir, &c) == EMBER_ERR_FORMAT &&
                                        has(ctx, "is not a data file of this checkpoint's generations"));
    put_manifest(dir, saved, NULL);
    free(saved);

    // The same state saved whole, elsewhere; then a delta into the chain is refused (the
    // collection's mark is now the full checkpoint's), and so is one into a directory without one.
    snapshot ref;
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, snap(a.s, &ref) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, full, NULL) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &delta) == EMBER_ERR_INVALID_ARG &&
                                        has(ctx, "holds generation 3, not the checkpoint this collection last saved"));
    char none[140];
    snprintf(none, sizeof none, "%s_none", dir);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, none, &delta) == EMBER_ERR_IO && !dir_exists(none) &&
                                        has(ctx, "a delta goes on top of the checkpoint in") &&
                                        has(ctx, "_none': cannot open: No such file or directory (rank"));
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, generation_bytes(dir, 4) == 0);

    // The chain loads as the full checkpoint does, bitwise, into every world size under other plans.
    for (int w = 1; w <= W; w++) {
        for (int shift = 0; shift < SCHEMES; shift += 2) {
            MPI_Comm sub;
            MPI_Comm_split(MPI_COMM_WORLD, R < w ? 0 : MPI_UNDEFINED, R, &sub);
            bool ok = true;
            if (sub != MPI_COMM_NULL) {
                for (int which = 0; which < 2 && ok; which++) {
                    coll b;
                    ok = delta_open(&b, sub, shift + w, ssd) == EMBER_OK && delta_train(b.s, 9, 1) == EMBER_OK;
                    const ember_status st = ok ? ember_checkpoint_load(b.s, which ? full : dir, NULL) : EMBER_ERR_INVALID_ARG;
                    if (st != EMBER_OK) fprintf(stderr, "rank %d (w %d): %s\n", R, w, ember_ctx_errmsg(b.ctx));
                    snapshot z;
                    ok = ok && st == EMBER_OK && snap(b.s, &z) == EMBER_OK;
                    if (ok && !snap_equal(&ref, &z)) {
                        fprintf(stderr, "rank %d: %s loaded under w %d, shift %d: not bitwise the saved state\n", R,
                                which ? "the full checkpoint" : "the chain", w, shift);
                        ok = false;
                    }
                    if (ok) snap_free(&z);
                    coll_close(&b);
                }
                MPI_Comm_free(&sub);
            }
            MPI_ASSERT_TRUE(MPI_COMM_WORLD, ok);
        }
    }
    snap_free(&ref);

    // A load marks the collection: a delta onto the loaded chain goes on; a full save removes
    // the chain's files.
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_load(a.s, dir, NULL) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, delta_train(a.s, 4, 1) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, &delta) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, generation_bytes(dir, 1) == g1 && generation_bytes(dir, 4) > 0);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, ember_checkpoint_save(a.s, dir, NULL) == EMBER_OK);
    MPI_ASSERT_TRUE(MPI_COMM_WORLD, count_names(dir, "g", ".bin") == count_names(dir, "g5-", ".bin"));
    coll_close(&a);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    const char *only = argc > 1 ? argv[1] : "";
    struct CMUnitTest all[] = {
        cmocka_unit_test(reshard_every_world_size),
        cmocka_unit_test(bounded_memory),
        cmocka_unit_test(commit_protocol),
        cmocka_unit_test(deltas),
        cmocka_unit_test(verify_checks_what_load_checks),
    };
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!only[0] || strstr(all[i].name, only)) chosen[n++] = all[i];
    int fails = _cmocka_run_group_tests("checkpoint", chosen, (size_t)n, scratch_setup, scratch_teardown);
    MPI_Finalize();
    return fails;
}
