// Global state dict of a sharded collection, beside the schemes whose pieces it walks: every
// table is read and written as one plain [rows, cols] array whatever its scheme. Reads gather the owned blocks, writes
// scatter them; replicated (data-parallel) tables are read from this rank's replica (all
// replicas are equal).
#include <string.h>

#include "core/dtype.h"
#include "shard/internal.h"

// A named tensor of a table, from the one list (ember_table_tensors): its columns (0: no such
// tensor) and, when dtype is not NULL, its dtype.
static int32_t tensor_cols(const ember_table_config *t, const char *name, ember_dtype *dtype) {
    if (!name) return 0;
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int32_t n = ember_table_tensors(t, ti);
    for (int32_t i = 0; i < n; i++) {
        if (strcmp(name, ti[i].name) != 0) continue;
        if (dtype) *dtype = ti[i].dtype;
        return ti[i].cols;
    }
    return 0;
}

static ember_status check(ember_sebc *s, const char *fn, int32_t table, const char *tensor, const void *buf,
                          int32_t root, int32_t *cols) {
    EMBER_CHECK(s->ctx, table >= 0 && table < s->T, EMBER_ERR_INVALID_ARG, "%s: table %d outside [0, %d)", fn,
                (int)table, (int)s->T);
    *cols = tensor_cols(&s->tables[table], tensor, NULL);
    EMBER_CHECK(s->ctx, *cols > 0, EMBER_ERR_INVALID_ARG, "%s: table '%s' has no tensor '%s'", fn,
                s->tables[table].name, tensor ? tensor : "(null)");
    EMBER_CHECK(s->ctx, root >= -1 && root < s->W, EMBER_ERR_INVALID_ARG, "%s: root %d outside [-1, %d)", fn,
                (int)root, (int)s->W);
    EMBER_CHECK(s->ctx, buf != NULL || (root >= 0 && root != s->rank), EMBER_ERR_INVALID_ARG, "%s: buffer is NULL",
                fn);
    return EMBER_OK;
}

// Columns of shard `sh` in a tensor of `cols` columns: its slice for [rows, dim] tensors, the
// whole row for per-row state and a hashed table's "ids"/"candidates" (dim -1: never sliced).
static void shard_cols(const ember__shard *sh, int32_t cols, int32_t dim, int32_t *c0, int32_t *w) {
    if (cols == dim) {
        *c0 = sh->c0;
        *w = sh->c1 - sh->c0;
    } else {
        *c0 = 0;
        *w = cols;
    }
}

// A hashed table's int64 tensors ("ids", "candidates"): never sliced by columns.
static bool is_i64(const ember_table_config *t, const char *tensor) {
    ember_dtype dt = EMBER_DTYPE_F32;
    return tensor_cols(t, tensor, &dt) > 0 && dt == EMBER_DTYPE_I64;
}

// The dim shard_cols slices by: the table's, or -1 for the int64 tensors.
static int32_t slice_dim(const ember_table_config *t, const char *tensor) { return is_i64(t, tensor) ? -1 : t->dim; }


// A tensor is read or written as F32, or, the weight of a 16-bit table, as its own dtype.
static ember_status check_dtype(ember_sebc *s, const char *fn, int32_t t, const char *tensor, ember_dtype dtype) {
    EMBER_CHECK(s->ctx, ember_dtype_size(dtype) > 0, EMBER_ERR_INVALID_ARG, "%s: unknown dtype %d", fn, (int)dtype);
    const ember_table_config *tc = &s->tables[t];
    const bool weight = tensor && strcmp(tensor, "weight") == 0, ids = is_i64(tc, tensor);
    EMBER_CHECK(s->ctx, ids == (dtype == EMBER_DTYPE_I64), EMBER_ERR_INVALID_ARG,
                "%s: table '%s' tensor '%s' cannot be read or written as %s", fn, tc->name, tensor ? tensor : "(null)",
                ember_dtype_name(dtype));
    EMBER_CHECK(s->ctx, ids || dtype == EMBER_DTYPE_F32 || (weight && dtype == tc->dtype), EMBER_ERR_INVALID_ARG,
                "%s: table '%s' tensor '%s' cannot be read or written as %s (stored as %s)", fn, tc->name,
                tensor ? tensor : "(null)", ember_dtype_name(dtype),
                ember_dtype_name(weight ? tc->dtype : EMBER_DTYPE_F32));
    return EMBER_OK;
}

// Agrees on c (the group's, or 2D's world) on the status so far and on the arguments every rank
// must give alike: the table, the tensor, the dtype, the root, and for a write (write = 1) the
// array's values when every rank passes it (root -1; all: this rank's array, bytes long). The same
// number of arguments on every rank whatever they are.
static ember_status agree_on(ember_comm *c, ember_status st, const char *fn, int32_t table, const char *tensor,
                             ember_dtype dtype, int32_t root, int write, const void *all, size_t bytes) {
    const ember_arg args[] = {
        {.name = "table", .value = table},
        {.name = "tensor", .text = tensor ? tensor : "(null)"},
        {.name = "dtype", .text = ember_dtype_name(dtype)},
        {.name = "root", .value = root},
        {.name = "the array (root -1: every rank passes the same values)",
         .value = st == EMBER_OK && all ? (int64_t)ember_digest(all, bytes) : 0, .digest = 1},
    };
    return ember_comm_agree_args(c, st, fn, args, write ? 5 : 4);
}


ember_status ember_sebc_read(ember_sebc *s, int32_t table, const char *tensor, float *dst, int32_t root) {
    return ember_sebc_read_as(s, table, tensor, EMBER_DTYPE_F32, dst, root);
}

ember_status ember_sebc_write(ember_sebc *s, int32_t table, const char *tensor, const float *src, int32_t root) {
    return ember_sebc_write_as(s, table, tensor, EMBER_DTYPE_F32, src, root);
}

// The read and the write on this rank's sharding group (root: a rank of it, or -1).
static ember_status read_as(ember_sebc *s, int32_t table, const char *tensor, ember_dtype dtype, void *dst_,
                            int32_t root) {
    const char *fn = "ember_sebc_read";
    int32_t cols = 0;
    unsigned char *dst = dst_;
    const size_t es = ember_dtype_size(dtype);
    ember_status st = check(s, fn, table, tensor, dst, root, &cols);
    if (st == EMBER_OK) st = check_dtype(s, fn, table, tensor, dtype);
    EMBER_TRY(agree_on(s->comm, st, fn, table, tensor, dtype, root, 0, NULL, 0));
    const ember__table_shards *ts = &s->ts[table];
    const int32_t dim = slice_dim(&s->tables[table < 0 || table >= s->T ? 0 : table], tensor);
    ember_ebc *e;
    int32_t lt;
    if (ts->nshards == 0) { // replicated: every rank holds the whole table
        if ((root < 0 || root == s->rank) && ember__piece(s, table, 0, &e, &lt))
            st = ember_ebc_read(e, lt, tensor, 0, s->tables[table].rows, dtype, dst);
        return ember_comm_agree(s->comm, st);
    }
    // Pack this rank's blocks in shard order.
    int64_t mine = 0;
    if (st == EMBER_OK) {
        for (int32_t i = 0; i < ts->nshards; i++) {
            const ember__shard *sh = &ts->shards[i];
            int32_t c0, w;
            shard_cols(sh, cols, dim, &c0, &w);
            if (sh->owner == s->rank) mine += (sh->r1 - sh->r0) * w;
        }
    }
    int64_t total = st == EMBER_OK ? s->tables[table].rows * (int64_t)cols * ts->nshards : 0;
    unsigned char *send = st == EMBER_OK ? ember__buf_reserve(s->ctx, &s->snd_out, es * (size_t)(mine + 1)) : NULL;
    unsigned char *recv = st == EMBER_OK ? ember__buf_reserve(s->ctx, &s->rcv_out, es * (size_t)(total + 1)) : NULL;
    if (st == EMBER_OK && (!send || !recv)) st = EMBER_ERR_NOMEM;
    int64_t n = 0;
    for (int32_t i = 0; st == EMBER_OK && i < ts->nshards; i++) {
        const ember__shard *sh = &ts->shards[i];
        if (sh->owner != s->rank) continue;
        int32_t c0, w;
        shard_cols(sh, cols, dim, &c0, &w);
        st = ember_ebc_read(s->local, sh->local_table, tensor, 0, sh->r1 - sh->r0, dtype, send + es * (size_t)n);
        n += (sh->r1 - sh->r0) * w;
    }
    EMBER_TRY(ember_comm_agree(s->comm, st));
    int64_t *counts = s->cnt;
    EMBER_TRY(ember_comm_allgather_i64(s->comm, mine, counts));
    EMBER_TRY(ember__comm_allgatherv(s->comm, send, mine, recv, counts, es));
    if (root >= 0 && root != s->rank) return EMBER_OK;
    // Unpack: rank q's blocks follow each other in shard order.
    int64_t base = 0;
    for (int32_t q = 0; q < s->W; q++) {
        int64_t o = base;
        for (int32_t i = 0; i < ts->nshards; i++) {
            const ember__shard *sh = &ts->shards[i];
            if (sh->owner != q) continue;
            int32_t c0, w;
            shard_cols(sh, cols, dim, &c0, &w);
            for (int64_t r = sh->r0; r < sh->r1; r++, o += w)
                memcpy(dst + es * (size_t)(r * cols + c0), recv + es * (size_t)o, es * (size_t)w);
        }
        base += counts[q];
    }
    return EMBER_OK;
}

static ember_status write_as(ember_sebc *s, int32_t table, const char *tensor, ember_dtype dtype, const void *src,
                             int32_t root) {
    const char *fn = "ember_sebc_write";
    int32_t cols = 0;
    const size_t es = ember_dtype_size(dtype);
    ember_status st = check(s, fn, table, tensor, src, root, &cols);
    if (st == EMBER_OK) st = check_dtype(s, fn, table, tensor, dtype);
    const int64_t total = st == EMBER_OK ? s->tables[table].rows * (int64_t)cols : 0;
    float v = 0;
    const int64_t bad = st == EMBER_OK && (root < 0 || root == s->rank) ? ember__first_nonfinite(dtype, src, total, &v) : -1;
    if (bad >= 0)
        st = ember__error(s->ctx, EMBER_ERR_NUMERIC, "%s: table '%s' tensor '%s' row %lld column %d: %g", fn,
                          s->tables[table].name, tensor, (long long)(bad / cols), (int)(bad % cols), (double)v);
    EMBER_TRY(agree_on(s->comm, st, fn, table, tensor, dtype, root, 1, root < 0 ? src : NULL, es * (size_t)total));
    const ember__table_shards *ts = st == EMBER_OK ? &s->ts[table] : NULL;
    const int32_t dim = st == EMBER_OK ? slice_dim(&s->tables[table], tensor) : 0;
    // Every buffer before anything is written: the broadcast array, and one block of the largest
    // piece this rank holds (a rank may hold several: all are written, or none).
    int64_t most = 0;
    for (int32_t i = 0; st == EMBER_OK && i < ts->nshards; i++) {
        const ember__shard *sh = &ts->shards[i];
        int32_t c0, w;
        shard_cols(sh, cols, dim, &c0, &w);
        if (sh->owner == s->rank && (sh->r1 - sh->r0) * w > most) most = (sh->r1 - sh->r0) * w;
    }
    const unsigned char *full = src;
    unsigned char *buf = NULL, *blk = NULL;
    if (st == EMBER_OK && root >= 0) {
        buf = ember__buf_reserve(s->ctx, &s->rcv_out, es * (size_t)(total + 1));
        if (!buf) st = EMBER_ERR_NOMEM;
        else if (root == s->rank) memcpy(buf, src, es * (size_t)total);
        full = buf;
    }
    if (st == EMBER_OK && most > 0 && !(blk = ember__buf_reserve(s->ctx, &s->snd_out, es * (size_t)(most + 1))))
        st = EMBER_ERR_NOMEM;
    EMBER_TRY(ember_comm_agree(s->comm, st));
    if (root >= 0) EMBER_TRY(ember__comm_bcast(s->comm, buf, es * (size_t)total, root));
    ember_ebc *e;
    int32_t lt;
    if (ts->nshards == 0) { // replicated
        if (ember__piece(s, table, 0, &e, &lt))
            st = ember_ebc_write(e, lt, tensor, 0, s->tables[table].rows, dtype, full);
        return ember_comm_agree(s->comm, st);
    }
    for (int32_t i = 0; st == EMBER_OK && i < ts->nshards; i++) {
        const ember__shard *sh = &ts->shards[i];
        if (sh->owner != s->rank) continue;
        int32_t c0, w;
        shard_cols(sh, cols, dim, &c0, &w);
        for (int64_t r = sh->r0; r < sh->r1; r++)
            memcpy(blk + es * (size_t)((r - sh->r0) * w), full + es * (size_t)(r * cols + c0), es * (size_t)w);
        st = ember_ebc_write(s->local, sh->local_table, tensor, 0, sh->r1 - sh->r0, dtype, blk);
    }
    return ember_comm_agree(s->comm, st);
}

// 2D: read by the group holding root (every group for root -1), written by every group from the
// same array (root -1 only); checked and agreed over the world first, and after.
static ember_status call_2d(ember_sebc *s, const char *fn, int write, int32_t table, const char *tensor,
                            ember_dtype dtype, void *dst, const void *src, int32_t root) {
    int32_t cols = 0;
    ember_status st = EMBER_OK;
    if (root < -1 || root >= s->W * s->nrep)
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "%s: root %d outside [-1, %d)", fn, (int)root,
                          (int)(s->W * s->nrep));
    else if (write && root >= 0)
        st = ember__error(s->ctx, EMBER_ERR_UNSUPPORTED,
                          "%s: a collection of %d sharding groups is written from every rank (root -1), not one", fn,
                          (int)s->nrep);
    const int32_t groot = root < 0 ? -1 : root % s->W, mine = root < 0 || root / s->W == s->world->rank / s->W;
    // A rank of another group than root's reads nothing: its buffer may be NULL (s stands in).
    const void *buf = write ? src : mine ? dst : (const void *)s;
    if (st == EMBER_OK) st = check(s, fn, table, tensor, buf, groot, &cols);
    if (st == EMBER_OK) st = check_dtype(s, fn, table, tensor, dtype);
    const size_t bytes = st == EMBER_OK && write ? ember_dtype_size(dtype) * (size_t)(s->tables[table].rows * cols) : 0;
    EMBER_TRY(agree_on(s->world, st, fn, table, tensor, dtype, root, write, src, bytes));
    if (write) st = write_as(s, table, tensor, dtype, src, -1);
    else if (mine) st = read_as(s, table, tensor, dtype, dst, groot);
    return ember_comm_agree(s->world, st);
}

ember_status ember_sebc_read_as(ember_sebc *s, int32_t table, const char *tensor, ember_dtype dtype, void *dst,
                                int32_t root) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    if (s->replica) return call_2d(s, "ember_sebc_read", 0, table, tensor, dtype, dst, NULL, root);
    return read_as(s, table, tensor, dtype, dst, root);
}

ember_status ember_sebc_write_as(ember_sebc *s, int32_t table, const char *tensor, ember_dtype dtype, const void *src,
                                 int32_t root) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    if (s->replica) return call_2d(s, "ember_sebc_write", 1, table, tensor, dtype, NULL, src, root);
    return write_as(s, table, tensor, dtype, src, root);
}

// 2D: a conversion in one group could succeed where another's fails (EMBER_ERR_UNSUPPORTED).
static ember_status refuse_2d(ember_sebc *s, const char *fn) {
    return ember_comm_agree(s->world, ember__error(s->ctx, EMBER_ERR_UNSUPPORTED,
                                                   "%s: not on a collection of %d sharding groups (load a checkpoint "
                                                   "of the converted tables instead)",
                                                   fn, (int)s->nrep));
}

ember_status ember__sebc_convert_dtypes(ember_sebc *s, const ember_dtype *dtypes, ember_status st) {
    int change = 0; // dtypes is NULL only with a failed st
    for (int32_t t = 0; st == EMBER_OK && t < s->T; t++) change |= dtypes[t] != s->tables[t].dtype;
    if (!change) return ember_comm_agree(s->comm, st); // the same answer on every rank: tables are global
    // Every local collection's new dtypes, table by table, from the pieces of each global table.
    ember_ebc *col[1 + EMBER_SHARD_COUNT];
    const int32_t nc = ember__local_collections(s, col);
    int32_t total = 0;
    for (int32_t i = 0; i < nc; i++) total += col[i]->T;
    ember_dtype *local = ember__xalloc(s->ctx, sizeof(ember_dtype) * (size_t)(total + 1), "dtype conversion");
    ember__dtype_change chg[1 + EMBER_SHARD_COUNT];
    if (!local) st = EMBER_ERR_NOMEM;
    for (int32_t i = 0, base = 0; st == EMBER_OK && i < nc; base += col[i]->T, i++) {
        chg[i] = (ember__dtype_change){.dtypes = local + base};
        for (int32_t t = 0; t < s->T; t++) {
            ember_ebc *e;
            int32_t lt;
            for (int32_t p = 0; ember__piece(s, t, p, &e, &lt); p++)
                if (e == col[i]) local[base + lt] = dtypes[t];
        }
    }
    int32_t prepared = 0;
    for (; st == EMBER_OK && prepared < nc; prepared++) {
        st = ember__ebc_convert_prepare(col[prepared], &chg[prepared]);
        if (st != EMBER_OK) break;
    }
    st = ember_comm_agree(s->comm, st);
    for (int32_t i = 0; i < prepared; i++) {
        if (st == EMBER_OK) ember__ebc_convert_commit(col[i], &chg[i]);
        else ember__ebc_convert_abort(col[i], &chg[i]);
    }
    if (st == EMBER_OK)
        for (int32_t t = 0; t < s->T; t++) s->tables[t].dtype = dtypes[t];
    ember__free(s->ctx, local);
    return st;
}

ember_status ember_sebc_convert_dtype(ember_sebc *s, int32_t table, ember_dtype dtype) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    if (s->replica) return refuse_2d(s, "ember_sebc_convert_dtype");
    ember_status st = EMBER_OK;
    if (table < 0 || table >= s->T)
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "ember_sebc_convert_dtype: table %d outside [0, %d)",
                          (int)table, (int)s->T);
    else if (!ember_dtype_is_storage(dtype))
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "ember_sebc_convert_dtype: dtype %s (%d) cannot store weights",
                          ember_dtype_name(dtype), (int)dtype);
    const ember_arg args[] = {EMBER__ARG("table", table), EMBER__ARG_STR("dtype", ember_dtype_name(dtype))};
    EMBER_TRY(ember_comm_agree_args(s->comm, st, "ember_sebc_convert_dtype", args, 2));
    ember_dtype *dtypes = st == EMBER_OK ? ember__xalloc(s->ctx, sizeof(ember_dtype) * (size_t)s->T, "dtype conversion")
                                         : NULL;
    if (st == EMBER_OK && !dtypes) st = EMBER_ERR_NOMEM;
    for (int32_t t = 0; st == EMBER_OK && t < s->T; t++) dtypes[t] = t == table ? dtype : s->tables[t].dtype;
    st = ember__sebc_convert_dtypes(s, dtypes, st);
    ember__free(s->ctx, dtypes);
    return st;
}

ember_status ember_sebc_convert_dtypes(ember_sebc *s, const ember_dtype *dtypes) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    if (s->replica) return refuse_2d(s, "ember_sebc_convert_dtypes");
    ember_status st =
        dtypes ? EMBER_OK : ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "ember_sebc_convert_dtypes: dtypes is NULL");
    for (int32_t t = 0; st == EMBER_OK && t < s->T; t++)
        if (!ember_dtype_is_storage(dtypes[t]))
            st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG,
                              "ember_sebc_convert_dtypes: table '%s': dtype %s (%d) cannot store weights",
                              s->tables[t].name, ember_dtype_name(dtypes[t]), (int)dtypes[t]);
    const ember_arg args[] = {{.name = "the tables' dtypes", .digest = 1,
                               .value = st == EMBER_OK ? (int64_t)ember_digest(dtypes, sizeof *dtypes * (size_t)s->T) : 0}};
    EMBER_TRY(ember_comm_agree_args(s->comm, st, "ember_sebc_convert_dtypes", args, 1));
    return ember__sebc_convert_dtypes(s, dtypes, EMBER_OK);
}

// ---- Pieces (shard.h): this rank's blocks of a table, read and written in place ---------------

int32_t ember_sebc_num_pieces(const ember_sebc *s, int32_t t) {
    if (!s || t < 0 || t >= s->T) return 0;
    ember_ebc *e;
    int32_t lt, n = 0;
    while (ember__piece(s, t, n, &e, &lt)) n++;
    return n;
}

// The shard behind piece i of table t (NULL for a replica). Caller checked that the piece exists.
static const ember__shard *piece_shard(const ember_sebc *s, int32_t t, int32_t i) {
    const ember__table_shards *ts = &s->ts[t];
    for (int32_t k = 0; k < ts->nshards; k++)
        if (ts->shards[k].owner == s->rank && i-- == 0) return &ts->shards[k];
    return NULL;
}

// Piece i of table t exists on this rank.
static ember_status check_piece(const ember_sebc *s, const char *fn, int32_t t, int32_t i, ember_ebc **e,
                                int32_t *lt) {
    EMBER_CHECK(s->ctx, t >= 0 && t < s->T, EMBER_ERR_INVALID_ARG, "%s: table %d outside [0, %d)", fn, (int)t,
                (int)s->T);
    if (i >= 0 && ember__piece(s, t, i, e, lt)) return EMBER_OK;
    int32_t n = 0;
    while (ember__piece(s, t, n, e, lt)) n++;
    return ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "%s: table '%s' has no piece %d on this rank (it holds %d)", fn,
                        s->tables[t].name, (int)i, (int)n);
}

ember_status ember_sebc_piece(const ember_sebc *s, int32_t t, int32_t i, ember_piece *out) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_ebc *e;
    int32_t lt;
    EMBER_CHECK(s->ctx, out != NULL, EMBER_ERR_INVALID_ARG, "ember_sebc_piece: out is NULL");
    EMBER_TRY(check_piece(s, "ember_sebc_piece", t, i, &e, &lt));
    const ember__shard *sh = piece_shard(s, t, i);
    const ember_table_config *tc = &s->tables[t];
    *out = sh ? (ember_piece){sh->r0, sh->r1, sh->c0, sh->c1, 0} : (ember_piece){0, tc->rows, 0, tc->dim, 1};
    return EMBER_OK;
}

static ember_status piece_io(ember_sebc *s, const char *fn, int32_t t, int32_t i, const char *tensor,
                             int64_t row_begin, int64_t row_end, ember_dtype dtype, const void *src, void *dst,
                             int write) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_ebc *e;
    int32_t lt;
    EMBER_TRY(check_piece(s, fn, t, i, &e, &lt));
    EMBER_TRY(check_dtype(s, fn, t, tensor, dtype));
    const ember__shard *sh = piece_shard(s, t, i);
    const int64_t r0 = sh ? sh->r0 : 0, r1 = sh ? sh->r1 : s->tables[t].rows;
    EMBER_CHECK(s->ctx, row_begin >= r0 && row_begin <= row_end && row_end <= r1, EMBER_ERR_INVALID_ARG,
                "%s: table '%s' rows [%lld, %lld) are not inside the piece's [%lld, %lld)", fn, s->tables[t].name,
                (long long)row_begin, (long long)row_end, (long long)r0, (long long)r1);
    EMBER_CHECK(s->ctx, write ? src != NULL : dst != NULL, EMBER_ERR_INVALID_ARG, "%s: buffer is NULL", fn);
    if (write) return ember__ebc_write_bits(e, lt, tensor, row_begin - r0, row_end - r0, dtype, src);
    return ember_ebc_read(e, lt, tensor, row_begin - r0, row_end - r0, dtype, dst);
}

int ember_tensor_is_sliced(const ember_table_config *t, const ember_tensor_info *ti) {
    return t && ti && ti->cols == t->dim && ti->dtype != EMBER_DTYPE_I64;
}

ember_status ember_sebc_piece_dirty(const ember_sebc *s, int32_t t, int32_t i, int64_t from, int64_t *run_begin,
                                    int64_t *run_end) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_sebc_piece_dirty";
    ember_ebc *e;
    int32_t lt;
    EMBER_TRY(check_piece(s, fn, t, i, &e, &lt));
    EMBER_CHECK(s->ctx, run_begin && run_end, EMBER_ERR_INVALID_ARG, "%s: NULL output", fn);
    const ember__shard *sh = piece_shard(s, t, i);
    const int64_t r0 = sh ? sh->r0 : 0, r1 = sh ? sh->r1 : s->tables[t].rows;
    EMBER_CHECK(s->ctx, from >= r0 && from <= r1, EMBER_ERR_INVALID_ARG,
                "%s: table '%s' row %lld is not inside the piece's [%lld, %lld]", fn, s->tables[t].name,
                (long long)from, (long long)r0, (long long)r1);
    ember__dirty_next(&e->tables[lt], from - r0, run_begin, run_end);
    *run_begin += r0;
    *run_end += r0;
    return EMBER_OK;
}

void ember_sebc_mark(ember_sebc *s, uint64_t tag) {
    if (!s) return;
    for (int32_t t = 0; t < s->T; t++) {
        ember_ebc *e;
        int32_t lt;
        for (int32_t i = 0; ember__piece(s, t, i, &e, &lt); i++) ember__dirty_clear(&e->tables[lt]);
    }
    s->mark_tag = tag;
}

uint64_t ember_sebc_mark_tag(const ember_sebc *s) { return s ? s->mark_tag : 0; }

ember_status ember_sebc_piece_read(ember_sebc *s, int32_t t, int32_t i, const char *tensor, int64_t row_begin,
                                   int64_t row_end, ember_dtype dtype, void *dst) {
    return piece_io(s, "ember_sebc_piece_read", t, i, tensor, row_begin, row_end, dtype, NULL, dst, 0);
}

ember_status ember_sebc_piece_write(ember_sebc *s, int32_t t, int32_t i, const char *tensor, int64_t row_begin,
                                    int64_t row_end, ember_dtype dtype, const void *src) {
    return piece_io(s, "ember_sebc_piece_write", t, i, tensor, row_begin, row_end, dtype, src, NULL, 1);
}
