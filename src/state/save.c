// ember_checkpoint_save (include/ember/state.h): every rank streams the pieces it holds (a delta:
// their rows changed since the collection's mark) into its own data file, record by record, and
// makes it durable; the records' list is gathered onto every rank; rank 0 commits the manifest
// (a delta's names its base's records first) and then removes the files it no longer names.
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
    ember_ctx *ctx = ember_comm_ctx(ember__sebc_shard_comm(s));
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
    if (st == EMBER_OK && o && o->delta && !ember_sebc_mark_tag(s))
        st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                 "%s: a delta goes on top of the checkpoint this collection last saved or loaded, and "
                                 "it has neither saved nor loaded one: save a full checkpoint first",
                                 fn);
    for (int32_t t = 0; t < T && st == EMBER_OK; t++)
        if (strlen(ember_sebc_table(s, t)->name) >= EMBER__CKPT_MAX_NAME)
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "%s: table name '%.40s...' is longer than %d bytes",
                                     fn, ember_sebc_table(s, t)->name, EMBER__CKPT_MAX_NAME - 1);
    return st;
}

// Rank 0 of a delta: the checkpoint c in dir is the one s holds the mark of, with its tables;
// whole[t]: table t is written whole (its dtype changed since).
static ember_status check_base(ember_sebc *s, const char *dir, ember_checkpoint *c, unsigned char *whole) {
    ember_ctx *ctx = ember_comm_ctx(ember__sebc_shard_comm(s));
    const char *fn = "ember_checkpoint_save";
    if (ember__ckpt_tag(c->chain, c->generation) != ember_sebc_mark_tag(s))
        return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                   "%s: '%s' holds generation %" PRId64 ", not the checkpoint this collection last "
                                   "saved or loaded: a delta goes only on top of that one (save a full checkpoint)",
                                   fn, dir, c->generation);
    for (int32_t t = 0; t < ember_sebc_num_tables(s); t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        const int32_t i = ember__ckpt_find_table(c, tc->name);
        const ember__ckpt_table *x = i >= 0 ? &c->tables[i] : NULL;
        if (!x || x->rows != tc->rows || x->dim != tc->dim || x->optim != tc->optim.kind)
            return ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG,
                                       "%s: table '%s' is not in '%s' with its rows, dim and optimizer: a delta needs "
                                       "a full checkpoint of these tables",
                                       fn, tc->name, dir);
        whole[t] = x->dtype != tc->dtype;
    }
    return EMBER_OK;
}

// Rank 0: the generation of the checkpoint in dir now (0 if none), creating dir if missing
// (*created: 1 when this call made it, also when it fails after). A delta (base non-NULL) needs
// the checkpoint there: base->c keeps it open (close it) and base->whole is filled.
static ember_status prepare_dir(ember_sebc *s, const char *dir, ember__ckpt_base *base, unsigned char *whole,
                                int64_t *generation, int *created) {
    ember_ctx *ctx = ember_comm_ctx(ember__sebc_shard_comm(s));
    *generation = 0;
    *created = 0;
    if (base) {
        const ember_status st = ember_checkpoint_open(ctx, dir, &base->c);
        if (st != EMBER_OK) { // open's reason, without its rank tag, after what the delta needs
            char why[EMBER_ERRMSG_CAP];
            snprintf(why, sizeof why, "%s", ember_ctx_errmsg(ctx));
            char *tag = strstr(why, " (rank ");
            if (tag) *tag = '\0';
            return ember_ctx_set_error(ctx, st, "ember_checkpoint_save: a delta goes on top of the checkpoint in '%s': %s",
                                       dir, why);
        }
        EMBER_TRY(check_base(s, dir, base->c, whole));
    } else if (mkdir(dir, 0777) == 0) *created = 1;
    else if (errno != EEXIST)
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: cannot create directory '%s': %s", dir,
                                   strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ember_ctx_set_error(ctx, EMBER_ERR_IO, "ember_checkpoint_save: '%s' is not a directory", dir);
    // The highest generation named by the manifest or by any data file (a killed save's leftovers
    // included), so a new generation never reuses a name.
    // No readable manifest is no previous checkpoint; being out of memory fails the save.
    if (base) *generation = base->c->generation;
    else {
        ember_checkpoint *c = NULL;
        const ember_status st = ember_checkpoint_open(ctx, dir, &c);
        if (st == EMBER_ERR_NOMEM) return st;
        if (st == EMBER_OK) *generation = c->generation;
        else ember_ctx_clear_error(ctx);
        ember_checkpoint_close(c);
    }
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

// Whether a delta's manifest names a file of generation g through its base's records (those of
// the tables not written whole).
static int base_names(ember_sebc *s, const ember__ckpt_base *base, int64_t g) {
    for (int32_t t = 0; base && t < ember_sebc_num_tables(s); t++) {
        const int32_t i = base->whole[t] ? -1 : ember__ckpt_find_table(base->c, ember_sebc_table(s, t)->name);
        if (i < 0) continue;
        const ember__ckpt_table *x = &base->c->tables[i];
        for (int32_t k = 0; k < x->ntensors; k++)
            for (int32_t j = x->tensors[k].first; j < x->tensors[k].first + x->tensors[k].count; j++)
                if (base->c->records[j].gen == g) return 1;
    }
    return 0;
}

// Rank 0 after the commit: removes every data file (and temporary) the new manifest does not
// name: of other generations than `generation` and, after a delta, its base's that it keeps.
static void collect_garbage(ember_sebc *s, const char *dir, int64_t generation, const ember__ckpt_base *base) {
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
        if ((ours && (partial || (g != generation && !base_names(s, base, g)))) ||
            strcmp(n, EMBER__CKPT_MANIFEST ".partial") == 0) {
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

// Rows per bucket of a hashed table, 1 for any other. A hashed table's records hold whole buckets:
// a load writes a record's "ids" rows at once, and an id map row is checked against the rest of
// its bucket (an id twice in a bucket is refused), which the record then holds too.
static int64_t record_align(const ember_table_config *tc) {
    if (ember_table_id_space(tc) != EMBER_IDS_HASHED) return 1;
    return tc->hash.bucket_rows > 0 ? tc->hash.bucket_rows : EMBER_HASH_BUCKET_ROWS;
}

// A delta's next rows of piece i at or after `from`: a run of changed rows [*b, *e), widened to
// whole buckets (`align` rows from the piece's first row) and joined with the runs that then
// touch it. *b = row_end when none is left.
static ember_status next_rows(ember_sebc *s, int32_t t, int32_t i, const ember_piece *p, int64_t from, int64_t align,
                              int64_t *b, int64_t *e) {
    EMBER_TRY(ember_sebc_piece_dirty(s, t, i, from, b, e));
    if (*b >= p->row_end) return EMBER_OK;
    *b = p->row_begin + (*b - p->row_begin) / align * align;
    for (;;) {
        int64_t x = (*e - p->row_begin + align - 1) / align * align + p->row_begin;
        *e = x < p->row_end ? x : p->row_end;
        if (*e >= p->row_end) return EMBER_OK;
        int64_t nb, ne;
        EMBER_TRY(ember_sebc_piece_dirty(s, t, i, *e, &nb, &ne));
        if (nb != *e) return EMBER_OK;
        *e = ne;
    }
}

// Where this rank's records go: its data file (opened at the first record), the offset reached
// and the list of what it wrote; a staging buffer of `cap` bytes.
typedef struct writer {
    ember_ctx *ctx;
    ember__dfile *df;
    const char *path;
    int *opened;
    int64_t offset;
    save_state *w;
    unsigned char *buf;
    size_t cap;
} writer;

// Appends record x (its offset, bytes and CRC-32 set here): the na bytes at a, then the nb at b
// (nb may be 0). EMBER_OK, EMBER_ERR_IO (opening the file), EMBER_ERR_NOMEM.
static ember_status emit(writer *v, ember__ckpt_wrote x, const void *a, uint64_t na, const void *b, uint64_t nb) {
    EMBER_TRY(open_once(v->ctx, v->df, v->path, v->opened));
    uint32_t crc = (uint32_t)crc32_z(0, a, (z_size_t)na);
    if (nb) crc = (uint32_t)crc32_z(crc, b, (z_size_t)nb);
    x.offset = v->offset;
    x.bytes = na + nb;
    x.crc = crc;
    ember__dfile_write(v->df, a, (size_t)na);
    if (nb) ember__dfile_write(v->df, b, (size_t)nb);
    v->offset += (int64_t)(na + nb);
    if (!add_wrote(v->w, &x)) return ember_ctx_set_error(v->ctx, EMBER_ERR_NOMEM, "ember_checkpoint_save: cannot allocate");
    return EMBER_OK;
}

// A delta's record of the n rows gathered: plain when they are contiguous, else a row list.
static ember_status emit_rows(writer *v, ember__ckpt_wrote x, const int64_t *idx, const unsigned char *rows, int64_t n,
                              size_t row_bytes) {
    x.r0 = idx[0], x.r1 = idx[n - 1] + 1;
    x.count = x.r1 - x.r0 == n ? 0 : n;
    const uint64_t data = (uint64_t)n * row_bytes;
    return x.count ? emit(v, x, idx, sizeof(int64_t) * (uint64_t)n, rows, data) : emit(v, x, rows, data, NULL, 0);
}

// Tensor k of piece i, all of its rows in records of `per` rows; or a delta's changed rows, in
// records of up to `per` rows each: contiguous ones plain, others as a row list (the rows'
// numbers first). x: the records' table, tensor, file and columns.
static ember_status write_tensor(ember_sebc *s, writer *v, int32_t t, int32_t i, const ember_piece *p,
                                 const ember_tensor_info *ti, ember__ckpt_wrote x, size_t row_bytes, int64_t per,
                                 int64_t align, int delta) {
    int64_t *idx = (int64_t *)v->buf, n = 0;
    unsigned char *rows = v->buf + (delta ? sizeof(int64_t) * (size_t)per : 0);
    if (!delta) {
        for (int64_t r = p->row_begin; r < p->row_end; r += per) {
            const int64_t e = r + per < p->row_end ? r + per : p->row_end;
            EMBER_TRY(ember_sebc_piece_read(s, t, i, ti->name, r, e, ti->dtype, rows));
            x.r0 = r, x.r1 = e, x.count = 0;
            EMBER_TRY(emit(v, x, rows, (uint64_t)(e - r) * row_bytes, NULL, 0));
        }
        return EMBER_OK;
    }
    for (int64_t from = p->row_begin, a, b; from < p->row_end; from = b) {
        EMBER_TRY(next_rows(s, t, i, p, from, align, &a, &b));
        for (int64_t r = a; r < b;) { // into the buffer, a record whenever it is full
            const int64_t take = b - r < per - n ? b - r : per - n;
            EMBER_TRY(ember_sebc_piece_read(s, t, i, ti->name, r, r + take, ti->dtype, rows + (size_t)n * row_bytes));
            for (int64_t j = 0; j < take; j++) idx[n + j] = r + j;
            n += take;
            r += take;
            if (n == per) EMBER_TRY(emit_rows(v, x, idx, rows, n, row_bytes));
            if (n == per) n = 0;
        }
    }
    return n ? emit_rows(v, x, idx, rows, n, row_bytes) : EMBER_OK;
}

// This rank's records: its pieces (the canonical copy of each value: per-row state from the
// col_begin == 0 piece, a data-parallel table from rank t % W) and, on rank 0, the blobs. A delta
// (whole non-NULL) writes only the rows changed since the mark of the tables not written whole.
static ember_status write_pieces(ember_sebc *s, const char *dir, ember__dfile *df, int *opened, int64_t generation,
                                 size_t chunk, const ember_checkpoint_options *o, const unsigned char *whole,
                                 save_state *w) {
    ember_comm *comm = ember__sebc_shard_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm), W = ember_comm_size(comm), T = ember_sebc_num_tables(s);
    char name[64], path[EMBER__PATH_MAX];
    ember__ckpt_data_name(name, sizeof name, generation, rank);
    ember__ckpt_join(path, sizeof path, dir, name);
    writer v = {ctx, df, path, opened, 0, w, NULL, 0};
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
                // Records of a chunk (or one row larger than it), a delta's row numbers included.
                const int delta = whole && !whole[t];
                const size_t row_bytes = (size_t)(c1 - c0) * ember_dtype_size(ti[k].dtype);
                const size_t unit = row_bytes + (delta ? sizeof(int64_t) : 0);
                const int64_t align = record_align(tc), fit = (int64_t)(chunk / unit) / align * align;
                const int64_t per = fit > 0 ? fit : align;
                const size_t need = unit * (size_t)per;
                if (need > v.cap) {
                    ember_ctx_free(ctx, v.buf);
                    v.cap = (v.buf = ember_ctx_alloc(ctx, need)) ? need : 0;
                    if (!v.buf) {
                        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM,
                                                 "ember_checkpoint_save: cannot allocate %zu bytes", need);
                        break;
                    }
                }
                const ember__ckpt_wrote x = {.table = t, .tensor = k, .file = rank, .c0 = c0, .c1 = c1};
                st = write_tensor(s, &v, t, i, &p, &ti[k], x, row_bytes, per, align, delta);
            }
        }
    }
    for (int32_t b = 0; rank == 0 && o && b < o->num_blobs && st == EMBER_OK; b++) {
        const ember__ckpt_wrote y = {.table = -1, .tensor = b, .file = rank};
        st = emit(&v, y, o->blobs[b].data, o->blobs[b].bytes, NULL, 0);
    }
    ember_ctx_free(ctx, v.buf);
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
static ember_status commit_manifest(ember_sebc *s, const char *dir, int64_t generation, uint64_t chain,
                                    const ember__ckpt_base *base, const int64_t *steps, const ember__ckpt_wrote *all,
                                    int64_t n, const ember_checkpoint_options *o, int *committed) {
    ember_ctx *ctx = ember_comm_ctx(ember__sebc_shard_comm(s));
    const char *fn = "ember_checkpoint_save";
    char *text = ember__ckpt_manifest_text(s, generation, chain, base, steps, all, n, o);
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

// Generation `generation` in dir (prepared: it exists, no file of this generation is named by its
// manifest; a delta's base: whole on every rank, its checkpoint on rank 0, its chain in *chain):
// steps 1 to 3, after the commit the collection's mark and the clean-up. A full save names its
// chain after the records it wrote (the same content, the same name: a rerun writes the same
// manifest) into *chain. Collective. *committed as commit_manifest's (rank 0).
static ember_status save_generation(ember_sebc *s, const char *dir, int64_t generation, uint64_t *chain,
                                    const ember__ckpt_base *base, const ember_checkpoint_options *o, int *committed) {
    ember_comm *comm = ember__sebc_shard_comm(s);
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
    if (st == EMBER_OK) st = write_pieces(s, dir, &df, &opened, generation, chunk, o, base ? base->whole : NULL, &w);
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
    if (st == EMBER_OK && !base) {
        const uint64_t x[2] = {ember_digest(all, sizeof(ember__ckpt_wrote) * (size_t)n), (uint64_t)generation};
        *chain = ember_digest(x, sizeof x);
    }

    // 3. The commit: rank 0 replaces manifest.json.
    if (st == EMBER_OK && rank == 0)
        st = commit_manifest(s, dir, generation, *chain, base, steps, all, n, o, committed);
    st = ember_comm_agree(comm, st);
    if (st != EMBER_OK && opened && df.err == 0) unlink(df.path); // this generation never committed
    // The state saved is the one the next delta goes on top of.
    if (st == EMBER_OK) ember_sebc_mark(s, ember__ckpt_tag(*chain, generation));
    if (st == EMBER_OK && rank == 0) collect_garbage(s, dir, generation, base);
    ember_ctx_free(ctx, steps);
    ember_ctx_free(ctx, all);
    ember_ctx_free(ctx, w.list);
    return st;
}

static ember_status save(ember_sebc *s, const char *dir, const ember_checkpoint_options *o);

ember_status ember_checkpoint_save(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    if (ember_sebc_num_groups(s) == 1) return save(s, dir, o);
    // 2D: the groups' replicas are equal: group 0 writes the one copy, a G-rank collection's.
    ember_comm *world = ember_sebc_comm(s);
    const ember_arg args[] = {{.name = "directory", .text = dir ? dir : "(null)"}};
    EMBER_TRY(ember_comm_agree_args(world, EMBER_OK, "ember_checkpoint_save", args, 1));
    const int writes = ember_comm_rank(world) < ember_sebc_group_size(s);
    return ember_comm_agree(world, writes ? save(s, dir, o) : EMBER_OK);
}

static ember_status save(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    ember_comm *comm = ember__sebc_shard_comm(s);
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
    const int delta = o && o->delta;
    const ember_arg args[] = {
        {.name = "directory", .text = dir ? dir : "(null)"},
        {.name = "chunk_bytes", .value = (int64_t)(o && o->chunk_bytes ? o->chunk_bytes : EMBER_CHECKPOINT_CHUNK_DEFAULT)},
        {.name = "num_blobs", .value = o ? o->num_blobs : 0},
        {.name = "blobs", .value = (int64_t)blobs, .digest = 1},
        {.name = "delta", .value = delta}};
    st = ember_comm_agree_args(comm, st, "ember_checkpoint_save", args, 5);
    if (st != EMBER_OK) return st;
    const int32_t T = ember_sebc_num_tables(s);
    unsigned char *whole = ember_ctx_alloc(ctx, (size_t)T + 1);
    st = ember_comm_agree(comm, whole ? EMBER_OK
                                      : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_save: cannot allocate"));
    if (st != EMBER_OK) {
        ember_ctx_free(ctx, whole);
        return st;
    }
    memset(whole, 0, (size_t)T + 1);
    ember__ckpt_base base = {NULL, whole};
    // Rank 0 finds the generation (and a delta's base, whose chain it continues).
    int64_t head[2] = {0, 0}; // generation, chain
    int created = 0, committed = 0; // rank 0: this call made dir; manifest.json was replaced
    if (ember_comm_rank(comm) == 0) {
        st = prepare_dir(s, dir, delta ? &base : NULL, whole, &head[0], &created);
        const uint64_t chain = base.c ? base.c->chain : 0; // a full save's is named after what it wrote
        memcpy(&head[1], &chain, sizeof chain);
    }
    st = ember_comm_agree(comm, st);
    if (st == EMBER_OK) st = ember_comm_bcast(comm, head, sizeof head, 0);
    if (st == EMBER_OK && delta) st = ember_comm_bcast(comm, whole, (size_t)T, 0);
    uint64_t chain;
    memcpy(&chain, &head[1], sizeof chain);
    if (st == EMBER_OK) st = save_generation(s, dir, head[0] + 1, &chain, delta ? &base : NULL, o, &committed);
    // A failed save leaves no directory of its own behind: every rank has removed its file (or is
    // past writing it: the statuses were agreed), so rank 0 removes the rest and the directory.
    if (st != EMBER_OK && created && !committed) remove_created_dir(dir, head[0] + 1, ember_comm_size(comm));
    ember_checkpoint_close(base.c);
    ember_ctx_free(ctx, whole);
    return st;
}
