// Backward of the sharded collection: the gradients of the routed pieces travel home -> owner,
// each owner applies its fused update (column slices of row-wise optimizers first exchange
// their per-row sums of squares within each row block), then the schemes that keep tables at
// home sync theirs. Every allocation of the updates, on every rank, is made and agreed on before
// the first table changes: a failed backward changes nothing and can be called again.
#include <string.h>

#include "core/dtype.h"
#include "shard/overlap.h"



// Keys of local table lt in a coalesced gradient: [*lo, *hi).
static void key_range(const ember_ebc *e, const ember__sparse_grad *g, int32_t lt, int64_t *lo, int64_t *hi) {
    const int64_t a = e->tables[lt].key_base, b = a + e->tables[lt].cfg.rows;
    int64_t i = 0;
    while (i < g->n && g->key[i] < a) i++;
    *lo = i;
    while (i < g->n && g->key[i] < b) i++;
    *hi = i;
}

static int is_sliced_rowwise(const ember_sebc *s, int32_t t) {
    return s->ts[t].ops->column_slices && ember__optim(s->tables[t].optim.kind)->rowwise_sumsq;
}

// Row block k of a table is its shards [k * nc, (k + 1) * nc), nc = nshards / nblocks (one block
// for column-wise): [*i0, *i1).
static void block_shards(const ember__table_shards *ts, int32_t k, int32_t *i0, int32_t *i1) {
    const int32_t nc = ts->nshards / ts->nblocks;
    *i0 = k * nc;
    *i1 = (k + 1) * nc;
}

static int block_on(const ember__table_shards *ts, int32_t k, int32_t q) {
    int32_t i0, i1;
    block_shards(ts, k, &i0, &i1);
    for (int32_t i = i0; i < i1; i++)
        if (ts->shards[i].owner == q) return 1;
    return 0;
}

// The owner's fused update, in two steps: prepare allocates and computes everything it needs
// without changing a table (its status is agreed on before apply), apply exchanges and updates
// and allocates nothing.
//
// A row-wise optimizer on a column-sliced table (column-wise, grid) needs the mean of g^2 over
// the whole row, which is split over the column slices of the row's block: every shard of a row
// block sees the same bags' ids of that block, hence the same touched rows in the same order, so
// the shards of each row block exchange their per-row partial sums of squares and add them in
// shard order (the same sum on every shard of the block, so the per-row state stays identical
// across its slices). Column-wise is one row block.
typedef struct routed_update {
    ember__segments seg;   // the plain fused backward (no column-sliced row-wise table, no replicas)
    ember__sparse_grad g;  // otherwise: the coalesced gradient (2D: summed over the replicas),
    float *mine;           // [g.n] its per-row sums of squares,
    float *snd, *rcv;      // and the exchange's buffers (counts in s->cnt[0, 2W))
} routed_update;

// The per-row sums of squares each rank sends to and receives from every other (sc, rc [W]) for
// the coalesced gradient g: shard i of row block k of a column-sliced row-wise table carries u
// values (the block's touched rows), to every other rank holding a shard of the same block. With
// g NULL, u = 1: the counts per touched row (a bound before the rows are known).
static void sumsq_counts(const ember_sebc *s, const ember__sparse_grad *g, int64_t *sc, int64_t *rc, int64_t *nsend,
                         int64_t *nrecv) {
    const int32_t W = s->W, me = s->rank;
    *nsend = *nrecv = 0;
    for (int32_t q = 0; q < W; q++) {
        sc[q] = rc[q] = 0;
        if (q == me) continue;
        for (int32_t t = 0; t < s->T; t++) {
            const ember__table_shards *ts = &s->ts[t];
            if (!is_sliced_rowwise(s, t)) continue;
            for (int32_t k = 0; k < ts->nblocks; k++) {
                if (!block_on(ts, k, me) || !block_on(ts, k, q)) continue;
                int32_t i0, i1;
                block_shards(ts, k, &i0, &i1);
                int64_t lo = 0, hi = 1;
                for (int32_t i = i0; g && i < i1; i++)
                    if (ts->shards[i].owner == me) key_range(s->local, g, ts->shards[i].local_table, &lo, &hi);
                for (int32_t i = i0; i < i1; i++) {
                    if (ts->shards[i].owner == me) sc[q] += hi - lo;
                    if (ts->shards[i].owner == q) rc[q] += hi - lo;
                }
            }
        }
        *nsend += sc[q];
        *nrecv += rc[q];
    }
}

static ember_status routed_prepare(ember_sebc *s, float *grad, routed_update *ru) {
    const int32_t W = s->W, nr = s->nroutes[s->rank];
    memset(ru, 0, sizeof *ru);
    const int mine = s->local && nr > 0;
    if (!s->cw_rowwise && !s->replica)
        return mine ? ember__ebc_backward_prepare(s->local, &s->local_kjt, &ru->seg) : EMBER_OK;
    ember_status st = EMBER_OK;
    if (mine) st = ember__ebc_coalesce(s->local, &s->local_kjt, grad, &ru->g);
    // 2D: the replicas of this rank's pieces (ranks alike in every group: they all have some or
    // none) learn each other's sizes; the merged gradient has at most `rows` rows.
    int64_t rows = ru->g.n;
    if (s->replica && mine) {
        st = ember__replica_prepare(s, &s->rsum, st == EMBER_OK ? ru->g.n : 0, st == EMBER_OK ? ru->g.goff[ru->g.n] : 0,
                                    st);
        rows = s->rsum.tk;
    }
    if (!s->cw_rowwise) return st;
    int64_t *sc = s->cnt, *rc = s->cnt + W, nsend = 0, nrecv = 0;
    // The replicas' sum touches rows of the other groups' batches too: its counts are known only
    // then; each block's touched rows are at most `rows`.
    if (st == EMBER_OK) sumsq_counts(s, s->replica ? NULL : &ru->g, sc, rc, &nsend, &nrecv);
    if (s->replica) {
        nsend *= rows;
        nrecv *= rows;
    }
    if (mine) ru->mine = EMBER__RESERVE(s, s->ss_mine, float, rows);
    // The send buffer later holds one row block's per-row totals too: at most `rows` values.
    ru->snd = EMBER__RESERVE(s, s->ss_send, float, nsend > rows ? nsend : rows);
    ru->rcv = EMBER__RESERVE(s, s->ss_recv, float, nrecv);
    if (st == EMBER_OK && (!ru->snd || !ru->rcv || (mine && !ru->mine))) st = EMBER_ERR_NOMEM;
    // Without replicas the sums are this rank's own (2D: of the merged gradient, in apply).
    if (st == EMBER_OK && mine && !s->replica) st = ember__ebc_row_sumsq(s->local, &ru->g, ru->mine);
    return st;
}

static ember_status routed_apply(ember_sebc *s, const float *grad, routed_update *ru) {
    const int32_t W = s->W, me = s->rank, nr = s->nroutes[me];
    const int mine_pieces = s->local && nr > 0;
    if (!s->cw_rowwise && !s->replica)
        return mine_pieces ? ember__ebc_backward_apply(s->local, &ru->seg, grad, NULL) : EMBER_OK;
    if (s->replica && mine_pieces) EMBER_TRY(ember__replica_merge(s, &s->rsum, s->local, &ru->g, &ru->g));
    if (!s->cw_rowwise)
        return mine_pieces ? ember__ebc_apply(s->local, ru->g.key, ru->g.goff, ru->g.grad, ru->g.n, NULL) : EMBER_OK;
    ember_comm *c = s->comm;
    const ember__sparse_grad *g = &ru->g;
    float *mine = ru->mine, *snd = ru->snd, *rcv = ru->rcv;
    int64_t *sc = s->cnt, *rc = s->cnt + W;
    if (s->replica) { // the counts of the merged gradient (within the prepared bounds)
        int64_t ns, nv;
        sumsq_counts(s, g, sc, rc, &ns, &nv);
    }
    if (s->replica && mine_pieces) EMBER_TRY(ember__ebc_row_sumsq(s->local, g, mine));
    int64_t n = 0;
    for (int32_t q = 0; q < W; q++) {
        if (q == me) continue;
        for (int32_t t = 0; t < s->T; t++) {
            const ember__table_shards *ts = &s->ts[t];
            if (!is_sliced_rowwise(s, t)) continue;
            for (int32_t k = 0; k < ts->nblocks; k++) {
                if (!block_on(ts, k, me) || !block_on(ts, k, q)) continue;
                int32_t i0, i1;
                block_shards(ts, k, &i0, &i1);
                for (int32_t i = i0; i < i1; i++) {
                    if (ts->shards[i].owner != me) continue;
                    int64_t lo, hi;
                    key_range(s->local, g, ts->shards[i].local_table, &lo, &hi);
                    memcpy(snd + n, mine + lo, sizeof(float) * (size_t)(hi - lo));
                    n += hi - lo;
                }
            }
        }
    }
    EMBER_TRY(ember__comm_alltoallv(c, snd, sc, rcv, rc, sizeof(float)));
    if (!(s->local && nr > 0)) return EMBER_OK;
    // Received pieces: from each rank q in order, its shards of each shared row block in order.
    int64_t *qoff = s->cnt + 2 * W; // start of rank q's data in rcv
    for (int32_t q = 0, o = 0; q < W; q++) {
        qoff[q] = o;
        o += (int32_t)rc[q];
    }
    for (int32_t t = 0; t < s->T; t++) {
        const ember__table_shards *ts = &s->ts[t];
        if (!is_sliced_rowwise(s, t)) continue;
        for (int32_t k = 0; k < ts->nblocks; k++) {
            if (!block_on(ts, k, me)) continue;
            int32_t i0, i1;
            block_shards(ts, k, &i0, &i1);
            int64_t lo = 0, hi = 0;
            int32_t first_mine = -1;
            for (int32_t i = i0; i < i1; i++)
                if (ts->shards[i].owner == me && first_mine < 0) first_mine = i;
            key_range(s->local, g, ts->shards[first_mine].local_table, &lo, &hi);
            const int64_t u = hi - lo;
            float *total = snd; // the send buffer is free again: [u] sums in shard order
            for (int64_t j = 0; j < u; j++) total[j] = 0.0f;
            for (int32_t i = i0; i < i1; i++) {
                const ember__shard *sh = &ts->shards[i];
                const float *part;
                if (sh->owner == me) {
                    int64_t l2, h2;
                    key_range(s->local, g, sh->local_table, &l2, &h2);
                    part = mine + l2;
                } else {
                    part = rcv + qoff[sh->owner];
                    qoff[sh->owner] += u;
                }
                for (int64_t j = 0; j < u; j++) total[j] += part[j];
            }
            for (int32_t i = i0; i < i1; i++) {
                if (ts->shards[i].owner != me) continue;
                int64_t l2, h2;
                key_range(s->local, g, ts->shards[i].local_table, &l2, &h2);
                memcpy(mine + l2, total, sizeof(float) * (size_t)u);
            }
        }
    }
    return ember__ebc_apply(s->local, g->key, g->goff, g->grad, g->n, mine); // allocates nothing after coalesce
}

// The home schemes' exchanges a failed backward leaves in flight: waited for (their buffers are
// the schemes'), whatever fails.
static void drain_home(ember_sebc *s) {
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (s->home[k]) ember__schemes[k]->backward_drain(s, s->home[k]);
}

static const char *const FN = "ember_sebc_backward";

// Whether a backward may start now: EMBER_OK or EMBER_ERR_STATE with its message.
static ember_status may_start(ember_sebc *s) {
    if (s->ov->bwd_started)
        return ember__error(s->ctx, EMBER_ERR_STATE, "%s: a backward was started and not finished", FN);
    if (!s->has_forward) return ember__error(s->ctx, EMBER_ERR_STATE, "%s: no forward to go back through", FN);
    return EMBER_OK;
}

// The checks of a backward's KJT (never VBE) and gradient, before anything is agreed on.
static ember_status check_plain(ember_sebc *s, const ember_kjt *kjt, const float *grad_out) {
    const char *fn = FN;
    EMBER_TRY(may_start(s));
    if (!kjt || kjt->batch_size != s->in->batch || kjt->num_features != s->F || kjt->nnz != s->fwd_nnz ||
        (!kjt->lengths && !kjt->offsets) || (kjt->nnz > 0 && !kjt->values) ||
        ember__input_digest(s, kjt) != s->fwd_digest) {
        const int same_shape =
            kjt && kjt->batch_size == s->in->batch && kjt->num_features == s->F && kjt->nnz == s->fwd_nnz;
        if (!kjt) return ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "%s: kjt is NULL", fn);
        if (same_shape)
            return ember__error(s->ctx, EMBER_ERR_INVALID_ARG,
                                "%s: the kjt is not the preceding forward's: its lengths, ids or weights differ", fn);
        return ember__error(s->ctx, EMBER_ERR_INVALID_ARG,
                            "%s: the kjt (batch %d, %d features, nnz %lld) is not the preceding forward's (batch %d, "
                            "%d features, nnz %lld)",
                            fn, (int)kjt->batch_size, (int)kjt->num_features, (long long)kjt->nnz, (int)s->in->batch,
                            (int)s->F, (long long)s->fwd_nnz);
    }
    EMBER_CHECK(s->ctx, grad_out || ember_sebc_output_size(s, kjt) == 0, EMBER_ERR_INVALID_ARG, "%s: grad_out is NULL",
                fn);
    float v = 0;
    const int64_t i = ember__first_nonfinite(EMBER_DTYPE_F32, grad_out, ember_sebc_output_size(s, kjt), &v);
    EMBER_CHECK(s->ctx, i < 0, EMBER_ERR_NUMERIC, "%s: grad_out[%lld][%lld] is %g", fn, (long long)(i / s->out_dim),
                (long long)(i % s->out_dim), (double)v);
    return EMBER_OK;
}

// The backward of the forward's batch (its KJT checked, never VBE) whose checks gave st
// (collective from here).
static ember_status backward_checked(ember_sebc *s, const float *grad_out, ember_status st) {
    ember_comm *c = s->comm;
    const int32_t W = s->W, me = s->rank;
    const int32_t B = s->in->batch, lod = s->local_out_dim[me];
    const float scale = ember__grad_scale(s);
    int64_t nsend = 0;
    for (int32_t q = 0; q < W; q++)
        nsend += s->sequence ? s->in->send_ids[q] * s->out_dim : (int64_t)B * s->local_out_dim[q];
    float *send = EMBER__RESERVE(s, s->rcv_out, float, nsend); // the forward's receive buffer, reused
    if (st == EMBER_OK && !send) st = EMBER_ERR_NOMEM;
    EMBER_TRY(ember_comm_agree(c, st));

    // Gradients of the routed pieces, home -> owner, scaled by the convention (and, for
    // row-block MEAN, by 1/|I| of the global bag).
    const int64_t *off = s->in->san_off.p;
    if (s->sequence) {
        const int64_t *spos = s->in->snd_pos.p;
        const int32_t D = s->out_dim;
        for (int64_t i = 0; i < nsend / (D ? D : 1); i++)
            for (int32_t d = 0; d < D; d++) send[i * D + d] = scale * grad_out[spos[i] * D + d];
    } else {
        // Sample b's pieces for rank q start at b * local_out_dim[q] in q's block (the counts of
        // the exchange below): samples are independent, on the rank's threads.
        int64_t base = 0;
        for (int32_t q = 0; q < W; q++) {
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
            for (int32_t b = 0; b < B; b++) {
                int64_t n = base + (int64_t)b * s->local_out_dim[q];
                for (int32_t k = 0; k < s->nroutes[q]; k++) {
                    const ember__route *r = &s->routes[q][k];
                    const int32_t wdt = r->shard->c1 - r->shard->c0;
                    float sc = scale;
                    if (r->partial && s->tables[r->table].pooling == EMBER_POOL_MEAN) {
                        const int64_t bag = (int64_t)r->feature * B + b, len = off[bag + 1] - off[bag];
                        if (len > 0) sc = scale / (float)len;
                    }
                    const float *src = grad_out + (size_t)b * s->out_dim + s->feature_col[r->feature] + r->shard->c0;
                    for (int32_t d = 0; d < wdt; d++) send[n + d] = sc * src[d];
                    n += wdt;
                }
            }
            base += (int64_t)B * s->local_out_dim[q];
        }
    }
    int64_t *sc = s->cnt, *rc = s->cnt + W;
    for (int32_t q = 0; q < W; q++) {
        if (s->sequence) {
            sc[q] = s->in->send_ids[q] * s->out_dim;
            rc[q] = s->in->recv_ids[q] * s->out_dim;
        } else {
            sc[q] = (int64_t)B * s->local_out_dim[q];
            rc[q] = s->in->Bs[q] * lod;
        }
    }
    float *recv = s->sequence ? s->snd_out.p : s->loc_out.p;
    ember__overlap *ov = s->ov;
    // Encoded in the wire precision now, decoded by the finish.
    EMBER_TRY(ember__wire_start(s, EMBER__WIRE_BWD, send, sc, recv, rc, &ov->grad));
    (void)ember_comm_progress(c);
    // The schemes kept at home prepare now, from grad_out (every allocation of their update, agreed
    // on; data-parallel then starts its gathers), while the routed gradients travel.
    st = EMBER_OK;
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (s->home[k]) st = ember__schemes[k]->backward_prepare(s, s->home[k], grad_out, st);
    if (st != EMBER_OK) {
        (void)ember__comm_wait(c, &ov->grad);
        drain_home(s);
        return st;
    }
    ov->bwd_started = 1;
    ember__prefetch_rows(s); // the next batch's rows of tiered tables, if its ids are here
    return EMBER_OK;
}

// The checks of a VBE backward (the caller's KJT must be the forward's: its batch sizes are
// compared before its digest is taken, which reads as many bags as they say), then its padded
// KJT and the bags' gradients, each summed over its samples (kjt/vbe.c) into s->vbe_io.
static ember_status check_vbe(ember_sebc *s, const ember_kjt *kjt, const float *grad_out, ember_kjt *padded) {
    EMBER_TRY(may_start(s));
    EMBER_CHECK(s->ctx, ember__kjt_is_vbe(kjt) && s->vbe_fwd != 0, EMBER_ERR_INVALID_ARG,
                "%s: the kjt is not the preceding forward's: one has per-feature batch sizes (VBE), the other not", FN);
    EMBER_CHECK(s->ctx,
                kjt->num_features == s->F && (kjt->inverse_indices != NULL) == (s->vbe_fwd == 2) &&
                    !memcmp(kjt->feature_batch_sizes, s->vbe_fbs.p, sizeof(int32_t) * (size_t)s->F),
                EMBER_ERR_INVALID_ARG,
                "%s: the kjt is not the preceding forward's: its features, batch sizes or inverse indices differ", FN);
    EMBER_CHECK(s->ctx, ember__kjt_digest(kjt) == s->fwd_digest, EMBER_ERR_INVALID_ARG,
                "%s: the kjt is not the preceding forward's: its lengths, ids, weights or inverse indices differ", FN);
    EMBER_CHECK(s->ctx, grad_out || ember_sebc_output_size(s, kjt) == 0,
                EMBER_ERR_INVALID_ARG, "%s: grad_out is NULL", FN);
    EMBER_TRY(ember__vbe_check_grad(s->ctx, FN, kjt, s->feature_col, s->out_dim, (const char *const *)s->feature_names,
                                    grad_out));
    EMBER_TRY(ember__vbe_pad(s->ctx, FN, kjt, s->F, NULL, &s->vbe_len, padded));
    float *pad = EMBER__RESERVE(s, s->vbe_io, float, (int64_t)padded->batch_size * s->out_dim);
    if (!pad) return EMBER_ERR_NOMEM;
    ember__vbe_reduce(s->ctx, kjt, padded->batch_size, s->feature_col, s->out_dim, grad_out, pad);
    return EMBER_OK;
}

static ember_status backward_start(ember_sebc *s, const ember_kjt *kjt, const float *grad_out) {
    if (!ember__kjt_is_vbe(kjt) && s->vbe_fwd == 0)
        return backward_checked(s, grad_out, check_plain(s, kjt, grad_out));
    // VBE: the padded KJT's backward (the forward's batch), its gradient summed per bag.
    ember_kjt padded;
    const ember_status st = check_vbe(s, kjt, grad_out, &padded);
    return backward_checked(s, st == EMBER_OK ? s->vbe_io.p : NULL, st);
}

ember_status ember_sebc_backward_start(ember_sebc *s, const ember_kjt *kjt, const float *grad_out) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    const ember_status mine = backward_start(s, kjt, grad_out), st = ember__world_agree(s, mine);
    if (mine == EMBER_OK && st != EMBER_OK) { // 2D: another group failed: undo this one's start
        (void)ember__comm_wait(s->comm, &s->ov->grad);
        drain_home(s);
        s->ov->bwd_started = 0;
    }
    return st;
}

ember_status ember_sebc_backward_finish(ember_sebc *s) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_comm *c = s->comm;
    ember__overlap *ov = s->ov;
    EMBER_CHECK(s->ctx, ov->bwd_started, EMBER_ERR_STATE, "ember_sebc_backward_finish: no backward was started");
    ov->bwd_started = 0;
    const int32_t nr = s->nroutes[s->rank];
    ember_status st = ember__wire_finish(s, s->sequence ? s->snd_out.p : s->loc_out.p, &ov->grad);
    ember__prefetch_rows(s); // before the updates: the rows are read while they run
    if (st != EMBER_OK) {
        drain_home(s);
        return ember__world_agree(s, st); // 2D: the other groups meet it below
    }
    if (s->sequence && s->local && nr > 0) ember__permute_rows(s, s->loc_out.p, s->snd_out.p, 1);
    // Every allocation the updates need, the routed pieces' and (in the start) the schemes' kept
    // at home, made and agreed on before any table changes: a rank out of memory leaves every
    // table, step and the forward's state as they were, on every rank.
    routed_update ru;
    st = ember_comm_agree(c, routed_prepare(s, s->loc_out.p, &ru));
    st = ember__world_agree(s, st); // 2D: every group ready before any replica changes
    if (st != EMBER_OK) {
        drain_home(s);
        return st;
    }
    s->has_forward = 0; // the updates begin: this forward is spent
    st = routed_apply(s, s->loc_out.p, &ru);
    // Communication failures only: agree before the home schemes' collectives.
    st = ember_comm_agree(c, st);
    if (st != EMBER_OK) {
        drain_home(s);
        return st;
    }
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (st == EMBER_OK && s->home[k]) st = ember__schemes[k]->backward_apply(s, s->home[k]);
    drain_home(s); // after a failure only: nothing stays in flight
    st = ember__world_agree(s, ember_comm_agree(c, st));
    s->bytes_last_step = ember__sebc_bytes(s) - s->bytes_at_forward;
    return st;
}

ember_status ember_sebc_backward(ember_sebc *s, const ember_kjt *kjt, const float *grad_out) {
    EMBER_TRY(ember_sebc_backward_start(s, kjt, grad_out));
    return ember_sebc_backward_finish(s);
}

