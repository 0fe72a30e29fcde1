// Internal layout of the sharded collection.
//
// Every routed table is cut into shards, each a block of rows x columns on one owner rank.
// Each (feature, shard) pair is a *route*: the feature's ids that fall in the shard's rows
// travel from every sample's home rank to the shard's owner, which pools them in its local
// collection, and the pooled rows travel back. The schemes differ in how they cut a table,
// where an id goes, and whether the pieces' outputs are concatenated (table-wise, column-wise)
// or summed (row-wise, table-row-wise, grid: column slices of row blocks); that is each scheme's ops table below, one file each.
// A scheme may instead keep its tables at home (data-parallel: a full replica on every rank,
// in a collection of its own, dp.c) through the ops' optional hooks.
#ifndef EMBER_SHARD_INTERNAL_H
#define EMBER_SHARD_INTERNAL_H

#include "comm/internal.h"
#include "ember/shard.h"
#include "tbe/internal.h"
#include "tbe/rowmap.h"

typedef struct ember__shard {
    int32_t owner;          // rank holding the block
    int64_t r0, r1;         // global rows [r0, r1)
    int32_t c0, c1;         // global columns [c0, c1)
    int32_t local_table;    // index of the block in the owner's local collection
} ember__shard;

typedef struct ember__table_shards ember__table_shards;

// The planner's per-step traffic of one option, per rank ([W] arrays, summed into): bytes of
// stored rows read, and bytes sent to itself (counted by the byte model, free in time), sent to
// and received from ranks of its host, sent to and received from other hosts. host_of NULL: one
// host.
typedef struct ember__traffic {
    int32_t W;
    const int32_t *host_of;
    double *read, *self, *intra, *intra_in, *inter, *inter_in;
} ember__traffic;
#define EMBER__TRAFFIC_ARRAYS 6

// Adds `bytes` sent by rank src to rank dst.
static inline void ember__traffic_send(ember__traffic *tr, int32_t src, int32_t dst, double bytes) {
    if (src == dst) tr->self[src] += bytes;
    else if (!tr->host_of || tr->host_of[src] == tr->host_of[dst]) {
        tr->intra[src] += bytes;
        tr->intra_in[dst] += bytes;
    } else {
        tr->inter[src] += bytes;
        tr->inter_in[dst] += bytes;
    }
}

// One scheme: how a table's plan is checked, how the table is cut into shards, where each id
// goes, and what the scheme adds to a step besides the routed data. One file per scheme; a new
// scheme is its file, its enum value and its entry in ember__schemes.
typedef struct ember__scheme_ops {
    ember_shard_scheme scheme;
    const char *name;        // "table_wise" (plan descriptions)
    const char *short_name;  // "tw" (command lines)
    // Checks plan against the table and world size; message names the table.
    ember_status (*validate)(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W);
    // Number of shards, and the shards themselves (owner, rows, columns) when out is not NULL,
    // block-major: the column slices of row block k are shards [k * ncols, (k + 1) * ncols).
    // Zero shards: the table is not routed (it stays home, see build_home).
    int32_t (*cut)(const ember_table_config *t, const ember_table_plan *p, int32_t W, ember__shard *out);
    // Pieces hold row blocks whose partial pools are summed at the home rank (RW, TWRW);
    // otherwise they are column blocks of complete pools, concatenated.
    int partial;
    // The plan fields the scheme reads (EMBER_PLAN_USES_*): what ember_shard_scheme_plan_fields
    // and ember_table_plan_ranks_needed report.
    unsigned plan_fields;
    // Pieces are column slices of their row block: a row-wise optimizer's per-row state needs
    // the sum of g^2 over the whole row, exchanged among the shards of a row block (CW, GRID).
    int column_slices;
    // Bucketize: the row block of a valid id (-1: it stays home). Called once per id of a
    // table with more than one row block.
    int32_t (*bucket)(const ember__table_shards *ts, int64_t id);
    // Optional, for schemes that keep rank-local state instead of shards: creates it once the
    // shards and routes exist (local_cfg: the bounds and limits of the local collections),
    // pools the ids that stay home into out (zeroed) during forward, and in backward exchanges
    // and applies their gradients in two collective steps: prepare computes and allocates
    // everything without changing a table, given the rank's status so far, and returns the
    // status every rank agreed on (grad_out as the caller gave it); apply, once every rank's
    // prepare succeeded, exchanges and updates and allocates nothing.
    ember_status (*build_home)(ember_sebc *s, const ember_ebc_config *local_cfg);
    ember_status (*home_forward)(ember_sebc *s, float *out);
    ember_status (*backward_prepare)(ember_sebc *s, const float *grad_out, ember_status st);
    ember_status (*backward_apply)(ember_sebc *s);
    // The planner's estimate of one table of the plan p per step: the bytes each rank reads and
    // sends, by destination, into tr (ember__traffic_send); B samples per rank, L ids per sample,
    // row/out bytes of a stored/pooled row, rows of the table.
    void (*step_traffic)(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, struct ember__traffic *tr);
} ember__scheme_ops;

// What every scheme that splits a table's columns requires (cw, grid): pooled bags (a sequence
// table's rows are not summed per slice), and an optimizer whose descriptor allows column slices
// (whole-row norms, as LAMB's trust ratio and LARS's rate, would need more exchanges per step).
// `scheme` names it in the message.
ember_status ember__check_column_slices(ember_ctx *ctx, const ember_table_config *t, const char *scheme);

// The bucket of a scheme with one row block (every id goes to all of the table's shards).
int32_t ember__bucket_one_block(const ember__table_shards *ts, int64_t id);
// The bucket of the row-split schemes (rw, twrw, grid): row blocks are the contiguous split of
// the rows (empty blocks have no shard and come last).
int32_t ember__bucket_row_split(const ember__table_shards *ts, int64_t id);

extern const ember__scheme_ops ember__scheme_dp, ember__scheme_tw, ember__scheme_cw, ember__scheme_rw,
    ember__scheme_twrw, ember__scheme_grid;
// Indexed by ember_shard_scheme.
extern const ember__scheme_ops *const ember__schemes[EMBER_SHARD_COUNT];
// The ops of a valid scheme (never NULL).
static inline const ember__scheme_ops *ember__scheme(ember_shard_scheme s) { return ember__schemes[s]; }

// Rows per unit of a table's row blocks: 1, or a hashed table's bucket rows (its blocks hold
// whole buckets, so each block's id map evolves as the whole table's, docs/hashed.md).
static inline int64_t ember__row_unit(const ember_table_config *t) {
    return ember_table_id_space(t) == EMBER_IDS_HASHED ? ember__hash_bucket_rows(&t->hash) : 1;
}

// Contiguous split of n into k parts: the first n % k parts get one more.
static inline int64_t ember__split_begin(int64_t n, int32_t k, int32_t i) {
    int64_t base = n / k, rem = n % k;
    return (int64_t)i * base + (i < rem ? i : rem);
}
// The part of that split holding element x (0 <= x < n).
static inline int32_t ember__split_index(int64_t n, int32_t k, int64_t x) {
    const int64_t base = n / k, rem = n % k, big = rem * (base + 1);
    return (int32_t)(x < big ? x / (base + 1) : rem + (x - big) / base);
}

// First row of block i of a table's rows split into k row blocks (rw, twrw, grid).
static inline int64_t ember__block_begin(const ember_table_config *t, int32_t k, int32_t i) {
    const int64_t u = ember__row_unit(t);
    return ember__split_begin(t->rows / u, k, i) * u;
}

typedef struct ember__route {
    int32_t feature;        // global feature index
    int32_t table;          // global table index
    const ember__shard *shard;
    int32_t local_col;      // first column of this route in the owner's local output
    int32_t partial;        // summed (row blocks) rather than placed
} ember__route;

struct ember__table_shards {
    ember_shard_scheme scheme;
    const ember__scheme_ops *ops;
    int64_t rows;
    ember_id_space ids;     // what its ids are (ember_table_id_space): routing asks nothing else
    int64_t unit;           // ember__row_unit: a hashed table's rows are split by whole buckets
    int32_t nshards;
    int32_t nblocks;        // row blocks (0 for DP); nshards / nblocks column slices each
    ember__shard *shards;   // [nshards]; NULL for DP
    int32_t dp_local;       // DP: index in the DP collection
};

struct ember_sebc {
    ember_ctx *ctx;
    ember_comm *comm;
    int32_t W, rank;
    ember_grad_convention conv;
    int32_t T, F;
    ember_table_config *tables;   // [T] copies (names owned by the local collections' copies)
    int32_t *feature_table;       // [F]
    int32_t *feature_col;         // [F] first output column
    int64_t *feature_rows;        // [F] the validator's bound of its ids (ember__id_limit)
    char **feature_names;         // [F] owned
    char **table_names;           // [T] owned
    int32_t out_dim;
    bool sequence;
    ember_bounds_mode bounds;
    ember__table_shards *ts;      // [T]
    // Routes per owner rank, in the order their data is laid out in every message.
    int32_t *nroutes;             // [W]
    ember__route **routes;        // [W][nroutes[q]]
    int32_t *local_out_dim;       // [W] sum of the routes' widths at owner q
    int32_t *route_base;          // [W+1] global index of owner q's first route
    int32_t *froute_off;          // [F+1] feature f's shards' routes are froute[froute_off[f] ..]
    int32_t *froute;              // global route index of (feature, shard), in shard order
    ember_ebc *local;             // this rank's shards (NULL if it owns none)
    ember_ebc *dp;                // replicas of the DP tables (NULL if none)
    int32_t cw_rowwise;           // some column-sliced (CW, GRID) table has a row-wise optimizer
    int32_t ndp_features;
    int32_t *dp_features;         // [ndp_features] global feature index of DP feature i
    int32_t dp_out_dim;
    // State of the last forward, kept for backward.
    int has_forward;
    uint64_t fwd_digest;        // ember__kjt_digest of the forward's KJT, which the backward must repeat
    int64_t fwd_nnz;
    int32_t batch, weighted;
    int64_t *Bs;                  // [W] batch sizes
    int64_t *send_ids, *recv_ids; // [W] id counts sent to / received from each rank
    int64_t *cnt;                 // [4W] scratch counts for the collectives
    ember__buf san_off, san_val, san_w, san_pos;  // sanitised KJT: offsets [F*B+1], ids, weights, positions
    ember__buf san_blk;                           // row block of every sanitised id
    ember__buf snd_len, snd_val, snd_w, snd_pos;  // routed input, grouped by destination
    ember__buf snd_cur;                           // bucketize's write cursor per (route, bag)
    ember__buf rcv_len, rcv_val, rcv_w;
    ember__buf loc_off, loc_val, loc_w;           // the owner's local KJT
    ember__buf loc_out, snd_out, rcv_out;         // pooled outputs and their gradients
    ember__buf dp_off, dp_val, dp_w, dp_out;      // DP sub-KJT
    ember__buf dp_keys, dp_grads, dp_counts;      // DP gradient exchange
    ember__buf dp_glen, dp_gval, dp_goff;         // DP hashed tables: the global batch's ids
    int dp_hashed;                                // some data-parallel table is hashed
    int training;                                 // ember_sebc_set_training (1 at creation)
    ember__sparse_grad dp_grad;                   // DP: this rank's coalesced gradient (backward)
    ember__buf ss_mine, ss_send, ss_recv;         // column-sliced row-wise optimizers: row sums of g^2
    ember_kjt local_kjt, dp_kjt;
    uint64_t bytes_last_step, bytes_at_forward;
    int64_t ids_examined;         // ids bucketize looked at in the last forward
    int legacy_bucketize;         // measurement only: the O(W * nnz) path
    ember_dtype wire_fwd, wire_bwd; // wire precision of the output and gradient dists (wire.c)
    ember__buf wire_snd, wire_rcv;  // their 16-bit messages
    struct ember__overlap *ov;    // prefetch and split backward (shard/overlap.h)
};

// The i-th piece of table t this rank holds (its shards in shard order, or its replica) as a
// local table of a collection; 0 when there is no such piece.
int ember__piece(const ember_sebc *s, int32_t t, int32_t i, ember_ebc **ebc, int32_t *local_table);

// The convention's factor on every gradient handed to an update (1/W for MEAN).
static inline float ember__grad_scale(const ember_sebc *s) { return s->conv == EMBER_GRAD_MEAN ? 1.0f / (float)s->W : 1.0f; }

// Applies the bounds mode once, at the home rank: san_* (kept ids, their weights and original
// positions, offsets per bag). Routed pieces then carry only valid ids.
ember_status ember__sanitise(ember_sebc *s, const ember_kjt *kjt);
// Sequence outputs between the owner's local order and the per-source order (forward.c).
void ember__permute_rows(ember_sebc *s, float *local, float *by_source, int dir);

// Converts every table t's storage to dtypes[t] at once (ember_sebc_convert_dtype, checkpoint
// loads). Collective: every rank allocates its re-laid-out slabs first and the status (with `st`,
// the caller's so far) is agreed on before any conversion: on failure no table changed anywhere.
// Returns the agreed status.
ember_status ember__sebc_convert_dtypes(ember_sebc *s, const ember_dtype *dtypes, ember_status st);

// Routes the sanitised local batch (san_*): snd_* and send_ids for the input dist, dp_kjt for
// the replicas (its weights are dropped at home_forward if no rank sends weights).
ember_status ember__bucketize(ember_sebc *s, int32_t B);

// The float exchange of the output dist (dir EMBER__WIRE_FWD: owner -> home, this rank's routes'
// rows for rank q's samples in block q) or of the gradient dist (EMBER__WIRE_BWD: home -> owner,
// rank q's routes' rows for this rank's samples), as ember_comm_alltoallv with float elements, in
// the wire precision set for that direction (wire.c). s->cnt[2W, 4W) is used as scratch.
// Collective. Returns EMBER_OK, EMBER_ERR_NUMERIC (a value overflows the 16-bit format, on any
// rank), EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; every rank returns the same status.
enum { EMBER__WIRE_FWD = 0, EMBER__WIRE_BWD = 1 };
ember_status ember__wire_exchange(ember_sebc *s, int dir, const float *send, const int64_t *sc, float *recv,
                                  const int64_t *rc);
void ember__wire_free(ember_sebc *s);

#endif
