// Combining coalesced row gradients over copies of the same piece: the ranks of a data-parallel
// table, and (2D, ember_sebc_create_2d) the replicas of every piece across the sharding groups.
// Every copy sums the same gathered rows in the same order, so the copies stay bitwise equal.
#include <string.h>

#include "shard/overlap.h"

int64_t ember__merge_grads(const ember_ebc *e, int32_t n, const int64_t *nk, const int64_t *keys, const float *grads,
                           int64_t *head, int64_t *goffs, int64_t *mkeys, int64_t *moff, float *mgrads) {
    // Offsets of every gathered row's gradient: each source's rows are laid out in its key order
    // with the width of the key's table.
    int64_t k = 0, go = 0;
    for (int32_t q = 0; q < n; q++) {
        for (int64_t i = 0; i < nk[q]; i++, k++) {
            goffs[k] = go;
            go += e->tables[ember__ebc_key_table(e, keys[k])].cfg.dim;
        }
    }
    goffs[k] = go;
    int64_t start = 0;
    for (int32_t q = 0; q < n; q++) {
        head[q] = start;
        start += nk[q];
    }
    // Each source's keys are sorted and unique: an n-way merge by repeated minimum, adding the
    // sources' rows for equal keys in source order.
    int64_t nm = 0, mg = 0;
    for (;;) {
        int64_t best = -1, end = 0;
        int32_t bq = -1;
        for (int32_t q = 0; q < n; q++) {
            end += nk[q];
            if (head[q] < end && (bq < 0 || keys[head[q]] < best)) {
                best = keys[head[q]];
                bq = q;
            }
        }
        if (bq < 0) break;
        const int32_t D = e->tables[ember__ebc_key_table(e, best)].cfg.dim;
        mkeys[nm] = best;
        moff[nm] = mg;
        memset(mgrads + mg, 0, sizeof(float) * (size_t)D);
        int64_t e_end = 0;
        for (int32_t q = 0; q < n; q++) {
            e_end += nk[q];
            if (head[q] < e_end && keys[head[q]] == best) {
                const float *src = grads + goffs[head[q]];
                for (int32_t d = 0; d < D; d++) mgrads[mg + d] += src[d];
                head[q]++;
            }
        }
        mg += D;
        nm++;
    }
    moff[nm] = mg;
    return nm;
}

ember_status ember__replica_init(ember_sebc *s, ember__replica_sum *r) {
    memset(r, 0, sizeof *r);
    r->cnt = ember__calloc(s->ctx, sizeof(int64_t) * 4 * (size_t)s->nrep);
    return r->cnt ? EMBER_OK : EMBER_ERR_NOMEM;
}

void ember__replica_free(ember_sebc *s, ember__replica_sum *r) {
    ember__buf_free(s->ctx, &r->keys);
    ember__buf_free(s->ctx, &r->grads);
    ember__free(s->ctx, r->cnt);
    memset(r, 0, sizeof *r);
}

// The buffers, for R replicas sending at most tk keys and tg floats in all: keys holds gathered
// [tk], merged [tk], merged offsets [tk + 1], gathered offsets [tk + 1]; grads holds gathered
// [tg], merged [tg]; cnt holds keys and floats per replica [2R] and the merge's heads [R].
ember_status ember__replica_prepare(ember_sebc *s, ember__replica_sum *r, int64_t nk, int64_t ng, ember_status st) {
    const int32_t R = s->nrep;
    // Every replica comes here (the same plan on each), whatever its status: the caller agrees.
    EMBER_TRY(ember_comm_allgather_i64(s->replica, st == EMBER_OK ? nk : 0, r->cnt));
    EMBER_TRY(ember_comm_allgather_i64(s->replica, st == EMBER_OK ? ng : 0, r->cnt + R));
    if (st != EMBER_OK) return st;
    r->tk = r->tg = 0;
    for (int32_t q = 0; q < R; q++) {
        r->tk += r->cnt[q];
        r->tg += r->cnt[R + q];
    }
    if (!EMBER__RESERVE(s, r->keys, int64_t, 4 * r->tk + 2) || !EMBER__RESERVE(s, r->grads, float, 2 * r->tg))
        return ember__error(s->ctx, EMBER_ERR_NOMEM, "the replicas' gradient sum: out of memory");
    return EMBER_OK;
}

ember_status ember__replica_merge(ember_sebc *s, ember__replica_sum *r, const ember_ebc *e,
                                  const ember__sparse_grad *g, ember__sparse_grad *out) {
    const int32_t R = s->nrep;
    int64_t *nk = r->cnt, *ng = r->cnt + R, *head = r->cnt + 2 * R;
    // The exact counts (at most the prepared bounds), then the rows.
    EMBER_TRY(ember_comm_allgather_i64(s->replica, g->n, nk));
    EMBER_TRY(ember_comm_allgather_i64(s->replica, g->goff[g->n], ng));
    int64_t tk = 0;
    for (int32_t q = 0; q < R; q++) tk += nk[q];
    int64_t *keys = r->keys.p, *mkeys = keys + tk, *moff = keys + 2 * tk, *goffs = keys + 3 * tk + 1;
    float *grads = r->grads.p, *mgrads = grads + r->tg;
    EMBER_TRY(ember__comm_allgatherv(s->replica, g->key, g->n, keys, nk, sizeof(int64_t)));
    EMBER_TRY(ember__comm_allgatherv(s->replica, g->grad, g->goff[g->n], grads, ng, sizeof(float)));
    const int64_t nm = ember__merge_grads(e, R, nk, keys, grads, head, goffs, mkeys, moff, mgrads);
    *out = (ember__sparse_grad){nm, mkeys, moff, mgrads};
    return EMBER_OK;
}
