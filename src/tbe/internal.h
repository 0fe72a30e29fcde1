// Internal layout of the table-batched EmbeddingBagCollection, shared with the shard layer.
//
// Three levels, each knowing only the one below:
//   the collection (ebc.c, config.c, calls.c, rows.c): tables, features, validation, the state dict, the
//     entry points; it decides each table's shape (rows held, dtype, optimizer state columns)
//     and never touches a row's bytes;
//   row maps (rowmap.h: tiered.c, hashed.c): tables whose ids are not rows of the storage,
//     translated before any kernel runs; they move rows through the backend's row calls;
//   the backend (backend.h; cpu/ and cuda/): where weights and optimizer state
//     live and the kernels that run over them (pooled forward, fused backward, row reads/writes).
#ifndef EMBER_TBE_INTERNAL_H
#define EMBER_TBE_INTERNAL_H

#include <stdbool.h>

#include "core/internal.h"
#include "ember/ebc.h"
#include "kjt/internal.h"

// Where a local table sits in its global table (sharding): local (r, c) is global
// (row_offset + r, col_offset + c) of a global table of global_rows x global_dim. An unsharded
// table has offsets 0 and global sizes equal to its own. Initial values are a function of the
// global coordinates, so every sharding starts from the same weights.
typedef struct ember__origin {
    int64_t row_offset, global_rows;
    int32_t col_offset, global_dim;
    const char *global_name;  // name of the global table (seeds its values); NULL: the local name
} ember__origin;

// The register paths the wide kernel variants have for an optimizer (cpu/isa/avx2.c, avx512.c).
enum ember__fused {
    EMBER__FUSED_NONE = 0,
    EMBER__FUSED_SGD = 1,
    EMBER__FUSED_ROWWISE_ADAGRAD = 2,
    EMBER__FUSED_ADAM = 3
};

// One row of the optimizer descriptor table (optim.c).
typedef struct ember__optim_desc {
    ember_optim_info info;   // the public part: name, states, column-wise support, bias correction
    int rowwise_sumsq;       // the update takes the whole row's mean of g^2: column shards of a row
                             // exchange their partial sums (ember__ebc_row_sumsq)
    int l2_in_update;        // applies weight decay inside its own formula (no generic L2 step)
    int adagrad_init;        // momentum1 starts at initial_accumulator
    enum ember__fused fused; // the wide variants' register path, if any
} ember__optim_desc;
// The descriptor of `kind` (NULL outside the enum).
const ember__optim_desc *ember__optim(ember_optim_kind kind);
// Checks a table's optimizer configuration; the message names fn and table nm. Local.
ember_status ember__optim_check(ember_ctx *ctx, const char *fn, const char *nm, const ember_optim_config *o);

typedef struct ember__table {
    ember_table_config cfg;  // cfg.name points at `name`
    char *name;              // owned copy
    char *label;             // for messages: the global table's name (owned), or name when unsharded
    ember__origin origin;
    size_t row_bytes;        // dim * sizeof(dtype)
    const struct ember__optim_desc *optim; // cfg.optim.kind's descriptor (optim.c)
    int32_t m1_cols, m2_cols;// dim or 1 (per-row state); 0 when absent
    // Where the backend keeps the table: slab_rows rows of weights (row_bytes apart) and of each
    // optimizer state (m1_cols, m2_cols floats apart; NULL when absent), in the backend's memory.
    // Set by the backend; only the backend and its kernels dereference them.
    unsigned char *w;
    float *m1, *m2;
    int64_t key_base;        // first sort key of the table: key = key_base + row
    int64_t step;            // backward calls applied (bias correction)
    uint64_t name_hash;      // seeds init and stochastic rounding
    int64_t slab_rows;       // rows held in the slabs: cfg.rows, or the cache of a tiered table
    struct ember__rowmap *map; // tiered or hashed: translates the KJT's ids to slab rows (rowmap.h)
    const struct ember__rowmap_kind *kind; // the map's kind (NULL: none), from the configuration
    ember_id_space ids;      // what the KJT's ids of this table are: the kind's, else EMBER_IDS_ROWS
    // Rows changed since the last ember__dirty_clear (a bit per row of cfg.rows, in the rows a
    // state dict names: a tiered table's logical rows, not its cache slots): a superset of the
    // rows whose weights, optimizer state or row-map entries changed. Set by the updates of
    // backward and apply, a training forward's admissions (hashed), the writes and a dtype
    // change; read by the sharded layer's incremental checkpoints (ember_sebc_piece_dirty).
    // dirty_all: every row is (marking the whole table is then O(1): a GPU backend's updates
    // mark every row on every step).
    uint64_t *dirty;
    int dirty_all;
} ember__table;

static inline void ember__dirty_mark(ember__table *tb, int64_t r) { tb->dirty[r >> 6] |= (uint64_t)1 << (r & 63); }
void ember__dirty_mark_range(ember__table *tb, int64_t r0, int64_t r1);
void ember__dirty_clear(ember__table *tb);
// The first run [*b, *e) of changed rows at or after row `from` (both cfg.rows when none).
void ember__dirty_next(const ember__table *tb, int64_t from, int64_t *b, int64_t *e);
// Whether tb's state dict rows are not its slab rows (a tiered table: rowmap.h's read): its
// updates are marked by id when its backward translates them, not by slot.
int ember__table_cached(const ember__table *tb);

// The bound the KJT validator checks an id space's ids against: the table's rows, or -1 (any
// int64: a hashed table's ids are keys).
static inline int64_t ember__id_limit(ember_id_space ids, int64_t rows) { return ids == EMBER_IDS_HASHED ? -1 : rows; }

#define EMBER__WS_SLOTS 16

struct ember__backend_ops; // tbe/backend.h

struct ember_ebc {
    ember_ctx *ctx;
    const struct ember__backend_ops *be; // where the tables live and what computes on them
    void *bs;                            // the backend's own state
    ember_backend backend;
    int32_t T, F;
    ember__table *tables;    // [T]
    int32_t *feature_table;  // [F]
    char **feature_names;    // [F] owned copies
    int32_t *feature_col;    // [F] first output column of feature f
    int64_t *feature_rows;   // [F] rows of f's table (validation)
    int32_t out_dim;         // sum_f D_f (pooled) or D (sequence)
    int32_t max_dim;
    bool sequence;           // all tables NONE
    ember_bounds_mode bounds;
    ember_bounds_mode kbounds; // what the kernels apply: bounds, or SKIP when ids are mapped (-1 = absent)
    bool mapped;             // some table has a row map: every call translates the KJT first
    bool training;           // ember_ebc_set_training
    ember_kjt mkjt;          // the translated KJT of the current call (values in the workspace)
    uint64_t seed;
    int64_t total_keys;      // sum_t rows_t
    ember__buf ws[EMBER__WS_SLOTS]; // grow-on-demand scratch of the calls (ember__ws_get)
    ember__buf vbe_len, vbe_io;     // a VBE call's padded lengths, and its padded output or gradient
    ember_kjt vbe_kjt;              // and its padded KJT
};

// Creates a collection whose table t is the piece origins[t] of a larger global table (NULL:
// unsharded). cfg->tables[t].rows/dim are the local sizes.
ember_status ember__ebc_create_ex(ember_ctx *ctx, const ember_ebc_config *cfg, const ember__origin *origins,
                                  ember_ebc **out);

// The checks ember_ebc_create makes on a configuration, for layers that derive their own; fn
// names the caller in the messages.
ember_status ember__ebc_check_config(ember_ctx *ctx, const char *fn, const ember_ebc_config *cfg);

// Validates kjt (and that buf is given); *oor receives the number of ids outside their tables
// (accepted under CLAMP/SKIP). 0 means every id can be used as a row index as is. *use is the
// KJT the kernels compute on: kjt, or a VBE KJT's padded KJT (ebc->vbe_kjt, kjt/internal.h).
ember_status ember__ebc_check_forward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname, int64_t *oor, const ember_kjt **use);
// Offsets of a validated KJT: its own, or computed into workspace slot 0. NULL on NOMEM.
const int64_t *ember__ebc_offsets(ember_ebc *ebc, const ember_kjt *kjt);

// Coalesced sparse gradient: n unique rows (sorted by key), row i's gradient is
// grad[goff[i] .. goff[i] + dim_of(key[i])). Storage belongs to the collection's workspace and
// is valid until its next call.
typedef struct ember__sparse_grad {
    int64_t n;
    const int64_t *key;   // [n] key_base[t] + row
    const int64_t *goff;  // [n+1] float offsets into grad
    const float *grad;
} ember__sparse_grad;

// Unchecked entry points for layers that validated the KJT and the gradient themselves (the
// sharded collection checks once, at the home rank): the KJT carries offsets, every id is a row
// of its table, out/grad_out are non-NULL where needed and grad_out is finite. The public
// ember_ebc_forward/backward check, then run the same code.
// With mapped tables (tiered, hashed) these first translate the ids (rowmap.h), which may fail
// (EMBER_ERR_IO, EMBER_ERR_NOMEM, EMBER_ERR_UNSUPPORTED); otherwise forward returns EMBER_OK.
ember_status ember__ebc_forward_unchecked(ember_ebc *ebc, const ember_kjt *kjt, float *out);
ember_status ember__ebc_backward_unchecked(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out,
                                           float *grad_weights);
// ember_ebc_prefetch on such a KJT (the sharded collection's owners: the next batch's routed
// ids, once its input dist arrived). Returns EMBER_OK, EMBER_ERR_NOMEM (then nothing is advised).
ember_status ember__ebc_prefetch_unchecked(ember_ebc *ebc, const ember_kjt *kjt);
// Whether the collection has a tiered table (a prefetch has something to do).
int ember__ebc_tiered(const ember_ebc *ebc);

// Per-table constants of one optimizer step (hoisted out of the row loop: Adam's bias
// corrections are two powf calls that would otherwise run for every row). Computed on the host,
// the same way for every backend (optim.c).
typedef struct ember__optim_step {
    float c1, c2; // 1 - beta1^step, 1 - beta2^step (Adam, LAMB, partial row-wise Adam)
    // Row-wise optimizers on a row split over column shards: the whole row's sum of squared
    // (L2-adjusted) gradients, summed over the shards (the per-row mean then divides by the
    // global dim). Negative (ember__optim_prepare's value): this piece is the whole row.
    float row_sumsq;
    uint64_t sr_key; // stochastic rounding: a function of (seed, table, step) (ember__sr_row_key)
} ember__optim_step;
void ember__optim_prepare(const ember__table *t, uint64_t seed, ember__optim_step *st);

// Where an entry's gradient comes from (backward.c builds the entries).
enum ember__item_kind {
    EMBER__ITEM_BAG = 0,        // pooled, unweighted: item = bag
    EMBER__ITEM_POS_POOLED = 1, // pooled, weighted: item = position, bag_of[position] = bag
    EMBER__ITEM_POS_SEQ = 2,    // sequence (NONE): item = position = output row
};

// The sorted entries of one backward call: segment k is the run of entries of one touched row.
typedef struct ember__segments {
    const ember_kjt *kjt;
    const int64_t *off;       // [F*B+1]
    enum ember__item_kind kind;
    int64_t m;                // kept ids (entries)
    int64_t u;                // unique rows (segments)
    const int64_t *row;       // [m] row of each entry; sorted by (table, row)
    const int64_t *item;      // [m] gradient source; ascending position within a row
    const int64_t *seg;       // [u+1] first entry of each segment; seg[u] = m
    const int64_t *tseg;      // [T+1] first segment of each table
    const float *bag_c;       // [F*B] c_bag: 1 (SUM) or 1/|I| (MEAN)
    const int64_t *bag_goff;  // [F*B] float offset of bag (f, b)'s slice of dL/dy: b*out_dim + col_f
    const int64_t *bag_of;    // [nnz] bag of each position (ITEM_POS_POOLED only)
    ember__optim_step *step;  // [T] per-table step constants
} ember__segments;

// The unchecked backward in two steps, for a caller that must know every allocation succeeded
// before any table changes (the sharded collection agrees on it across ranks): prepare sorts
// the entries into *s and reserves all the workspace the update needs (EMBER_OK or
// EMBER_ERR_NOMEM; nothing changes); apply then counts the step and updates the rows, and
// allocates nothing (it fails only on a device error of a GPU backend). Nothing else may use the
// collection's workspace in between.
ember_status ember__ebc_backward_prepare(ember_ebc *ebc, const ember_kjt *kjt, ember__segments *s);
ember_status ember__ebc_backward_apply(ember_ebc *ebc, const ember__segments *s, const float *grad_out,
                                       float *grad_weights);

// Validates kjt and grad_out (finite) the way backward does, without changing anything.
ember_status ember__ebc_check_backward(ember_ebc *ebc, const char *caller, const ember_kjt *kjt,
                                       const float *grad_out, const ember_kjt **use);
// The coalesced gradient of a validated KJT (duplicates summed in value order). It also
// reserves the workspace ember__ebc_apply needs: an apply after it allocates nothing.
ember_status ember__ebc_coalesce(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out,
                                 ember__sparse_grad *out);
// Applies one optimizer update per row of `g` (keys sorted, unique) and advances every table's
// step counter. Used by backward and by the data-parallel scheme after its cross-rank sum.
// row_sumsq (NULL, or [n] with -1 for "not given") carries the whole-row sum of squared
// gradients of row-wise optimizers whose rows are split over column shards.
ember_status ember__ebc_apply(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad,
                              int64_t n, const float *row_sumsq);
// out[k] = sum_d (g_d + l2 * w_d)^2 over this piece of row key[k] for the optimizers whose
// update takes the row's mean of g^2 (the descriptor's rowwise_sumsq), -1 for the others.
ember_status ember__ebc_row_sumsq(ember_ebc *ebc, const ember__sparse_grad *g, float *out);
// Table index of a key (binary search over key_base).
int32_t ember__ebc_key_table(const ember_ebc *ebc, int64_t key);

// A change of weight dtypes in two steps, for callers that must know the allocation succeeded
// before anything changes (the sharded collection agrees on it across ranks): prepare has the
// backend allocate its storage re-laid out for the new dtypes (EMBER_OK, EMBER_ERR_NOMEM or
// EMBER_ERR_UNSUPPORTED: nothing changes; nothing is allocated when no dtype changes), commit
// converts into it and cannot fail, abort frees it.
// Table t's new dtype is dtypes[t] (borrowed until commit), or with dtypes NULL: `dtype` for
// table `table`, the others keep theirs.
typedef struct ember__dtype_change {
    const ember_dtype *dtypes;
    int32_t table;
    ember_dtype dtype;
    void *prepared;      // the backend's new storage (NULL: no change)
} ember__dtype_change;
// The dtype table t has after the change.
static inline ember_dtype ember__dtype_change_new(const ember_ebc *ebc, const ember__dtype_change *c, int32_t t) {
    return c->dtypes ? c->dtypes[t] : t == c->table ? c->dtype : ebc->tables[t].cfg.dtype;
}
// ember_ebc_write without its value check: the bits given, NaN and infinity included (a
// checkpoint's records, restored as they were saved).
ember_status ember__ebc_write_bits(ember_ebc *ebc, int32_t table, const char *tensor, int64_t row_begin, int64_t row_end,
                                   ember_dtype dtype, const void *src);
ember_status ember__ebc_convert_prepare(ember_ebc *ebc, ember__dtype_change *c);
void ember__ebc_convert_commit(ember_ebc *ebc, ember__dtype_change *c);
void ember__ebc_convert_abort(ember_ebc *ebc, ember__dtype_change *c);

// Workspace slot `slot` with at least `bytes`; NULL + NOMEM error on failure.
void *ember__ws_get(ember_ebc *ebc, int slot, size_t bytes);

// Initial weights of row r of table t in global coordinates (origin.row_offset + r), D floats.
void ember__init_row(const ember_ebc *ebc, const ember__table *t, int64_t r, float *dst);
// The same for global row R (a hashed table's rows start from the values of their id's "row").
void ember__init_global(const ember_ebc *ebc, const ember__table *t, int64_t R, float *dst);


#endif
