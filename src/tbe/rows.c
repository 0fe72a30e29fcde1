// The bottom of the collection layer: what every file of src/tbe asks of a collection and none
// of them implements for the others: a row's initial values (a function of the seed, the table
// and the global coordinates, so every sharding starts from the same weights), the workspace,
// the offsets of a KJT, the table of a sort key, the slab layout every backend uses, and the
// bitmap of changed rows. Calls nothing of src/tbe: the layer has no call circle.
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "tbe/backend.h"
#include "tbe/rowmap.h"

// Initial value of global element (R, C) of a table: a function of (seed, table name, R, C).
static float init_value(const ember__table *t, uint64_t seed, int64_t R, int32_t C) {
    const ember_init *in = &t->cfg.init;
    uint64_t k = ember_splitmix64(seed ^ t->name_hash) ^ ember_splitmix64((uint64_t)R * (uint64_t)t->origin.global_dim +
                                                                   (uint64_t)C);
    switch (in->kind) {
    case EMBER_INIT_ZEROS: return 0.0f;
    case EMBER_INIT_UNIFORM: return in->a + (in->b - in->a) * ember__u01(ember_splitmix64(k));
    case EMBER_INIT_NORMAL: {
        // Box-Muller from two independent uniforms; u1 in (0, 1].
        double u1 = 1.0 - (double)(ember_splitmix64(k) >> 11) * 0x1p-53;
        double u2 = (double)(ember_splitmix64(k ^ 0x5bd1e995u) >> 11) * 0x1p-53;
        return (float)(in->std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    }
    return 0.0f;
}

void ember__init_global(const ember_ebc *ebc, const ember__table *t, int64_t R, float *dst) {
    for (int32_t c = 0; c < t->cfg.dim; c++) dst[c] = init_value(t, ebc->seed, R, t->origin.col_offset + c);
}

void ember__init_row(const ember_ebc *ebc, const ember__table *t, int64_t r, float *dst) {
    ember__init_global(ebc, t, t->origin.row_offset + r, dst);
}

void ember__dirty_mark_range(ember__table *tb, int64_t r0, int64_t r1) {
    if (tb->dirty_all) return;
    if (r0 == 0 && r1 >= tb->cfg.rows) {
        tb->dirty_all = 1;
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        if ((r & 63) == 0 && r + 64 <= r1) {
            tb->dirty[r >> 6] = ~(uint64_t)0;
            r += 63;
        } else {
            ember__dirty_mark(tb, r);
        }
    }
}

void ember__dirty_clear(ember__table *tb) {
    tb->dirty_all = 0;
    memset(tb->dirty, 0, sizeof(uint64_t) * (size_t)((tb->cfg.rows + 63) / 64));
}

// The first row at or after `r` whose bit is `want`, or rows.
static int64_t dirty_find(const ember__table *tb, int64_t r, int want) {
    const int64_t rows = tb->cfg.rows;
    if (tb->dirty_all) return want && r < rows ? r : rows;
    while (r < rows) {
        uint64_t w = tb->dirty[r >> 6];
        if (!want) w = ~w;
        w &= ~(uint64_t)0 << (r & 63);
        if (w) {
            const int64_t x = (r & ~(int64_t)63) + __builtin_ctzll(w);
            return x < rows ? x : rows;
        }
        r = (r & ~(int64_t)63) + 64;
    }
    return rows;
}

void ember__dirty_next(const ember__table *tb, int64_t from, int64_t *b, int64_t *e) {
    *b = dirty_find(tb, from, 1);
    *e = dirty_find(tb, *b, 0);
}

int ember__table_cached(const ember__table *tb) { return tb->map && tb->map->ops->read; }

const int64_t *ember__ebc_offsets(ember_ebc *ebc, const ember_kjt *kjt) {
    if (kjt->offsets) return kjt->offsets;
    int64_t *o = ember__ws_get(ebc, 0, sizeof(int64_t) * ((size_t)kjt->num_features * (size_t)kjt->batch_size + 1));
    if (o) ember__kjt_offsets(kjt, o);
    return o;
}

void *ember__ws_get(ember_ebc *ebc, int slot, size_t bytes) {
    EMBER_ASSERT(slot >= 0 && slot < EMBER__WS_SLOTS);
    return ember__buf_reserve(ebc->ctx, &ebc->ws[slot], bytes);
}

int32_t ember__ebc_key_table(const ember_ebc *ebc, int64_t key) {
    int32_t lo = 0, hi = ebc->T - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (ebc->tables[mid].key_base <= key) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

size_t ember__weight_block(const ember__table *tb, ember_dtype dt) {
    return ((size_t)tb->slab_rows * (size_t)tb->cfg.dim * ember_dtype_size(dt) + 63) & ~(size_t)63;
}

void ember__slab_sizes(const ember_ebc *ebc, size_t *weight_bytes, size_t *state_floats) {
    *weight_bytes = *state_floats = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        const ember__table *tb = &ebc->tables[t];
        *weight_bytes += ember__weight_block(tb, tb->cfg.dtype);
        *state_floats += (size_t)tb->slab_rows * (size_t)(tb->m1_cols + tb->m2_cols);
    }
}

void ember__slab_layout(ember_ebc *ebc, unsigned char *weights, float *state) {
    size_t woff = 0, soff = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        tb->w = weights + woff;
        woff += ember__weight_block(tb, tb->cfg.dtype);
        const size_t n1 = (size_t)tb->slab_rows * (size_t)tb->m1_cols, n2 = (size_t)tb->slab_rows * (size_t)tb->m2_cols;
        tb->m1 = n1 ? state + soff : NULL;
        soff += n1;
        tb->m2 = n2 ? state + soff : NULL;
        soff += n2;
    }
}
