// The home rank's side of the input: applies the bounds mode to the local batch, then
// bucketize sends every sanitised id of the local batch to the routes that pool it, and hands
// the home schemes theirs (data-parallel: the local replicas' sub-KJT, dp.c). Each id's destination is computed
// once (its table's row block, by the scheme's bucket hook), whatever the world size.
#include <string.h>

#include "shard/internal.h"
#include "tbe/rowmap.h"


// Applies the bounds mode once, at the home rank: kept ids (clamped where asked), their weights
// and original positions, with offsets per bag. Routed pieces then carry only valid ids.
ember_status ember__sanitise(ember_sebc *s, const ember_kjt *kjt) {
    const int32_t B = kjt->batch_size;
    const int64_t nbags = (int64_t)s->F * B;
    int64_t *off = EMBER__RESERVE(s, s->in->san_off, int64_t, nbags + 1);
    int64_t *val = EMBER__RESERVE(s, s->in->san_val, int64_t, kjt->nnz);
    float *w = EMBER__RESERVE(s, s->in->san_w, float, kjt->nnz);
    int64_t *pos = EMBER__RESERVE(s, s->in->san_pos, int64_t, kjt->nnz);
    if (!off || !val || !w || !pos) return EMBER_ERR_NOMEM;
    int64_t start = 0, m = 0;
    off[0] = 0;
    for (int64_t i = 0; i < nbags; i++) {
        const ember__table_shards *ts = &s->ts[s->feature_table[i / B]];
        const int hashed = ts->ids == EMBER_IDS_HASHED; // every int64 is an id, kept as it is
        const int64_t len = kjt->lengths ? kjt->lengths[i] : kjt->offsets[i + 1] - kjt->offsets[i];
        for (int64_t j = start; j < start + len; j++) {
            const int64_t id = hashed ? kjt->values[j] : ember__resolve_id(kjt->values[j], ts->rows, s->bounds);
            if (id < 0 && !hashed) continue; // skipped
            val[m] = id;
            w[m] = kjt->weights ? kjt->weights[j] : 1.0f;
            pos[m] = j;
            m++;
        }
        start += len;
        off[i + 1] = m;
    }
    return EMBER_OK;
}

int32_t ember__bucket_one_block(const ember__table_shards *ts, int64_t id) {
    (void)ts; (void)id;
    return 0;
}

int32_t ember__bucket_row_split(const ember__table_shards *ts, int64_t id) {
    if (ts->ids == EMBER_IDS_ROWS) return ember__split_index(ts->rows, ts->nblocks, id);
    const int64_t buckets = ts->rows / ts->unit; // hashed: the block holding the id's bucket
    return ember__split_index(buckets, ts->nblocks, ember__hash_bucket(id, buckets));
}

void ember_sebc_set_reference_bucketize(ember_sebc *s, int on) {
    if (s) s->legacy_bucketize = on;
}
int64_t ember_sebc_ids_examined_last_step(const ember_sebc *s) { return s ? s->in->ids_examined : 0; }

// The old path, kept for measurement only: every route scans all of its feature's ids, so a
// row-wise feature's ids are examined once per destination rank.
static ember_status legacy_pack_input(ember_sebc *s, int32_t B) {
    const int64_t *off = s->in->san_off.p;
    const int64_t *val = s->in->san_val.p;
    const float *w = s->in->san_w.p;
    const int64_t *pos = s->in->san_pos.p;
    int64_t nlen = 0, nid_bound = 0;
    for (int32_t q = 0; q < s->W; q++) {
        nlen += (int64_t)s->nroutes[q] * B;
        for (int32_t k = 0; k < s->nroutes[q]; k++) {
            const int32_t f = s->routes[q][k].feature;
            nid_bound += off[(int64_t)(f + 1) * B] - off[(int64_t)f * B];
        }
    }
    int32_t *slen = EMBER__RESERVE(s, s->in->snd_len, int32_t, nlen);
    int64_t *sval = EMBER__RESERVE(s, s->in->snd_val, int64_t, nid_bound);
    float *sw = EMBER__RESERVE(s, s->in->snd_w, float, nid_bound);
    int64_t *spos = EMBER__RESERVE(s, s->in->snd_pos, int64_t, nid_bound);
    if (!slen || !sval || !sw || !spos) return EMBER_ERR_NOMEM;
    s->in->ids_examined += nid_bound;
    int64_t L = 0, n = 0;
    for (int32_t q = 0; q < s->W; q++) {
        const int64_t n0 = n;
        for (int32_t k = 0; k < s->nroutes[q]; k++) {
            const ember__route *r = &s->routes[q][k];
            const int64_t r0 = r->shard->r0, r1 = r->shard->r1;
            for (int32_t b = 0; b < B; b++) {
                const int64_t bag = (int64_t)r->feature * B + b;
                int32_t len = 0;
                for (int64_t j = off[bag]; j < off[bag + 1]; j++) {
                    if (val[j] < r0 || val[j] >= r1) continue;
                    sval[n] = val[j] - r0;
                    sw[n] = w[j];
                    spos[n] = pos[j];
                    n++;
                    len++;
                }
                slen[L++] = len;
            }
        }
        s->in->send_ids[q] = n - n0;
    }
    return EMBER_OK;
}

// For each destination q, for each of q's routes, the lengths of this rank's B bags restricted
// to the route's shard, then the ids (relative to the shard's first row), weights and original
// positions in the same order. Route g (global index: owners in order, then their routes) has
// its B lengths at snd_len[g * B]. Two passes: count per (route, bag), then place.
static ember_status pack_input(ember_sebc *s, int32_t B) {
    const int32_t F = s->F, G = s->route_base[s->W];
    const int64_t *off = s->in->san_off.p;
    const int64_t *val = s->in->san_val.p;
    const float *w = s->in->san_w.p;
    const int64_t *pos = s->in->san_pos.p;
    const int64_t nsan = off[(int64_t)F * B];
    int64_t nid = 0;
    for (int32_t f = 0; f < F; f++) {
        const ember__table_shards *ts = &s->ts[s->feature_table[f]];
        if (ts->nblocks > 0) nid += (off[(int64_t)(f + 1) * B] - off[(int64_t)f * B]) * (ts->nshards / ts->nblocks);
    }
    int32_t *slen = EMBER__RESERVE(s, s->in->snd_len, int32_t, (int64_t)G * B);
    int64_t *cur = EMBER__RESERVE(s, s->in->snd_cur, int64_t, (int64_t)G * B);
    int32_t *blk = EMBER__RESERVE(s, s->in->san_blk, int32_t, nsan);
    int64_t *sval = EMBER__RESERVE(s, s->in->snd_val, int64_t, nid);
    float *sw = EMBER__RESERVE(s, s->in->snd_w, float, nid);
    int64_t *spos = EMBER__RESERVE(s, s->in->snd_pos, int64_t, nid);
    if (!slen || !cur || !blk || !sval || !sw || !spos) return EMBER_ERR_NOMEM;
    memset(slen, 0, sizeof(int32_t) * (size_t)G * (size_t)B);
    // Count: the row block of every id, once.
    for (int32_t f = 0; f < F; f++) {
        const ember__table_shards *ts = &s->ts[s->feature_table[f]];
        if (ts->nblocks == 0) continue; // replicated: pack_replicas
        const int32_t ncols = ts->nshards / ts->nblocks, *fr = s->froute + s->froute_off[f];
        s->in->ids_examined += off[(int64_t)(f + 1) * B] - off[(int64_t)f * B];
        for (int32_t b = 0; b < B; b++) {
            const int64_t bag = (int64_t)f * B + b;
            if (ts->nblocks == 1) {
                for (int32_t c = 0; c < ncols; c++) slen[(int64_t)fr[c] * B + b] = (int32_t)(off[bag + 1] - off[bag]);
                continue;
            }
            for (int64_t j = off[bag]; j < off[bag + 1]; j++) {
                const int32_t k = ts->ops->bucket(ts, val[j]);
                blk[j] = k;
                for (int32_t c = 0; c < ncols; c++) slen[(int64_t)fr[k * ncols + c] * B + b]++;
            }
        }
    }
    int64_t n = 0;
    for (int32_t q = 0; q < s->W; q++) {
        const int64_t n0 = n;
        for (int64_t i = (int64_t)s->route_base[q] * B; i < (int64_t)s->route_base[q + 1] * B; i++) {
            cur[i] = n;
            n += slen[i];
        }
        s->in->send_ids[q] = n - n0;
    }
    // Place, in value order within every (route, bag).
    for (int32_t f = 0; f < F; f++) {
        const ember__table_shards *ts = &s->ts[s->feature_table[f]];
        if (ts->nblocks == 0) continue;
        const int32_t ncols = ts->nshards / ts->nblocks, *fr = s->froute + s->froute_off[f];
        for (int32_t b = 0; b < B; b++) {
            const int64_t bag = (int64_t)f * B + b;
            for (int64_t j = off[bag]; j < off[bag + 1]; j++) {
                const int32_t k = ts->nblocks == 1 ? 0 : blk[j];
                // Rows are sent as rows of the block; a hashed table's ids as they are (the
                // owner's map places them in its buckets).
                const int64_t id = ts->ids == EMBER_IDS_HASHED ? val[j] : val[j] - ts->shards[k * ncols].r0;
                for (int32_t c = 0; c < ncols; c++) {
                    const int64_t p = cur[(int64_t)fr[k * ncols + c] * B + b]++;
                    sval[p] = id;
                    sw[p] = w[j];
                    spos[p] = pos[j];
                }
            }
        }
    }
    return EMBER_OK;
}

ember_status ember__bucketize(ember_sebc *s, int32_t B) {
    s->in->ids_examined = 0;
    // The old path compares ids with row ranges: hashed tables always take the one that asks
    // the scheme for each id's block.
    int hashed = 0;
    for (int32_t t = 0; t < s->T; t++) hashed |= s->ts[t].ids == EMBER_IDS_HASHED;
    EMBER_TRY(s->legacy_bucketize && !hashed ? legacy_pack_input(s, B) : pack_input(s, B));
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++) // the ids that stay home
        if (s->home[k]) EMBER_TRY(ember__schemes[k]->home_route(s, s->home[k], s->in, B));
    return EMBER_OK;
}
