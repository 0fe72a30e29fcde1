// ember/shard.h — an EmbeddingBagCollection sharded over the ranks of an ember_comm
// (docs/semantics.md §3, §6; docs/sharding.md).
//
// Every rank passes its own local KJT (local batch sizes may differ between ranks) and receives
// exactly the pooled rows of its local batch that an unsharded collection holding the same
// weights would give. Backward takes dL_r/d(out) of the local loss and trains the objective
//   J = (1/W) sum_r L_r   (EMBER_GRAD_MEAN, default)   or   J = sum_r L_r   (EMBER_GRAD_SUM),
// applied identically to every table whatever its scheme: the gradient handed to a row's update
// is exactly dJ/dE[row]; nothing else rescales a gradient. With GRAD_MEAN and local losses that
// are means over equal local batches, W ranks train exactly as one process on the concatenated
// global batch.
//
// Schemes, per table (a plan may mix them all):
//   DATA_PARALLEL    full replica on every rank; coalesced row gradients are combined across
//                    ranks and every replica applies the same update (bitwise identical).
//   TABLE_WISE       the whole table on `ranks[0]`.
//   COLUMN_WISE      columns split into num_shards contiguous slices, slice i on ranks[i].
//   ROW_WISE         rows split into W contiguous blocks (uneven splits: the first rows % W
//                    blocks get one more row), block r on rank r; partial sums are
//                    reduce-scattered, MEAN divides once by the global bag length.
//   TABLE_ROW_WISE   ROW_WISE within the group ranks[0..group_size) (rows split over the group).
//   GRID             COLUMN_WISE slices, each ROW_WISE over a group: columns split into num_shards
//                    slices, rows into group_size blocks; slice c's row block k lives on
//                    ranks[c * group_size + k] (num_shards * group_size entries; a rank appears at
//                    most once per slice's group, and may hold blocks of several slices). Partial
//                    sums as ROW_WISE, per slice.
// Data flows and byte counts are in docs/sharding.md.
#ifndef EMBER_SHARD_H
#define EMBER_SHARD_H

#include "ember/comm.h"
#include "ember/ebc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_shard_scheme {
    EMBER_SHARD_DATA_PARALLEL = 0,
    EMBER_SHARD_TABLE_WISE = 1,
    EMBER_SHARD_COLUMN_WISE = 2,
    EMBER_SHARD_ROW_WISE = 3,
    EMBER_SHARD_TABLE_ROW_WISE = 4,
    EMBER_SHARD_GRID = 5,
    EMBER_SHARD_COUNT         // number of schemes
} ember_shard_scheme;

// One table's placement. ranks is pointer + count, so a plan has no rank ceiling: the array is
// the caller's (ember_sebc_create and ember_shard_rank_bytes only read it during the call), or
// the planner's (ember_plan_create allocates it; ember_plan_release frees it).
typedef struct ember_table_plan {
    ember_shard_scheme scheme;
    int32_t num_shards;  // COLUMN_WISE, GRID: number of column slices (divides dim unevenly allowed)
    int32_t group_size;  // TABLE_ROW_WISE, GRID: ranks in the (each slice's) group
    int32_t num_ranks;   // entries in ranks: exactly ember_table_plan_ranks_needed (0 for dp, rw)
    int32_t *ranks;      // [num_ranks] (NULL when 0). TW: ranks[0]; CW: one per slice; TWRW: the
                         // group; GRID: ranks[c * group_size + k] holds slice c, row block k
} ember_table_plan;

// The entries of plan->ranks its scheme reads: 1 (tw), num_shards (cw), group_size (twrw),
// num_shards * group_size (grid), 0 (dp, rw, or a scheme outside the enum); -1 when a count it
// reads is below 1 or their product does not fit an int32_t. Local.
EMBER_API int32_t ember_table_plan_ranks_needed(const ember_table_plan *plan);

// The default placement of table number t (its index in the configuration; dim its columns)
// under `scheme` on W ranks: the one rule the CLI, the Python package and the benchmarks use when
// a scheme is named without ranks. ranks: [W] storage that out->ranks points into (out->ranks is
// NULL when the scheme reads none); group: the table-row-wise group size (the ranks of a host),
// W when it is 0 or does not divide W.
//   dp, rw  no ranks;
//   tw      rank t mod W;
//   cw      min(W, dim) column slices, slice i on rank (t + i) mod W;
//   twrw    the group (t mod (W / group)): ranks [g * group, (g + 1) * group);
//   grid    min(dim, 2) column slices, each row-wise over max(1, W / 2) ranks, ranks[i] =
//           (t + i) mod W.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (an unknown scheme, t < 0, dim < 1, W < 1, a
// NULL pointer).
EMBER_API ember_status ember_table_plan_default(ember_shard_scheme scheme, int32_t t, int32_t dim, int32_t W,
                                                int32_t group, int32_t *ranks, ember_table_plan *out);

// Names of a scheme: "data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise",
// "grid_shard" (plan descriptions) and "dp", "tw", "cw", "rw", "twrw", "grid" (command lines); "unknown" outside the
// enum. parse accepts either name: EMBER_OK and *out set, or EMBER_ERR_INVALID_ARG (*out
// unchanged). Local.
EMBER_API const char *ember_shard_scheme_name(ember_shard_scheme s);
EMBER_API const char *ember_shard_scheme_short_name(ember_shard_scheme s);
EMBER_API ember_status ember_shard_scheme_parse(const char *name, ember_shard_scheme *out);

// Which fields of an ember_table_plan a scheme reads: ranks (tw, cw, twrw, grid), num_shards (cw,
// grid), group_size (twrw, grid); 0 outside the enum. Local.
#define EMBER_PLAN_USES_RANKS 1u
#define EMBER_PLAN_USES_SHARDS 2u
#define EMBER_PLAN_USES_GROUP 4u
EMBER_API unsigned ember_shard_scheme_plan_fields(ember_shard_scheme s);

typedef struct ember_sebc ember_sebc;

// Creates the sharded collection. Every rank passes the same cfg and plan[num_tables]; each
// rank allocates only the shards it owns, initialised to the values the unsharded collection
// would hold (same seed). comm is borrowed and must outlive the object.
// Before building anything the ranks agree on a digest of the whole configuration, plan and
// convention (every field but the workspace hints max_batch_size and max_nnz): ranks that differ
// all fail with the same message naming the first differing field, its values and the ranks
// ("table 'user' rows: 31 on rank 2, 30 on rank 0").
// Collective on comm. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (bad plan: rank outside the
// communicator, shard count > dim, num_ranks not what the scheme reads, ...; ranks configured
// differently), EMBER_ERR_UNSUPPORTED (a scheme the table's pooling or optimizer cannot use; a
// tiered table data-parallel; a hashed table with MEAN pooling row-wise, table-row-wise or grid),
// EMBER_ERR_IO (a tiered shard's file, docs/tiered.md), EMBER_ERR_NOMEM, EMBER_ERR_COMM,
// EMBER_ERR_TIMEOUT; every rank returns the same status and *out is NULL on failure.
// Tiered and hashed tables (docs/tiered.md, docs/hashed.md): each shard of a tiered table has its
// own file and a cache of cache_rows rows; a hashed table's row blocks are whole buckets and its
// ids travel to the rank holding their bucket.
EMBER_API ember_status ember_sebc_create(ember_comm *comm, const ember_ebc_config *cfg,
                                         const ember_table_plan *plan, ember_grad_convention conv,
                                         ember_sebc **out);

// 2D parallelism (TorchRec's DMPCollection): the tables sharded within groups of group_size
// ranks and replicated across the W / group_size groups. Group g is the ranks [g G, (g + 1) G)
// of comm (G = group_size: with ranks placed by host, a group per host keeps the all-to-alls of
// the pooled rows and their gradients inside the host); plan places each table on the G ranks of
// a group (its ranks are group ranks, 0..G-1), and every group holds the same pieces. Each rank
// still passes its own batch, and the objective is that of the W ranks (§ above: GRAD_MEAN's
// 1/W is the world's); in backward each piece's coalesced row gradient, summed over its group as
// usual, is then summed over the piece's replicas (the ranks at the same place in every group),
// in group order, and every replica applies that same update: replicas stay bitwise equal, and
// the result equals one process on the global batch up to the order of those sums. Only the
// replicas' touched rows cross between groups, once per step (where TorchRec all-reduces the
// replicas' weights or gradients). A data-parallel table sums over its group, then over the
// groups. group_size = W is ember_sebc_create; every other call below works on the result, and
// is Collective on the whole of comm: a failure in one group (a bad batch) is every rank's.
// Checkpoints (ember/state.h) are written once, by group 0, as a G-rank collection's, and load
// into every group (or into any other world size). Not with 2D: hashed or tiered tables
// (EMBER_ERR_UNSUPPORTED: their id maps and caches follow each group's own ids), ember_sebc_write
// or _write_as from one root, ember_sebc_reshard and ember_sebc_convert_dtype(s) (EMBER_ERR_UNSUPPORTED).
// Collective on comm. Returns the statuses of ember_sebc_create, and EMBER_ERR_INVALID_ARG
// (group_size not a divisor of W, or ranks that differ in it).
EMBER_API ember_status ember_sebc_create_2d(ember_comm *comm, const ember_ebc_config *cfg,
                                            const ember_table_plan *plan, ember_grad_convention conv,
                                            int32_t group_size, ember_sebc **out);
// The sharding group size (W for ember_sebc_create) and the number of groups. Local.
EMBER_API int32_t ember_sebc_group_size(const ember_sebc *s);
EMBER_API int32_t ember_sebc_num_groups(const ember_sebc *s);
// Collective on comm (frees shard state); NULL accepted.
EMBER_API void ember_sebc_destroy(ember_sebc *s);

EMBER_API int32_t ember_sebc_output_dim(const ember_sebc *s);
// Floats ember_sebc_forward writes for this rank's KJT (and its backward reads): B * output_dim
// (pooled), nnz * D (all-NONE), a VBE KJT's as ember_ebc_output_size (kjt.h); 0 for NULL. Local.
EMBER_API int64_t ember_sebc_output_size(const ember_sebc *s, const ember_kjt *kjt);
// The communicator it was created on, its number of tables, and table t's configuration as given
// to ember_sebc_create (NULL outside [0, T)). Local; the pointers live as long as s.
EMBER_API ember_comm *ember_sebc_comm(const ember_sebc *s);
EMBER_API int32_t ember_sebc_num_tables(const ember_sebc *s);
EMBER_API const ember_table_config *ember_sebc_table(const ember_sebc *s, int32_t t);
// Table t's optimizer step counter (backward calls applied; bias correction), the same on every
// rank. step: Collective. set_step: Local, on every rank holding a piece of t (call it on all).
// Return EMBER_OK or EMBER_ERR_INVALID_ARG (t outside [0, T), step NULL or negative); step also
// EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_sebc_step(ember_sebc *s, int32_t t, int64_t *step);
EMBER_API ember_status ember_sebc_set_step(ember_sebc *s, int32_t t, int64_t step);
EMBER_API ember_grad_convention ember_sebc_grad_convention(const ember_sebc *s);

// Training (1, the default) or evaluation (0) for every local collection (ember_ebc_set_training):
// in evaluation a forward changes no table (a hashed table admits no id). Local: call it on every
// rank alike. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL).
EMBER_API ember_status ember_sebc_set_training(ember_sebc *s, int training);

// Cache counters of table t's pieces on this rank when t is tiered (ember_ebc_tier_stats of
// each, summed; zero where the rank holds none of t). Column slices keep a cache each, so a
// row read by a cw table's 2 slices counts twice: rates are unchanged. Sum over ranks for the
// table's totals. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL, t outside [0, T), a
// table that is not tiered).
EMBER_API ember_status ember_sebc_tier_stats(const ember_sebc *s, int32_t t, ember_tier_stats *out);

// Forward of the local batch: out [B_local, sum_f D_f] (NONE: [nnz_local, D]); a KJT with a batch
// size per feature (VBE, kjt.h) is pooled once per bag and laid out as kjt.h says, under every
// scheme (the pipelined calls too; pooled collections only).
// Collective on comm. A bad KJT on any rank makes every rank return that error (the message
// names the failing rank); nothing changes anywhere. Returns EMBER_OK, EMBER_ERR_INVALID_ARG
// (malformed KJT, out NULL), EMBER_ERR_OUT_OF_RANGE (an id outside its table under
// EMBER_BOUNDS_ERROR), EMBER_ERR_NUMERIC (a NaN or infinite per-id weight: feature, bag and
// position named), EMBER_ERR_UNSUPPORTED (a VBE KJT for a sequence collection), EMBER_ERR_NOMEM,
// EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_sebc_forward(ember_sebc *s, const ember_kjt *kjt, float *out);
// Backward + fused optimizer with the same KJT as the preceding forward; grad_out = dL_r/d(out).
// "The same" means the same contents (batch size, features, bag lengths whether given as lengths
// or offsets, ids, weights; a VBE KJT's batch sizes and inverse indices; compared through a 64-bit
// digest taken by the forward); any other KJT is refused. A VBE bag's gradient is the sum of its
// samples' rows, in sample order. Collective on comm. Returns EMBER_OK, EMBER_ERR_STATE (no successful forward since
// the last backward), EMBER_ERR_INVALID_ARG (another KJT, grad_out NULL), EMBER_ERR_NUMERIC (a NaN
// or infinite gradient, position named), EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT;
// every rank returns the same status, and on failure no table or optimizer state changes.
EMBER_API ember_status ember_sebc_backward(ember_sebc *s, const ember_kjt *kjt, const float *grad_out);

// Overlap: the same step with its exchanges in flight while the caller computes. Results are
// bitwise those of the plain calls (every sum is taken in the same order; only the time at which
// data moves changes).
//
// ember_sebc_prefetch validates, sanitises and routes the NEXT batch's KJT, exchanges its counts
// and starts its input dist (lengths, ids, weights) into a second set of buffers, then returns:
// TorchRec's sparse-dist pipeline. The next ember_sebc_forward whose KJT has the same contents
// on every rank (the digest ember_sebc_backward compares) completes that exchange instead of
// redoing it. If any rank's forward KJT differs from what it prefetched (or is invalid), every
// rank learns it in the forward, waits for and drops the prefetch, and then does the plain input
// dist (or returns the agreed error); a prefetch is never a reason for a different result. A
// second prefetch before the forward waits for and drops the first. The KJT need not outlive the
// call (what travels was copied). Tiered tables (docs/tiered.md): once the prefetched ids have
// arrived at their owner (tested in this call, in ember_sebc_backward_start and at the start of
// ember_sebc_backward_finish; never waited for), the owner asks the kernel to read the file
// pages of the rows they read that are not cached (ember_ebc_prefetch), while the step goes on;
// ember_sebc_tier_stats counts them (prefetched). Collective. Returns EMBER_OK, and the validation statuses of
// ember_sebc_forward (then nothing is in flight), EMBER_ERR_NOMEM, EMBER_ERR_COMM,
// EMBER_ERR_TIMEOUT; every rank returns the same status.
//
// ember_sebc_backward_start(s, kjt, grad_out) is the first half of ember_sebc_backward: the same
// checks and statuses (agreed), then it starts the routed gradients' exchange, prepares the
// data-parallel tables' update (their gradient from grad_out, every allocation agreed on) and
// starts their gathers, and returns with those exchanges in flight. grad_out and kjt are not read
// after it returns. ember_sebc_backward_finish(s) waits for them and applies the fused updates;
// it returns EMBER_OK, EMBER_ERR_STATE (no backward started), EMBER_ERR_NOMEM, EMBER_ERR_COMM,
// EMBER_ERR_TIMEOUT, the same on every rank. The failure contract of ember_sebc_backward holds
// for the pair: when start or finish fails no table or optimizer state has changed (and the
// backward may be started again after a failed finish). ember_sebc_backward is start + finish.
//
// The order of a pipelined step, every call Collective and in the same order on every rank:
//
//     forward(kjt[i]); prefetch(kjt[i+1]);              // the next input dist starts
//     ... dense forward, loss, top of the dense backward, calling ember_comm_progress now and then
//     backward_start(kjt[i], grad_out); ... the rest of the dense backward (its allreduce too)
//     backward_finish(); forward(kjt[i+1]) ...           // takes the prefetch
//
// A prefetch may also be issued between backward_start and backward_finish. Between start and
// finish no other call on s is allowed but prefetch: ember_sebc_forward returns EMBER_ERR_STATE
// there, and so does a second backward_start. Statistics: the bytes of a prefetch count in the
// step during which it was issued (ember_sebc_bytes_sent_last_step), as do its ids examined
// (ember_sebc_ids_examined_last_step reports the forward's own batch).
// Exchanges in flight advance only inside MPI calls on transports without a progress thread:
// see ember_comm_progress in ember/comm.h.
EMBER_API ember_status ember_sebc_prefetch(ember_sebc *s, const ember_kjt *next_kjt);
EMBER_API ember_status ember_sebc_backward_start(ember_sebc *s, const ember_kjt *kjt, const float *grad_out);
EMBER_API ember_status ember_sebc_backward_finish(ember_sebc *s);

// Sets table's learning rate (table -1: every table) on this rank's pieces. Local: call it with
// the same value on every rank (each applies its own to the rows it updates). Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (table outside [-1, T), lr NaN or negative).
EMBER_API ember_status ember_sebc_set_lr(ember_sebc *s, int32_t table, float lr);

// Global state dict: reads table t's named tensor (as in ember_ebc_read) as one global
// [rows, cols] array in fp32, gathered onto `root` (root = -1: onto every rank); writes scatter
// a global array given on `root` (-1: every rank passes the same array). 2D (ember_sebc_create_2d):
// root is a rank of comm; a read gathers within root's group (every group for -1), a write
// takes root -1 only (every group writes its replica). The whole array passes
// through one rank: for tables larger than a rank's memory use the pieces below (checkpoints do).
// The _as forms take the array's dtype: F32 for every tensor, or the table's own 16-bit dtype
// for the weight of a 16-bit table (its native bits, no rounding either way).
// Collective on comm. Return EMBER_OK, EMBER_ERR_INVALID_ARG (table outside [0, T), no such
// tensor, root outside [-1, W), NULL buffer where one is read, a dtype the tensor is not stored
// in), EMBER_ERR_NUMERIC (a write of a NaN or infinity: table, tensor, row, column and the rank
// holding the array are named), EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; every rank
// returns the same status. Every argument (table, tensor, dtype, root; for a root -1 write, the
// array itself) must be the same on every rank: a rank that differs is named, nothing moves.
EMBER_API ember_status ember_sebc_read(ember_sebc *s, int32_t table, const char *tensor, float *dst, int32_t root);
EMBER_API ember_status ember_sebc_write(ember_sebc *s, int32_t table, const char *tensor, const float *src,
                                        int32_t root);
EMBER_API ember_status ember_sebc_read_as(ember_sebc *s, int32_t table, const char *tensor, ember_dtype dtype,
                                          void *dst, int32_t root);
EMBER_API ember_status ember_sebc_write_as(ember_sebc *s, int32_t table, const char *tensor, ember_dtype dtype,
                                           const void *src, int32_t root);

// Pieces: the blocks of a table this rank holds, read and written in place (no communication),
// so that a program can stream a table of any size to and from its own storage (ember/state.h
// does). Piece i of table t covers rows [row_begin, row_end) and, of the [rows, dim] tensors
// (the weight, element-wise optimizer state), columns [col_begin, col_end); of a per-row tensor
// ([rows, 1]: row-wise optimizer state) it holds the single column of the same rows. Column-
// sliced schemes (cw, grid) keep the per-row state of a row in every slice holding that row, all
// equal: the piece with col_begin == 0 is its canonical copy. A data-parallel table is one piece
// covering the whole table on every rank, with replicated = 1. Pieces are numbered 0..n-1 in
// shard order; they do not change during the collection's life.
typedef struct ember_piece {
    int64_t row_begin, row_end; // global rows
    int32_t col_begin, col_end; // global columns of [rows, dim] tensors
    int32_t replicated;         // 1: every rank holds this same, whole-table piece (data parallel)
} ember_piece;

// 1 when a piece holds its own column slice [col_begin, col_end) of tensor ti of table t (the
// [rows, dim] tensors: weights, element-wise state), 0 when it holds every column (per-row state,
// a hashed table's int64 id map: never sliced). Local.
EMBER_API int ember_tensor_is_sliced(const ember_table_config *t, const ember_tensor_info *ti);
// Number of pieces of table t on this rank (0 for t outside [0, T)). Local.
EMBER_API int32_t ember_sebc_num_pieces(const ember_sebc *s, int32_t t);
// Piece i of table t. Local. Returns EMBER_OK or EMBER_ERR_INVALID_ARG (no such piece, out NULL).
EMBER_API ember_status ember_sebc_piece(const ember_sebc *s, int32_t t, int32_t i, ember_piece *out);
// Rows [row_begin, row_end) (global row numbers inside the piece) of the piece's part of a named
// tensor, as [row_end - row_begin, piece columns] row-major (per-row tensors: 1 column), in
// `dtype` (as ember_sebc_read_as). Writes round to nearest-even into 16-bit storage and take
// the values as given, NaN and infinity included (a checkpoint load restores what was saved;
// ember_sebc_write refuses them). Local. Return EMBER_OK or EMBER_ERR_INVALID_ARG (no such piece or tensor, rows outside the
// piece, NULL buffer, a dtype the tensor is not stored in).
EMBER_API ember_status ember_sebc_piece_read(ember_sebc *s, int32_t t, int32_t i, const char *tensor,
                                             int64_t row_begin, int64_t row_end, ember_dtype dtype, void *dst);
EMBER_API ember_status ember_sebc_piece_write(ember_sebc *s, int32_t t, int32_t i, const char *tensor,
                                              int64_t row_begin, int64_t row_end, ember_dtype dtype,
                                              const void *src);
// Rows changed since a mark (what an incremental checkpoint saves: ember/state.h). Every piece
// tracks the rows whose state changed since the last ember_sebc_mark: the rows a backward
// updated (also with zero gradients: their optimizer state moves), a data-parallel table's rows
// its summed update changed, a hashed table's rows whose id map a training forward changed
// (admissions, evictions, uses, candidates), every row a write or a load wrote, every row of a
// table whose dtype was converted. A superset: a marked row may be unchanged; a changed row is
// always marked. A new collection starts with none marked and the tag 0.
// The first run [*run_begin, *run_end) of changed rows of piece i of table t at or after global
// row `from` (both the piece's row_end when there is none). Local. Returns EMBER_OK or
// EMBER_ERR_INVALID_ARG (no such piece, `from` outside it, NULL outputs).
EMBER_API ember_status ember_sebc_piece_dirty(const ember_sebc *s, int32_t t, int32_t i, int64_t from,
                                              int64_t *run_begin, int64_t *run_end);
// Forgets every piece's changed rows and remembers `tag` (the caller's name for the state marked;
// checkpoints use the checkpoint a save wrote or a load read). Local: call it on every rank.
EMBER_API void ember_sebc_mark(ember_sebc *s, uint64_t tag);
// The tag of the last mark; 0 before the first.
EMBER_API uint64_t ember_sebc_mark_tag(const ember_sebc *s);
// Converts table t's storage dtype on every rank that holds a piece of it. Collective on comm.
// Returns EMBER_OK, EMBER_ERR_INVALID_ARG (t outside [0, T), unknown dtype), EMBER_ERR_NOMEM
// (no piece converted on any rank), EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; every rank returns the same
// status.
EMBER_API ember_status ember_sebc_convert_dtype(ember_sebc *s, int32_t table, ember_dtype dtype);
// Converts every table t to dtypes[t] at once (a checkpoint load): every rank allocates its
// re-laid-out storage first and the status is agreed on before any conversion, so on failure no
// table changed anywhere. Collective on comm. Returns as ember_sebc_convert_dtype (dtypes NULL:
// EMBER_ERR_INVALID_ARG).
EMBER_API ember_status ember_sebc_convert_dtypes(ember_sebc *s, const ember_dtype *dtypes);

// Resharding a running collection: moves every table to the placement plan [T] gives (another
// scheme, other ranks, another column split, to or from data-parallel) with its weights,
// optimizer state, hashed id maps and tiered rows, its step counter, learning rate and dtype, and
// keeps the collection's wire precision and loss scales, training flag and mark tag; the next
// step gives bit for bit what a collection created with plan and loaded from this one's state
// (a checkpoint) gives. The rows move directly between the ranks that hold them (one alltoallv a
// round): each round sends at most about chunk_bytes from a rank (0: 64 MiB), so beyond the two
// placements' pieces, which coexist during the move (the new ones are made first), a rank holds
// one round's messages. Every row written counts as changed since the mark (an incremental
// checkpoint after a reshard saves the tables again). A pending prefetch is dropped, and a
// forward not yet followed by its backward is forgotten (that backward is then refused with
// EMBER_ERR_STATE: back-propagate before resharding). stats (NULL
// to skip) receives the bytes this rank sent to and received from other ranks and the seconds
// the reshard took. Collective on comm: every rank passes the same plan (agreed on as
// ember_sebc_create does). Returns EMBER_OK, EMBER_ERR_INVALID_ARG (plan NULL, or one
// ember_sebc_create refuses; ranks that differ), EMBER_ERR_UNSUPPORTED (as ember_sebc_create),
// EMBER_ERR_STATE (between ember_sebc_backward_start and _finish), EMBER_ERR_NOMEM (the new
// placement or a round does not fit), EMBER_ERR_IO (a tiered table's file), EMBER_ERR_COMM,
// EMBER_ERR_TIMEOUT; every rank returns the same status, and on failure the collection is as it
// was (placement, tables, settings).
typedef struct ember_reshard_stats {
    uint64_t bytes_sent, bytes_received; // this rank's, to and from other ranks
    double seconds;
} ember_reshard_stats;
EMBER_API ember_status ember_sebc_reshard(ember_sebc *s, const ember_table_plan *plan, size_t chunk_bytes,
                                          ember_reshard_stats *stats);

// Bytes rank `rank` of W holds for table t under plan p: its pieces' weights in the table's dtype
// and their optimizer state (ember_table_config_bytes of each piece; a data-parallel table is a
// full replica on every rank). The CLI's memory check uses it. Local. Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (NULL argument, rank outside [0, W), a plan ember_sebc_create would
// refuse: the message names the table), EMBER_ERR_UNSUPPORTED (a placement the collection does
// not support for this table, e.g. a tiered table data-parallel), EMBER_ERR_NOMEM.
EMBER_API ember_status ember_shard_rank_bytes(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p,
                                              int32_t W, int32_t rank, size_t *weight_bytes, size_t *state_bytes);

// Wire precision (as TorchRec's quantized comms, QCommsConfig's forward_precision and
// backward_precision): the pooled rows of the output dist (owner -> home) travel as `forward`, their
// gradients of the gradient dist (home -> owner, after the convention's scale and the row-wise MEAN
// divisor) as `backward`. Bytes a value on the wire and bound on a value's error:
//   EMBER_DTYPE_F32       4  exact (the default)
//   EMBER_DTYPE_F16       2  rounded to nearest even: <= 2^-11 |x| for |x| >= 2^-14, else steps of 2^-24
//   EMBER_DTYPE_BF16      2  <= 2^-8 |x|
//   EMBER_DTYPE_FP8_E4M3  1  <= 2^-4 |x| for |x| >= 2^-6, else steps of 2^-9 (largest finite 448)
//   EMBER_DTYPE_FP8_E5M2  1  <= 2^-3 |x| for |x| >= 2^-14, else steps of 2^-16 (largest 57344)
//   EMBER_DTYPE_I8        1  + 8 per row piece: each piece (the columns of one table's piece for
//                            one sample, or one sequence row) quantized row-wise as ember/quant.h's
//                            INT8 rows (FBGEMM's fused 8-bit rows: uint8 values, fp32 scale and
//                            bias), |error| <= (hi - lo) / 510 + 1e-8 plus the fp32 rounding of
//                            the dequantizing fma, lo and hi the piece's least and greatest value
// The float formats see x times the direction's loss scale (ember_sebc_set_wire_loss_scale; 1 by
// default), divided by it again on arrival: the bounds above hold for x times the scale (a
// power of two scales exactly), so a scale lifts small gradients out of fp8's subnormal steps.
// int8 scales each piece itself and ignores the loss scale. At D = 64, int8 sends 72 bytes for
// fp32's 256. Row-block partial sums (rw, twrw, grid) are encoded per partial, so a pooled
// value's error is bounded by the sum of its partials' bounds. Only values that cross ranks are
// encoded: a rank's own block (and everything at W = 1) stays fp32, as do the input dist, the
// data-parallel gradient exchange and the row-wise optimizers' sums of squares. Non-finite values
// pass the float formats as they are (E4M3 has no infinity: one arrives as NaN); int8 refuses
// them. A finite value that would round beyond the format's largest finite (fp16: |x| >= 65520;
// bf16: beyond 3.39e38; fp8: beyond 448 or 57344, after the loss scale) is refused, and so is a
// non-finite value under int8: the forward or backward returns EMBER_ERR_NUMERIC on every rank,
// naming the feature, table, sample and value, before anything is sent (a failed backward changes
// no table); nothing saturates (TorchRec's fp8 clamps). Collective on comm: every rank passes the
// same values; ranks that differ all return EMBER_ERR_INVALID_ARG with one message naming the
// values and ranks. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (a value other than the six above, or
// ranks that differ), EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; on failure the precision
// is unchanged. wire_precision reads the current pair (Local; NULL pointers are skipped).
EMBER_API ember_status ember_sebc_set_wire_precision(ember_sebc *s, ember_dtype forward, ember_dtype backward);
EMBER_API void ember_sebc_wire_precision(const ember_sebc *s, ember_dtype *forward, ember_dtype *backward);
// The loss scales of the float wire formats (QCommsConfig's forward_loss_scale and
// backward_loss_scale): each value is multiplied by the direction's scale before it is encoded and
// divided by it after it is decoded. Each must be finite and > 0; 1 (the default) changes nothing.
// Collective on comm, as set_wire_precision: every rank passes the same pair (compared exactly).
// Returns EMBER_OK, EMBER_ERR_INVALID_ARG (a scale not finite and positive, or ranks that differ),
// EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; on failure the scales are unchanged.
// wire_loss_scale reads them (Local; NULL pointers are skipped; 1 for a NULL s).
EMBER_API ember_status ember_sebc_set_wire_loss_scale(ember_sebc *s, float forward, float backward);
EMBER_API void ember_sebc_wire_loss_scale(const ember_sebc *s, float *forward, float *backward);

// Bytes this rank sent in the last forward + backward (all schemes), and the analytic count for
// one table (see docs/sharding.md). Local.
EMBER_API uint64_t ember_sebc_bytes_sent_last_step(const ember_sebc *s);
// Ids the routing (bucketize) examined in the last forward: the local batch's nnz whatever W and
// the scheme (each id's destination is computed once). Local.
EMBER_API int64_t ember_sebc_ids_examined_last_step(const ember_sebc *s);
// For measurement only (`ember bench shard`): on = 1 routes with the former O(W x nnz) scan,
// which examines a row-wise feature's ids once per destination rank. The results are the same
// bits either way. Local; a NULL s is ignored.
EMBER_API void ember_sebc_set_reference_bucketize(ember_sebc *s, int on);

#ifdef __cplusplus
}
#endif
#endif
