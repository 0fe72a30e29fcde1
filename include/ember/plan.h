// ember/plan.h — the planner: tables + topology + constraints -> a sharding plan.
//
// ember_plan_create is pure and Local (no MPI): every rank calling it with the same inputs gets
// the same plan, so a program can plan on each rank and pass the result to ember_sebc_create.
// ember_plan_detect_topology (Collective) finds the hosts and their bandwidths to plan for.
//
// The model, in the spirit of TorchRec's planner (enumerate options, estimate, partition):
//   - each table has candidate options: data-parallel, table-wise on rank r, row-wise,
//     column-wise in k slices, table-row-wise over a group;
//   - each option has, per rank, a storage cost (weights + optimizer state bytes) and a
//     per-step traffic: the embedding rows read for pooling plus the bytes the rank sends for
//     the table, split by destination into its own host and other hosts (the formulas of
//     docs/sharding.md, with the expected ids per sample as pooling factor);
//   - without bandwidths, a rank's step cost is its bytes read + sent (one host); with them, a
//     predicted time: rows read / memory bandwidth + intra-host bytes / intra-host bandwidth +
//     the busier direction of its host's link (all its ranks' inter-host bytes) / inter-host
//     bandwidth + the step's collective rounds x round_s (docs/planner.md);
//   - tables are placed largest first, each on the option that keeps the largest per-rank
//     step cost lowest while every rank stays within its memory budget; with more than one
//     host, table-row-wise over each host's ranks (and grid, one column slice per host, when
//     allowed) are candidates too;
//   - a table that fits nowhere makes the call fail, naming it.
// The result is a good plan for the model, not a proven optimum.
#ifndef EMBER_PLAN_H
#define EMBER_PLAN_H

#include "ember/comm.h"
#include "ember/ebc.h"
#include "ember/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_plan_config {
    int32_t world_size;          // W >= 1
    int32_t batch_size;          // local batch size per rank (samples per step)
    size_t memory_per_rank;      // bytes available for embedding storage on each rank (0: unlimited)
    const float *pooling_factor; // [num_features] mean ids per sample, or NULL (1 each)
    int32_t allow;               // bit mask of (1 << ember_shard_scheme) allowed; 0: all but GRID
                                 // (GRID is offered only when its bit is set)
    size_t dp_max_bytes;         // data-parallel only for tables up to this size (0: 1 MiB)
    // Topology (all zero/NULL: one host, plans on bytes as before).
    const int32_t *host_of;      // [world_size] host of each rank, hosts numbered 0..H-1 with no gap
                                 // (e.g. from ember_plan_detect_topology), or NULL
    int32_t ranks_per_host;      // when host_of is NULL: host h holds ranks [h*n, (h+1)*n) (0: one host)
    double intra_host_bw;        // bytes/s a rank sends to ranks of its host (0: plan on bytes;
                                 // not needed when every host holds one rank)
    double inter_host_bw;        // bytes/s of one host's link to the others, each direction; needed
                                 // (with intra_host_bw, where a host holds 2 ranks or more) when
                                 // there is more than one host
    double mem_bw;               // bytes/s of embedding rows one rank pools and updates (forward,
                                 // backward, optimizer), per byte of rows read (0: 2e9)
    double round_s;              // seconds of one collective round over all ranks (0: none); a
                                 // step takes about 15 rounds with routed tables, 6 more with
                                 // data-parallel ones (the collectives of src/shard/)
    double disk_bw;              // bytes/s a rank moves to and from a tiered table's file (0: 1e9);
                                 // each step's expected misses (uniform ids: 1 - cache/rows of the
                                 // rows it touches) read a record and write one back at this rate
    const double *rank_speed;    // [world_size] each rank's speed relative to the model (> 0; e.g.
                                 // modelled over measured seconds), or NULL (all 1): placing a
                                 // table, a rank's load counts divided by its speed, so a slow rank
                                 // gets less. The figures of ember_plan_stats stay as modelled.
} ember_plan_config;
#define EMBER_PLAN_CONFIG_DEFAULT                                                                     \
    {.world_size = 1, .batch_size = 512, .memory_per_rank = 0, .pooling_factor = NULL, .allow = 0,       \
     .dp_max_bytes = 0, .host_of = NULL, .ranks_per_host = 0, .intra_host_bw = 0, .inter_host_bw = 0,    \
     .mem_bw = 0, .round_s = 0, .disk_bw = 0, .rank_speed = NULL}

// Per-rank totals of a plan, as the planner estimates them: arrays of world_size entries the
// caller provides (either may be NULL).
typedef struct ember_plan_stats {
    size_t *storage_bytes; // [world_size] weights + optimizer state held
    double *step_bytes;    // [world_size] rows read + bytes sent per step
    double *step_seconds;  // [world_size] predicted seconds per step (0 without bandwidths)
    double *inter_bytes;   // [world_size] of step_bytes, bytes sent to other hosts
} ember_plan_stats;

// Fills plan[ebc_cfg->num_tables] for the collection `ebc_cfg`; each table's ranks array is
// allocated through ctx's allocator: release it with ember_plan_release once the plan has been
// used (ember_sebc_create keeps no pointer into it). stats may be NULL; its storage_bytes are
// the planner's bound (a split table's largest piece on each of its ranks; ember_plan_predict
// gives the exact bytes). Time O(T * W log W), memory O(W) beside the plan: 65,536 ranks plan in
// about a second.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (bad sizes, world size < 1, a host_of entry
// outside [0, world_size) or hosts numbered with a gap, ranks_per_host < 0 or not dividing the
// world size, a negative or non-finite bandwidth, a rank_speed not positive and finite, more than one host without inter_host_bw or,
// where a host holds 2 ranks or more, intra_host_bw:
// the message names the value),
// EMBER_ERR_NOMEM (a table fits on no rank within memory_per_rank: the message names it; or an
// allocation failed). On failure no ranks array is left allocated and every entry is zero.
EMBER_API ember_status ember_plan_create(ember_ctx *ctx, const ember_ebc_config *ebc_cfg,
                                         const ember_plan_config *cfg, ember_table_plan *plan,
                                         ember_plan_stats *stats);

// The planner's estimate for a given plan (one entry per table of ebc_cfg, e.g. an explicit
// placement or a plan file), under cfg's batch, pooling factors and topology: fills the arrays
// of stats that are not NULL (storage_bytes from ember_shard_rank_bytes). Local. Returns
// EMBER_OK, EMBER_ERR_INVALID_ARG (NULL argument, bad sizes or topology as ember_plan_create, a
// table's plan that ember_sebc_create would refuse: the message names the table).
EMBER_API ember_status ember_plan_predict(ember_ctx *ctx, const ember_ebc_config *ebc_cfg, const ember_plan_config *cfg,
                                          const ember_table_plan *plan, ember_plan_stats *stats);

// The topology of comm for ember_plan_config: host_of[W] (every rank's host: ranks that share
// memory, MPI_COMM_TYPE_SHARED, are one host; hosts numbered by their lowest rank, so host 0
// holds rank 0) and the number of hosts in *num_hosts (may be NULL). With probe_bytes > 0,
// also measures *intra_bw and *inter_bw in bytes/s (either pointer may be NULL): ranks 0 and
// the next rank of its host exchange probe_bytes back and forth `reps` times (reps < 1: 3), as
// do rank 0 and the lowest rank of host 1; the best round trip of each pair gives the bandwidth
// (0 when there is no such pair: one rank per host, or one host), and the mean of 10 barriers
// over every rank gives *round_s (may be NULL). Every rank gets the same numbers. probe_bytes 0:
// no probe, the bandwidths and round_s are left alone. Each step is bounded by comm's watchdog
// deadline.
// Collective. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL comm or host_of, probe_bytes
// negative or over 1 GiB), EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; the status is
// agreed on by every rank, and on failure host_of and the bandwidths are unchanged.
EMBER_API ember_status ember_plan_detect_topology(ember_comm *comm, int32_t *host_of, int32_t *num_hosts,
                                                  int64_t probe_bytes, int32_t reps, double *intra_bw,
                                                  double *inter_bw, double *round_s);

// Measures the rate at which a tiered table's file in `dir` (NULL: $TMPDIR, else /tmp) moves
// records, in bytes/s for ember_plan_config.disk_bw: a scratch file of `bytes` (4 KiB to 16 GiB)
// is reserved, mapped, written, flushed to the disk and read back (after asking the kernel to
// drop it from the page cache, which it may not do on every file system: then the figure is the
// page cache's). Takes about bytes / disk rate x 2. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG
// (NULL bw, bytes out of range), EMBER_ERR_IO (the directory cannot hold the file; the message
// names it).
EMBER_API ember_status ember_plan_probe_disk(ember_ctx *ctx, const char *dir, int64_t bytes, double *bw);

// Frees the ranks arrays of plan[num_tables] through ctx's allocator (those ember_plan_create
// allocated, or that the caller allocated with ember_ctx_alloc) and sets them NULL and their
// counts 0. NULL plan accepted. Local.
EMBER_API void ember_plan_release(ember_ctx *ctx, ember_table_plan *plan, int32_t num_tables);

// One line per table: "name scheme ranks", for logs and `ember plan`. Writes at most `cap`
// bytes to `buf` (NUL-terminated) and returns the length it needed.
EMBER_API size_t ember_plan_describe(const ember_ebc_config *ebc_cfg, const ember_table_plan *plan, char *buf,
                                     size_t cap);

#ifdef __cplusplus
}
#endif
#endif
