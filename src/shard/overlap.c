// Overlap of the sharded step's communication with computation: the next batch's input dist
// started early (ember_sebc_prefetch, TorchRec's sparse-dist pipeline) and taken by the forward
// that repeats its KJT. The split backward lives in backward.c (its exchanges are in s->ov).
#include <string.h>

#include "kjt/internal.h"
#include "shard/overlap.h"


// Exchanges the current batch with the spare one.
static void swap_input(ember_sebc *s, ember__overlap *ov) {
    ember__batch *t = s->in;
    s->in = ov->spare;
    ov->spare = t;
}

ember_status ember__overlap_create(ember_sebc *s) {
    ember__overlap *ov = ember__calloc(s->ctx, sizeof *ov);
    if (!ov) return EMBER_ERR_NOMEM;
    s->ov = ov;
    ov->ctl = ember__calloc(s->ctx, sizeof(int64_t) * 6 * (size_t)s->W);
    // The requests' MPI counts now, so that starting an exchange cannot fail for memory.
    ember__req *reqs[] = {&ov->in[0], &ov->in[1], &ov->in[2], &ov->grad};
    int ok = ember__batch_create(s, &ov->spare) == EMBER_OK && ov->ctl;
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        reqs[i]->mpi = MPI_REQUEST_NULL;
        reqs[i]->counts = ember__alloc(s->ctx, sizeof(int) * 4 * (size_t)s->W);
        ok = ok && reqs[i]->counts;
    }
    return ok ? EMBER_OK : EMBER_ERR_NOMEM;
}

void ember__overlap_destroy(ember_sebc *s) {
    ember__overlap *ov = s->ov;
    if (!ov) return;
    ember__req *reqs[] = {&ov->in[0], &ov->in[1], &ov->in[2], &ov->grad};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        (void)ember__comm_wait(s->comm, reqs[i]); // MPI owns the buffers until then
        ember__free(s->ctx, reqs[i]->counts);
    }
    ember__batch_destroy(s, ov->spare);
    ember__buf_free(s->ctx, &ov->pf_off);
    ember__buf_free(s->ctx, &ov->pf_val);
    ember__free(s->ctx, ov->ctl);
    ember__free(s->ctx, ov);
    s->ov = NULL;
}

// Waits for the prefetch's exchanges, all of them whatever fails (none stays in flight).
static ember_status wait_input(ember_sebc *s) {
    ember_status st = EMBER_OK;
    for (int i = 0; i < 3; i++) {
        ember_status w = ember__comm_wait(s->comm, &s->ov->in[i]);
        if (st == EMBER_OK) st = w;
    }
    return st;
}

ember_status ember__prefetch_drain(ember_sebc *s) {
    if (!s->ov->pending) return EMBER_OK;
    s->ov->pending = 0;
    return wait_input(s);
}

// The prefetch of kjt (never VBE) whose checks gave st (collective from here).
static ember_status prefetch_checked(ember_sebc *s, const char *fn, const ember_kjt *kjt, ember_status st) {
    ember__overlap *ov = s->ov;
    ember_comm *c = s->comm;
    // The next batch goes into the spare fields; the current batch's (its backward reads them)
    // are swapped back before returning.
    swap_input(s, ov);
    if (st == EMBER_OK) st = ember__sanitise(s, kjt);
    if (st == EMBER_OK) st = ember__bucketize(s, kjt->batch_size);
    // One exchange instead of the forward's three (agreement, batch sizes, id counts): to every
    // rank q, (this rank failed, 2 B + weighted, ids for q). The failing rank's message is agreed
    // on only when one failed.
    const int32_t W = s->W, nr = s->nroutes[s->rank];
    int64_t *snd3 = ov->ctl, *rcv3 = ov->ctl + 3 * W;
    for (int32_t q = 0; q < W; q++) {
        snd3[3 * q] = st != EMBER_OK;
        snd3[3 * q + 1] = st == EMBER_OK ? (int64_t)kjt->batch_size * 2 + (kjt->weights != NULL) : 0;
        snd3[3 * q + 2] = st == EMBER_OK ? s->in->send_ids[q] : 0;
    }
    ember_status ex = ember__comm_alltoall_i64n(c, snd3, rcv3, 3);
    int failed = 0;
    for (int32_t q = 0; ex == EMBER_OK && q < W; q++) failed |= rcv3[3 * q] != 0;
    st = ex != EMBER_OK ? ex : failed ? ember_comm_agree(c, st) : EMBER_OK;
    if (st == EMBER_OK) {
        s->in->weighted = 0;
        for (int32_t q = 0; q < W; q++) {
            s->in->Bs[q] = rcv3[3 * q + 1] / 2;
            s->in->weighted |= (int32_t)(rcv3[3 * q + 1] & 1);
            s->in->recv_ids[q] = rcv3[3 * q + 2];
        }
        s->in->batch = kjt->batch_size;
    }
    if (st == EMBER_OK) {
        int64_t Btot = 0, nrecv = 0;
        for (int32_t q = 0; q < W; q++) {
            Btot += s->in->Bs[q];
            nrecv += s->in->recv_ids[q];
        }
        const int ok = EMBER__RESERVE(s, s->in->rcv_len, int32_t, (int64_t)nr * Btot) &&
                       EMBER__RESERVE(s, s->in->rcv_val, int64_t, nrecv) &&
                       EMBER__RESERVE(s, s->in->rcv_w, float, nrecv);
        st = ember_comm_agree(c, ok ? EMBER_OK : ember__error(s->ctx, EMBER_ERR_NOMEM, "%s: out of memory", fn));
    }
    if (st == EMBER_OK) {
        // The input dist, as the forward's: lengths, ids, weights.
        int64_t *sc = s->cnt, *rc = s->cnt + W;
        for (int32_t q = 0; q < W; q++) {
            sc[q] = (int64_t)s->nroutes[q] * s->in->batch;
            rc[q] = (int64_t)nr * s->in->Bs[q];
        }
        st = ember__comm_ialltoallv(c, s->in->snd_len.p, sc, s->in->rcv_len.p, rc, sizeof(int32_t), &ov->in[0]);
        if (st == EMBER_OK)
            st = ember__comm_ialltoallv(c, s->in->snd_val.p, s->in->send_ids, s->in->rcv_val.p, s->in->recv_ids,
                                        sizeof(int64_t), &ov->in[1]);
        if (st == EMBER_OK && s->in->weighted)
            st = ember__comm_ialltoallv(c, s->in->snd_w.p, s->in->send_ids, s->in->rcv_w.p, s->in->recv_ids,
                                        sizeof(float), &ov->in[2]);
        if (st != EMBER_OK) (void)wait_input(s);
    }
    swap_input(s, ov);
    if (st != EMBER_OK) return st;
    ov->pending = 1;
    ov->rows_started = 0;
    ov->digest = ember__input_digest(s, kjt);
    ov->nnz = kjt->nnz;
    (void)ember_comm_progress(c); // hand MPI the first chunks before the caller computes
    ember__prefetch_rows(s);
    return EMBER_OK;
}

static ember_status prefetch(ember_sebc *s, const ember_kjt *kjt);

ember_status ember_sebc_prefetch(ember_sebc *s, const ember_kjt *kjt) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    const ember_status mine = prefetch(s, kjt), st = ember__world_agree(s, mine);
    if (mine == EMBER_OK && st != EMBER_OK) (void)ember__prefetch_drain(s); // 2D: another group failed
    return st;
}

static ember_status prefetch(ember_sebc *s, const ember_kjt *kjt) {
    const char *fn = "ember_sebc_prefetch";
    EMBER_TRY(ember__prefetch_drain(s)); // an earlier prefetch whose batch was never forwarded
    if (!ember__kjt_is_vbe(kjt)) {
        int64_t oor = 0;
        return prefetch_checked(s, fn, kjt,
                                ember__kjt_validate(s->ctx, fn, kjt, s->F, s->feature_rows,
                                                    (const char *const *)s->feature_names, s->bounds, &oor));
    }
    // VBE: the padded KJT travels (its lengths are copied into the routed input), known by the
    // caller's digest; an empty batch stands in when the checks failed.
    ember_kjt padded = {.num_features = s->F};
    const float none = 0; // no output: only the KJT is checked
    ember_status st = ember__sebc_vbe_input(s, fn, kjt, &none, &padded);
    if (st != EMBER_OK) padded = (ember_kjt){.num_features = s->F};
    s->vbe_user = st == EMBER_OK ? kjt : NULL;
    st = prefetch_checked(s, fn, &padded, st);
    s->vbe_user = NULL;
    return st;
}

void ember__prefetch_rows(ember_sebc *s) {
    ember__overlap *ov = s->ov;
    if (!ov->pending || ov->rows_started || !s->local || s->nroutes[s->rank] == 0 || !ember__ebc_tiered(s->local))
        return;
    // A request MPI completed (here or in an earlier progress call) is null: its buffer is ready.
    if (ember_comm_progress(s->comm) != EMBER_OK || ov->in[0].mpi != MPI_REQUEST_NULL ||
        ov->in[1].mpi != MPI_REQUEST_NULL)
        return;
    ov->rows_started = 1;
    ember_kjt k;
    swap_input(s, ov); // the prefetched batch's fields, for ember__build_local
    const ember_status st = ember__build_local(s, &ov->pf_off, &ov->pf_val, NULL, ov->ctl, &k);
    swap_input(s, ov);
    if (st == EMBER_OK) (void)ember__ebc_prefetch_unchecked(s->local, &k);
}

ember_status ember__prefetch_take(ember_sebc *s, const ember_kjt *kjt, ember_status st, int *taken) {
    ember__overlap *ov = s->ov;
    ember_comm *c = s->comm;
    *taken = 0;
    // One small all-reduce when every rank's batch is valid and the prefetched one: (failed,
    // differs), maxima over ranks; the failing rank's message is agreed on only when one failed.
    int64_t v[2] = {st != EMBER_OK, !(st == EMBER_OK && kjt->nnz == ov->nnz && kjt->batch_size == ov->spare->batch &&
                                      ember__input_digest(s, kjt) == ov->digest)};
    ember_status agreed = ember__comm_allreduce_max_i64(c, v, 2);
    if (agreed == EMBER_OK && v[0]) agreed = ember_comm_agree(c, st);
    st = agreed;
    const int64_t differs = v[1];
    if (st != EMBER_OK || differs) {
        const ember_status d = ember__prefetch_drain(s);
        ov->dropped++;
        if (st == EMBER_OK && differs)
            ember__log(s->ctx, EMBER_LOG_INFO,
                       "ember_sebc_forward: some rank's batch is not the one it prefetched: input dist redone");
        return st != EMBER_OK ? st : d;
    }
    ov->pending = 0;
    st = wait_input(s);
    if (st != EMBER_OK) return st;
    swap_input(s, ov); // the prefetched batch is current; the previous one is the spare
    s->fwd_digest = ov->digest;
    s->fwd_nnz = ov->nnz;
    *taken = 1;
    ov->taken++;
    return EMBER_OK;
}
