// ember/plan.h — the planner: tables + topology + constraints -> a sharding plan.
//
// Pure and Local (no MPI): every rank calling it with the same inputs gets the same plan, so a
// program can plan on each rank and pass the result to ember_sebc_create.
//
// The model, in the spirit of TorchRec's planner (enumerate options, estimate, partition):
//   - each table has candidate options: data-parallel, table-wise on rank r, row-wise,
//     column-wise in k slices, table-row-wise over a group;
//   - each option has, per rank, a storage cost (weights + optimizer state bytes) and a
//     per-step cost in bytes moved: the embedding rows read for pooling plus the bytes the rank
//     sends for the table (the formulas of docs/sharding.md, with the expected ids per sample
//     as pooling factor);
//   - tables are placed largest first, each on the option that keeps the largest per-rank
//     step cost lowest while every rank stays within its memory budget;
//   - a table that fits nowhere makes the call fail, naming it.
// The result is a good plan for the model, not a proven optimum.
#ifndef EMBER_PLAN_H
#define EMBER_PLAN_H

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
} ember_plan_config;
#define EMBER_PLAN_CONFIG_DEFAULT {1, 512, 0, NULL, 0, 0}

// Per-rank totals of a plan, as the planner estimates them: arrays of world_size entries the
// caller provides (either may be NULL).
typedef struct ember_plan_stats {
    size_t *storage_bytes; // [world_size] weights + optimizer state held
    double *step_bytes;    // [world_size] rows read + bytes sent per step
} ember_plan_stats;

// Fills plan[ebc_cfg->num_tables] for the collection `ebc_cfg`; each table's ranks array is
// allocated through ctx's allocator: release it with ember_plan_release once the plan has been
// used (ember_sebc_create keeps no pointer into it). stats may be NULL. Time O(T * W^2), memory
// O(W) beside the plan: 4096 ranks plan in well under a second.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (bad sizes, world size < 1),
// EMBER_ERR_NOMEM (a table fits on no rank within memory_per_rank: the message names it; or an
// allocation failed). On failure no ranks array is left allocated and every entry is zero.
EMBER_API ember_status ember_plan_create(ember_ctx *ctx, const ember_ebc_config *ebc_cfg,
                                         const ember_plan_config *cfg, ember_table_plan *plan,
                                         ember_plan_stats *stats);

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
