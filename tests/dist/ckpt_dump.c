// The writer half of the "readable outside ember" test (ckpt_numpy.sh runs it under mpiexec, then
// tests/python/read_checkpoint.py reads what it wrote with numpy alone):
//   ckpt_dump CKPT_DIR REF_DIR
// builds a sharded collection of six tables (fp32, fp16 and bf16 weights; per-row state:
// rowwise_adagrad, partial_rowwise_adam; element-wise state: adam, adagrad; schemes
// column_wise, grid, row_wise, data_parallel, table_wise, table_row_wise; a one-row table; rows
// wider than a record), fills every tensor with seeded random values (a few -0.0 and 16-bit
// subnormals among them), sets step counters (one above 2^32), and saves it into CKPT_DIR twice
// (the second save, of other values: generation 2, the first one's files removed) with records of
// at most 64 bytes, plus two blobs; then rewrites every fifth row of every tensor and saves a
// delta on top (the checkpoint to read: generation 3, a chain of two). Then rank 0 writes into REF_DIR each
// tensor's global state dict as gathered by ember_sebc_read_as, in its stored dtype (the weight's
// own fp32/fp16/bf16 bits, fp32 optimizer state), as raw little-endian row-major files
// "<table>.<tensor>.bin", each blob as "blob.<name>.bin", and reference.json listing them:
//   {"world_size": W, "generation": 3,
//    "tables": [{"name", "rows", "dim", "optimizer", "dtype", "step",
//                "tensors": [{"name", "rows", "cols", "dtype", "file"}]}],
//    "blobs": [{"name", "bytes", "file"}]}
// Exit status 0, or 1 with the reason on stderr.
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember.h"
#include "gen.h"

enum { T = 6, CHUNK = 64 };
static const char *const NAMES[T] = {"w32_cw", "h16_grid", "b16_rw", "one_dp", "b16_tw", "h16_twrw"};
static const int64_t ROWS[T] = {37, 29, 23, 1, 19, 31};
static const int32_t DIMS[T] = {24, 8, 5, 7, 40, 6};
static const ember_dtype DTYPES[T] = {EMBER_DTYPE_F32, EMBER_DTYPE_F16, EMBER_DTYPE_BF16,
                                      EMBER_DTYPE_F32, EMBER_DTYPE_BF16, EMBER_DTYPE_F16};
static const ember_optim_kind OPTS[T] = {EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_PARTIAL_ROWWISE_ADAM, EMBER_OPT_ADAM,
                                         EMBER_OPT_ADAM,           EMBER_OPT_ADAGRAD,              EMBER_OPT_ROWWISE_ADAGRAD};
static const ember_shard_scheme SCHEMES[T] = {EMBER_SHARD_COLUMN_WISE, EMBER_SHARD_GRID,       EMBER_SHARD_ROW_WISE,
                                              EMBER_SHARD_DATA_PARALLEL, EMBER_SHARD_TABLE_WISE, EMBER_SHARD_TABLE_ROW_WISE};

// Table t's plan on W ranks (ranks: the caller's buffer of 2 W + 4 entries).
static ember_table_plan plan_of(int t, int W, int32_t *ranks) {
    ember_table_plan p;
    memset(&p, 0, sizeof p);
    p.scheme = SCHEMES[t];
    p.ranks = ranks;
    switch (p.scheme) {
    case EMBER_SHARD_COLUMN_WISE: // 3 uneven slices of 24 columns, more slices than ranks at W < 3
        p.num_shards = 3;
        for (int i = 0; i < 3; i++) ranks[i] = (t + i) % W;
        break;
    case EMBER_SHARD_GRID: // 2 column slices, each row-wise over every rank
        p.num_shards = 2;
        p.group_size = W;
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < W; k++) ranks[c * W + k] = (k + c) % W;
        break;
    case EMBER_SHARD_TABLE_WISE: ranks[0] = W - 1; break;
    case EMBER_SHARD_TABLE_ROW_WISE:
        p.group_size = W >= 2 ? 2 : 1;
        for (int i = 0; i < p.group_size; i++) ranks[i] = W - 1 - i;
        break;
    default: break;
    }
    p.num_ranks = ember_table_plan_ranks_needed(&p);
    if (!p.num_ranks) p.ranks = NULL;
    return p;
}

// Seeded values in every tensor: weights in [-1, 1) with every 17th a -0.0 or a value below 3e-6
// (an fp16 subnormal); state in [0, 1); steps 1000 + 7 t and, for the last table, 2^32 + 5.
static ember_status fill(ember_sebc *s, uint64_t seed) {
    test_rng rng = {seed};
    ember_status st = EMBER_OK;
    for (int t = 0; t < T && st == EMBER_OK; t++) {
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(ember_sebc_table(s, t), ti);
        for (int k = 0; k < n && st == EMBER_OK; k++) {
            const size_t cnt = (size_t)ti[k].rows * (size_t)ti[k].cols;
            float *v = malloc(sizeof(float) * cnt);
            if (!v) return EMBER_ERR_NOMEM;
            for (size_t i = 0; i < cnt; i++) {
                const float u = (float)rng_uniform(&rng);
                v[i] = k ? u : 2 * u - 1;
                if (k == 0 && i % 17 == 3) v[i] = (i / 17) % 2 ? -0.0f : 3e-6f * u;
            }
            st = ember_sebc_write(s, t, ti[k].name, v, -1);
            free(v);
        }
        if (st == EMBER_OK) st = ember_sebc_set_step(s, t, t == T - 1 ? ((int64_t)1 << 32) + 5 : 1000 + 7 * t);
    }
    return st;
}



// Rows 2, 7, 12, ... of every tensor rewritten through this rank's pieces, each value a function of
// its table, tensor, global row and column (a row's per-row state alike in every column slice).
static ember_status touch_rows(ember_sebc *s, uint64_t seed) {
    ember_status st = EMBER_OK;
    for (int t = 0; t < T && st == EMBER_OK; t++) {
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(ember_sebc_table(s, t), ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t) && st == EMBER_OK; i++) {
            ember_piece p;
            st = ember_sebc_piece(s, t, i, &p);
            for (int k = 0; k < n && st == EMBER_OK; k++) {
                const int sliced = ti[k].cols == DIMS[t];
                const int32_t c0 = sliced ? p.col_begin : 0, c1 = sliced ? p.col_end : ti[k].cols;
                float v[64];
                for (int64_t r = p.row_begin + (7 - p.row_begin % 5) % 5; r < p.row_end && st == EMBER_OK; r += 5) {
                    for (int32_t c = c0; c < c1; c++) {
                        test_rng rng = {seed ^ ((uint64_t)t << 56) ^ ((uint64_t)k << 48) ^ ((uint64_t)r << 16) ^ (uint64_t)c};
                        v[c - c0] = (float)rng_uniform(&rng);
                    }
                    st = ember_sebc_piece_write(s, t, i, ti[k].name, r, r + 1, EMBER_DTYPE_F32, v);
                }
            }
        }
    }
    return st;
}

static int write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "ckpt_dump: cannot write '%s'\n", path);
    return ok;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int W = 1, R = 0, ok = 1, files_ok = 1; // files_ok: rank 0's own writes (no collective depends on it)
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    ember_sebc *s = NULL;
    FILE *js = NULL;
    if (argc != 3) {
        if (R == 0) fprintf(stderr, "usage: mpiexec -n W ckpt_dump CKPT_DIR REF_DIR\n");
        MPI_Finalize();
        return 2;
    }
    const char *ck = argv[1], *ref = argv[2];
    ember_table_config tc[T];
    ember_feature_config fc[T];
    ember_table_plan plan[T];
    int32_t *ranks = calloc((size_t)T * (size_t)(2 * W + 4), sizeof *ranks);
    for (int t = 0; t < T; t++) {
        ember_optim_config o = EMBER_OPTIM_CONFIG_DEFAULT;
        o.kind = OPTS[t];
        tc[t] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tc[t].name = NAMES[t], tc[t].rows = ROWS[t], tc[t].dim = DIMS[t], tc[t].dtype = DTYPES[t];
        tc[t].init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -1, .b = 1}, tc[t].optim = o;
        fc[t] = (ember_feature_config){.name = NAMES[t], .table = t};
        plan[t] = plan_of(t, W, ranks + (size_t)t * (size_t)(2 * W + 4));
    }
    ember_ebc_config cfg = {.tables = tc, .num_tables = T, .features = fc, .num_features = T,
                            .bounds = EMBER_BOUNDS_ERROR, .seed = 7};
    // Two blobs: a trainer's text and some doubles (rank 0's bytes are the ones saved).
    const char text[] = "{\"epoch\": 3, \"batch\": 1234, \"note\": \"read by numpy\"}";
    double dense[33];
    for (int i = 0; i < 33; i++) dense[i] = 0.25 * i - 3.5;
    const ember_checkpoint_blob blobs[2] = {{.name = "trainer.json", .data = text, .bytes = sizeof text - 1},
                                            {.name = "dense.params", .data = dense, .bytes = sizeof dense}};
    const ember_checkpoint_options opts = {.chunk_bytes = CHUNK, .blobs = blobs, .num_blobs = 2};

    ember_status st = ranks ? EMBER_OK : EMBER_ERR_NOMEM;
    if (st == EMBER_OK) st = ember_ctx_create(NULL, &ctx);
    if (st == EMBER_OK) st = ember_comm_create(ctx, MPI_COMM_WORLD, &comm);
    if (st == EMBER_OK) st = ember_sebc_create(comm, &cfg, plan, EMBER_GRAD_MEAN, &s);
    if (st == EMBER_OK) st = fill(s, 41);
    if (st == EMBER_OK) st = ember_checkpoint_save(s, ck, &opts);
    if (st == EMBER_OK) st = fill(s, 42);
    if (st == EMBER_OK) st = ember_checkpoint_save(s, ck, &opts);
    const ember_checkpoint_options delta = {.chunk_bytes = CHUNK, .blobs = blobs, .num_blobs = 2, .delta = 1};
    if (st == EMBER_OK) st = touch_rows(s, 43);
    if (st == EMBER_OK) st = ember_checkpoint_save(s, ck, &delta);
    if (st != EMBER_OK) {
        fprintf(stderr, "ckpt_dump: rank %d: %s\n", R, ctx ? ember_ctx_errmsg(ctx) : "cannot create a context");
        ok = 0;
        goto done;
    }
    if (R == 0) {
        if (mkdir(ref, 0777) != 0 && errno != EEXIST) perror(ref);
        char path[1024];
        snprintf(path, sizeof path, "%s/reference.json", ref);
        if (!(js = fopen(path, "w"))) {
            fprintf(stderr, "ckpt_dump: cannot write '%s'\n", path);
            ok = 0;
        } else {
            fprintf(js, "{\"world_size\": %d, \"generation\": 3, \"tables\": [", W);
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD); // every rank runs the same collectives below
    for (int t = 0; t < T && ok && st == EMBER_OK; t++) {
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t n = ember_table_tensors(&tc[t], ti);
        int64_t step = 0;
        st = ember_sebc_step(s, t, &step);
        if (R == 0 && st == EMBER_OK)
            fprintf(js, "%s\n  {\"name\": \"%s\", \"rows\": %lld, \"dim\": %d, \"optimizer\": \"%s\", \"dtype\": \"%s\", "
                        "\"step\": %lld, \"tensors\": [",
                    t ? "," : "", NAMES[t], (long long)ROWS[t], (int)DIMS[t], ember_optim_name(OPTS[t]),
                    ember_dtype_name(DTYPES[t]), (long long)step);
        for (int k = 0; k < n && st == EMBER_OK; k++) {
            // The stored dtype: the weight's own, fp32 for optimizer state.
            const ember_dtype dt = k == 0 ? DTYPES[t] : EMBER_DTYPE_F32;
            const size_t bytes = (size_t)ti[k].rows * (size_t)ti[k].cols * ember_dtype_size(dt);
            void *buf = malloc(bytes);
            st = buf ? ember_sebc_read_as(s, t, ti[k].name, dt, buf, 0) : EMBER_ERR_NOMEM;
            if (st == EMBER_OK && R == 0) {
                char file[128];
                snprintf(file, sizeof file, "%s.%s.bin", NAMES[t], ti[k].name);
                files_ok &= write_file(ref, file, buf, bytes);
                fprintf(js, "%s\n    {\"name\": \"%s\", \"rows\": %lld, \"cols\": %d, \"dtype\": \"%s\", \"file\": \"%s\"}",
                        k ? "," : "", ti[k].name, (long long)ti[k].rows, (int)ti[k].cols, ember_dtype_name(dt), file);
            }
            free(buf);
        }
        if (R == 0) fprintf(js, "]}");
        if (st != EMBER_OK) fprintf(stderr, "ckpt_dump: rank %d: table '%s': %s\n", R, NAMES[t], ember_ctx_errmsg(ctx));
    }
    if (st != EMBER_OK) ok = 0;
    if (R == 0 && js) {
        fprintf(js, "],\n \"blobs\": [");
        for (int b = 0; b < 2; b++) {
            char file[160];
            snprintf(file, sizeof file, "blob.%s.bin", blobs[b].name);
            files_ok &= write_file(ref, file, blobs[b].data, blobs[b].bytes);
            fprintf(js, "%s\n  {\"name\": \"%s\", \"bytes\": %zu, \"file\": \"%s\"}", b ? "," : "", blobs[b].name,
                    blobs[b].bytes, file);
        }
        fprintf(js, "]}\n");
        if (fclose(js) != 0) files_ok = 0;
        ok = ok && files_ok;
        if (ok) printf("ckpt_dump: %d tables saved by %d ranks into %s, references in %s\n", T, W, ck, ref);
    }
done:
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ember_sebc_destroy(s);
    ember_comm_destroy(comm);
    ember_ctx_destroy(ctx);
    free(ranks);
    MPI_Finalize();
    return ok ? 0 : 1;
}
