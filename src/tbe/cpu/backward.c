// The cpu backend's fused backward (docs/semantics.md §4): sort-and-segment coalescing of duplicate ids, then exactly
// one optimizer update per touched row.
//
//   1. every kept id at position j of a feature reading table t becomes an entry (row, item)
//      in table t's slice of the entry arrays; the item says where its gradient comes from
//      (below). Features are feature-major in `values`, so a table's entries are built in
//      position order;
//   2. each table's slice is sorted by row with a stable LSD radix sort. Tables are
//      independent, so threads sort whole tables (a slice of ~10^4 entries sorts in L2), and
//      the result is the same whoever sorts which table. Stability keeps positions ascending
//      within a row, so each row's gradient g = sum_j s_j * dL/dy[bag(j)] is summed in value
//      order;
//   3. the unique rows (segments), table after table, are split into contiguous per-thread
//      chunks of about equal cost; each thread reduces its segments' gradients and applies
//      their updates, prefetching the rows (and optimizer state) a few segments ahead. Sorted
//      rows are visited in ascending address order: each table's slab is read once.
// No float atomics and a fixed summation order: bitwise identical for any thread count.
//
// The item of an entry is the bag (f*B + b) for pooled, unweighted KJTs: the gradient source
// is then two small per-bag tables (offset of dL/dy's slice, 1 or 1/|I|) instead of a
// per-position bag lookup. Weighted KJTs and sequence (NONE) collections need the position
// itself (for w_j, or the output row), so their item is the position.
#include <math.h>
#include <string.h>


#include "tbe/cpu/isa/isa.h"

// Workspace slots (slot 0 is the offsets array shared with forward).
enum { WS_OFFSETS = 0, WS_ENT, WS_BAG, WS_TAB, WS_ROWBUF, WS_GOFF, WS_GRAD, WS_UKEY };

// Stable LSD radix sort of n (row, item) pairs by row, rows in [0, 2^bits). Digits of at most 11
// bits (a 16 KiB count table), balanced over the passes: 17-bit rows (1e5) take two 9-bit passes.
// A pass whose digit is the same for every entry is skipped. The result is in row/item.
static void sort_slice(int64_t *row, int64_t *item, int64_t *row_tmp, int64_t *item_tmp, int64_t n, int bits) {
    if (n < 2 || bits == 0) return;
    const int passes = (bits + 10) / 11, width = (bits + passes - 1) / passes;
    const int64_t mask = ((int64_t)1 << width) - 1;
    int64_t count[1 << 11];
    int64_t *r0 = row, *i0 = item;
    for (int p = 0; p < passes; p++) {
        const int shift = p * width;
        memset(count, 0, sizeof(int64_t) << width);
        for (int64_t i = 0; i < n; i++) count[(row[i] >> shift) & mask]++;
        if (count[(row[0] >> shift) & mask] == n) continue;
        int64_t sum = 0;
        for (int64_t b = 0; b <= mask; b++) {
            const int64_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++) {
            const int64_t d = count[(row[i] >> shift) & mask]++;
            row_tmp[d] = row[i];
            item_tmp[d] = item[i];
        }
        int64_t *t = row; row = row_tmp; row_tmp = t;
        t = item; item = item_tmp; item_tmp = t;
    }
    if (row != r0) {
        memcpy(r0, row, sizeof(int64_t) * (size_t)n);
        memcpy(i0, item, sizeof(int64_t) * (size_t)n);
    }
}

static int bits_for(int64_t rows) {
    int b = 0;
    while (b < 63 && ((int64_t)1 << b) < rows) b++;
    return b;
}

// Fills and sorts table t's slice [tstart[t], tstart[t+1]) of the entry arrays, and writes its
// segment starts (absolute entry indices) to seg_tmp from tstart[t]; returns their count.
static int64_t build_table(const ember_ebc *ebc, const ember__segments *s, int32_t t, const int64_t *tstart,
                           int64_t *row, int64_t *item, int64_t *row_tmp, int64_t *item_tmp, int64_t *seg_tmp,
                           int resolve_ids) {
    const ember__table *tb = &ebc->tables[t];
    const ember_kjt *kjt = s->kjt;
    const int32_t B = kjt->batch_size;
    const int64_t rows = tb->cfg.rows, e0 = tstart[t];
    int64_t e = e0;
    for (int32_t f = 0; f < ebc->F; f++) {
        if (ebc->feature_table[f] != t) continue;
        for (int64_t i = (int64_t)f * B; i < (int64_t)(f + 1) * B; i++) {
            for (int64_t j = s->off[i]; j < s->off[i + 1]; j++) {
                int64_t id = kjt->values[j];
                if (resolve_ids && (id = ember__resolve_id(id, rows, ebc->kbounds)) < 0) continue;
                row[e] = id;
                item[e] = s->kind == EMBER__ITEM_BAG ? i : j;
                e++;
            }
        }
    }
    const int64_t n = e - e0;
    sort_slice(row + e0, item + e0, row_tmp + e0, item_tmp + e0, n, bits_for(rows));
    int64_t u = 0;
    for (int64_t k = e0; k < e0 + n; k++)
        if (k == e0 || row[k] != row[k - 1]) seg_tmp[e0 + u++] = k;
    return u;
}

static ember_status build_segments(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, ember__segments *s) {
    // The caller validated the KJT: under EMBER_BOUNDS_ERROR every id is a row as is; under
    // CLAMP/SKIP each id is resolved while the entries are built (a predictable compare).
    // Mapped tables' ids were translated (rowmap.h): rows, or -1 resolved as SKIP.
    const int resolve_ids = ebc->kbounds != EMBER_BOUNDS_ERROR;
    const size_t nnz = (size_t)kjt->nnz, T = (size_t)ebc->T;
    const int32_t B = kjt->batch_size;
    const int64_t nbags = (int64_t)ebc->F * B;
    const enum ember__item_kind kind = ebc->sequence  ? EMBER__ITEM_POS_SEQ
                                       : kjt->weights ? EMBER__ITEM_POS_POOLED
                                                      : EMBER__ITEM_BAG;
    // One block of int64 arrays: row, item, row_tmp, item_tmp, seg_tmp [nnz]; seg [nnz+1];
    // bag_of [nnz] (weighted pooled only).
    const size_t nent = nnz ? nnz : 1;
    int64_t *ent = ember__ws_get(ebc, WS_ENT, sizeof(int64_t) * (nent * (kind == EMBER__ITEM_POS_POOLED ? 7 : 6) + 1));
    void *bagbuf = ember__ws_get(ebc, WS_BAG, (sizeof(float) + sizeof(int64_t)) * (size_t)(nbags + 1));
    void *tabbuf = ember__ws_get(ebc, WS_TAB, (sizeof(int64_t) * 3 + sizeof(ember__optim_step)) * (T + 1));
    if (!ent || !bagbuf || !tabbuf) return EMBER_ERR_NOMEM;
    int64_t *row = ent, *item = ent + nent, *row_tmp = ent + 2 * nent, *item_tmp = ent + 3 * nent;
    int64_t *seg_tmp = ent + 4 * nent, *seg = ent + 5 * nent, *bag_of = ent + 6 * nent + 1;
    int64_t *bag_goff = bagbuf;
    float *bag_c = (float *)(void *)(bag_goff + nbags + 1);
    int64_t *tstart = tabbuf, *tseg = tstart + (T + 1), *tcount = tseg + (T + 1);
    ember__optim_step *step = (ember__optim_step *)(tcount + (T + 1));

    // Per bag: where its dL/dy slice is, its MEAN scale (kept ids), its entry count by table.
    for (size_t t = 0; t <= T; t++) tcount[t] = 0;
    for (int32_t f = 0; f < ebc->F; f++) {
        const ember__table *tb = &ebc->tables[ebc->feature_table[f]];
        for (int32_t b = 0; b < B; b++) {
            const int64_t i = (int64_t)f * B + b;
            int64_t kept = off[i + 1] - off[i];
            if (ebc->kbounds == EMBER_BOUNDS_SKIP) {
                for (int64_t j = off[i]; j < off[i + 1]; j++)
                    kept -= kjt->values[j] < 0 || kjt->values[j] >= tb->cfg.rows;
            }
            tcount[ebc->feature_table[f]] += kept;
            bag_goff[i] = (int64_t)b * ebc->out_dim + ebc->feature_col[f];
            // MEAN: y = (1/|I|) sum_j w_j E[id_j], so each id's gradient carries 1/|I|.
            bag_c[i] = tb->cfg.pooling == EMBER_POOL_MEAN && kept > 0 ? 1.0f / (float)kept : 1.0f;
            if (kind == EMBER__ITEM_POS_POOLED)
                for (int64_t j = off[i]; j < off[i + 1]; j++) bag_of[j] = i;
        }
    }
    tstart[0] = 0;
    for (size_t t = 0; t < T; t++) tstart[t + 1] = tstart[t] + tcount[t];
    *s = (ember__segments){kjt, off, kind, tstart[T], 0, row, item, seg, tseg, bag_c, bag_goff, bag_of, step};

    // Tables in parallel (dynamic: table sizes differ); each table's result does not depend on
    // which thread built it. tcount[t] becomes table t's segment count, then segments are
    // numbered table after table.
#pragma omp parallel num_threads(ember__threads(ebc->ctx))
    {
#pragma omp for schedule(dynamic, 1)
        for (int32_t t = 0; t < ebc->T; t++)
            tcount[t] = build_table(ebc, s, t, tstart, row, item, row_tmp, item_tmp, seg_tmp, resolve_ids);
#pragma omp single
        {
            tseg[0] = 0;
            for (size_t t = 0; t < T; t++) tseg[t + 1] = tseg[t] + tcount[t];
            seg[tseg[T]] = s->m;
            s->u = tseg[T];
        }
#pragma omp for schedule(dynamic, 1)
        for (int32_t t = 0; t < ebc->T; t++)
            memcpy(seg + tseg[t], seg_tmp + tstart[t], sizeof(int64_t) * (size_t)tcount[t]);
    }
    return EMBER_OK;
}

// grad_weights[j] = c_bag * <dL/dy, E[id_j]>: the derivative of the pooled output with respect
// to the per-id weight, with the weights before any update.
static void weight_grads(ember_ebc *ebc, const ember__segments *s, const float *grad_out, float *grad_weights,
                         float *scratch) {
    const ember_kjt *kjt = s->kjt;
    const int32_t B = kjt->batch_size;
    const int64_t nbags = (int64_t)ebc->F * B;
#pragma omp parallel for schedule(dynamic, 64) num_threads(ember__threads(ebc->ctx))
    for (int64_t i = 0; i < nbags; i++) {
        float *row = scratch + (size_t)2 * (size_t)ebc->max_dim * (size_t)ember__thread_id();
        const ember__table *tb = &ebc->tables[ebc->feature_table[i / B]];
        const int32_t D = tb->cfg.dim;
        for (int64_t j = s->off[i]; j < s->off[i + 1]; j++) {
            const int64_t id = ember__resolve_id(kjt->values[j], tb->cfg.rows, ebc->kbounds);
            if (id < 0) {
                grad_weights[j] = 0.0f;
                continue;
            }
            ember__load_row(tb->cfg.dtype, ember__row_ptr(tb, id), row, D);
            const float *go = ebc->sequence ? grad_out + (size_t)j * (size_t)ebc->out_dim : grad_out + s->bag_goff[i];
            float dot = 0.0f;
            for (int32_t d = 0; d < D; d++) dot += go[d] * row[d];
            grad_weights[j] = s->bag_c[i] * dot;
        }
    }
}

// Per-thread scratch: two rows of max_dim floats per thread.
static float *row_scratch(ember_ebc *ebc) {
    return ember__ws_get(ebc, WS_ROWBUF, sizeof(float) * 2 * (size_t)ebc->max_dim * (size_t)ember__threads(ebc->ctx));
}

// Advances every table's step counter and computes its step constants.
static void begin_step(ember_ebc *ebc, ember__optim_step *step) {
    for (int32_t t = 0; t < ebc->T; t++) {
        ebc->tables[t].step++;
        ember__optim_prepare(&ebc->tables[t], ebc->seed, &step[t]);
    }
}

ember_status ember__cpu_backward_prepare(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, ember__segments *s) {
    EMBER_TRY(build_segments(ebc, kjt, off, s));
    return row_scratch(ebc) ? EMBER_OK : EMBER_ERR_NOMEM;
}

ember_status ember__cpu_backward_apply(ember_ebc *ebc, const ember__segments *s, const float *grad_out, float *grad_weights) {
    float *scratch = ebc->ws[WS_ROWBUF].p; // reserved by prepare
    // Nothing here can fail: the update is all or nothing.
    if (grad_weights) weight_grads(ebc, s, grad_out, grad_weights, scratch);
    begin_step(ebc, s->step);
    const int nt = ember__threads(ebc->ctx), nc = ember__chunks(nt);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int c = 0; c < nc; c++) {
        float *g = scratch + (size_t)2 * (size_t)ebc->max_dim * (size_t)ember__thread_id();
        ember__cpu_kern(ebc)->update_segments(ebc, s, grad_out, ember__split(s->seg, s->u, EMBER__SEGMENT_COST, c, nc),
                                   ember__split(s->seg, s->u, EMBER__SEGMENT_COST, c + 1, nc), g, g + ebc->max_dim);
    }
    return EMBER_OK;
}

ember_status ember__cpu_coalesce(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, const float *grad_out,
                                 ember__sparse_grad *out) {
    ember__segments s;
    EMBER_TRY(build_segments(ebc, kjt, off, &s));
    int64_t *goff = ember__ws_get(ebc, WS_GOFF, sizeof(int64_t) * (size_t)(s.u + 1));
    int64_t *ukey = ember__ws_get(ebc, WS_UKEY, sizeof(int64_t) * (size_t)(s.u > 0 ? s.u : 1));
    // And ember__ebc_apply's rows (its step constants go in WS_TAB, which build_segments sized).
    if (!goff || !ukey || !row_scratch(ebc)) return EMBER_ERR_NOMEM;
    goff[0] = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        const ember__table *tb = &ebc->tables[t];
        for (int64_t k = s.tseg[t]; k < s.tseg[t + 1]; k++) {
            ukey[k] = tb->key_base + s.row[s.seg[k]];
            goff[k + 1] = goff[k] + tb->cfg.dim;
        }
    }
    float *grad = ember__ws_get(ebc, WS_GRAD, sizeof(float) * (size_t)(goff[s.u] > 0 ? goff[s.u] : 1));
    if (!grad) return EMBER_ERR_NOMEM;
    const int nt = ember__threads(ebc->ctx), nc = ember__chunks(nt);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int c = 0; c < nc; c++) {
        const int64_t k1 = ember__split(s.seg, s.u, EMBER__SEGMENT_COST, c + 1, nc);
        for (int64_t k = ember__split(s.seg, s.u, EMBER__SEGMENT_COST, c, nc); k < k1; k++)
            ember__cpu_kern(ebc)->reduce_segment(ebc, &s, grad_out, k, (int32_t)(goff[k + 1] - goff[k]), grad + goff[k]);
    }
    *out = (ember__sparse_grad){s.u, ukey, goff, grad};
    return EMBER_OK;
}

ember_status ember__cpu_apply(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad, int64_t n,
                              const float *row_sumsq) {
    float *scratch = row_scratch(ebc);
    ember__optim_step *step = ember__ws_get(ebc, WS_TAB, sizeof(ember__optim_step) * (size_t)ebc->T);
    if (!scratch || !step) return EMBER_ERR_NOMEM;
    begin_step(ebc, step);
    // Contiguous chunks balanced by gradient floats plus a per-row cost, prefetching ahead.
    const int nt = ember__threads(ebc->ctx), nc = ember__chunks(nt);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int c = 0; c < nc; c++) {
        float *g = scratch + (size_t)2 * (size_t)ebc->max_dim * (size_t)ember__thread_id();
        float *w = g + ebc->max_dim;
        const int64_t k0 = ember__split(goff, n, 64, c, nc), k1 = ember__split(goff, n, 64, c + 1, nc);
        for (int64_t k = k0; k < k1; k++) {
            const int32_t t = ember__ebc_key_table(ebc, key[k]);
            const ember__table *tb = &ebc->tables[t];
            const int64_t kp = k + ember__prefetch_ids(tb->row_bytes);
            if (kp < k1) {
                const ember__table *tp = &ebc->tables[ember__ebc_key_table(ebc, key[kp])];
                ember__prefetch_update(tp, key[kp] - tp->key_base);
            }
            memcpy(g, grad + goff[k], sizeof(float) * (size_t)tb->cfg.dim);
            ember__optim_step st = step[t];
            if (row_sumsq && row_sumsq[k] >= 0.0f) st.row_sumsq = row_sumsq[k];
            ember__cpu_kern(ebc)->update_row(ebc, tb, &st, key[k] - tb->key_base, g, w);
        }
    }
    return EMBER_OK;
}

ember_status ember__cpu_row_sumsq(ember_ebc *ebc, const ember__sparse_grad *g, float *out) {
    float *scratch = row_scratch(ebc);
    if (!scratch) return EMBER_ERR_NOMEM;
    for (int64_t k = 0; k < g->n; k++) {
        const ember__table *tb = &ebc->tables[ember__ebc_key_table(ebc, g->key[k])];
        if (!tb->optim->rowwise_sumsq) {
            out[k] = -1.0f;
            continue;
        }
        const int32_t D = tb->cfg.dim;
        const float *gr = g->grad + g->goff[k];
        // The optimizer adds L2 weight decay to g before squaring: do the same here.
        const float l2 = tb->cfg.optim.weight_decay_mode == EMBER_WD_L2 ? tb->cfg.optim.weight_decay : 0.0f;
        ember__load_row(tb->cfg.dtype, ember__row_ptr(tb, g->key[k] - tb->key_base), scratch, D);
        float ss = 0.0f;
        for (int32_t d = 0; d < D; d++) {
            const float v = gr[d] + l2 * scratch[d];
            ss += v * v;
        }
        out[k] = ss;
    }
    return EMBER_OK;
}
