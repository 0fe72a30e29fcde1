// Data-parallel: a full replica of the table on every rank. Its ids stay home and are pooled by
// this rank's replica collection; backward combines the ranks' coalesced row gradients so that
// every replica applies bitwise the same update.
#include <string.h>

#include "shard/overlap.h"
#include "tbe/rowmap.h"

#define RESERVE(s, buf, type, n) ((type *)ember__buf_reserve((s)->ctx, &(s)->buf, sizeof(type) * (size_t)((n) > 0 ? (n) : 1)))

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
static ember_status build_home(ember_sebc *s, const ember_ebc_config *local_cfg) {
    ember_ctx *ctx = s->ctx;
    int32_t ndp_tables = 0;
    for (int32_t t = 0; t < s->T; t++)
        if (s->ts[t].ops == &ember__scheme_dp) s->ts[t].dp_local = ndp_tables++;
    if (ndp_tables == 0) return EMBER_OK;
    ember__buf tb = {0}, fb = {0};
    ember_table_config *dt = ember__buf_reserve(ctx, &tb, sizeof(ember_table_config) * (size_t)ndp_tables);
    ember_feature_config *df = ember__buf_reserve(ctx, &fb, sizeof(ember_feature_config) * (size_t)s->F);
    ember_status st = EMBER_ERR_NOMEM;
    if (dt && df) {
        for (int32_t t = 0; t < s->T; t++)
            if (s->ts[t].ops == &ember__scheme_dp) {
                dt[s->ts[t].dp_local] = s->tables[t];
                s->dp_hashed |= s->ts[t].ids == EMBER_IDS_HASHED;
            }
        int32_t n = 0, dcol = 0;
        for (int32_t f = 0; f < s->F; f++) {
            const int32_t t = s->feature_table[f];
            if (s->ts[t].ops != &ember__scheme_dp) continue;
            df[n] = (ember_feature_config){s->feature_names[f], s->ts[t].dp_local};
            s->dp_features[n++] = f;
            dcol += s->tables[t].dim;
        }
        s->ndp_features = n;
        s->dp_out_dim = s->sequence ? s->out_dim : dcol;
        if (n == 0) {
            df[0] = (ember_feature_config){"unused", 0};
            n = 1;
        }
        ember_ebc_config lc = *local_cfg;
        lc.tables = dt;
        lc.num_tables = ndp_tables;
        lc.features = df;
        lc.num_features = n;
        st = ember__ebc_create_ex(ctx, &lc, NULL, &s->dp);
    }
    ember__buf_free(ctx, &tb);
    ember__buf_free(ctx, &fb);
    return st;
}

// Hashed replicas keep one id map: before pooling its own ids by lookup, every rank admits the
// global batch's ids of the replicated features, each feature's bags of rank 0, 1, ... in
// order: what one process does with the whole batch. Two allgathers (lengths, ids). Collective;
// every rank comes here or none (forward agrees first).
static ember_status admit_global(ember_sebc *s) {
    ember_comm *c = s->comm;
    const int32_t W = s->W, nf = s->ndp_features;
    const ember_kjt *k = &s->dp_kjt;
    int64_t *cnt = RESERVE(s, dp_counts, int64_t, 3 * W), G = 0, nnz = 0;
    ember_status st = cnt ? EMBER_OK : EMBER_ERR_NOMEM;
    st = ember_comm_agree(c, st);
    if (st == EMBER_OK) st = ember_comm_allgather_i64(c, k->nnz, cnt + W); // ids per rank
    if (st != EMBER_OK) return st;
    for (int32_t q = 0; q < W; q++) {
        cnt[q] = (int64_t)nf * s->Bs[q]; // bag lengths per rank
        G += s->Bs[q];
        nnz += cnt[W + q];
    }
    int64_t *len = RESERVE(s, dp_glen, int64_t, (int64_t)nf * G + (int64_t)nf * s->batch);
    int64_t *val = RESERVE(s, dp_gval, int64_t, 2 * nnz);
    int64_t *off = RESERVE(s, dp_goff, int64_t, (int64_t)nf * G + 1);
    st = ember_comm_agree(c, len && val && off ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st != EMBER_OK) return st;
    int64_t *mine = len + (int64_t)nf * G, *all = val + nnz; // this rank's lengths; gathered ids
    for (int64_t i = 0; i < (int64_t)nf * s->batch; i++) mine[i] = k->offsets[i + 1] - k->offsets[i];
    st = ember_comm_allgatherv(c, mine, (int64_t)nf * s->batch, len, cnt, sizeof(int64_t));
    if (st == EMBER_OK) st = ember_comm_allgatherv(c, k->values, k->nnz, all, cnt + W, sizeof(int64_t));
    if (st != EMBER_OK) return st;
    // Rank q's block holds its nf features' bags (lengths) and ids, feature after feature.
    int64_t n = 0, bag = 0, lbase = 0, vbase = 0;
    off[0] = 0;
    for (int32_t i = 0; i < nf; i++) {
        lbase = vbase = 0;
        for (int32_t q = 0; q < W; q++) {
            const int64_t *lq = len + lbase, *vq = all + vbase;
            int64_t skip = 0; // ids of rank q's earlier features
            for (int64_t j = 0; j < (int64_t)i * s->Bs[q]; j++) skip += lq[j];
            for (int64_t b = 0; b < s->Bs[q]; b++) {
                const int64_t l = lq[(int64_t)i * s->Bs[q] + b];
                if (l > 0) memcpy(val + n, vq + skip, sizeof(int64_t) * (size_t)l);
                skip += l;
                n += l;
                off[++bag] = n;
            }
            lbase += cnt[q];
            vbase += cnt[W + q];
        }
    }
    const ember_kjt global = {nf, (int32_t)G, NULL, off, val, NULL, n};
    return ember__ebc_admit(s->dp, &global);
}

// Pools the replicated features' sub-KJT (bucketize built it) and places its rows in `out`
// (zeroed; the routed schemes' columns and positions are disjoint from these).
static ember_status home_forward(ember_sebc *s, float *out) {
    if (!s->weighted) s->dp_kjt.weights = NULL;
    if (!s->dp || s->ndp_features == 0) return EMBER_OK;
    const int32_t B = s->batch;
    if (s->dp_hashed) {
        if (s->training) EMBER_TRY(admit_global(s));
        // Then this rank's ids by lookup only: the admissions and uses were the global batch's.
        ember_ebc_set_training(s->dp, 0);
        const ember_status st = ember__ebc_forward_unchecked(s->dp, &s->dp_kjt, s->dp_out.p);
        ember_ebc_set_training(s->dp, s->training);
        EMBER_TRY(st);
    } else {
        EMBER_TRY(ember__ebc_forward_unchecked(s->dp, &s->dp_kjt, s->dp_out.p)); // ids sanitised at home
    }
    const float *dout = s->dp_out.p;
    if (s->sequence) {
        // Rows follow the sub-KJT's value order: features in order, their kept ids.
        const int64_t *off = s->san_off.p, *pos = s->san_pos.p;
        const int32_t D = s->out_dim;
        int64_t m = 0;
        for (int32_t i = 0; i < s->ndp_features; i++) {
            const int32_t f = s->dp_features[i];
            for (int64_t j = off[(int64_t)f * B]; j < off[(int64_t)(f + 1) * B]; j++, m++)
                memcpy(out + pos[j] * D, dout + m * D, sizeof(float) * (size_t)D);
        }
        return EMBER_OK;
    }
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
    for (int32_t b = 0; b < B; b++) {
        int32_t dc = 0;
        for (int32_t i = 0; i < s->ndp_features; i++) {
            const int32_t f = s->dp_features[i], D = s->tables[s->feature_table[f]].dim;
            memcpy(out + (size_t)b * s->out_dim + s->feature_col[f], dout + (size_t)b * s->dp_out_dim + dc,
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
static ember_status backward_prepare(ember_sebc *s, const float *grad_out, ember_status st) {
    if (!s->dp) return st; // no data-parallel table, on any rank
    ember_comm *c = s->comm;
    const int32_t W = s->W, B = s->batch;
    const float scale = ember__grad_scale(s);
    float *gdp = s->dp_out.p;
    int64_t *counts = RESERVE(s, dp_counts, int64_t, 3 * W); // keys, floats per rank; merge heads
    if (st == EMBER_OK && !counts) st = EMBER_ERR_NOMEM;
    if (st == EMBER_OK && s->sequence) {
        const int64_t *off = s->san_off.p, *pos = s->san_pos.p;
        const int32_t D = s->out_dim;
        int64_t m = 0;
        for (int32_t i = 0; i < s->ndp_features; i++) {
            const int32_t f = s->dp_features[i];
            for (int64_t j = off[(int64_t)f * B]; j < off[(int64_t)(f + 1) * B]; j++, m++)
                for (int32_t d = 0; d < D; d++) gdp[m * D + d] = scale * grad_out[pos[j] * D + d];
        }
    } else if (st == EMBER_OK) {
#pragma omp parallel for schedule(static) num_threads(ember__threads(s->ctx))
        for (int32_t b = 0; b < B; b++) {
            int32_t dc = 0;
            for (int32_t i = 0; i < s->ndp_features; i++) {
                const int32_t f = s->dp_features[i], D = s->tables[s->feature_table[f]].dim;
                const float *src = grad_out + (size_t)b * s->out_dim + s->feature_col[f];
                for (int32_t d = 0; d < D; d++) gdp[(size_t)b * s->dp_out_dim + dc + d] = scale * src[d];
                dc += D;
            }
        }
    }
    if (st == EMBER_OK) st = ember__ebc_coalesce(s->dp, &s->dp_kjt, gdp, &s->dp_grad);
    EMBER_TRY(ember_comm_agree(c, st));
    const ember__sparse_grad *g = &s->dp_grad;
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
    int64_t *keys = RESERVE(s, dp_keys, int64_t, 4 * tk + W + 1);
    float *grads = RESERVE(s, dp_grads, float, 2 * tg);
    EMBER_TRY(ember_comm_agree(c, keys && grads ? EMBER_OK : EMBER_ERR_NOMEM));
    // The gathers start now and travel during the routed pieces' exchange and update (and the
    // caller's dense backward between ember_sebc_backward_start and _finish); apply waits.
    EMBER_TRY(ember__comm_iallgatherv(c, g->key, g->n, keys, nk, sizeof(int64_t), &s->ov->dp[0]));
    return ember__comm_iallgatherv(c, g->grad, g->goff[g->n], grads, ng, sizeof(float), &s->ov->dp[1]);
}

// Apply: the exchange, the merge and the update. Collective; allocates nothing.
static ember_status backward_apply(ember_sebc *s) {
    if (!s->dp) return EMBER_OK;
    ember_comm *c = s->comm;
    const int32_t W = s->W;
    int64_t *nk = s->dp_counts.p, *ng = nk + W, *head = nk + 2 * W; // head: next gathered index per rank
    int64_t tk = 0, tg = 0;
    for (int32_t q = 0; q < W; q++) {
        tk += nk[q];
        tg += ng[q];
    }
    int64_t *keys = s->dp_keys.p, *mkeys = keys + tk, *moff = keys + 2 * tk, *goffs = keys + 3 * tk + 1;
    float *grads = s->dp_grads.p, *mgrads = grads + tg;
    EMBER_TRY(ember__comm_wait(c, &s->ov->dp[0]));
    EMBER_TRY(ember__comm_wait(c, &s->ov->dp[1]));
    // Offsets of every gathered row's gradient: each rank's rows are laid out in its key order
    // with the width of the key's table.
    int64_t k = 0, go = 0;
    for (int32_t q = 0; q < W; q++) {
        for (int64_t i = 0; i < nk[q]; i++, k++) {
            goffs[k] = go;
            go += s->dp->tables[ember__ebc_key_table(s->dp, keys[k])].cfg.dim;
        }
    }
    goffs[tk] = go;
    // Each rank's keys are sorted and unique: a W-way merge by repeated minimum, adding the
    // ranks' rows for equal keys in rank order.
    int64_t start = 0;
    for (int32_t q = 0; q < W; q++) {
        head[q] = start;
        start += nk[q];
    }
    int64_t nm = 0, mg = 0;
    for (;;) {
        int64_t best = -1;
        int32_t bq = -1;
        int64_t end = 0;
        for (int32_t q = 0; q < W; q++) {
            end += nk[q];
            if (head[q] < end && (bq < 0 || keys[head[q]] < best)) {
                best = keys[head[q]];
                bq = q;
            }
        }
        if (bq < 0) break;
        const int32_t D = s->dp->tables[ember__ebc_key_table(s->dp, best)].cfg.dim;
        mkeys[nm] = best;
        moff[nm] = mg;
        memset(mgrads + mg, 0, sizeof(float) * (size_t)D);
        // Ranks in order: each contributes its (unique) row for this key, if any.
        int64_t e = 0;
        for (int32_t q = 0; q < W; q++) {
            e += nk[q];
            if (head[q] < e && keys[head[q]] == best) {
                const float *src = grads + goffs[head[q]];
                for (int32_t d = 0; d < D; d++) mgrads[mg + d] += src[d];
                head[q]++;
            }
        }
        mg += D;
        nm++;
    }
    moff[nm] = mg;
    return ember__ebc_apply(s->dp, mkeys, moff, mgrads, nm, NULL); // allocates nothing after coalesce
}

// Per rank: every id's pooling reads B * L rows; the touched rows' keys and gradients go to
// every other rank.
static void step_traffic(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, ember__traffic *tr) {
    (void)p;
    const double touched = B * L < rows ? B * L : rows;
    for (int q = 0; q < W; q++) {
        tr->read[q] += B * L * row;
        // The sparse gradient exchange: every rank's touched rows (key + row) to every other.
        for (int d = 0; d < W; d++)
            if (d != q) ember__traffic_send(tr, q, d, touched * (8 + out));
    }
}

const ember__scheme_ops ember__scheme_dp = {
    .scheme = EMBER_SHARD_DATA_PARALLEL, .name = "data_parallel", .short_name = "dp", .validate = validate,
    .cut = cut, .partial = 0, .plan_fields = 0, .bucket = bucket, .build_home = build_home, .home_forward = home_forward,
    .backward_prepare = backward_prepare, .backward_apply = backward_apply, .step_traffic = step_traffic,
};
