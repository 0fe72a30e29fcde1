// Resharding a running collection (ember_sebc_reshard): a collection with the new plan is made
// beside this one, every tensor of every table is moved into it directly between the ranks
// holding the rows (one alltoallv a round, rounds of a bounded number of rows), the per-table and
// per-collection settings are carried over, and the two objects' contents are swapped, so the
// caller's handle now holds the new placement and the old one is destroyed.
//
// What moves where: every table's pieces in both placements are known on every rank (the
// routing tables: ts[t].shards, or for a data-parallel table a whole-table replica on every
// rank). A destination piece b takes, from every source piece a, the rows and columns they have
// in common: of a [rows, dim] tensor the overlap of their column ranges; of a per-row tensor (and
// a hashed table's id map) the whole row, from the source's canonical copy (the column slice
// starting at 0). A data-parallel source is read on the destination's own rank. Every rank walks
// the pairs in the same order (tensor, destination piece, source piece), so a receiver finds each
// pair's rows in its source's block without any header.
#define _POSIX_C_SOURCE 200809L // clock_gettime
#include <string.h>
#include <time.h>

#include "shard/internal.h"
#include "shard/overlap.h"

enum { DEFAULT_CHUNK = 64 << 20 };

// A piece of a table in a placement: owner (-1: a replica on every rank), rows, columns, and its
// index among its owner's pieces of the table (ember_sebc_piece_read's i).
typedef struct gpiece {
    int32_t owner;
    int64_t r0, r1;
    int32_t c0, c1;
    int32_t local;
} gpiece;

// The pieces of table t in s, in shard order; their count. out holds at least max(nshards, 1);
// seen: [W] scratch (each owner's pieces so far).
static int32_t global_pieces(const ember_sebc *s, int32_t t, gpiece *out, int32_t *seen) {
    const ember__table_shards *ts = &s->ts[t];
    if (ts->ops->build_home) {
        out[0] = (gpiece){-1, 0, ts->rows, 0, s->tables[t].dim, 0};
        return 1;
    }
    memset(seen, 0, sizeof(int32_t) * (size_t)s->W);
    for (int32_t k = 0; k < ts->nshards; k++) {
        const ember__shard *sh = &ts->shards[k];
        out[k] = (gpiece){sh->owner, sh->r0, sh->r1, sh->c0, sh->c1, seen[sh->owner]++};
    }
    return ts->nshards;
}

// One transfer: rows [r0, r1) and columns [c0, c1) of the tensor, from source piece a on rank
// `from` to destination piece b on rank `to`.
typedef struct pair {
    const gpiece *a, *b;
    int32_t from, to;
    int64_t r0, r1;
    int32_t c0, c1;
} pair;

// The pair of source a and destination b for the destination's copy on rank `to` within rows
// [w0, w1), or 0 when they share nothing there. sliced: a [rows, dim] tensor (columns
// intersect); otherwise a per-row tensor (whole rows, from the canonical source only).
static int make_pair(const gpiece *a, const gpiece *b, int32_t to, int64_t w0, int64_t w1, int sliced, int32_t cols,
                     pair *p) {
    if (!sliced && a->c0 != 0) return 0;
    const int64_t r0 = a->r0 > b->r0 ? a->r0 : b->r0, r1 = a->r1 < b->r1 ? a->r1 : b->r1;
    p->r0 = r0 > w0 ? r0 : w0;
    p->r1 = r1 < w1 ? r1 : w1;
    p->c0 = sliced ? (a->c0 > b->c0 ? a->c0 : b->c0) : 0;
    p->c1 = sliced ? (a->c1 < b->c1 ? a->c1 : b->c1) : cols;
    p->a = a, p->b = b, p->to = to;
    p->from = a->owner < 0 ? to : a->owner;
    return p->r0 < p->r1 && p->c0 < p->c1;
}

typedef struct mover {
    ember_sebc *src, *dst;
    int32_t t, W, me;
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    int sliced[EMBER_MAX_TENSORS]; // ember_tensor_is_sliced of each
    int32_t nti;
    const gpiece *pa, *pb; // source and destination pieces
    int32_t na, nb;
    int64_t *cnt;          // [2W] bytes sent to, received from each rank this round
    int32_t *seen;         // [W] scratch of global_pieces
    ember__buf snd, rcv, tmp, tmp2, own;
    uint64_t sent, received;
} mover;

// Calls fn on every pair of rows [w0, w1) in the order every rank walks them; stops at a failure.
typedef ember_status (*pair_fn)(mover *m, int32_t k, const pair *p, void *arg);
static ember_status walk(mover *m, int64_t w0, int64_t w1, pair_fn fn, void *arg) {
    for (int32_t k = 0; k < m->nti; k++) {
        for (int32_t j = 0; j < m->nb; j++) {
            const gpiece *b = &m->pb[j];
            for (int32_t to = b->owner < 0 ? 0 : b->owner; to < (b->owner < 0 ? m->W : b->owner + 1); to++)
                for (int32_t i = 0; i < m->na; i++) {
                    pair p;
                    if (make_pair(&m->pa[i], b, to, w0, w1, m->sliced[k], m->ti[k].cols, &p)) EMBER_TRY(fn(m, k, &p, arg));
                }
        }
    }
    return EMBER_OK;
}

static size_t pair_bytes(const mover *m, int32_t k, const pair *p) {
    return (size_t)(p->r1 - p->r0) * (size_t)(p->c1 - p->c0) * ember_dtype_size(m->ti[k].dtype);
}

// What crosses ranks (a rank's own pairs are copied directly: copy_own).
static ember_status count_pair(mover *m, int32_t k, const pair *p, void *arg) {
    (void)arg;
    if (p->from == p->to) return EMBER_OK;
    if (p->from == m->me) m->cnt[p->to] += (int64_t)pair_bytes(m, k, p);
    if (p->to == m->me) m->cnt[m->W + p->from] += (int64_t)pair_bytes(m, k, p);
    return EMBER_OK;
}

// The columns a piece holds of tensor k: its slice, or the whole row of a per-row tensor.
static int32_t piece_width(const mover *m, int32_t k, const gpiece *g) { return m->sliced[k] ? g->c1 - g->c0 : m->ti[k].cols; }
static int32_t piece_first_col(const mover *m, int32_t k, const gpiece *g) { return m->sliced[k] ? g->c0 : 0; }

// The pair's rows and columns of its source piece into dst (rows of its columns): read there
// directly when they are the piece's whole rows, else through m->tmp.
static ember_status read_pair(mover *m, int32_t k, const pair *p, unsigned char *dst) {
    const size_t es = ember_dtype_size(m->ti[k].dtype);
    const int32_t aw = piece_width(m, k, p->a), ac = piece_first_col(m, k, p->a);
    const size_t row = (size_t)aw * es, part = (size_t)(p->c1 - p->c0) * es;
    const int32_t i = p->a->owner < 0 ? 0 : p->a->local;
    if (part == row) return ember_sebc_piece_read(m->src, m->t, i, m->ti[k].name, p->r0, p->r1, m->ti[k].dtype, dst);
    unsigned char *tmp = ember__buf_reserve(m->src->ctx, &m->tmp, row * (size_t)(p->r1 - p->r0));
    if (!tmp) return EMBER_ERR_NOMEM;
    EMBER_TRY(ember_sebc_piece_read(m->src, m->t, i, m->ti[k].name, p->r0, p->r1, m->ti[k].dtype, tmp));
    for (int64_t r = 0; r < p->r1 - p->r0; r++)
        memcpy(dst + (size_t)r * part, tmp + (size_t)r * row + (size_t)(p->c0 - ac) * es, part);
    return EMBER_OK;
}

// Packs the pairs this rank sends, each rank's in walk order; at[q] is the next byte of q's block.
static ember_status pack_pair(mover *m, int32_t k, const pair *p, void *arg) {
    if (p->from != m->me || p->to == m->me) return EMBER_OK;
    int64_t *at = arg;
    EMBER_TRY(read_pair(m, k, p, (unsigned char *)m->snd.p + at[p->to]));
    at[p->to] += (int64_t)pair_bytes(m, k, p);
    return EMBER_OK;
}

// The pair's rows (rows of its columns, at src) into its destination piece: whole rows at once, a
// part of their columns patched into the rows read back (through m->tmp2).
static ember_status write_pair(mover *m, int32_t k, const pair *p, const unsigned char *src) {
    const size_t es = ember_dtype_size(m->ti[k].dtype);
    const int32_t bw = piece_width(m, k, p->b), bc = piece_first_col(m, k, p->b);
    const size_t row = (size_t)bw * es, part = (size_t)(p->c1 - p->c0) * es;
    const int32_t i = p->b->owner < 0 ? 0 : p->b->local;
    if (part == row)
        return ember_sebc_piece_write(m->dst, m->t, i, m->ti[k].name, p->r0, p->r1, m->ti[k].dtype, src);
    unsigned char *tmp = ember__buf_reserve(m->src->ctx, &m->tmp2, row * (size_t)(p->r1 - p->r0));
    if (!tmp) return EMBER_ERR_NOMEM;
    EMBER_TRY(ember_sebc_piece_read(m->dst, m->t, i, m->ti[k].name, p->r0, p->r1, m->ti[k].dtype, tmp));
    for (int64_t r = 0; r < p->r1 - p->r0; r++)
        memcpy(tmp + (size_t)r * row + (size_t)(p->c0 - bc) * es, src + (size_t)r * part, part);
    return ember_sebc_piece_write(m->dst, m->t, i, m->ti[k].name, p->r0, p->r1, m->ti[k].dtype, tmp);
}

// Writes the pairs this rank receives from others, each source's block in walk order.
static ember_status unpack_pair(mover *m, int32_t k, const pair *p, void *arg) {
    if (p->to != m->me || p->from == m->me) return EMBER_OK;
    int64_t *at = arg;
    const unsigned char *src = (const unsigned char *)m->rcv.p + at[m->W + p->from];
    at[m->W + p->from] += (int64_t)pair_bytes(m, k, p);
    return write_pair(m, k, p, src);
}

// This rank's own pairs: from its source piece to its destination piece through m->own (no
// message).
static ember_status copy_own(mover *m, int32_t k, const pair *p, void *arg) {
    (void)arg;
    if (p->from != m->me || p->to != m->me) return EMBER_OK;
    unsigned char *buf = ember__buf_reserve(m->src->ctx, &m->own, pair_bytes(m, k, p));
    if (!buf) return EMBER_ERR_NOMEM;
    EMBER_TRY(read_pair(m, k, p, buf));
    return write_pair(m, k, p, buf);
}

// Moves table t from src to dst in rounds of at most `chunk` bytes sent by any rank (about).
static ember_status move_table(mover *m, int32_t t, size_t chunk, gpiece *pa, gpiece *pb) {
    ember_comm *c = m->src->comm;
    m->t = t;
    m->pa = pa, m->pb = pb;
    m->na = global_pieces(m->src, t, pa, m->seen);
    m->nb = global_pieces(m->dst, t, pb, m->seen);
    const ember_tensor_info *ti = m->ti;
    m->nti = ember_table_tensors(&m->src->tables[t], m->ti);
    for (int32_t k = 0; k < m->nti; k++) m->sliced[k] = ember_tensor_is_sliced(&m->src->tables[t], &ti[k]);
    // Rows a round: every tensor's whole row to every rank bounds a row's bytes; whole buckets
    // of a hashed table (both placements cut at them).
    size_t row_bytes = 0;
    for (int32_t k = 0; k < m->nti; k++) row_bytes += (size_t)ti[k].cols * ember_dtype_size(ti[k].dtype);
    const int64_t unit = m->src->ts[t].unit > 0 ? m->src->ts[t].unit : 1, rows = m->src->ts[t].rows;
    int64_t per = (int64_t)(chunk / (row_bytes * (size_t)m->W));
    per = per < unit ? unit : per / unit * unit;
    for (int64_t w0 = 0; w0 < rows; w0 += per) {
        const int64_t w1 = w0 + per < rows ? w0 + per : rows;
        memset(m->cnt, 0, sizeof(int64_t) * 2 * (size_t)m->W);
        (void)walk(m, w0, w1, count_pair, NULL);
        int64_t ns = 0, nr = 0;
        for (int32_t q = 0; q < m->W; q++) ns += m->cnt[q], nr += m->cnt[m->W + q];
        ember_status st = EMBER_OK;
        if (!ember__buf_reserve(m->src->ctx, &m->snd, (size_t)(ns > 0 ? ns : 1)) ||
            !ember__buf_reserve(m->src->ctx, &m->rcv, (size_t)(nr > 0 ? nr : 1)))
            st = EMBER_ERR_NOMEM;
        int64_t *pos = ember__calloc(m->src->ctx, sizeof(int64_t) * 2 * (size_t)m->W);
        if (!pos) st = EMBER_ERR_NOMEM;
        if (st == EMBER_OK) {
            int64_t off = 0;
            for (int32_t q = 0; q < m->W; q++) pos[q] = off, off += m->cnt[q];
            st = walk(m, w0, w1, pack_pair, pos);
        }
        st = ember_comm_agree(c, st);
        if (st == EMBER_OK) st = ember__comm_alltoallv(c, m->snd.p, m->cnt, m->rcv.p, m->cnt + m->W, 1);
        if (st == EMBER_OK) {
            int64_t off = 0;
            for (int32_t q = 0; q < m->W; q++) pos[m->W + q] = off, off += m->cnt[m->W + q];
            st = walk(m, w0, w1, unpack_pair, pos);
            if (st == EMBER_OK) st = walk(m, w0, w1, copy_own, NULL);
            st = ember_comm_agree(c, st);
        }
        ember__free(m->src->ctx, pos);
        if (st != EMBER_OK) return st;
        for (int32_t q = 0; q < m->W; q++)
            if (q != m->me) m->sent += (uint64_t)m->cnt[q], m->received += (uint64_t)m->cnt[m->W + q];
    }
    return EMBER_OK;
}

ember_status ember_sebc_reshard(ember_sebc *s, const ember_table_plan *plan, size_t chunk_bytes,
                                ember_reshard_stats *stats) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    static const char fn[] = "ember_sebc_reshard";
    ember_ctx *ctx = s->ctx;
    ember_comm *c = s->comm;
    if (s->replica) // the groups would each move their replica, and must all succeed or none
        return ember_comm_agree(s->world, ember__error(ctx, EMBER_ERR_UNSUPPORTED,
                                                       "%s: not on a collection of %d sharding groups (save a "
                                                       "checkpoint and load it into a collection of the new plan)",
                                                       fn, (int)s->nrep));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ember_status st = EMBER_OK;
    if (s->ov->bwd_started)
        st = ember__error(ctx, EMBER_ERR_STATE, "%s: a backward was started and not finished", fn);
    else if (!plan)
        st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: plan is NULL", fn);
    EMBER_TRY(ember_comm_agree(c, st));
    EMBER_TRY(ember__prefetch_drain(s)); // a pending prefetch belongs to the old routing
    // The new collection: this one's configuration as it stands (dtypes, learning rates), the
    // new plan (checked, agreed on and built by create, which refuses what it would refuse).
    ember_feature_config *feats = ember__calloc(ctx, sizeof *feats * (size_t)s->F);
    if (!feats) st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: out of memory", fn);
    for (int32_t f = 0; feats && f < s->F; f++) feats[f] = (ember_feature_config){s->feature_names[f], s->feature_table[f]};
    EMBER_TRY(ember_comm_agree(c, st));
    const ember_ebc_config cfg = {.tables = s->tables, .num_tables = s->T, .features = feats, .num_features = s->F,
                                  .bounds = s->bounds, .seed = s->seed, .max_batch_size = s->max_batch_size,
                                  .max_nnz = s->max_nnz, .ssd_dir = s->ssd_dir, .backend = s->backend};
    ember_sebc *n = NULL;
    st = ember_sebc_create(c, &cfg, plan, s->conv, &n);
    ember__free(ctx, feats);
    if (st != EMBER_OK) return st;
    // Every table's tensors, then its step counter (the optimizers' bias corrections and
    // stochastic rounding read it).
    int32_t most = 1;
    for (int32_t t = 0; t < s->T; t++) {
        most = s->ts[t].nshards > most ? s->ts[t].nshards : most;
        most = n->ts[t].nshards > most ? n->ts[t].nshards : most;
    }
    mover m = {.src = s, .dst = n, .W = s->W, .me = s->rank};
    gpiece *pa = ember__calloc(ctx, sizeof(gpiece) * (size_t)most), *pb = ember__calloc(ctx, sizeof(gpiece) * (size_t)most);
    m.cnt = ember__calloc(ctx, sizeof(int64_t) * 2 * (size_t)s->W);
    m.seen = ember__calloc(ctx, sizeof(int32_t) * (size_t)s->W);
    st = pa && pb && m.cnt && m.seen ? EMBER_OK : ember__error(ctx, EMBER_ERR_NOMEM, "%s: out of memory", fn);
    st = ember_comm_agree(c, st);
    for (int32_t t = 0; st == EMBER_OK && t < s->T; t++) {
        st = move_table(&m, t, chunk_bytes ? chunk_bytes : DEFAULT_CHUNK, pa, pb);
        int64_t step = 0;
        if (st == EMBER_OK) st = ember_sebc_step(s, t, &step);
        if (st == EMBER_OK) st = ember_comm_agree(c, ember_sebc_set_step(n, t, step));
    }
    ember__free(ctx, pa);
    ember__free(ctx, pb);
    ember__free(ctx, m.cnt);
    ember__free(ctx, m.seen);
    ember__buf_free(ctx, &m.snd);
    ember__buf_free(ctx, &m.rcv);
    ember__buf_free(ctx, &m.tmp);
    ember__buf_free(ctx, &m.tmp2);
    ember__buf_free(ctx, &m.own);
    if (st != EMBER_OK) {
        ember_sebc_destroy(n); // this collection is as it was
        return st;
    }
    // The collection's own settings. The rows written are all marked changed (a superset of what
    // changed since the mark, which an incremental checkpoint may save again); the mark's tag stays.
    ember_sebc_set_training(n, s->training);
    n->wire_fwd = s->wire_fwd, n->wire_bwd = s->wire_bwd;
    n->wire_scale_fwd = s->wire_scale_fwd, n->wire_scale_bwd = s->wire_scale_bwd;
    n->legacy_bucketize = s->legacy_bucketize;
    n->mark_tag = s->mark_tag;
    n->bytes_last_step = 0;
    // The caller's handle takes the new contents; the old ones go.
    ember_sebc old = *s;
    *s = *n;
    *n = old;
    ember_sebc_destroy(n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (stats) {
        stats->bytes_sent = m.sent;
        stats->bytes_received = m.received;
        stats->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    return EMBER_OK;
}
