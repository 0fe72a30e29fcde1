// Row maps: tables whose ids are not rows of the slab. A tiered table (tiered.c, docs/tiered.md)
// keeps its rows in a file and a cache of slab_rows rows in the slab; a hashed table (hashed.c,
// docs/hashed.md) maps arbitrary 64-bit ids to rows of its own. Either way the kernels never see
// an id: every call of a collection with a mapped table first builds a translated copy of the
// KJT (ember__ebc_map) whose values are slab rows, or -1 for an id that is absent (it
// contributes nothing and does not count in MEAN, as EMBER_BOUNDS_SKIP), and the kernels run
// with bounds SKIP on that copy. Unmapped tables' ids are resolved by the collection's bounds
// mode in the same copy.
#ifndef EMBER_TBE_ROWMAP_H
#define EMBER_TBE_ROWMAP_H

#include "ember/rng.h"
#include "tbe/internal.h"

// What a translation is for.
enum ember__map_phase {
    EMBER__MAP_FORWARD = 0, // a forward: may admit ids (training) and fetch/evict cache rows
    EMBER__MAP_BACKWARD = 1,// the backward of the preceding forward's ids: hashed tables look up
                            // only (an id without a row gets no update); tiered tables fetch
                            // what is missing as forward would
};

typedef struct ember__rowmap ember__rowmap;
typedef struct ember__rowmap_ops {
    // Translates the n ids of table tb in this call (its features in configuration order, each
    // in value order) to slab rows in rows[n] (-1: absent). A table whose id space is
    // EMBER_IDS_HASHED gets the KJT's values as they are; any other gets them resolved by the
    // bounds mode: rows of [0, cfg.rows), or -1 for a skipped id, which stays -1. All of a
    // call's ids are resident together: rows of this call are never evicted by it. A failure
    // changes no logical state (weights, optimizer state, the id -> row map).
    ember_status (*map)(ember_ebc *ebc, ember__table *tb, const int64_t *ids, int64_t n, int64_t *rows,
                        enum ember__map_phase phase);
    // State dict access for tables whose logical rows are not slab rows (tiered); NULL: the
    // slab rows are the state dict rows. which: 0 weight, 1 momentum1, 2 momentum2; dst/src are
    // [n, cols] in `dtype` as ember_ebc_read/write take them (checked by the caller).
    ember_status (*read)(const ember_ebc *ebc, const ember__table *tb, int which, int64_t row_begin,
                         int64_t row_end, ember_dtype dtype, void *dst);
    ember_status (*write)(ember_ebc *ebc, ember__table *tb, int which, int64_t row_begin, int64_t row_end,
                          ember_dtype dtype, const void *src);
    // The tensors the kind adds (ember__rowmap_kind.tensors), k-th of them: rows [row_begin,
    // row_end) as its dtype gives them. NULL when the kind adds none. A write that the map
    // refuses changes nothing.
    ember_status (*read_extra)(const ember_ebc *ebc, const ember__table *tb, int k, int64_t row_begin,
                               int64_t row_end, void *dst);
    ember_status (*write_extra)(ember_ebc *ebc, ember__table *tb, int k, int64_t row_begin, int64_t row_end,
                                const void *src);
    void (*destroy)(ember_ctx *ctx, ember__rowmap *m);
} ember__rowmap_ops;

// Every map starts with this header; the implementation owns the rest.
struct ember__rowmap {
    const ember__rowmap_ops *ops;
};

// A kind of row map, known before any table has one: what the ids of its tables are, the
// tensors it adds to their state dicts, and how it is made. One per file; a table's kind comes
// from its configuration alone (ember__rowmap_kind_of), so every layer that routes, validates,
// plans or saves a table asks the same answer (ember_table_id_space, ember_table_tensors).
typedef struct ember__rowmap_kind {
    const char *name;   // "tiered", "hashed"
    ember_id_space ids; // what its tables' ids are
    // The tensors it adds after "weight" and the optimizer's states, into out; returns their
    // count (at most EMBER_MAX_TENSORS - 1 - EMBER_MAX_STATES). NULL: none.
    int32_t (*tensors)(const ember_table_config *t, ember_tensor_info *out);
    // Creates table tb's map after the collection laid out its slabs (tb->slab_rows rows, state
    // pointers set, initial values written). Local. EMBER_OK, EMBER_ERR_IO, EMBER_ERR_NOMEM,
    // EMBER_ERR_UNSUPPORTED; the message names the table.
    ember_status (*create)(ember_ebc *ebc, ember__table *tb, const ember_ebc_config *cfg, ember__rowmap **out);
} ember__rowmap_kind;
extern const ember__rowmap_kind ember__rowmap_tiered, ember__rowmap_hashed;

// The kind of row map a table of this configuration has; NULL: none (its ids are slab rows).
const ember__rowmap_kind *ember__rowmap_kind_of(const ember_table_config *t);

// Rows per bucket of a hashed table (bucket_rows, or EMBER_HASH_BUCKET_ROWS for 0).
static inline int64_t ember__hash_bucket_rows(const ember_hash_config *h) {
    return h->bucket_rows > 0 ? h->bucket_rows : EMBER_HASH_BUCKET_ROWS;
}

// The global bucket of id x in a hashed table of `buckets` buckets: the one definition the local
// map and the sharded layer's routing share.
static inline int64_t ember__hash_bucket(int64_t x, int64_t buckets) {
    return (int64_t)(ember_splitmix64((uint64_t)x) % (uint64_t)buckets);
}

// A training forward's admissions without the pooling: translates `kjt` (validated, with
// offsets) as a forward does and drops the rows. The sharded collection's hashed replicas admit
// the global batch with it. Local.
ember_status ember__ebc_admit(ember_ebc *ebc, const ember_kjt *kjt);

// The translated KJT of a validated `kjt` with offsets `off` into ebc->mkjt (values in the
// collection's workspace; lengths NULL, offsets = off, weights shared). Local.
ember_status ember__ebc_map(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, enum ember__map_phase phase);

#endif
