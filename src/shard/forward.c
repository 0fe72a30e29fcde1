// Forward of the sharded collection: validation at home, input dist, the owners' pooling,
// output dist and the assembly of each rank's output. Every call validates locally, agrees on
// the status across ranks, and only then communicates; allocations whose size depends on other
// ranks are agreed on again before the data moves, so one rank's failure never leaves the
// others waiting.
#include <string.h>

#include "shard/overlap.h"

// Owner side: the local KJT over every source's bags, with offsets (the unchecked pooling and
// update take them as they are). Local feature k (route k) has Btot = sum_s B_s bags, source
// s's at [boff_s, boff_s + B_s).
ember_status ember__build_local(ember_sebc *s, ember__buf *obuf, ember__buf *vbuf, ember__buf *wbuf, int64_t *cur,
                                ember_kjt *out) {
    const int32_t W = s->W, nr = s->nroutes[s->rank];
    int64_t Btot = 0, nnz = 0;
    for (int32_t q = 0; q < W; q++) {
        Btot += s->in->Bs[q];
        nnz += s->in->recv_ids[q];
    }
    const int weighted = s->in->weighted && wbuf;
    int64_t *off = ember__buf_reserve(s->ctx, obuf, sizeof(int64_t) * (size_t)(nr * Btot + 1));
    int64_t *val = ember__buf_reserve(s->ctx, vbuf, sizeof(int64_t) * (size_t)(nnz > 0 ? nnz : 1));
    float *w = weighted ? ember__buf_reserve(s->ctx, wbuf, sizeof(float) * (size_t)(nnz > 0 ? nnz : 1)) : NULL;
    if (!off || !val || (weighted && !w)) return EMBER_ERR_NOMEM;
    const int32_t *rlen = s->in->rcv_len.p;
    const int64_t *rval = s->in->rcv_val.p;
    const float *rw = s->in->rcv_w.p;
    // Ids arrive grouped by source, then route; the local KJT wants route, then source. Source
    // q's next lengths and ids are at lcur[q] and vcur[q] (its routes come in order).
    int64_t *lcur = cur, *vcur = cur + W;
    int64_t l = 0, v = 0;
    for (int32_t q = 0; q < W; q++) {
        lcur[q] = l;
        vcur[q] = v;
        l += nr * s->in->Bs[q];
        v += s->in->recv_ids[q];
    }
    int64_t n = 0, i = 0;
    off[0] = 0;
    for (int32_t k = 0; k < nr; k++) {
        for (int32_t q = 0; q < W; q++) {
            const int64_t v0 = vcur[q];
            for (int64_t b = 0; b < s->in->Bs[q]; b++) {
                vcur[q] += rlen[lcur[q]++];
                off[++i] = n + vcur[q] - v0;
            }
            const int64_t m = vcur[q] - v0;
            memcpy(val + n, rval + v0, sizeof(int64_t) * (size_t)m);
            if (weighted) memcpy(w + n, rw + v0, sizeof(float) * (size_t)m);
            n += m;
        }
    }
    *out = (ember_kjt){.num_features = nr, .batch_size = (int32_t)Btot, .offsets = off, .values = val,
                       .weights = weighted ? w : NULL, .nnz = nnz};
    return EMBER_OK;
}

// Sequence outputs: the owner's rows are in local value order (route, source); each source
// wants its own rows in the order it sent them (source, route). dir = 0 packs local -> per
// source, dir = 1 unpacks per source -> local.
void ember__permute_rows(ember_sebc *s, float *local, float *by_source, int dir) {
    const int32_t D = s->out_dim, nr = s->nroutes[s->rank], W = s->W;
    const int64_t *off = s->local_kjt.offsets;
    // Rows of (route k, source q) in local order start at off[bag]; in per-source order at so[q].
    int64_t *so = s->cnt + 2 * W; // not in use by the caller's exchange at this point
    int64_t acc = 0, bag = 0;
    for (int32_t q = 0; q < W; q++) { so[q] = acc; acc += s->in->recv_ids[q]; }
    for (int32_t k = 0; k < nr; k++) {
        for (int32_t q = 0; q < W; q++) {
            const int64_t lo = off[bag], n = off[bag + s->in->Bs[q]] - lo;
            float *a = local + lo * D, *c = by_source + so[q] * D;
            if (dir == 0) memcpy(c, a, sizeof(float) * (size_t)(n * D));
            else memcpy(a, c, sizeof(float) * (size_t)(n * D));
            so[q] += n;
            bag += s->in->Bs[q];
        }
    }
}

// The input of a batch no prefetch took: sanitised and bucketized at home, then (collective)
// the agreed status, every rank's batch size and weights, and the id counts of the input dist.
static ember_status route_input(ember_sebc *s, const ember_kjt *kjt, ember_status st) {
    ember_comm *c = s->comm;
    if (st == EMBER_OK) st = ember__sanitise(s, kjt);
    if (st == EMBER_OK) st = ember__bucketize(s, kjt->batch_size);
    if (st == EMBER_OK) {
        s->fwd_digest = ember__input_digest(s, kjt);
        s->fwd_nnz = kjt->nnz;
    }
    EMBER_TRY(ember_comm_agree(c, st));
    // Batch sizes and whether any rank carries weights (then every rank sends weights).
    int64_t *Bw = s->cnt;
    EMBER_TRY(ember_comm_allgather_i64(c, (int64_t)kjt->batch_size * 2 + (kjt->weights != NULL), Bw));
    s->in->weighted = 0;
    for (int32_t q = 0; q < s->W; q++) {
        s->in->Bs[q] = Bw[q] / 2;
        s->in->weighted |= (int32_t)(Bw[q] & 1);
    }
    s->in->batch = kjt->batch_size;
    return ember_comm_alltoall_i64(c, s->in->send_ids, s->in->recv_ids);
}

// kjt (never VBE) validated; buf NULL only when nothing is written (size: the caller's output's).
static ember_status check_inputs(ember_sebc *s, const char *fn, const ember_kjt *kjt, const void *buf,
                                 const char *bufname, int64_t size) {
    int64_t oor = 0;
    EMBER_TRY(ember__kjt_validate(s->ctx, fn, kjt, s->F, s->feature_rows, (const char *const *)s->feature_names,
                                  s->bounds, &oor));
    EMBER_CHECK(s->ctx, buf != NULL || size == 0, EMBER_ERR_INVALID_ARG, "%s: %s is NULL", fn, bufname);
    if (oor > 0 && s->bounds == EMBER_BOUNDS_CLAMP)
        ember__log(s->ctx, EMBER_LOG_WARN, "%s: %lld ids outside their tables were clamped", fn, (long long)oor);
    return EMBER_OK;
}

ember_status ember__sebc_vbe_input(ember_sebc *s, const char *fn, const ember_kjt *kjt, const void *out,
                                   ember_kjt *padded) {
    EMBER_CHECK(s->ctx, !s->sequence, EMBER_ERR_UNSUPPORTED,
                "%s: a KJT with per-feature batch sizes (VBE) for a sequence collection, whose outputs are per id", fn);
    EMBER_TRY(ember__vbe_pad(s->ctx, fn, kjt, s->F, (const char *const *)s->feature_names, &s->vbe_len, padded));
    return check_inputs(s, fn, padded, out, "out", ember_sebc_output_size(s, kjt));
}

// This rank's output from the owners' pooled rows (rcv_out): sequence rows placed at their
// positions; pooled bags' pieces placed (whole bags) or added (row-block partial sums), then
// row-wise MEAN divided once by the global bag length.
static void assemble_output(ember_sebc *s, float *out) {
    const int32_t W = s->W, B = s->in->batch;
    const float *rout = s->rcv_out.p;
    if (s->sequence) {
        const int64_t *spos = s->in->snd_pos.p;
        const int32_t D = s->out_dim;
        int64_t n = 0;
        for (int32_t q = 0; q < W; q++)
            for (int64_t i = 0; i < s->in->send_ids[q]; i++, n++)
                memcpy(out + spos[n] * D, rout + n * D, sizeof(float) * (size_t)D);
    } else {
        // Samples are independent here and below: each loop over b runs on the rank's threads.
        // Owners' blocks, in rank order: placed (whole bags) or added (row-block partial sums).
        int64_t base = 0;
        for (int32_t q = 0; q < W; q++) {
            const int32_t qd = s->local_out_dim[q];
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
            for (int32_t b = 0; b < B; b++) {
                const float *src = rout + base + (int64_t)b * qd;
                for (int32_t k = 0; k < s->nroutes[q]; k++) {
                    const ember__route *r = &s->routes[q][k];
                    const int32_t wdt = r->shard->c1 - r->shard->c0;
                    float *dst = out + (size_t)b * s->out_dim + s->feature_col[r->feature] + r->shard->c0;
                    if (r->partial)
                        for (int32_t d = 0; d < wdt; d++) dst[d] += src[r->local_col + d];
                    else
                        memcpy(dst, src + r->local_col, sizeof(float) * (size_t)wdt);
                }
            }
            base += (int64_t)B * qd;
        }
        // Row-wise MEAN: divide the summed partials once by the global bag length.
        const int64_t *off = s->in->san_off.p;
        for (int32_t f = 0; f < s->F; f++) {
            const int32_t t = s->feature_table[f];
            if (!s->ts[t].ops->partial || s->tables[t].pooling != EMBER_POOL_MEAN) continue;
            const int32_t D = s->tables[t].dim;
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
            for (int32_t b = 0; b < B; b++) {
                const int64_t n = off[(int64_t)f * B + b + 1] - off[(int64_t)f * B + b];
                if (n == 0) continue;
                const float inv = 1.0f / (float)n;
                float *dst = out + (size_t)b * s->out_dim + s->feature_col[f];
                for (int32_t d = 0; d < D; d++) dst[d] *= inv;
            }
        }
    }
}

// The forward of kjt (never VBE) whose checks gave st (collective from here).
static ember_status forward_checked(ember_sebc *s, const ember_kjt *kjt, float *out, ember_status st) {
    ember_comm *c = s->comm;
    const int32_t W = s->W, me = s->rank;
    // A prefetch of this batch (every rank's KJT the one it prefetched) did everything up to
    // and including the input dist (overlap.c).
    int taken = 0;
    if (s->ov->pending) EMBER_TRY(ember__prefetch_take(s, kjt, st, &taken));
    const int32_t B = kjt->batch_size;
    if (!taken) EMBER_TRY(route_input(s, kjt, st));
    // Receive buffers and outputs, sized from the peers' counts; agreed before data moves.
    const int32_t nr = s->nroutes[me], lod = s->local_out_dim[me];
    int64_t Btot = 0, nrecv = 0, nout = 0;
    for (int32_t q = 0; q < W; q++) {
        Btot += s->in->Bs[q];
        nrecv += s->in->recv_ids[q];
        nout += s->sequence ? s->in->send_ids[q] * s->out_dim : (int64_t)B * s->local_out_dim[q];
    }
    st = EMBER_OK;
    if (!EMBER__RESERVE(s, s->in->rcv_len, int32_t, (int64_t)nr * Btot) ||
        !EMBER__RESERVE(s, s->in->rcv_val, int64_t, nrecv) || !EMBER__RESERVE(s, s->in->rcv_w, float, nrecv) ||
        !EMBER__RESERVE(s, s->rcv_out, float, nout) ||
        !EMBER__RESERVE(s, s->loc_out, float, s->sequence ? nrecv * s->out_dim : Btot * lod) ||
        !EMBER__RESERVE(s, s->snd_out, float, s->sequence ? nrecv * s->out_dim : Btot * lod))
        st = EMBER_ERR_NOMEM;
    // The owner's local KJT too (ember__build_local then allocates nothing): nothing below may fail for
    // memory once `out` is written.
    if (st == EMBER_OK && s->local && nr > 0 &&
        (!EMBER__RESERVE(s, s->loc_off, int64_t, (int64_t)nr * Btot + 1) ||
         !EMBER__RESERVE(s, s->loc_val, int64_t, nrecv) || !EMBER__RESERVE(s, s->loc_w, float, nrecv)))
        st = EMBER_ERR_NOMEM;
    EMBER_TRY(ember_comm_agree(c, st));

    // The output starts at zero (schemes that pool at home write into it before the output
    // dist), on the rank's threads too: B x out_dim floats, megabytes a step.
    const int64_t nzero = ember_sebc_output_size(s, kjt);
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
    for (int64_t i = 0; i < nzero; i += 4096)
        memset(out + i, 0, sizeof(float) * (size_t)(nzero - i < 4096 ? nzero - i : 4096));

    // Input dist: lengths, ids, weights.
    int64_t *sc = s->cnt, *rc = s->cnt + W;
    for (int32_t q = 0; q < W; q++) {
        sc[q] = (int64_t)s->nroutes[q] * B;
        rc[q] = (int64_t)nr * s->in->Bs[q];
    }
    if (!taken) st = ember__comm_alltoallv(c, s->in->snd_len.p, sc, s->in->rcv_len.p, rc, sizeof(int32_t));
    if (st == EMBER_OK && !taken)
        st = ember__comm_alltoallv(c, s->in->snd_val.p, s->in->send_ids, s->in->rcv_val.p, s->in->recv_ids,
                                  sizeof(int64_t));
    if (st == EMBER_OK && !taken && s->in->weighted)
        st = ember__comm_alltoallv(c, s->in->snd_w.p, s->in->send_ids, s->in->rcv_w.p, s->in->recv_ids, sizeof(float));
    if (st == EMBER_OK && s->local && nr > 0) {
        // Its buffers were reserved above: this allocates nothing. s->cnt's second half is free
        // until the output dist.
        st = ember__build_local(s, &s->loc_off, &s->loc_val, &s->loc_w, s->cnt + 2 * W, &s->local_kjt);
        if (st == EMBER_OK) st = ember__ebc_forward_unchecked(s->local, &s->local_kjt, s->loc_out.p);
    }
    // The schemes kept at home pool theirs (one that communicates agrees on st first).
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (s->home[k]) st = ember__schemes[k]->home_forward(s, s->home[k], out, st);
    // Local failures here (workspace, a tiered table's file): agree before the output dist.
    st = ember_comm_agree(c, st);
    if (st != EMBER_OK) return st;

    // Output dist: owner -> home. Pooled rows of source q are contiguous in the local output.
    const float *send = s->loc_out.p;
    for (int32_t q = 0; q < W; q++) {
        if (s->sequence) {
            sc[q] = s->in->recv_ids[q] * s->out_dim;
            rc[q] = s->in->send_ids[q] * s->out_dim;
        } else {
            sc[q] = s->in->Bs[q] * lod;
            rc[q] = (int64_t)B * s->local_out_dim[q];
        }
    }
    if (s->sequence && nr > 0) {
        ember__permute_rows(s, s->loc_out.p, s->snd_out.p, 0);
        send = s->snd_out.p;
    }
    EMBER_TRY(ember__wire_exchange(s, EMBER__WIRE_FWD, send, sc, s->rcv_out.p, rc));

    assemble_output(s, out);
    s->has_forward = 1;
    return EMBER_OK;
}

static ember_status forward(ember_sebc *s, const ember_kjt *kjt, float *out);

ember_status ember_sebc_forward(ember_sebc *s, const ember_kjt *kjt, float *out) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    s->bytes_at_forward = ember__sebc_bytes(s);
    const ember_status st = ember__world_agree(s, forward(s, kjt, out));
    if (st != EMBER_OK) { // 2D: another group's failure is this one's (a forward changes no table)
        s->has_forward = 0;
        s->vbe_fwd = 0;
    }
    return st;
}

static ember_status forward(ember_sebc *s, const ember_kjt *kjt, float *out) {
    const char *fn = "ember_sebc_forward";
    EMBER_CHECK(s->ctx, !s->ov->bwd_started, EMBER_ERR_STATE, "%s: a backward was started and not finished", fn);
    s->has_forward = 0;
    s->vbe_fwd = 0;
    if (!ember__kjt_is_vbe(kjt))
        return forward_checked(s, kjt, out, check_inputs(s, fn, kjt, out, "out", ember_sebc_output_size(s, kjt)));
    // VBE: the padded KJT's forward (an empty batch stands in when the checks failed: the
    // agreement fails every rank), then each sample's rows placed from its bags' (kjt/vbe.c).
    // The padded rows go to out itself when they fit (then only the deduplicated features'
    // columns move), else to the workspace.
    ember_kjt padded = {.num_features = s->F};
    ember_status st = ember__sebc_vbe_input(s, fn, kjt, out, &padded);
    float *ws = NULL, *pad = NULL;
    if (st == EMBER_OK) {
        const int in_place = ember__vbe_in_place(kjt, padded.batch_size);
        ws = EMBER__RESERVE(s, s->vbe_io, float,
                            in_place ? ember__vbe_scratch(kjt, s->feature_col, s->out_dim)
                                     : (int64_t)padded.batch_size * s->out_dim);
        pad = in_place ? out : ws;
        if (!ws || !EMBER__RESERVE(s, s->vbe_fbs, int32_t, s->F)) st = EMBER_ERR_NOMEM;
    }
    if (st != EMBER_OK) padded = (ember_kjt){.num_features = s->F};
    s->vbe_user = st == EMBER_OK ? kjt : NULL;
    st = forward_checked(s, &padded, pad, st);
    s->vbe_user = NULL;
    if (st != EMBER_OK) return st;
    ember__vbe_expand(s->ctx, kjt, s->feature_col, s->out_dim, pad, out, ws);
    memcpy(s->vbe_fbs.p, kjt->feature_batch_sizes, sizeof(int32_t) * (size_t)s->F);
    s->vbe_fwd = kjt->inverse_indices ? 2 : 1;
    return EMBER_OK;
}

