// Data-parallel: a full replica of the table on every rank. Its ids stay home and are pooled by
// this rank's replica collection; backward combines the ranks' coalesced row gradients so that
// every replica applies bitwise the same update.
#include <string.h>

#include "shard/overlap.h"
#include "tbe/rowmap.h"

// The scheme's state (s->home[DATA_PARALLEL]): the replicas of every data-parallel table in one
// collection, the features that read them, and the gradient exchange's buffers and requests.
typedef struct dp_home {
    ember_ebc *ebc;             // the replicas
    int32_t *local;             // [T] table t's index in ebc (-1: not data-parallel)
    int32_t nf;                 // features reading a replica
    int32_t *features;          // [nf] their global index
    int32_t out_dim;            // the sub-KJT's output width (pooled) or D (sequence)
    int hashed;                 // some replica is hashed (its admissions need the global batch)
    ember__buf keys, grads, counts;  // the gradient exchange
    ember__buf glen, gval, goff;     // hashed replicas: the global batch's ids
    ember__sparse_grad grad;    // this rank's coalesced gradient (backward)
    ember__req req[2];          // the gathers of keys and gradients in flight
    ember__replica_sum rsum;    // 2D: the groups' sums summed over the replicas
} dp_home;

// Its part of a batch: the replicated features' sub-KJT (features in order, their kept ids) and
// the replicas' output for it (then, in backward, its gradient).
typedef struct dp_batch {
    ember__buf off, val, w, out;
    ember_kjt kjt;
} dp_batch;

static dp_batch *batch_of(const ember_sebc *s) { return s->in->home[EMBER_SHARD_DATA_PARALLEL]; }

// A tiered table is not replicated: each replica would be a whole table on disk per rank.
static ember_status validate(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W) {
    (void)p; (void)W;
    EMBER_CHECK(ctx, t->cache_rows == 0, EMBER_ERR_UNSUPPORTED,
                "table '%s': a tiered table cannot be data-parallel (plan it table-wise, row-wise or column-wise)",
                t->name);
    return EMBER_OK;
}

// No shards: nothing is routed.
static int32_t cut(const ember_table_config *t, const ember_table_plan *p, int32_t W, ember__shard *out) {
    (void)t; (void)p; (void)W; (void)out;
    return 0;
}

// Every id stays home (a table without row blocks: bucketize copies its ids to the replicas'
// sub-KJT without asking).
static int32_t bucket(const ember__table_shards *ts, int64_t id) {
    (void)ts; (void)id;
    return -1;
}

// The replicas: one collection of every data-parallel table, one feature per feature reading one.
static void destroy_home(ember_sebc *s, void *home) {
    dp_home *h = home;
    for (int i = 0; i < 2; i++) {
        (void)ember__comm_wait(s->comm, &h->req[i]); // MPI owns the buffers until then
        ember__free(s->ctx, h->req[i].counts);
    }
    ember_ebc_destroy(h->ebc);
    ember__replica_free(s, &h->rsum);
    ember__buf *bufs[] = {&h->keys, &h->grads, &h->counts, &h->glen, &h->gval, &h->goff};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember__buf_free(s->ctx, bufs[i]);
    ember__free(s->ctx, h->local);
    ember__free(s->ctx, h->features);
    ember__free(s->ctx, h);
}

static ember_status build_home(ember_sebc *s, const ember_ebc_config *local_cfg, void **home) {
    ember_ctx *ctx = s->ctx;
    int32_t ndp_tables = 0;
    for (int32_t t = 0; t < s->T; t++) ndp_tables += s->ts[t].scheme == EMBER_SHARD_DATA_PARALLEL;
    if (ndp_tables == 0) return EMBER_OK;
    dp_home *h = ember__calloc(ctx, sizeof *h);
    if (!h) return EMBER_ERR_NOMEM;
    *home = h;
    h->local = ember__alloc(ctx, sizeof(int32_t) * (size_t)s->T);
    h->features = ember__alloc(ctx, sizeof(int32_t) * (size_t)s->F);
    for (int i = 0; i < 2; i++) {
        h->req[i].mpi = MPI_REQUEST_NULL;
        h->req[i].counts = ember__alloc(ctx, sizeof(int) * 4 * (size_t)s->W); // starting cannot fail
    }
    if (!h->local || !h->features || !h->req[0].counts || !h->req[1].counts) return EMBER_ERR_NOMEM;
    if (s->replica) EMBER_TRY(ember__replica_init(s, &h->rsum));
    ember__buf tb = {0}, fb = {0};
    ember_table_config *dt = ember__buf_reserve(ctx, &tb, sizeof(ember_table_config) * (size_t)ndp_tables);
    ember_feature_config *df = ember__buf_reserve(ctx, &fb, sizeof(ember_feature_config) * (size_t)s->F);
    ember_status st = EMBER_ERR_NOMEM;
    if (dt && df) {
        int32_t nt = 0;
        for (int32_t t = 0; t < s->T; t++) {
            h->local[t] = s->ts[t].scheme == EMBER_SHARD_DATA_PARALLEL ? nt : -1;
            if (h->local[t] < 0) continue;
            dt[nt++] = s->tables[t];
            h->hashed |= s->ts[t].ids == EMBER_IDS_HASHED;
        }
        int32_t n = 0, dcol = 0;
        for (int32_t f = 0; f < s->F; f++) {
            const int32_t t = s->feature_table[f];
            if (h->local[t] < 0) continue;
            df[n] = (ember_feature_config){.name = s->feature_names[f], .table = h->local[t]};
            h->features[n++] = f;
            dcol += s->tables[t].dim;
        }
        h->nf = n;
        h->out_dim = s->sequence ? s->out_dim : dcol;
        if (n == 0) {
            df[0] = (ember_feature_config){.name = "unused", .table = 0};
            n = 1;
        }
        ember_ebc_config lc = *local_cfg;
        lc.tables = dt;
        lc.num_tables = ndp_tables;
        lc.features = df;
        lc.num_features = n;
        st = ember__ebc_create_ex(ctx, &lc, NULL, &h->ebc);
    }
    ember__buf_free(ctx, &tb);
    ember__buf_free(ctx, &fb);
    return st;
}

static int home_piece(const ember_sebc *s, const void *home, int32_t t, ember_ebc **ebc, int32_t *local_table) {
    (void)s;
    const dp_home *h = home;
    if (!h || h->local[t] < 0) return 0;
    *ebc = h->ebc;
    *local_table = h->local[t];
    return 1;
}

static ember_ebc *home_ebc(const void *home) { return ((const dp_home *)home)->ebc; }

static void home_batch_free(ember_sebc *s, void *batch_part) {
    dp_batch *part = batch_part;
    ember__buf *bufs[] = {&part->off, &part->val, &part->w, &part->out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember__buf_free(s->ctx, bufs[i]);
    ember__free(s->ctx, part);
}

// Bucketize's part: the replicated features' sub-KJT of batch b and room for its output.
static ember_status home_route(ember_sebc *s, void *home, ember__batch *b, int32_t B) {
    const dp_home *h = home;
    dp_batch *part = b->home[EMBER_SHARD_DATA_PARALLEL];
    if (!part) { // the batch's first data-parallel part
        if (!(part = ember__xalloc(s->ctx, sizeof *part, "the replicas' batch"))) return EMBER_ERR_NOMEM;
        memset(part, 0, sizeof *part);
        b->home[EMBER_SHARD_DATA_PARALLEL] = part;
    }
    const int64_t *off = b->san_off.p;
    int64_t nnz = 0;
    for (int32_t i = 0; i < h->nf; i++) {
        const int32_t f = h->features[i];
        nnz += off[(int64_t)(f + 1) * B] - off[(int64_t)f * B];
    }
    const int32_t nf = h->nf ? h->nf : 1;
    int64_t *doff = EMBER__RESERVE(s, part->off, int64_t, (int64_t)nf * B + 1);
    int64_t *dval = EMBER__RESERVE(s, part->val, int64_t, nnz);
    float *dw = EMBER__RESERVE(s, part->w, float, nnz);
    float *dout = EMBER__RESERVE(s, part->out, float, s->sequence ? nnz * s->out_dim : (int64_t)B * h->out_dim);
    if (!doff || !dval || !dw || !dout) return EMBER_ERR_NOMEM;
    b->ids_examined += nnz;
    int64_t m = 0;
    doff[0] = 0;
    for (int32_t i = 0; i < h->nf; i++) {
        const int32_t f = h->features[i];
        const int64_t j0 = off[(int64_t)f * B], j1 = off[(int64_t)(f + 1) * B];
        memcpy(dval + m, (const int64_t *)b->san_val.p + j0, sizeof(int64_t) * (size_t)(j1 - j0));
        memcpy(dw + m, (const float *)b->san_w.p + j0, sizeof(float) * (size_t)(j1 - j0));
        for (int32_t x = 0; x < B; x++) doff[(int64_t)i * B + x + 1] = m + off[(int64_t)f * B + x + 1] - j0;
        m += j1 - j0;
    }
    if (h->nf == 0)
        for (int32_t x = 0; x < B; x++) doff[x + 1] = 0;
    part->kjt = (ember_kjt){.num_features = nf, .batch_size = B, .offsets = doff, .values = dval, .weights = dw, .nnz = m};
    return EMBER_OK;
}


// Hashed replicas keep one id map: before pooling its own ids by lookup, every rank admits the
// global batch's ids of the replicated features, each feature's bags of rank 0, 1, ... in
// order: what one process does with the whole batch. Two allgathers (lengths, ids). Collective;
// every rank comes here or none (forward agrees first).
static ember_status admit_global(ember_sebc *s, dp_home *h) {
    ember_comm *c = s->comm;
    const int32_t W = s->W, nf = h->nf;
    const ember_kjt *k = &batch_of(s)->kjt;
    int64_t *cnt = EMBER__RESERVE(s, h->counts, int64_t, 3 * W), G = 0, nnz = 0;
    ember_status st = cnt ? EMBER_OK : EMBER_ERR_NOMEM;
    st = ember_comm_agree(c, st);
    if (st == EMBER_OK) st = ember_comm_allgather_i64(c, k->nnz, cnt + W); // ids per rank
    if (st != EMBER_OK) return st;
    for (int32_t q = 0; q < W; q++) {
        cnt[q] = (int64_t)nf * s->in->Bs[q]; // bag lengths per rank
        G += s->in->Bs[q];
        nnz += cnt[W + q];
    }
    int64_t *len = EMBER__RESERVE(s, h->glen, int64_t, (int64_t)nf * G + (int64_t)nf * s->in->batch);
    int64_t *val = EMBER__RESERVE(s, h->gval, int64_t, 2 * nnz);
    int64_t *off = EMBER__RESERVE(s, h->goff, int64_t, (int64_t)nf * G + 1);
    st = ember_comm_agree(c, len && val && off ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st != EMBER_OK) return st;
    int64_t *mine = len + (int64_t)nf * G, *all = val + nnz; // this rank's lengths; gathered ids
    for (int64_t i = 0; i < (int64_t)nf * s->in->batch; i++) mine[i] = k->offsets[i + 1] - k->offsets[i];
    st = ember__comm_allgatherv(c, mine, (int64_t)nf * s->in->batch, len, cnt, sizeof(int64_t));
    if (st == EMBER_OK) st = ember__comm_allgatherv(c, k->values, k->nnz, all, cnt + W, sizeof(int64_t));
    if (st != EMBER_OK) return st;
    // Rank q's block holds its nf features' bags (lengths) and ids, feature after feature.
    int64_t n = 0, bag = 0, lbase = 0, vbase = 0;
    off[0] = 0;
    for (int32_t i = 0; i < nf; i++) {
        lbase = vbase = 0;
        for (int32_t q = 0; q < W; q++) {
            const int64_t *lq = len + lbase, *vq = all + vbase;
            int64_t skip = 0; // ids of rank q's earlier features
            for (int64_t j = 0; j < (int64_t)i * s->in->Bs[q]; j++) skip += lq[j];
            for (int64_t b = 0; b < s->in->Bs[q]; b++) {
                const int64_t l = lq[(int64_t)i * s->in->Bs[q] + b];
                if (l > 0) memcpy(val + n, vq + skip, sizeof(int64_t) * (size_t)l);
                skip += l;
                n += l;
                off[++bag] = n;
            }
            lbase += cnt[q];
            vbase += cnt[W + q];
        }
    }
    const ember_kjt global = {.num_features = nf, .batch_size = (int32_t)G, .offsets = off, .values = val, .nnz = n};
    return ember__ebc_admit(h->ebc, &global);
}

// Pools the replicated features' sub-KJT (bucketize built it) and places its rows in `out`
// (zeroed; the routed schemes' columns and positions are disjoint from these). Hashed replicas
// gather every rank's ids first: every rank agrees on st before, and comes here or none.
static ember_status home_forward(ember_sebc *s, void *home, float *out, ember_status st) {
    dp_home *h = home;
    dp_batch *part = batch_of(s);
    if (h->hashed) st = ember_comm_agree(s->comm, st);
    EMBER_TRY(st);
    if (!s->in->weighted) part->kjt.weights = NULL;
    if (h->nf == 0) return EMBER_OK;
    const int32_t B = s->in->batch;
    if (h->hashed) {
        if (s->training) EMBER_TRY(admit_global(s, h));
        // Then this rank's ids by lookup only: the admissions and uses were the global batch's.
        ember_ebc_set_training(h->ebc, 0);
        st = ember__ebc_forward_unchecked(h->ebc, &part->kjt, part->out.p);
        ember_ebc_set_training(h->ebc, s->training);
        EMBER_TRY(st);
    } else {
        EMBER_TRY(ember__ebc_forward_unchecked(h->ebc, &part->kjt, part->out.p)); // ids sanitised at home
    }
    const float *dout = part->out.p;
    if (s->sequence) {
        // Rows follow the sub-KJT's value order: features in order, their kept ids.
        const int64_t *off = s->in->san_off.p, *pos = s->in->san_pos.p;
        const int32_t D = s->out_dim;
        int64_t m = 0;
        for (int32_t i = 0; i < h->nf; i++) {
            const int32_t f = h->features[i];
            for (int64_t j = off[(int64_t)f * B]; j < off[(int64_t)(f + 1) * B]; j++, m++)
                memcpy(out + pos[j] * D, dout + m * D, sizeof(float) * (size_t)D);
        }
        return EMBER_OK;
    }
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
    for (int32_t b = 0; b < B; b++) {
        int32_t dc = 0;
        for (int32_t i = 0; i < h->nf; i++) {
            const int32_t f = h->features[i], D = s->tables[s->feature_table[f]].dim;
            memcpy(out + (size_t)b * s->out_dim + s->feature_col[f], dout + (size_t)b * h->out_dim + dc,
                   sizeof(float) * (size_t)D);
            dc += D;
        }
    }
    return EMBER_OK;
}

// Backward, in two steps around the caller's agreement (no replica changes unless every rank
// could allocate everything). Each rank's coalesced row gradients (already scaled by the
// convention) are gathered on every rank in rank order and summed per row in that order, so
// every replica applies bitwise the same update.
//
// Prepare: this rank's output slices of grad_out, scaled by the convention, coalesced; the
// exchange's counts and buffers. Collective: takes the caller's status so far and returns the
// status every rank agreed on.
static ember_status backward_prepare(ember_sebc *s, void *home, const float *grad_out, ember_status st) {
    dp_home *h = home;
    dp_batch *part = batch_of(s);
    ember_comm *c = s->comm;
    const int32_t W = s->W, B = s->in->batch;
    const float scale = ember__grad_scale(s);
    float *gdp = part->out.p;
    int64_t *counts = EMBER__RESERVE(s, h->counts, int64_t, 3 * W); // keys, floats per rank; merge heads
    if (st == EMBER_OK && !counts) st = EMBER_ERR_NOMEM;
    if (st == EMBER_OK && s->sequence) {
        const int64_t *off = s->in->san_off.p, *pos = s->in->san_pos.p;
        const int32_t D = s->out_dim;
        int64_t m = 0;
        for (int32_t i = 0; i < h->nf; i++) {
            const int32_t f = h->features[i];
            for (int64_t j = off[(int64_t)f * B]; j < off[(int64_t)(f + 1) * B]; j++, m++)
                for (int32_t d = 0; d < D; d++) gdp[m * D + d] = scale * grad_out[pos[j] * D + d];
        }
    } else if (st == EMBER_OK) {
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
        for (int32_t b = 0; b < B; b++) {
            int32_t dc = 0;
            for (int32_t i = 0; i < h->nf; i++) {
                const int32_t f = h->features[i], D = s->tables[s->feature_table[f]].dim;
                const float *src = grad_out + (size_t)b * s->out_dim + s->feature_col[f];
                for (int32_t d = 0; d < D; d++) gdp[(size_t)b * h->out_dim + dc + d] = scale * src[d];
                dc += D;
            }
        }
    }
    if (st == EMBER_OK) st = ember__ebc_coalesce(h->ebc, &part->kjt, gdp, &h->grad);
    EMBER_TRY(ember_comm_agree(c, st));
    const ember__sparse_grad *g = &h->grad;
    int64_t *nk = counts, *ng = counts + W;
    EMBER_TRY(ember_comm_allgather_i64(c, g->n, nk));
    EMBER_TRY(ember_comm_allgather_i64(c, g->goff[g->n], ng));
    int64_t tk = 0, tg = 0;
    for (int32_t q = 0; q < W; q++) {
        tk += nk[q];
        tg += ng[q];
    }
    // keys: gathered [tk], merged [tk], merged offsets [tk+1], gathered offsets [tk + W];
    // grads: gathered [tg], merged [tg].
    int64_t *keys = EMBER__RESERVE(s, h->keys, int64_t, 4 * tk + W + 1);
    float *grads = EMBER__RESERVE(s, h->grads, float, 2 * tg);
    st = keys && grads ? EMBER_OK : EMBER_ERR_NOMEM;
    // 2D: the group's sum is summed over the replicas next; at most tk keys and tg floats each.
    if (s->replica) st = ember__replica_prepare(s, &h->rsum, tk, tg, st);
    EMBER_TRY(ember_comm_agree(c, st));
    // The gathers start now and travel during the routed pieces' exchange and update (and the
    // caller's dense backward between ember_sebc_backward_start and _finish); apply waits.
    EMBER_TRY(ember__comm_iallgatherv(c, g->key, g->n, keys, nk, sizeof(int64_t), &h->req[0]));
    return ember__comm_iallgatherv(c, g->grad, g->goff[g->n], grads, ng, sizeof(float), &h->req[1]);
}

// Apply: the exchange, the merge and the update. Collective; allocates nothing.
static ember_status backward_apply(ember_sebc *s, void *home) {
    dp_home *h = home;
    ember_comm *c = s->comm;
    const int32_t W = s->W;
    int64_t *nk = h->counts.p, *ng = nk + W, *head = nk + 2 * W; // head: next gathered index per rank
    int64_t tk = 0, tg = 0;
    for (int32_t q = 0; q < W; q++) {
        tk += nk[q];
        tg += ng[q];
    }
    int64_t *keys = h->keys.p, *mkeys = keys + tk, *moff = keys + 2 * tk, *goffs = keys + 3 * tk + 1;
    float *grads = h->grads.p, *mgrads = grads + tg;
    EMBER_TRY(ember__comm_wait(c, &h->req[0]));
    EMBER_TRY(ember__comm_wait(c, &h->req[1]));
    // Each rank's rows added in rank order, then (2D) the groups' sums in group order.
    const int64_t nm = ember__merge_grads(h->ebc, W, nk, keys, grads, head, goffs, mkeys, moff, mgrads);
    ember__sparse_grad g = {nm, mkeys, moff, mgrads};
    if (s->replica) EMBER_TRY(ember__replica_merge(s, &h->rsum, h->ebc, &g, &g));
    return ember__ebc_apply(h->ebc, g.key, g.goff, g.grad, g.n, NULL); // allocates nothing after coalesce
}

// The gathers a failed backward leaves in flight: waited for (their buffers are the state's).
static void backward_drain(ember_sebc *s, void *home) {
    dp_home *h = home;
    (void)ember__comm_wait(s->comm, &h->req[0]);
    (void)ember__comm_wait(s->comm, &h->req[1]);
}

// Per rank: every id's pooling reads B * L rows; the touched rows' keys and gradients go to
// every other rank.
static void step_traffic(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, ember__traffic *tr) {
    (void)p;
    const double touched = B * L < rows ? B * L : rows;
    for (int q = 0; q < W; q++) tr->read[q] += B * L * row;
    // The sparse gradient exchange: every rank's touched rows (key + row) to every other.
    ember__traffic_all_pairs(tr, touched * (8 + out));
}

// A replica on every rank: tables up to the view's dp_max, neither tiered (refused) nor hashed
// (its replicas would gather every rank's ids each step).
static void candidates(const ember_table_config *t, size_t bytes, const ember__plan_view *v, int32_t *ranks,
                       ember__plan_emit emit, void *arg) {
    (void)ranks;
    if (bytes > v->dp_max || t->cache_rows > 0 || ember_table_id_space(t) == EMBER_IDS_HASHED) return;
    emit(arg, &(ember_table_plan){.scheme = EMBER_SHARD_DATA_PARALLEL});
}

static void storage(const ember_table_plan *p, int32_t W, size_t bytes, size_t *per_rank) {
    (void)p;
    for (int32_t q = 0; q < W; q++) per_rank[q] += bytes;
}

static void default_plan(int32_t t, int32_t dim, int32_t W, int32_t group, int32_t *ranks, ember_table_plan *out) {
    (void)t; (void)dim; (void)W; (void)group; (void)ranks;
    *out = (ember_table_plan){.scheme = EMBER_SHARD_DATA_PARALLEL};
}

const ember__scheme_ops ember__scheme_dp = {
    .scheme = EMBER_SHARD_DATA_PARALLEL, .name = "data_parallel", .short_name = "dp", .plan_fields = 0,
    // shards and routing: none, the replicas stay home
    .validate = validate, .cut = cut, .partial = 0, .bucket = bucket,
    // home state
    .build_home = build_home, .destroy_home = destroy_home, .home_route = home_route,
    .home_batch_free = home_batch_free, .home_forward = home_forward, .backward_prepare = backward_prepare,
    .backward_apply = backward_apply, .backward_drain = backward_drain, .home_piece = home_piece,
    .home_ebc = home_ebc,
    // planning
    .step_traffic = step_traffic, .candidates = candidates, .storage = storage, .plan_order = 0,
    .default_plan = default_plan,
};
