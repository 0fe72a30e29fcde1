// Internal layout of the sharded collection.
//
// Every routed table is cut into shards, each a block of rows x columns on one owner rank.
// Each (feature, shard) pair is a *route*: the feature's ids that fall in the shard's rows
// travel from every sample's home rank to the shard's owner, which pools them in its local
// collection, and the pooled rows travel back. The schemes differ in how they cut a table,
// where an id goes, and whether the pieces' outputs are concatenated (table-wise, column-wise)
// or summed (row-wise, table-row-wise, grid: column slices of row blocks); that is each scheme's ops table below, one
// file each. A scheme may instead keep its tables at home (data-parallel: a full replica on every rank, in a collection
// of its own, dp.c) through the ops' optional home hooks: it then owns a state of its own (the collection holds it as
// an opaque pointer per scheme, home[scheme]) and a part of every batch (ember__batch.home[scheme]); nothing outside
// its file knows what they hold.
//
// The sharded collection is a composition: the plan's geometry (shards, routes: built once), the
// batch in flight (ember__batch: one struct, so a prefetch swaps one pointer), the local
// collection of this rank's shards, each home scheme's state, the overlap state (overlap.h) and
// the wire precision (wire.c).
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

// Grows workspace buffer `buf` (an ember__buf) to hold n elements of `type` (at least one):
// the pointer, or NULL with EMBER_ERR_NOMEM on s's context.
#define EMBER__RESERVE(s, buf, type, n) \
    ((type *)ember__buf_reserve((s)->ctx, &(buf), sizeof(type) * (size_t)((n) > 0 ? (n) : 1)))

// One batch's input, from the home rank's sanitised KJT to what the owners received: the
// forward fills it (or a prefetch, ahead of its forward: overlap.c), the backward reads it.
typedef struct ember__batch {
    int32_t batch, weighted;     // this rank's batch size; some rank sends weights
    int64_t *Bs;                 // [W] batch sizes
    int64_t *send_ids, *recv_ids;// [W] id counts sent to / received from each rank
    ember__buf san_off, san_val, san_w, san_pos; // sanitised KJT: offsets [F*B+1], ids, weights, positions
    ember__buf san_blk;                          // row block of every sanitised id
    ember__buf snd_len, snd_val, snd_w, snd_pos; // routed input, grouped by destination
    ember__buf snd_cur;                          // bucketize's write cursor per (route, bag)
    ember__buf rcv_len, rcv_val, rcv_w;          // what the owners received
    int64_t ids_examined;        // ids bucketize looked at
    void *home[EMBER_SHARD_COUNT]; // each home scheme's part of the batch (its home_batch hook)
} ember__batch;
// A batch's arrays for W ranks, and its release (with the home schemes' parts). batch.c.
ember_status ember__batch_create(ember_sebc *s, ember__batch **out);
void ember__batch_destroy(ember_sebc *s, ember__batch *b);

// The planner's per-step traffic of one option, per rank ([W] arrays, summed into): bytes of
// stored rows read, and bytes sent to itself (counted by the byte model, free in time), sent to
// and received from ranks of its host, sent to and received from other hosts. host_of NULL: one
// host; host_size [W] the number of ranks on rank q's host (NULL: one host).
typedef struct ember__traffic {
    int32_t W;
    const int32_t *host_of, *host_size;
    int32_t *scratch; // [W] for ember__traffic_to_set
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

// What a scheme sees of the planner's machine when it proposes placements for a table (src/plan/
// enumerates the schemes' candidates, estimates and places).
typedef struct ember__plan_view {
    int32_t W, H;                // ranks, hosts
    const int32_t *by_load;      // [W] ranks, least loaded first (so far in the placement)
    const int32_t *host_first;   // [H + 1] host h's ranks are host_ranks[host_first[h] .. host_first[h + 1])
    const int32_t *host_ranks;   // [W]
    int hosts_even;              // more than one host, all of equal size and at least 2 ranks each
    int named;                   // the caller named this scheme among the allowed ones
    size_t dp_max;               // replicate only tables up to this many bytes
    const int32_t *host_by_load; // [H] hosts, least loaded first (the load of their least loaded rank)
} ember__plan_view;
// A scheme proposes a placement on a single rank (or host) only on the EMBER__PLAN_TRIES least
// loaded ones: the planner's work is then linear in the world size (a placement on a busier rank
// never wins when a less loaded one can take it).
#define EMBER__PLAN_TRIES 16
// A candidate's plan (its ranks valid during the call), handed to the planner.
typedef void (*ember__plan_emit)(void *arg, const ember_table_plan *p);

// Adds `bytes` sent by every rank to every other rank (O(W), whatever the hosts).
static inline void ember__traffic_all_pairs(ember__traffic *tr, double bytes) {
    for (int32_t q = 0; q < tr->W; q++) {
        const double same = tr->host_of ? (double)(tr->host_size[q] - 1) : (double)(tr->W - 1);
        const double other = (double)(tr->W - 1) - same;
        tr->intra[q] += same * bytes;
        tr->intra_in[q] += same * bytes;
        tr->inter[q] += other * bytes;
        tr->inter_in[q] += other * bytes;
    }
}

// Adds, for every rank q and each of the n owner ranks o: x bytes sent by q to o (to itself too:
// counted in self), and y bytes sent back by o to q when q != o. O(W + n), whatever the hosts.
void ember__traffic_to_set(ember__traffic *tr, const int32_t *owners, int32_t n, double x, double y);

// One scheme: how a table's plan is checked, how the table is cut into shards, where each id
// goes, what the scheme adds to a step besides the routed data, and how it places and plans a
// table. One file per scheme; a new scheme is its file, its enum value and its line in
// ember__schemes (schemes.c).
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
    // Optional, for schemes that keep rank-local state instead of shards (the home hooks; every
    // one gets the state build_home made, `home`):
    //   build_home      creates it once the shards and routes exist (local_cfg: the bounds and
    //                   limits of the local collections); *home stays NULL when the plan gives
    //                   the scheme no table, and then no other hook is called. destroy_home
    //                   waits for anything it left in flight and frees it.
    //   home_route      bucketize's part: this rank's sanitised batch b (B samples) -> the
    //                   scheme's part of b (b->home[scheme], which it allocates on first use and
    //                   home_batch_free frees).
    //   home_forward    pools the ids that stay home into out (zeroed), given the rank's status
    //                   so far (nothing to do unless EMBER_OK); one that communicates agrees on it
    //                   first. Returns the status (agreed, if it communicated).
    //   backward_prepare, backward_apply: its gradients in two collective steps: prepare
    //                   computes and allocates everything without changing a table, given the
    //                   rank's status so far, and returns the status every rank agreed on
    //                   (grad_out as the caller gave it); apply, once every rank's prepare
    //                   succeeded, exchanges and updates and allocates nothing. backward_drain
    //                   waits for exchanges a failed backward left in flight.
    //   home_piece      the collection and local table holding table t (its replica), or 0.
    //   home_ebc        its collection (set_training, dtype conversion reach it through this).
    ember_status (*build_home)(ember_sebc *s, const ember_ebc_config *local_cfg, void **home);
    void (*destroy_home)(ember_sebc *s, void *home);
    ember_status (*home_route)(ember_sebc *s, void *home, ember__batch *b, int32_t B);
    void (*home_batch_free)(ember_sebc *s, void *part);
    ember_status (*home_forward)(ember_sebc *s, void *home, float *out, ember_status st);
    ember_status (*backward_prepare)(ember_sebc *s, void *home, const float *grad_out, ember_status st);
    ember_status (*backward_apply)(ember_sebc *s, void *home);
    void (*backward_drain)(ember_sebc *s, void *home);
    int (*home_piece)(const ember_sebc *s, const void *home, int32_t t, ember_ebc **ebc, int32_t *local_table);
    ember_ebc *(*home_ebc)(const void *home);
    // The planner's estimate of one table of the plan p per step: the bytes each rank reads and
    // sends, by destination, into tr (ember__traffic_send); B samples per rank, L ids per sample,
    // row/out bytes of a stored/pooled row, rows of the table.
    void (*step_traffic)(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, struct ember__traffic *tr);
    // The planner: every placement worth trying for table t (of `bytes` bytes) on view's
    // machine, each through emit (ranks: [W] scratch for the plans' ranks); none when the table
    // cannot take the scheme. The bytes each rank stores of a table of `bytes` under p, added
    // into per_rank[W].
    void (*candidates)(const ember_table_config *t, size_t bytes, const ember__plan_view *v, int32_t *ranks,
                       ember__plan_emit emit, void *arg);
    void (*storage)(const ember_table_plan *p, int32_t W, size_t bytes, size_t *per_rank);
    // Planned only when named in the allowed schemes (ember_plan_config.allow).
    int planned_only_when_named;
    // The planner asks the schemes for candidates by increasing plan_order; of equally good
    // placements it keeps the first proposed (replication, row-wise, column-wise, table-wise, grid,
    // table-row-wise: 0, 10, 20, 30, 40, 50).
    int plan_order;
    // The default placement of table number t of dim columns on W ranks (ember_table_plan_default,
    // whose header states the rules), its ranks in ranks[W].
    void (*default_plan)(int32_t t, int32_t dim, int32_t W, int32_t group, int32_t *ranks, ember_table_plan *out);
} ember__scheme_ops;

// The first rank that appears twice in ranks[n] (all in [0, W)), or -1: O(n + W), a bitmap from
// ctx (-2 when it cannot be allocated: the caller reports EMBER_ERR_NOMEM).
int32_t ember__repeated_rank(ember_ctx *ctx, const int32_t *ranks, int32_t n, int32_t W);

// Storage of a plan that splits a table evenly over the ranks it names (ranks[0, num_ranks)):
// each holds bytes / n plus the remainder (cw, twrw, grid, tw).
void ember__storage_over_ranks(const ember_table_plan *p, int32_t W, size_t bytes, size_t *per_rank);

// Whether a table can be split by columns into k slices as the planner proposes them: at least 16
// columns a slice, pooled, an optimizer whose descriptor allows column slices.
int ember__plan_column_slices(const ember_table_config *t, int32_t k);

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

// Indexed by ember_shard_scheme (schemes.c).
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
};

// Sums of coalesced row gradients over copies of the same piece (replica.c).
// ember__merge_grads: n sources' coalesced gradients gathered one after another (source q's nk[q]
// keys, sorted and unique, in keys; their rows, each of its table's width in e, in grads, in the
// same order) merged into mkeys/moff/mgrads, equal keys' rows added in source order; head [n] and
// goffs [sum nk + 1] are scratch. Returns the merged count. Local.
int64_t ember__merge_grads(const ember_ebc *e, int32_t n, const int64_t *nk, const int64_t *keys, const float *grads,
                           int64_t *head, int64_t *goffs, int64_t *mkeys, int64_t *moff, float *mgrads);
// The replicas of a 2D collection (s->replica: the ranks holding the same pieces, one per sharding
// group) summing one coalesced gradient each, in group order: prepare (collective on the
// replicas, whatever st) learns every replica's bounds (nk keys, ng floats) and reserves the
// buffers, returning st or EMBER_ERR_NOMEM for the caller to agree on; merge (collective on the
// replicas, allocates nothing) gathers the gradients, at most the prepared bounds, and sums them
// into *out (valid until the next prepare).
typedef struct ember__replica_sum {
    int64_t *cnt;              // [4 R]: keys and floats per replica, merge heads
    int64_t tk, tg;            // the prepared bounds, over all replicas
    ember__buf keys, grads;
} ember__replica_sum;
ember_status ember__replica_init(ember_sebc *s, ember__replica_sum *r);
void ember__replica_free(ember_sebc *s, ember__replica_sum *r);
ember_status ember__replica_prepare(ember_sebc *s, ember__replica_sum *r, int64_t nk, int64_t ng, ember_status st);
ember_status ember__replica_merge(ember_sebc *s, ember__replica_sum *r, const ember_ebc *e,
                                  const ember__sparse_grad *g, ember__sparse_grad *out);

struct ember_sebc {
    ember_ctx *ctx;
    ember_comm *comm;             // the ranks the tables are sharded over: the caller's, or (2D) its group's
    int32_t W, rank;              // of comm
    // 2D (ember_sebc_create_2d): comm is this rank's sharding group (owned), world the caller's
    // communicator, replica the ranks at the same place in every group (owned), nrep = groups
    // (this rank's group: world->rank / W).
    // Otherwise world = comm, replica NULL, nrep 1.
    ember_comm *world, *replica;
    int32_t nrep;
    ember__replica_sum rsum;      // 2D: the routed pieces' replica sum
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
    // The rest of the creating configuration (ember_sebc_reshard makes its successor from it).
    uint64_t seed;
    int32_t max_batch_size;
    int64_t max_nnz;
    char *ssd_dir;                // owned; NULL: the default
    ember_backend backend;
    ember__table_shards *ts;      // [T]
    // Routes per owner rank, in the order their data is laid out in every message.
    int32_t *nroutes;             // [W]
    ember__route **routes;        // [W][nroutes[q]]
    int32_t *local_out_dim;       // [W] sum of the routes' widths at owner q
    int32_t *route_base;          // [W+1] global index of owner q's first route
    int32_t *froute_off;          // [F+1] feature f's shards' routes are froute[froute_off[f] ..]
    int32_t *froute;              // global route index of (feature, shard), in shard order
    ember_ebc *local;             // this rank's shards (NULL if it owns none)
    void *home[EMBER_SHARD_COUNT];// each home scheme's state (its build_home; NULL: none)
    int32_t cw_rowwise;           // some column-sliced (CW, GRID) table has a row-wise optimizer
    int training;                 // ember_sebc_set_training (1 at creation)
    uint64_t mark_tag;            // ember_sebc_mark's
    // The batch in flight, and what the last forward left for its backward.
    ember__batch *in;
    int has_forward;
    uint64_t fwd_digest;        // ember__kjt_digest of the forward's KJT, which the backward must repeat
    int64_t fwd_nnz;
    int64_t *cnt;                 // [4W] scratch counts for the collectives
    ember__buf loc_off, loc_val, loc_w;           // the owner's local KJT
    ember__buf loc_out, snd_out, rcv_out;         // pooled outputs and their gradients
    ember__buf ss_mine, ss_send, ss_recv;         // column-sliced row-wise optimizers: row sums of g^2
    ember_kjt local_kjt;
    uint64_t bytes_last_step, bytes_at_forward;
    int legacy_bucketize;         // measurement only: the O(W * nnz) path
    ember_dtype wire_fwd, wire_bwd; // wire precision of the output and gradient dists (wire.c)
    float wire_scale_fwd, wire_scale_bwd; // their loss scales (1 unless set)
    ember__buf wire_snd, wire_rcv;  // their encoded messages
    ember__buf wire_cnt;            // [3W] the exchange in flight's float counts received, bytes received, sent
    ember_dtype wire_inflight;      // the exchange in flight: its encoding (F32: none), scale, direction
    float wire_inflight_scale;
    int wire_inflight_dir;
    struct ember__overlap *ov;    // prefetch and split backward (shard/overlap.h)
    // Variable batch sizes per feature (kjt.h): a VBE call computes on the padded KJT (kjt/vbe.c);
    // in a forward or prefetch, vbe_user is the caller's KJT meanwhile (its digest is the batch's:
    // ember__input_digest; the backward compares it before padding).
    const ember_kjt *vbe_user;
    ember__buf vbe_len, vbe_io;   // the padded lengths; the padded output or gradient
    ember__buf vbe_fbs;           // the last forward's B_f [F] (a VBE forward's), for its backward
    int vbe_fwd;                  // the last forward was VBE: 1 without inverse indices, 2 with
};

// The digest a batch is known by (prefetch, forward, backward compare it): the caller's KJT's,
// the VBE one when the call computes on its padded KJT.
static inline uint64_t ember__input_digest(const ember_sebc *s, const ember_kjt *kjt) {
    return ember__kjt_digest(s->vbe_user ? s->vbe_user : kjt);
}

// A VBE KJT (kjt.h) checked as ember_sebc_forward checks a KJT (a sequence collection refuses
// it) and padded into s->vbe_len: *padded. Local; EMBER_OK or the status with its message.
ember_status ember__sebc_vbe_input(ember_sebc *s, const char *fn, const ember_kjt *kjt, const void *out,
                                   ember_kjt *padded);

// The i-th piece of table t this rank holds (its shards in shard order, or its replica) as a
// local table of a collection; 0 when there is no such piece.
int ember__piece(const ember_sebc *s, int32_t t, int32_t i, ember_ebc **ebc, int32_t *local_table);

// This rank's local collections: its shards' (s->local) and each home scheme's; their count, at
// most 1 + EMBER_SHARD_COUNT, into out.
int32_t ember__local_collections(const ember_sebc *s, ember_ebc **out);

// The convention's factor on every gradient handed to an update (1/W for MEAN, W all ranks).
static inline float ember__grad_scale(const ember_sebc *s) {
    return s->conv == EMBER_GRAD_MEAN ? 1.0f / (float)(s->W * s->nrep) : 1.0f;
}

// Bytes this rank handed to MPI on the collection's communicators (2D: its group's, the
// replicas' and the world's agreements).
static inline uint64_t ember__sebc_bytes(const ember_sebc *s) {
    return ember_comm_bytes_sent(s->comm) +
           (s->replica ? ember_comm_bytes_sent(s->replica) + ember_comm_bytes_sent(s->world) : 0);
}

// 2D: the status every rank of the world agrees on, after a call's work in the groups (st as
// is otherwise). Collective on the world.
static inline ember_status ember__world_agree(ember_sebc *s, ember_status st) {
    return s->replica ? ember_comm_agree(s->world, st) : st;
}

// Applies the bounds mode once, at the home rank: san_* (kept ids, their weights and original
// positions, offsets per bag). Routed pieces then carry only valid ids.
ember_status ember__sanitise(ember_sebc *s, const ember_kjt *kjt);
// Sequence outputs between the owner's local order and the per-source order (forward.c).
void ember__permute_rows(ember_sebc *s, float *local, float *by_source, int dir);

// The communicator the tables are sharded over (s->comm), for the checkpoints (src/state, whose
// internal.h declares it with ember__sebc_convert_dtypes).
ember_comm *ember__sebc_shard_comm(const ember_sebc *s);

// Converts every table t's storage to dtypes[t] at once (ember_sebc_convert_dtype, checkpoint
// loads). Collective: every rank allocates its re-laid-out slabs first and the status (with `st`,
// the caller's so far) is agreed on before any conversion: on failure no table changed anywhere.
// Returns the agreed status.
ember_status ember__sebc_convert_dtypes(ember_sebc *s, const ember_dtype *dtypes, ember_status st);

// Routes the sanitised local batch (s->in's san_*): snd_* and send_ids for the input dist, and
// each home scheme's part (home_route).
ember_status ember__bucketize(ember_sebc *s, int32_t B);

// The float exchange of the output dist (dir EMBER__WIRE_FWD: owner -> home, this rank's routes'
// rows for rank q's samples in block q) or of the gradient dist (EMBER__WIRE_BWD: home -> owner,
// rank q's routes' rows for this rank's samples), as ember_comm_alltoallv with float elements, in
// the wire precision set for that direction (wire.c). Collective. Returns EMBER_OK,
// EMBER_ERR_NUMERIC (a value the encoding cannot carry, on any rank), EMBER_ERR_NOMEM,
// EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; every rank returns the same status.
enum { EMBER__WIRE_FWD = 0, EMBER__WIRE_BWD = 1 };
ember_status ember__wire_exchange(ember_sebc *s, int dir, const float *send, const int64_t *sc, float *recv,
                                  const int64_t *rc);
// The same in two halves, for the split backward: the start encodes (refusals agreed on every
// rank before anything is sent, as above), copies the self block and leaves the messages in
// flight on req; the finish waits for them and decodes into recv (the start's). One exchange in
// flight per collection; send may be reused after the start, recv not before the finish.
// Statuses as ember__wire_exchange: a failed start has nothing in flight.
ember_status ember__wire_start(ember_sebc *s, int dir, const float *send, const int64_t *sc, float *recv,
                               const int64_t *rc, ember__req *req);
ember_status ember__wire_finish(ember_sebc *s, float *recv, ember__req *req);
void ember__wire_free(ember_sebc *s);

#endif
