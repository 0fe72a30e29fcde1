// Fused backward (DESIGN.md §1.5): sort-and-segment coalescing of duplicate ids, then exactly
// one optimizer update per touched row.
//
//   1. every kept id at position j becomes (key = key_base[table] + row, j); its gradient scale
//      is s_j = w_j * c_bag with c_bag = 1 (SUM) or 1/|I| (MEAN);
//   2. a stable LSD radix sort by key keeps positions ascending within a key, so each row's
//      gradient g = sum_j s_j * grad_out[bag(j)] is summed in value order by one thread;
//   3. rows are independent: threads split the segments, each applies its rows' updates.
// No float atomics and a fixed summation order: bitwise identical for any thread count.
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tbe/dtype.h"
#include "tbe/internal.h"

enum { WS_OFFSETS = 0, WS_KEY, WS_KEY_TMP, WS_POS, WS_POS_TMP, WS_BAGC, WS_SEG, WS_ROWBUF, WS_GOFF, WS_GRAD, WS_BAGOF };

void ember__optim_row(const ember__table *t, int64_t row, float *restrict w, float *restrict g, float sumsq);
void ember__load_row(ember_dtype dt, const void *src, float *dst, int32_t n);
void ember__store_row(ember_dtype dt, void *dst, const float *src, int32_t n);
const int64_t *ember__ebc_offsets(ember_ebc *ebc, const ember_kjt *kjt);
ember_status ember__ebc_check_forward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname);

static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// The sorted (key, position) list of one backward call.
typedef struct segments {
    const ember_kjt *kjt;
    const int64_t *off;   // [F*B+1]
    int64_t m;            // kept ids
    int64_t u;            // unique keys
    const int64_t *key;   // [m] sorted
    const int64_t *pos;   // [m] value positions, ascending within a key
    const int64_t *seg;   // [u+1] segment starts
    const float *bag_c;   // [F*B] c_bag: 1 (SUM) or 1/|I| (MEAN)
    const int64_t *bag;   // [nnz] bag of value position j
} segments;

ember_status ember__ebc_check_backward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const float *grad_out) {
    EMBER_TRY(ember__ebc_check_forward(ebc, fn, kjt, grad_out, "grad_out"));
    const int64_t n = ember_ebc_output_size(ebc, kjt);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(grad_out[i])) {
            return ember__error(ebc->ctx, EMBER_ERR_NUMERIC, "%s: grad_out[%lld][%lld] is %g", fn,
                                (long long)(i / ebc->out_dim), (long long)(i % ebc->out_dim), (double)grad_out[i]);
        }
    }
    return EMBER_OK;
}

// Stable LSD radix sort of (key, pos) pairs by key, keys in [0, limit). The result is in
// key/pos (the scratch arrays are clobbered).
static void radix_sort(int64_t *key, int64_t *pos, int64_t *key_tmp, int64_t *pos_tmp, int64_t m, int64_t limit) {
    enum { BITS = 11, NB = 1 << BITS };
    int bits = 0;
    while (bits < 63 && ((int64_t)1 << bits) < limit) bits++;
    int64_t count[NB];
    int64_t *k0 = key, *p0 = pos;
    for (int shift = 0; shift < bits; shift += BITS) {
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < m; i++) count[(key[i] >> shift) & (NB - 1)]++;
        int64_t sum = 0;
        for (int b = 0; b < NB; b++) {
            int64_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < m; i++) {
            int64_t d = count[(key[i] >> shift) & (NB - 1)]++;
            key_tmp[d] = key[i];
            pos_tmp[d] = pos[i];
        }
        int64_t *t = key; key = key_tmp; key_tmp = t;
        t = pos; pos = pos_tmp; pos_tmp = t;
    }
    if (key != k0) {
        memcpy(k0, key, sizeof(int64_t) * (size_t)m);
        memcpy(p0, pos, sizeof(int64_t) * (size_t)m);
    }
}

static ember_status build_segments(ember_ebc *ebc, const ember_kjt *kjt, segments *s) {
    const int64_t *off = ember__ebc_offsets(ebc, kjt);
    const size_t nnz = (size_t)kjt->nnz;
    const int32_t B = kjt->batch_size;
    const int64_t nbags = (int64_t)ebc->F * B;
    int64_t *key = ember__ws_get(ebc, WS_KEY, sizeof(int64_t) * nnz);
    int64_t *key_tmp = ember__ws_get(ebc, WS_KEY_TMP, sizeof(int64_t) * nnz);
    int64_t *pos = ember__ws_get(ebc, WS_POS, sizeof(int64_t) * nnz);
    int64_t *pos_tmp = ember__ws_get(ebc, WS_POS_TMP, sizeof(int64_t) * nnz);
    float *bag_c = ember__ws_get(ebc, WS_BAGC, sizeof(float) * (size_t)nbags);
    int64_t *seg = ember__ws_get(ebc, WS_SEG, sizeof(int64_t) * (nnz + 1));
    int64_t *bag = ember__ws_get(ebc, WS_BAGOF, sizeof(int64_t) * nnz);
    if (!off || !key || !key_tmp || !pos || !pos_tmp || !bag_c || !seg || !bag) return EMBER_ERR_NOMEM;
    int64_t m = 0;
    for (int64_t i = 0; i < nbags; i++) {
        const ember__table *tb = &ebc->tables[ebc->feature_table[i / B]];
        const int64_t rows = tb->cfg.rows;
        int64_t kept = 0;
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            int64_t id = kjt->values[j];
            bag[j] = i;
            if (id < 0 || id >= rows) {
                if (ebc->bounds == EMBER_BOUNDS_SKIP) continue;
                id = id < 0 ? 0 : rows - 1;
            }
            key[m] = tb->key_base + id;
            pos[m] = j;
            m++;
            kept++;
        }
        // MEAN: y = (1/|I|) sum_j w_j E[id_j], so each id's gradient carries 1/|I|.
        bag_c[i] = tb->cfg.pooling == EMBER_POOL_MEAN && kept > 0 ? 1.0f / (float)kept : 1.0f;
    }
    radix_sort(key, pos, key_tmp, pos_tmp, m, ebc->total_keys);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++)
        if (i == 0 || key[i] != key[i - 1]) seg[u++] = i;
    seg[u] = m;
    *s = (segments){kjt, off, m, u, key, pos, seg, bag_c, bag};
    return EMBER_OK;
}

// dL/dy for the output that position j (in bag `bag`) contributed to: pooled bag (f, b) is
// output row b at feature f's columns; a sequence (NONE) collection has one row per position.
static inline const float *grad_row(const ember_ebc *ebc, const segments *s, const float *grad_out, int64_t j,
                                    int64_t bag) {
    if (ebc->sequence) return grad_out + (size_t)j * (size_t)ebc->out_dim;
    const int64_t B = s->kjt->batch_size;
    return grad_out + (size_t)(bag % B) * (size_t)ebc->out_dim + (size_t)ebc->feature_col[bag / B];
}

// g[0..D) = coalesced gradient of segment k, summed in position order.
static void reduce_segment(const ember_ebc *ebc, const segments *s, const float *grad_out, int64_t k, int32_t D,
                           float *restrict g) {
    memset(g, 0, sizeof(float) * (size_t)D);
    const float *wts = s->kjt->weights;
    for (int64_t i = s->seg[k]; i < s->seg[k + 1]; i++) {
        const int64_t j = s->pos[i];
        const int64_t bag = s->bag[j];
        const float sc = (wts ? wts[j] : 1.0f) * s->bag_c[bag];
        const float *restrict go = grad_row(ebc, s, grad_out, j, bag);
        for (int32_t d = 0; d < D; d++) g[d] += sc * go[d];
    }
}

// Stochastic-rounding bits of (seed, table, step, row, column): independent of threads.
static inline uint32_t sr_bits(const ember_ebc *ebc, const ember__table *tb, int64_t row, int32_t d) {
    uint64_t k = ember__mix64(ebc->seed ^ tb->name_hash ^ ember__mix64((uint64_t)tb->step));
    return (uint32_t)ember__mix64(k ^ ember__mix64(((uint64_t)row << 20) ^ (uint64_t)d));
}

// One optimizer update of `row` of table tb with gradient g (clobbered); w is scratch [D].
static void update_row(const ember_ebc *ebc, const ember__table *tb, int64_t row, float *restrict g,
                       float *restrict w, float sumsq) {
    const int32_t D = tb->cfg.dim;
    unsigned char *p = ember__row_ptr(ebc, tb, row);
    if (tb->cfg.dtype == EMBER_DTYPE_F32) {
        ember__optim_row(tb, row, (float *)p, g, sumsq);
        return;
    }
    ember__load_row(tb->cfg.dtype, p, w, D);
    ember__optim_row(tb, row, w, g, sumsq);
    uint16_t *h = (uint16_t *)p;
    if (!tb->cfg.stochastic_rounding) {
        ember__store_row(tb->cfg.dtype, p, w, D);
    } else if (tb->cfg.dtype == EMBER_DTYPE_BF16) {
        for (int32_t d = 0; d < D; d++) h[d] = ember__f32_to_bf16_sr(w[d], sr_bits(ebc, tb, row, d));
    } else {
        for (int32_t d = 0; d < D; d++) h[d] = ember__f32_to_f16_sr(w[d], sr_bits(ebc, tb, row, d));
    }
}

// Per-thread scratch: two rows of max_dim floats per thread.
static float *row_scratch(ember_ebc *ebc) {
    return ember__ws_get(ebc, WS_ROWBUF, sizeof(float) * 2 * (size_t)ebc->max_dim * (size_t)ember__threads(ebc->ctx));
}

// grad_weights[j] = c_bag * <dL/dy, E[id_j]>: the derivative of the pooled output with respect
// to the per-id weight, with the weights before any update.
static void weight_grads(ember_ebc *ebc, const segments *s, const float *grad_out, float *grad_weights,
                         float *scratch) {
    const ember_kjt *kjt = s->kjt;
    const int32_t B = kjt->batch_size;
    const int64_t nbags = (int64_t)ebc->F * B;
#pragma omp parallel for schedule(static) num_threads(ember__threads(ebc->ctx))
    for (int64_t i = 0; i < nbags; i++) {
        float *row = scratch + (size_t)2 * (size_t)ebc->max_dim * (size_t)thread_id();
        const ember__table *tb = &ebc->tables[ebc->feature_table[i / B]];
        const int32_t D = tb->cfg.dim;
        for (int64_t j = s->off[i]; j < s->off[i + 1]; j++) {
            int64_t id = kjt->values[j];
            if (id < 0 || id >= tb->cfg.rows) {
                if (ebc->bounds == EMBER_BOUNDS_SKIP) {
                    grad_weights[j] = 0.0f;
                    continue;
                }
                id = id < 0 ? 0 : tb->cfg.rows - 1;
            }
            ember__load_row(tb->cfg.dtype, ember__row_ptr(ebc, tb, id), row, D);
            const float *go = grad_row(ebc, s, grad_out, j, i);
            float dot = 0.0f;
            for (int32_t d = 0; d < D; d++) dot += go[d] * row[d];
            grad_weights[j] = s->bag_c[i] * dot;
        }
    }
}

ember_status ember_ebc_backward(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out, float *grad_weights) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_ebc_backward";
    EMBER_TRY(ember__ebc_check_backward(ebc, fn, kjt, grad_out));
    EMBER_CHECK(ebc->ctx, !grad_weights || kjt->weights, EMBER_ERR_INVALID_ARG,
                "%s: grad_weights requested but the kjt has no weights", fn);
    segments s;
    EMBER_TRY(build_segments(ebc, kjt, &s));
    float *scratch = row_scratch(ebc);
    if (!scratch) return EMBER_ERR_NOMEM;
    // From here on nothing can fail: the update is all or nothing.
    if (grad_weights) weight_grads(ebc, &s, grad_out, grad_weights, scratch);
    for (int32_t t = 0; t < ebc->T; t++) ebc->tables[t].step++;
#pragma omp parallel for schedule(dynamic, 64) num_threads(ember__threads(ebc->ctx))
    for (int64_t k = 0; k < s.u; k++) {
        float *g = scratch + (size_t)2 * (size_t)ebc->max_dim * (size_t)thread_id();
        float *w = g + ebc->max_dim;
        const int64_t key = s.key[s.seg[k]];
        const ember__table *tb = &ebc->tables[ember__ebc_key_table(ebc, key)];
        reduce_segment(ebc, &s, grad_out, k, tb->cfg.dim, g);
        update_row(ebc, tb, key - tb->key_base, g, w, -1.0f);
    }
    return EMBER_OK;
}

ember_status ember__ebc_coalesce(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out,
                                 ember__sparse_grad *out) {
    segments s;
    EMBER_TRY(build_segments(ebc, kjt, &s));
    int64_t *goff = ember__ws_get(ebc, WS_GOFF, sizeof(int64_t) * (size_t)(s.u + 1));
    if (!goff) return EMBER_ERR_NOMEM;
    goff[0] = 0;
    for (int64_t k = 0; k < s.u; k++) {
        const int64_t key = s.key[s.seg[k]];
        goff[k + 1] = goff[k] + ebc->tables[ember__ebc_key_table(ebc, key)].cfg.dim;
    }
    float *grad = ember__ws_get(ebc, WS_GRAD, sizeof(float) * (size_t)(goff[s.u] > 0 ? goff[s.u] : 1));
    // The unique keys are compacted into the (now free) scratch key array.
    int64_t *ukey = ember__ws_get(ebc, WS_KEY_TMP, sizeof(int64_t) * (size_t)(s.u > 0 ? s.u : 1));
    if (!grad || !ukey) return EMBER_ERR_NOMEM;
#pragma omp parallel for schedule(dynamic, 64) num_threads(ember__threads(ebc->ctx))
    for (int64_t k = 0; k < s.u; k++) {
        const int64_t key = s.key[s.seg[k]];
        ukey[k] = key;
        reduce_segment(ebc, &s, grad_out, k, (int32_t)(goff[k + 1] - goff[k]), grad + goff[k]);
    }
    *out = (ember__sparse_grad){s.u, ukey, goff, grad};
    return EMBER_OK;
}

ember_status ember__ebc_apply(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad, int64_t n,
                              const float *row_sumsq) {
    float *scratch = row_scratch(ebc);
    if (!scratch) return EMBER_ERR_NOMEM;
    for (int32_t t = 0; t < ebc->T; t++) ebc->tables[t].step++;
#pragma omp parallel for schedule(dynamic, 64) num_threads(ember__threads(ebc->ctx))
    for (int64_t k = 0; k < n; k++) {
        float *g = scratch + (size_t)2 * (size_t)ebc->max_dim * (size_t)thread_id();
        float *w = g + ebc->max_dim;
        const ember__table *tb = &ebc->tables[ember__ebc_key_table(ebc, key[k])];
        memcpy(g, grad + goff[k], sizeof(float) * (size_t)tb->cfg.dim);
        update_row(ebc, tb, key[k] - tb->key_base, g, w, row_sumsq ? row_sumsq[k] : -1.0f);
    }
    return EMBER_OK;
}

ember_status ember__ebc_row_sumsq(ember_ebc *ebc, const ember__sparse_grad *g, float *out) {
    float *scratch = row_scratch(ebc);
    if (!scratch) return EMBER_ERR_NOMEM;
    for (int64_t k = 0; k < g->n; k++) {
        const ember__table *tb = &ebc->tables[ember__ebc_key_table(ebc, g->key[k])];
        const ember_optim_kind kind = tb->cfg.optim.kind;
        if (kind != EMBER_OPT_ROWWISE_ADAGRAD && kind != EMBER_OPT_PARTIAL_ROWWISE_ADAM) {
            out[k] = -1.0f;
            continue;
        }
        const int32_t D = tb->cfg.dim;
        const float *gr = g->grad + g->goff[k];
        // The optimizer adds L2 weight decay to g before squaring: do the same here.
        const float l2 = tb->cfg.optim.weight_decay_mode == EMBER_WD_L2 ? tb->cfg.optim.weight_decay : 0.0f;
        ember__load_row(tb->cfg.dtype, ember__row_ptr(ebc, tb, g->key[k] - tb->key_base), scratch, D);
        float ss = 0.0f;
        for (int32_t d = 0; d < D; d++) {
            const float v = gr[d] + l2 * scratch[d];
            ss += v * v;
        }
        out[k] = ss;
    }
    return EMBER_OK;
}
