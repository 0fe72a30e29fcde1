// ember_checkpoint_load (include/ember/state.h): rank 0 reads the manifest and every rank parses
// the same text; the tables are matched by name and shape, converted to the stored dtypes all at
// once, and each rank reads the records overlapping the pieces it holds (resharding: a record
// cut by another plan's rows or columns goes in by parts).
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "state/internal.h"

// Checks that the checkpoint holds every table of s with the same shape; indices into c->tables.
static ember_status match_tables(ember_sebc *s, const ember_checkpoint *c, int32_t *index) {
    ember_ctx *ctx = c->ctx;
    const char *fn = "ember_checkpoint_load";
    for (int32_t t = 0; t < ember_sebc_num_tables(s); t++) {
        const ember_table_config *tc = ember_sebc_table(s, t);
        const ember__ckpt_table *x = NULL;
        for (int32_t i = 0; i < c->ntables && !x; i++)
            if (strcmp(c->tables[i].name, tc->name) == 0) x = &c->tables[index[t] = i];
        if (!x)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' is not in checkpoint '%s'", fn, tc->name,
                                       c->dir);
        if (x->rows != tc->rows)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                                       "%s: table '%s' rows: %" PRId64 " in checkpoint '%s', %" PRId64 " here", fn,
                                       tc->name, x->rows, c->dir, tc->rows);
        if (x->dim != tc->dim)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s: table '%s' dim: %d in checkpoint '%s', %d here", fn,
                                       tc->name, (int)x->dim, c->dir, (int)tc->dim);
        if (x->optim != tc->optim.kind)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                                       "%s: table '%s' optimizer: %s in checkpoint '%s', %s here", fn, tc->name,
                                       ember_optim_name(x->optim), c->dir, ember_optim_name(tc->optim.kind));
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        int same = nt == x->ntensors;
        for (int32_t k = 0; k < nt && same; k++)
            same = strcmp(ti[k].name, x->tensors[k].name) == 0 && ti[k].cols == x->tensors[k].cols &&
                   x->tensors[k].dtype == (k == 0 ? x->dtype : ti[k].dtype);
        if (!same)
            return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                                       "%s: table '%s' tensors in checkpoint '%s' are not the ones "
                                       "its optimizer %s keeps",
                                       fn, tc->name, c->dir, ember_optim_name(tc->optim.kind));
    }
    return EMBER_OK;
}

// Rows [a, b) of piece i's tensor kx from src (rows src_row bytes apart, starting at column sc):
// as they are when the columns are the piece's [d0, d1), else (resharding between column
// slicings) the overlap [u, v) patched into the piece's rows, read and written back a chunk at a
// time through dst_buf.
static ember_status put_rows(ember_sebc *s, int32_t t, int32_t i, const ember__ckpt_tensor *kx, int64_t a, int64_t b,
                             const unsigned char *src, size_t src_row, int32_t sc, int32_t d0, int32_t d1, int32_t u,
                             int32_t v, void *dst_buf, size_t chunk) {
    if (sc == d0 && (size_t)(d1 - d0) * ember_dtype_size(kx->dtype) == src_row)
        return ember_sebc_piece_write(s, t, i, kx->name, a, b, kx->dtype, src);
    const size_t es = ember_dtype_size(kx->dtype), dst_row = (size_t)(d1 - d0) * es;
    const int64_t per = chunk / dst_row > 0 ? (int64_t)(chunk / dst_row) : 1;
    for (int64_t r0 = a; r0 < b; r0 += per) {
        const int64_t r1 = r0 + per < b ? r0 + per : b;
        unsigned char *d = dst_buf;
        EMBER_TRY(ember_sebc_piece_read(s, t, i, kx->name, r0, r1, kx->dtype, d));
        for (int64_t row = r0; row < r1; row++)
            memcpy(d + (size_t)(row - r0) * dst_row + (size_t)(u - d0) * es,
                   src + (size_t)(row - a) * src_row + (size_t)(u - sc) * es, (size_t)(v - u) * es);
        EMBER_TRY(ember_sebc_piece_write(s, t, i, kx->name, r0, r1, kx->dtype, d));
    }
    return EMBER_OK;
}

// Loads piece i of table t, tensor k, from the records overlapping it.
static ember_status load_piece(ember_sebc *s, ember_checkpoint *c, const ember__ckpt_table *x, int32_t t, int32_t i,
                               int32_t k, const ember_tensor_info *ti, void *rec_buf, size_t rec_cap, void *dst_buf,
                               size_t chunk) {
    const ember_table_config *tc = ember_sebc_table(s, t);
    ember_piece p;
    EMBER_TRY(ember_sebc_piece(s, t, i, &p));
    int32_t d0, d1;
    ember__ckpt_piece_cols(tc, ti, &p, &d0, &d1);
    const ember__ckpt_tensor *kx = &x->tensors[k];
    const size_t es = ember_dtype_size(kx->dtype);
    for (int32_t j = kx->first; j < kx->first + kx->count; j++) {
        const ember__ckpt_record *r = &c->records[j];
        const int64_t a = r->r0 > p.row_begin ? r->r0 : p.row_begin, b = r->r1 < p.row_end ? r->r1 : p.row_end;
        const int32_t u = r->c0 > d0 ? r->c0 : d0, v = r->c1 < d1 ? r->c1 : d1;
        if (a >= b || u >= v) continue;
        char what[EMBER__CKPT_MAX_NAME + 96];
        snprintf(what, sizeof what, "table '%s' %s rows [%" PRId64 ", %" PRId64 ")", x->name, kx->name, r->r0, r->r1);
        EMBER_TRY(ember__ckpt_read_at(c, r->gen, r->file, r->offset, r->bytes, r->crc, rec_buf, rec_cap, what));
        const size_t src_row = (size_t)(r->c1 - r->c0) * es;
        if (!r->count) { // rows [r0, r1): those inside the piece, one run
            const unsigned char *src = (const unsigned char *)rec_buf + (size_t)(a - r->r0) * src_row;
            EMBER_TRY(put_rows(s, t, i, kx, a, b, src, src_row, r->c0, d0, d1, u, v, dst_buf, chunk));
            continue;
        }
        // A row list: its runs of consecutive rows inside the piece, each at once.
        const int64_t *idx = rec_buf;
        const unsigned char *rows = (const unsigned char *)rec_buf + sizeof(int64_t) * (size_t)r->count;
        for (int64_t q = 0; q < r->count; q++)
            if (idx[q] < r->r0 || idx[q] >= r->r1 || (q > 0 && idx[q] <= idx[q - 1]))
                return ember_ctx_set_error(c->ctx, EMBER_ERR_FORMAT,
                                           "checkpoint '%s': %s: its row list is not ascending inside the record's "
                                           "rows (entry %" PRId64 ": row %" PRId64 ")",
                                           c->dir, what, q, idx[q]);
        for (int64_t q = 0, e; q < r->count; q = e) {
            for (e = q + 1; e < r->count && idx[e] == idx[e - 1] + 1;) e++;
            const int64_t lo = idx[q] > a ? idx[q] : a, hi = idx[e - 1] + 1 < b ? idx[e - 1] + 1 : b;
            if (lo < hi)
                EMBER_TRY(put_rows(s, t, i, kx, lo, hi, rows + (size_t)(q + lo - idx[q]) * src_row, src_row, r->c0,
                                   d0, d1, u, v, dst_buf, chunk));
        }
    }
    return EMBER_OK;
}

// Rank 0 reads dir's manifest once and every rank parses the same text into *c (made here; close
// it, also on failure). Collective: the reading is agreed on; the parse of the same text gives
// the same answer everywhere (but for a rank out of memory: the caller agrees before any change).
static ember_status open_everywhere(ember_comm *comm, const char *dir, ember_checkpoint **c) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t rank = ember_comm_rank(comm);
    ember_status st = ember__ckpt_new(ctx, dir, c);
    char *text = NULL;
    size_t len = 0;
    if (st == EMBER_OK && rank == 0) st = ember__ckpt_read_manifest(ctx, dir, &text, &len);
    st = ember_comm_agree(comm, st);
    int64_t n = (int64_t)len;
    if (st == EMBER_OK) st = ember_comm_bcast(comm, &n, sizeof n, 0);
    if (st == EMBER_OK && rank != 0 && !(text = ember_ctx_alloc(ctx, (size_t)n + 1)))
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_load: cannot allocate %lld bytes",
                                 (long long)n);
    st = ember_comm_agree(comm, st);
    if (st == EMBER_OK) st = ember_comm_bcast(comm, text, (size_t)n, 0);
    if (st == EMBER_OK) st = ember__ckpt_parse(*c, text, (size_t)n);
    ember_ctx_free(ctx, text);
    return st;
}

// Buffers: the largest record of the tables loaded (as far as the files hold it: *most), and one
// chunk of a destination piece (at least one row of the widest tensor loaded: *chunk). The
// checkpoint's other tables are not read and size nothing.
static void buffer_sizes(ember_checkpoint *c, const int32_t *index, int32_t T, uint64_t *most, size_t *chunk) {
    *most = 1;
    for (int32_t t = 0; t < T; t++)
        for (int32_t k = 0; k < c->tables[index[t]].ntensors; k++) {
            const ember__ckpt_tensor *x = &c->tables[index[t]].tensors[k];
            const size_t row = (size_t)x->cols * ember_dtype_size(x->dtype);
            *chunk = row > *chunk ? row : *chunk;
            for (int32_t j = x->first; j < x->first + x->count; j++) {
                const ember__ckpt_record *r = &c->records[j];
                const uint64_t held = ember__ckpt_held_bytes(c, r->gen, r->file, r->offset, r->bytes);
                *most = held > *most ? held : *most;
            }
        }
}

static ember_status load(ember_sebc *s, const char *dir, const ember_checkpoint_options *o);

ember_status ember_checkpoint_load(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    if (ember_sebc_num_groups(s) == 1) return load(s, dir, o);
    // 2D: every group loads its replica; a failure in one is every rank's.
    ember_comm *world = ember_sebc_comm(s);
    const ember_arg args[] = {{.name = "directory", .text = dir ? dir : "(null)"}};
    EMBER_TRY(ember_comm_agree_args(world, EMBER_OK, "ember_checkpoint_load", args, 1));
    return ember_comm_agree(world, load(s, dir, o));
}

static ember_status load(ember_sebc *s, const char *dir, const ember_checkpoint_options *o) {
    ember_comm *comm = ember__sebc_shard_comm(s);
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t T = ember_sebc_num_tables(s);
    size_t chunk = o && o->chunk_bytes ? o->chunk_bytes : EMBER_CHECKPOINT_CHUNK_DEFAULT;
    ember_checkpoint *c = NULL;
    const ember_arg args[] = {{.name = "directory", .text = dir ? dir : "(null)"},
                              {.name = "chunk_bytes", .value = (int64_t)chunk}};
    EMBER_TRY(ember_comm_agree_args(comm, EMBER_OK, "ember_checkpoint_load", args, 2));
    ember_status st = open_everywhere(comm, dir, &c);
    if (st == EMBER_OK) st = ember__ckpt_check(c); // what verify checks of the manifest, on every rank alike
    int32_t *index = st == EMBER_OK ? ember__calloc(ctx, sizeof(int32_t) * (size_t)(T ? T : 1)) : NULL;
    if (st == EMBER_OK && !index)
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_load: cannot allocate");
    if (st == EMBER_OK) st = match_tables(s, c, index);
    uint64_t most = 1;
    if (st == EMBER_OK) buffer_sizes(c, index, T, &most, &chunk);
    void *rec_buf = NULL, *dst_buf = NULL;
    ember_dtype *dtypes = NULL;
    if (st == EMBER_OK && (!(rec_buf = ember_ctx_alloc(ctx, (size_t)most)) || !(dst_buf = ember_ctx_alloc(ctx, chunk)) ||
                           !(dtypes = ember_ctx_alloc(ctx, sizeof(ember_dtype) * (size_t)(T ? T : 1)))))
        st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "ember_checkpoint_load: cannot allocate %" PRIu64 " + %zu bytes",
                                 most, chunk);
    // The stored dtypes, every table at once (the one step that allocates once tables change:
    // all of it before the first write). Every rank's status so far is agreed first; the
    // conversion agrees on its own allocations before it changes any table.
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) dtypes[t] = c->tables[index[t]].dtype;
    st = ember__sebc_convert_dtypes(s, dtypes, st);
    for (int32_t t = 0; t < T && st == EMBER_OK; t++) {
        const ember__ckpt_table *x = &c->tables[index[t]];
        const ember_table_config *tc = ember_sebc_table(s, t);
        ember_tensor_info ti[EMBER_MAX_TENSORS];
        const int32_t nt = ember_table_tensors(tc, ti);
        for (int32_t i = 0; i < ember_sebc_num_pieces(s, t) && st == EMBER_OK; i++)
            for (int32_t k = 0; k < nt && st == EMBER_OK; k++)
                st = load_piece(s, c, x, t, i, k, &ti[k], rec_buf, (size_t)most, dst_buf, chunk);
        if (st == EMBER_OK) st = ember_sebc_set_step(s, t, x->step);
        st = ember_comm_agree(comm, st);
    }
    // The state loaded is the one the next delta goes on top of (in this directory).
    if (st == EMBER_OK) ember_sebc_mark(s, ember__ckpt_tag(c->chain, c->generation));
    ember_ctx_free(ctx, rec_buf);
    ember_ctx_free(ctx, dst_buf);
    ember_ctx_free(ctx, dtypes);
    ember_ctx_free(ctx, index);
    ember_checkpoint_close(c);
    return st;
}
