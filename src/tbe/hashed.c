// Collisionless hashed tables (docs/hashed.md): arbitrary 64-bit ids, each with a row of its own.
//
// The table's rows are split into buckets of bucket_rows rows (set-associative): id x lives in
// global bucket ember__hash_bucket(x, buckets), in any free slot of it; its row is
// bucket * bucket_rows + slot. A bucket only ever sees its own ids, in call order, so the same
// table cut into bucket-aligned row blocks (row-wise sharding by hash) evolves exactly as the
// whole table. Per row: the id, the step it was last used, and its uses since admission.
//
// The clock is the table's step counter: a forward's rows are used at step + 1 (the step its
// backward makes), so a restored step restores the clock. Each id occurrence, in call order:
//   - resident (and not expired under TTL): present;
//   - otherwise a candidate: with min_count > 1 its occurrence count goes up (a bucket keeps
//     bucket_rows candidates; a new one replaces the least recently seen), and at min_count it
//     is admitted. Admission takes the bucket's lowest free slot, else evicts the policy's
//     victim among rows this call has not used (LRU: least recent step, LFU: fewest uses then
//     least recent; ties by slot). A bucket whose rows are all in use by this call admits no
//     more in it: the id is absent for the call (stats.overflow).
//   - an admitted row starts from the initialiser as a function of the id (not the slot) and
//     the optimizer's fresh state: an evicted id that comes back starts over.
// Then every occurrence of an id with a row reads it and counts as a use (an id admitted at its
// min_count-th occurrence is present for all its occurrences in the call). Ids without a row
// are absent (-1): they contribute nothing and do not count in MEAN.
// Backward and evaluation forwards only look up.
#include <string.h>

#include "ember/rng.h"
#include "core/dtype.h"
#include "tbe/backend.h"
#include "tbe/rowmap.h"

typedef struct hashed {
    ember__rowmap hdr;
    int64_t rows, br;          // local rows, rows per bucket
    int64_t nb, b0, nb_global; // local buckets, first global bucket, global buckets
    int64_t min_count, ttl;
    ember_evict_policy policy;
    int64_t *id, *last, *uses; // [rows]
    unsigned char *occ;        // [rows] 1: the row holds an id
    int64_t *pin;              // [rows] call that used it
    int64_t *cand_id, *cand_cnt, *cand_last; // [rows]: bucket_rows candidates per bucket (cnt 0: none)
    int64_t now, call;         // the step of the current call (the table's step + 1), calls
    float *row;                // [dim] scratch
    ember_hash_stats stats;
} hashed;

static inline int expired(const hashed *m, int64_t r) {
    return m->policy == EMBER_EVICT_TTL && m->occ[r] && m->now - m->last[r] > m->ttl;
}

// Local row of id x, or -1. Fills *bucket with its local bucket (-1 when not this table's).
static int64_t find(const hashed *m, int64_t x, int64_t *bucket) {
    const int64_t b = ember__hash_bucket(x, m->nb_global) - m->b0;
    *bucket = b >= 0 && b < m->nb ? b : -1;
    if (*bucket < 0) return -1;
    for (int64_t r = b * m->br; r < (b + 1) * m->br; r++)
        if (m->occ[r] && m->id[r] == x) return r;
    return -1;
}

// Fresh row r for id x: initial weights of the id, fresh optimizer state (m->row holds dim
// floats, and m1_cols, m2_cols <= dim). The row calls cannot fail: hashed tables live on the cpu
// backend alone (ember__ebc_check_config).
static void fresh_row(ember_ebc *ebc, hashed *m, const ember__table *tb, int64_t r, int64_t x) {
    ember__init_global(ebc, tb, x, m->row);
    (void)ebc->be->write_rows(ebc, tb, 0, r, 1, EMBER_DTYPE_F32, m->row);
    const float a = tb->optim->adagrad_init ? tb->cfg.optim.initial_accumulator : 0.0f;
    for (int32_t i = 0; i < tb->m1_cols; i++) m->row[i] = a;
    if (tb->m1_cols) (void)ebc->be->write_rows(ebc, tb, 1, r, 1, EMBER_DTYPE_F32, m->row);
    for (int32_t i = 0; i < tb->m2_cols; i++) m->row[i] = 0.0f;
    if (tb->m2_cols) (void)ebc->be->write_rows(ebc, tb, 2, r, 1, EMBER_DTYPE_F32, m->row);
}

static inline int worse(const hashed *m, int64_t a, int64_t b) { // a is a better victim than b
    if (m->policy == EMBER_EVICT_LFU && m->uses[a] != m->uses[b]) return m->uses[a] < m->uses[b];
    if (m->last[a] != m->last[b]) return m->last[a] < m->last[b];
    return a < b;
}

// Counts an occurrence of candidate x in bucket b; 1 when it reaches min_count.
static int admit_count(hashed *m, ember__table *tb, int64_t b, int64_t x) {
    if (m->min_count <= 1) return 1;
    int64_t *id = m->cand_id + b * m->br, *cnt = m->cand_cnt + b * m->br, *last = m->cand_last + b * m->br;
    int64_t k = -1, victim = 0;
    for (int64_t i = 0; i < m->br; i++) {
        if (cnt[i] > 0 && id[i] == x) k = i;
        if (cnt[victim] > 0 && (cnt[i] == 0 || last[i] < last[victim])) victim = i;
    }
    if (k < 0) {
        k = victim;
        id[k] = x, cnt[k] = 0;
    }
    cnt[k]++;
    last[k] = m->now;
    ember__dirty_mark(tb, b * m->br + k);
    if (cnt[k] < m->min_count) return 0;
    cnt[k] = 0; // admitted: no longer a candidate
    return 1;
}

static int64_t admit(ember_ebc *ebc, hashed *m, ember__table *tb, int64_t b, int64_t x) {
    int64_t v = -1;
    for (int64_t r = b * m->br; r < (b + 1) * m->br; r++) {
        if (m->pin[r] != m->call && expired(m, r)) { // TTL: drop what has expired
            m->occ[r] = 0;
            m->stats.evicted++;
            m->stats.occupied--;
            ember__dirty_mark(tb, r);
        }
        if (!m->occ[r]) {
            if (v < 0 || m->occ[v]) v = r; // the lowest free slot
        } else if (m->pin[r] != m->call && (v < 0 || (m->occ[v] && worse(m, r, v)))) {
            v = r;
        }
    }
    if (v < 0) {
        m->stats.overflow++;
        return -1;
    }
    if (m->occ[v]) m->stats.evicted++;
    else m->stats.occupied++;
    m->occ[v] = 1;
    m->id[v] = x;
    m->uses[v] = 0;
    m->last[v] = m->now;
    fresh_row(ebc, m, tb, v, x);
    ember__dirty_mark(tb, v);
    m->stats.admitted++;
    return v;
}

static ember_status hashed_map(ember_ebc *ebc, ember__table *tb, const int64_t *ids, int64_t n, int64_t *rows,
                               enum ember__map_phase phase) {
    hashed *m = (hashed *)tb->map;
    const int train = phase == EMBER__MAP_FORWARD && ebc->training;
    m->now = tb->step + 1; // the step this call's backward will be
    m->call++;
    // Admission in call order; then every occurrence of an id that has a row at the end of the
    // call reads it (an id admitted at its min_count-th occurrence is present for all of them,
    // so the backward's lookup sees the forward's rows).
    for (int64_t j = 0; j < n; j++) {
        int64_t b, r = find(m, ids[j], &b);
        if (r >= 0 && expired(m, r) && m->pin[r] != m->call) r = -1; // TTL: gone, even if not yet dropped
        if (r < 0 && train && b >= 0 && admit_count(m, tb, b, ids[j])) r = admit(ebc, m, tb, b, ids[j]);
        if (r >= 0 && train) m->pin[r] = m->call;
        rows[j] = r;
    }
    for (int64_t j = 0; j < n; j++) {
        int64_t b, r = rows[j];
        if (r < 0 && train && (r = find(m, ids[j], &b)) >= 0 && m->pin[r] != m->call) r = -1;
        if (r >= 0 && !train && expired(m, r)) r = -1;
        if (r < 0) {
            if (phase == EMBER__MAP_FORWARD) m->stats.absent++;
        } else if (train) {
            m->uses[r]++;
            m->last[r] = m->now;
            ember__dirty_mark(tb, r);
        }
        rows[j] = r;
    }
    return EMBER_OK;
}

// "ids" rows: id, last step, uses (0: the row is free); "candidates": id, count, last step.
static ember_status hashed_read_extra(const ember_ebc *ebc, const ember__table *tb, int cand, int64_t r0, int64_t r1,
                                      void *out) {
    (void)ebc;
    const hashed *m = (const hashed *)tb->map;
    int64_t *dst = out;
    for (int64_t r = r0; r < r1; r++) {
        int64_t *e = dst + 3 * (r - r0);
        const int on = cand ? m->cand_cnt[r] > 0 : m->occ[r];
        e[0] = on ? (cand ? m->cand_id[r] : m->id[r]) : 0;
        e[1] = on ? (cand ? m->cand_cnt[r] : m->last[r]) : 0;
        e[2] = on ? (cand ? m->cand_last[r] : m->uses[r]) : 0;
    }
    return EMBER_OK;
}

static ember_status hashed_write_extra(ember_ebc *ebc, ember__table *tb, int cand, int64_t r0, int64_t r1,
                                       const void *in) {
    hashed *m = (hashed *)tb->map;
    const int64_t *src = in;
    const char *fn = "ember_ebc_write", *what = cand ? "candidates" : "ids";
    const int cnt = cand ? 1 : 2; // the field that says the row is in use
    for (int64_t r = r0; r < r1; r++) { // check everything before anything changes
        const int64_t *e = src + 3 * (r - r0);
        EMBER_CHECK(ebc->ctx, e[cnt] >= 0, EMBER_ERR_INVALID_ARG, "%s: table '%s' %s row %lld: count %lld < 0", fn,
                    tb->label, what, (long long)r, (long long)e[cnt]);
        if (e[cnt] == 0) continue;
        EMBER_CHECK(ebc->ctx, ember__hash_bucket(e[0], m->nb_global) - m->b0 == r / m->br, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s' %s row %lld: id %lld belongs to bucket %lld, the row to bucket %lld", fn,
                    tb->label, what, (long long)r, (long long)e[0], (long long)ember__hash_bucket(e[0], m->nb_global),
                    (long long)(m->b0 + r / m->br));
        const int64_t b = r / m->br;
        for (int64_t q = b * m->br; q < (b + 1) * m->br; q++) {
            if (q == r) continue;
            const int64_t *o = q >= r0 && q < r1 ? src + 3 * (q - r0) : NULL;
            const int64_t oid = o ? o[0] : cand ? m->cand_id[q] : m->id[q];
            const int64_t on = o ? o[cnt] : cand ? m->cand_cnt[q] : m->occ[q];
            EMBER_CHECK(ebc->ctx, on == 0 || oid != e[0], EMBER_ERR_INVALID_ARG,
                        "%s: table '%s' %s: id %lld in rows %lld and %lld", fn, tb->label, what, (long long)e[0],
                        (long long)r, (long long)q);
        }
    }
    for (int64_t r = r0; r < r1; r++) {
        const int64_t *e = src + 3 * (r - r0);
        const int on = e[cnt] > 0;
        if (cand) {
            m->cand_id[r] = on ? e[0] : 0;
            m->cand_cnt[r] = on ? e[1] : 0;
            m->cand_last[r] = on ? e[2] : 0;
            continue;
        }
        m->stats.occupied += on - m->occ[r];
        m->occ[r] = (unsigned char)on;
        m->id[r] = on ? e[0] : 0;
        m->last[r] = on ? e[1] : 0;
        m->uses[r] = on ? e[2] : 0;
    }
    return EMBER_OK;
}

static void hashed_destroy(ember_ctx *ctx, ember__rowmap *map) {
    hashed *m = (hashed *)map;
    void *bufs[] = {m->id, m->last, m->uses, m->occ, m->pin, m->cand_id, m->cand_cnt, m->cand_last, m->row};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember__free(ctx, bufs[i]);
    ember__free(ctx, m);
}

static const ember__rowmap_ops hashed_ops = {.map = hashed_map, .read_extra = hashed_read_extra,
                                              .write_extra = hashed_write_extra, .destroy = hashed_destroy};

// The id map: per row its id, last step and uses (0: free); with min_count > 1 the admission
// candidates too (bucket b's in its rows: id, count, last step seen).
static int32_t hashed_tensors(const ember_table_config *t, ember_tensor_info *out) {
    out[0] = (ember_tensor_info){"ids", t->rows, 3, EMBER_DTYPE_I64};
    if (t->hash.min_count <= 1) return 1;
    out[1] = (ember_tensor_info){"candidates", t->rows, 3, EMBER_DTYPE_I64};
    return 2;
}

static ember_status hashed_create(ember_ebc *ebc, ember__table *tb, const ember_ebc_config *cfg, ember__rowmap **out) {
    (void)cfg;
    ember_ctx *ctx = ebc->ctx;
    *out = NULL;
    const ember_hash_config *h = &tb->cfg.hash;
    const int64_t br = ember__hash_bucket_rows(h);
    EMBER_CHECK(ctx, tb->origin.row_offset % br == 0 && tb->origin.global_rows % br == 0, EMBER_ERR_INVALID_ARG,
                "ember_ebc_create: table '%s': rows [%lld, +%lld) of %lld are not whole buckets of %lld rows",
                tb->label, (long long)tb->origin.row_offset, (long long)tb->cfg.rows,
                (long long)tb->origin.global_rows, (long long)br);
    hashed *m = ember__calloc(ctx, sizeof *m);
    if (!m) return ember__error(ctx, EMBER_ERR_NOMEM, "ember_ebc_create: table '%s': out of memory", tb->label);
    m->hdr.ops = &hashed_ops;
    m->rows = tb->cfg.rows;
    m->br = br;
    m->nb = m->rows / br;
    m->b0 = tb->origin.row_offset / br;
    m->nb_global = tb->origin.global_rows / br;
    m->min_count = h->min_count;
    m->ttl = h->ttl_steps;
    m->policy = h->policy;
    const size_t R = (size_t)m->rows * sizeof(int64_t);
    m->id = ember__calloc(ctx, R);
    m->last = ember__calloc(ctx, R);
    m->uses = ember__calloc(ctx, R);
    m->pin = ember__calloc(ctx, R);
    m->occ = ember__calloc(ctx, (size_t)m->rows);
    m->cand_id = ember__calloc(ctx, R);
    m->cand_cnt = ember__calloc(ctx, R);
    m->cand_last = ember__calloc(ctx, R);
    m->row = ember__alloc(ctx, sizeof(float) * (size_t)tb->cfg.dim);
    if (!m->id || !m->last || !m->uses || !m->occ || !m->pin || !m->cand_id || !m->cand_cnt || !m->cand_last ||
        !m->row) {
        hashed_destroy(ctx, &m->hdr);
        return ember__error(ctx, EMBER_ERR_NOMEM, "ember_ebc_create: table '%s': out of memory for its id map",
                            tb->label);
    }
    *out = &m->hdr;
    return EMBER_OK;
}

const ember__rowmap_kind ember__rowmap_hashed = {
    .name = "hashed", .ids = EMBER_IDS_HASHED, .tensors = hashed_tensors, .create = hashed_create};

ember_status ember_ebc_hash_stats(const ember_ebc *ebc, int32_t table, ember_hash_stats *out) {
    if (!ebc || !out) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ebc->ctx, table >= 0 && table < ebc->T, EMBER_ERR_INVALID_ARG,
                "ember_ebc_hash_stats: table %d outside [0, %d)", (int)table, (int)ebc->T);
    const ember__table *tb = &ebc->tables[table];
    EMBER_CHECK(ebc->ctx, tb->map && tb->map->ops == &hashed_ops, EMBER_ERR_INVALID_ARG,
                "ember_ebc_hash_stats: table '%s' is not hashed", tb->label);
    *out = ((const hashed *)tb->map)->stats;
    return EMBER_OK;
}
