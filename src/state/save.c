// ember_checkpoint_save (include/ember/state.h): every rank streams the pieces it holds into its
// own data file, record by record, and makes it durable; the records' list is gathered onto every
// rank; rank 0 commits the manifest and then removes what older generations left.
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/internal.h"
#include "state/internal.h"

// This rank's records so far, growing (through the context's allocator) as they are written.
typedef struct save_state {
    ember_ctx *ctx;
    ember__ckpt_wrote *list;
    int64_t n, cap;
} save_state;

static int add_wrote(save_state *w, const ember__ckpt_wrote *x) {
    if (w->n == w->cap) {
        const int64_t cap = w->cap ? 2 * w->cap : 64;
        ember__ckpt_wrote *p = ember_ctx_alloc(w->ctx, sizeof(ember__ckpt_wrote) * (size_t)cap);
        if (!p) return 0;
        if (w->n) memcpy(p, w->list, sizeof(ember__ckpt_wrote) * (size_t)w->n);
        ember_ctx_free(w->ctx, w->list);
        w->list = p;
        w->cap = cap;
    }
    w->list[w->n++] = *x;
    return 1;
}

// The arguments, checked on every rank before anything is written. Local.
static ember_status check_args(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    ember_ctx *ctx = ember_comm_ctx(ember_sebc_comm(s));
    const char *fn = "ember_checkpoint_save";
    const int32_t T = ember_sebc_num_tables(s);
    ember_status st = EMBER_OK;
    if (!dir) st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: directory is NULL", fn);
    else if (strlen(dir) + 64 >= EMBER__PATH_MAX)
        st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: directory name of %zu bytes is too long", fn,
                                 strlen(dir));
    for (int32_t b = 0; st == EMBER_OK && o && b < o->num_blobs; b++) {
        const ember_checkpoint_blob *x = &o->blobs[b];
        if (!ember__ckpt_blob_name_ok(x->name))
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                     "%s: blob %d name '%s': expected 1 to 127 letters, digits, '.', '_' or '-'", fn,
                                     (int)b, x->name ? x->name : "(null)");
        else if (!x->data && x->bytes)
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: blob '%s' has no data", fn, x->name);
        for (int32_t j = 0; j < b && st == EMBER_OK; j++)
            if (strcmp(o->blobs[j].name, x->name) == 0)
                st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: blob name '%s' appears twice", fn, x->name);
    }
    if (st == EMBER_OK && o && o->num_blobs < 0)
        st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: num_blobs %d < 0", fn, (int)o->num_blobs);
    for (int32_t t = 0; t < T && st == EMBER_OK; t++)
        if (strlen(ember_sebc_table(s, t)->name) >= EMBER__CKPT_MAX_NAME)
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: table name '%.40s...' is longer than %d bytes",
                                     fn, ember_sebc_table(s, t)->name, EMBER__CKPT_MAX_NAME - 1);
    return st;
}

// Rank 0: the generation of the checkpoint in dir now (0 if none), creating dir if missing
// (*created: 1 when this call made it, also when it fails after).
static ember_status prepare_dir(ember_ctx *ctx, const char *dir, int64_t *generation, int *created) {
    *generation = 0;
    *created = 0;
    if (mkdir(dir, 0777) == 0) *created = 1;
    else if (errno != EEXIST)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: cannot create directory '%s': %s", dir,
                                   strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: '%s' is not a directory", dir);
    // The highest generation named by the manifest or by any data file (a killed save's leftovers
    // included), so a new generation never reuses a name.
    // No readable manifest is no previous checkpoint; being out of memory fails the save.
    ember_checkpoint *c = NULL;
    const ember_status st = ember_checkpoint_open(ctx, dir, &c);
    if (st == EMBER_ERR_NOMEM) return st;
    if (st == EMBER_OK) *generation = c->generation;
    else ember_ctx_clear_error(ctx);
    ember_checkpoint_close(c);
    DIR *d = opendir(dir);
    if (!d)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: cannot list '%s': %s", dir,
                                   strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        long long g = 0;
        int r = 0;
        if (sscanf(e->d_name, "g%lld-r%d.bin", &g, &r) == 2 && g > *generation && g < INT64_MAX / 4) *generation = g;
    }
    closedir(d);
    return EMBER_OK;
}

// Rank 0 after the commit: removes every data file (and temporary) of other generations.
static void collect_garbage(const char *dir, int64_t generation) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[EMBER__PATH_MAX];
    for (struct dirent *e; (e = readdir(d));) {
        long long g = 0;
        int r = 0, end = 0;
        const char *n = e->d_name;
        const size_t len = strlen(n);
        const int partial = len > 8 && strcmp(n + len - 8, ".partial") == 0;
        const int ours = sscanf(n, "g%lld-r%d.bin%n", &g, &r, &end) == 2 &&
                         (n[end] == '\0' || strcmp(n + end, ".partial") == 0);
        if ((ours && (g != generation || partial)) || strcmp(n, EMBER__CKPT_MANIFEST ".partial") == 0) {
            if (ember__ckpt_join(path, sizeof path, dir, n) == 0) unlink(path);
        }
    }
    closedir(d);
}

// Rank 0 after a failed save into a directory that this save created: removes what the save may
// have left there (every rank's data file of `generation` and the temporaries) and the directory.
// Nothing else: a directory that holds a manifest (a checkpoint that someone else committed
// meanwhile) or any other file stays (rmdir refuses a directory that is not empty).
static void remove_created_dir(const char *dir, int64_t generation, int32_t world) {
    char path[EMBER__PATH_MAX], name[64];
    struct stat sb;
    if (ember__ckpt_join(path, sizeof path, dir, EMBER__CKPT_MANIFEST) != 0 || stat(path, &sb) == 0) return;
    ember__ckpt_join(path, sizeof path, dir, EMBER__CKPT_MANIFEST ".partial");
    unlink(path);
    for (int32_t r = 0; r < world; r++) {
        ember__ckpt_data_name(name, sizeof name, generation, r);
        ember__ckpt_join(path, sizeof path, dir, name);
        unlink(path);
        strcat(path, ".partial"); // fits: dir is at most EMBER__PATH_MAX - 64 bytes
        unlink(path);
    }
    rmdir(dir);
}

// Opens this rank's data file at its first record (a rank with nothing to write writes no file).
static ember_status open_once(ember_ctx *ctx, ember__dfile *df, const char *path, int *opened) {
    if (*opened) return EMBER_OK;
    if (ember__dfile_open(df, path) != 0)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: cannot open '%s.partial': %s", path,
                                   strerror(df->err));
    *opened = 1;
    return EMBER_OK;
}

// This rank's records: its pieces (the canonical copy of each value: per-row state from the
// col_begin == 0 piece, a data-parallel table from rank t % W) and, on rank 0, the blobs.
static ember_status write_pieces(ember_sebc *s, const char *dir, ember__dfile *df, int *opened, int64_t generation,
                                 size_t chunk, const ember_checkpoint_options *o, save_state *w) {
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), W = ember_comm_size(comm), T = ember_sebc_num_tables(s);
    char name[64], path[EMBER__PATH_MAX];
    ember__ckpt_data_name(name, sizeof name, generation, rank);
    ember__ckpt_join(path, sizeof path, dir, name);
    int64_t offset = 0;
    void *buf = NULL;
    size_t cap = 0;
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t) && st == EMBER_OK; i++) {
            ember_piece p;
            st = ember_sebc_piece(s, t, i, &p);
            if (st != EMBER_OK || (p.replicated && t % W != rank)) continue;
            for (int32_t k = 0; k < nt && st == EMBER_OK; k++) {
                int32_t c0, c1;
                ember__ckpt_piece_cols(tc, &ti[k], &p, &c0, &c1);
                if (c1 - c0 == ti[k].cols && p.col_begin != 0) continue; // per-row state, ids: one copy
                const ember_dtype dt = ti[k].dtype;
                const size_t row_bytes = (size_t)(c1 - c0) * ember_dtype_size(dt);
                const int64_t per = chunk / row_bytes > 0 ? (int64_t)(chunk / row_bytes) : 1;
                const size_t need = row_bytes * (size_t)per; // the chunk, or one row larger than it
                if (need > cap) {
                    ember_ctx_free(ctx, buf);
                    cap = (buf = ember_ctx_alloc(ctx, need)) ? need : 0;
                    if (!buf) {
                        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM,
                                                 "ember_checkpoint_save: cannot allocate %zu bytes", need);
                        break;
                    }
                }
                if (st == EMBER_OK) st = open_once(ctx, df, path, opened);
                for (int64_t r = p.row_begin; r < p.row_end && st == EMBER_OK; r += per) {
                    const int64_t e = r + per < p.row_end ? r + per : p.row_end;
                    st = ember_sebc_piece_read(s, t, i, ti[k].name, r, e, dt, buf);
                    if (st != EMBER_OK) break;
                    const uint64_t bytes = (uint64_t)(e - r) * row_bytes;
                    const uint32_t crc = (uint32_t)crc32_z(0, buf, (z_size_t)bytes);
                    const ember__ckpt_wrote x = {t, k, rank, c0, c1, 0, offset, r, e, bytes, crc, 0};
                    ember__dfile_write(df, buf, (size_t)bytes);
                    offset += (int64_t)bytes;
                    if (!add_wrote(w, &x))
                        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_save: cannot allocate");
                }
            }
        }
    }
    for (int32_t b = 0; rank == 0 && o && b < o->num_blobs && st == EMBER_OK; b++) {
        st = open_once(ctx, df, path, opened);
        if (st != EMBER_OK) break;
        const ember_checkpoint_blob *x = &o->blobs[b];
        const uint32_t crc = (uint32_t)crc32_z(0, x->data, (z_size_t)x->bytes);
        const ember__ckpt_wrote y = {-1, b, rank, 0, 0, 0, offset, 0, 0, x->bytes, crc, 0};
        ember__dfile_write(df, x->data, x->bytes);
        offset += (int64_t)x->bytes;
        if (!add_wrote(w, &y)) st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_save: cannot allocate");
    }
    ember_ctx_free(ctx, buf);
    if (st == EMBER_OK && *opened && df->err)
        st = ember_ctx_set_error(
            ctx, EMBER_ERR_IO,
            "ember_checkpoint_save: writing '%s.partial' failed: %s (the previous checkpoint is kept)", path,
            strerror(df->err));
    return st;
}


// Step 2 of a save: what every rank wrote (w), onto every rank: *all (a context buffer, also on
// failure; free it) holds *n entries. Collective; every rank returns the same status.
static ember_status gather_records(ember_comm *comm, const save_state *w, ember__ckpt_wrote **all, int64_t *n) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    const char *fn = "ember_checkpoint_save";
    const int32_t W = ember_comm_size(comm);
    int64_t *counts = ember_ctx_alloc(ctx, sizeof(int64_t) * (size_t)W), total = 0;
    ember_status st =
        ember_comm_agree(comm, counts ? EMBER_OK : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate", fn));
    if (st == EMBER_OK) st = ember_comm_allgather_i64(comm, w->n * (int64_t)sizeof(ember__ckpt_wrote), counts);
    for (int32_t r = 0; st == EMBER_OK && r < W; r++) total += counts[r];
    if (st == EMBER_OK)
        st = ember_comm_agree(comm, (*all = ember_ctx_alloc(ctx, (size_t)total + 1))
                                        ? EMBER_OK
                                        : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate %" PRId64
                                                              " bytes for the records' list", fn, total + 1));
    if (st == EMBER_OK)
        st = ember_comm_allgatherv(comm, w->list, w->n * (int64_t)sizeof(ember__ckpt_wrote), *all, counts, 1);
    *n = total / (int64_t)sizeof(ember__ckpt_wrote);
    ember_ctx_free(ctx, counts);
    return st;
}

// Step 3 of a save, on rank 0: the commit, manifest.json replaced by the manifest of `generation`.
// *committed: 1 once manifest.json is replaced (whatever the ranks agree on afterwards).
static ember_status commit_manifest(ember_sebc *s, const char *dir, int64_t generation, const int64_t *steps,
                                    const ember__ckpt_wrote *all, int64_t n, const ember_checkpoint_options *o,
                                    int *committed) {
    ember_ctx *ctx = ember_comm_ctx(ember_sebc_comm(s));
    const char *fn = "ember_checkpoint_save";
    char *text = ember__ckpt_manifest_text(s, generation, steps, all, n, o);
    char path[EMBER__PATH_MAX];
    ember__ckpt_join(path, sizeof path, dir, EMBER__CKPT_MANIFEST);
    ember__dfile m;
    ember_status st = EMBER_OK;
    if (!text) st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot build the manifest", fn);
    else if (ember__dfile_open(&m, path) != 0)
        st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: cannot open '%s.partial': %s", fn, path, strerror(m.err));
    else {
        ember__dfile_write(&m, text, strlen(text));
        if (ember__dfile_commit(&m) != 0)
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: writing '%s' failed: %s (the previous checkpoint is kept)",
                                     fn, path, strerror(m.err));
        else *committed = 1;
    }
    cJSON_free(text);
    return st;
}

// Generation `generation` of a checkpoint in dir (prepared: it exists, no file of this generation
// is named by its manifest): steps 1 to 3 and, after the commit, the clean-up. Collective.
// *committed as commit_manifest's (rank 0).
static ember_status save_generation(ember_sebc *s, const char *dir, int64_t generation,
                                    const ember_checkpoint_options *o, int *committed) {
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), T = ember_sebc_num_tables(s);
    const char *fn = "ember_checkpoint_save";
    const size_t chunk = o && o->chunk_bytes ? o->chunk_bytes : EMBER_CHECKPOINT_CHUNK_DEFAULT;
    int64_t *steps = ember_ctx_alloc(ctx, sizeof(int64_t) * (size_t)(T ? T : 1));
    ember_status st =
        ember_comm_agree(comm, steps ? EMBER_OK : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "%s: cannot allocate", fn));
    if (st != EMBER_OK) {
        ember_ctx_free(ctx, steps); // another rank failed
        return st;
    }
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) st = ember_sebc_step(s, t, &steps[t]);

    // 1. Every rank's records, durable under their final names (unreferenced until the commit).
    ember__dfile df;
    memset(&df, 0, sizeof df);
    int opened = 0;
    save_state w = {ctx, NULL, 0, 0};
    if (st == EMBER_OK) st = write_pieces(s, dir, &df, &opened, generation, chunk, o, &w);
    if (opened) {
        if (st != EMBER_OK) ember__dfile_abort(&df);
        else if (ember__dfile_commit(&df) != 0)
            st = ember_ctx_set_error(ctx, EMBER_ERR_IO, "%s: writing '%s' failed: %s (the previous checkpoint is kept)",
                                     fn, df.path, strerror(df.err));
    }
    st = ember_comm_agree(comm, st);

    // 2. What everyone wrote, onto every rank (small: one entry per record).
    ember__ckpt_wrote *all = NULL;
    int64_t n = 0;
    if (st == EMBER_OK) st = gather_records(comm, &w, &all, &n);

    // 3. The commit: rank 0 replaces manifest.json.
    if (st == EMBER_OK && rank == 0) st = commit_manifest(s, dir, generation, steps, all, n, o, committed);
    st = ember_comm_agree(comm, st);
    if (st != EMBER_OK && opened && df.err == 0) unlink(df.path); // this generation never committed
    if (st == EMBER_OK && rank == 0) collect_garbage(dir, generation);
    ember_ctx_free(ctx, steps);
    ember_ctx_free(ctx, all);
    ember_ctx_free(ctx, w.list);
    return st;
}

ember_status ember_checkpoint_save(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_comm *comm = ember_sebc_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    ember_status st = check_args(s, dir, o);
    // What every rank must give alike: the directory, the record size and the blobs (names, sizes
    // and bytes: rank 0 writes them). Nothing is created before they agree.
    uint64_t blobs = 0;
    for (int32_t b = 0; st == EMBER_OK && o && b < o->num_blobs; b++) {
        const uint64_t x[4] = {blobs, ember_digest(o->blobs[b].name, strlen(o->blobs[b].name)), o->blobs[b].bytes,
                               ember_digest(o->blobs[b].data, o->blobs[b].bytes)};
        blobs = ember_digest(x, sizeof x);
    }
    const ember_arg args[] = {
        {.name = "directory", .text = dir ? dir : "(null)"},
        {.name = "chunk_bytes", .value = (int64_t)(o && o->chunk_bytes ? o->chunk_bytes : EMBER_CHECKPOINT_CHUNK_DEFAULT)},
        {.name = "num_blobs", .value = o ? o->num_blobs : 0},
        {.name = "blobs", .value = (int64_t)blobs, .digest = 1}};
    st = ember_comm_agree_args(comm, st, "ember_checkpoint_save", args, 4);
    if (st != EMBER_OK) return st;
    int64_t generation = 0;
    int created = 0, committed = 0; // rank 0: this call made dir; manifest.json was replaced
    if (ember_comm_rank(comm) == 0) st = prepare_dir(ctx, dir, &generation, &created);
    st = ember_comm_agree(comm, st);
    if (st == EMBER_OK) st = ember_comm_bcast(comm, &generation, sizeof generation, 0);
    if (st == EMBER_OK) st = save_generation(s, dir, generation + 1, o, &committed);
    // A failed save leaves no directory of its own behind: every rank has removed its file (or is
    // past writing it: the statuses were agreed), so rank 0 removes the rest and the directory.
    if (st != EMBER_OK && created && !committed) remove_created_dir(dir, generation + 1, ember_comm_size(comm));
    return st;
}
