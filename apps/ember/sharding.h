// sharding.h — the table plan of `ember train`: per-table schemes from --sharding, or the
// automatic rule, and the memory each rank then holds.
//
// Automatic rule (until a planner exists), on a table's weight bytes rows * dim * 4:
//   <= SHARDING_DP_MAX_BYTES   data parallel: a replica is cheap, and no lookup crosses the wire;
//   >= SHARDING_RW_MIN_BYTES   row-wise: spread the rows (and the hot-row traffic) over all ranks;
//   otherwise                  table-wise, round-robin over the ranks in table order.
// Explicit schemes: cw splits the columns into min(W, dim) slices on consecutive ranks starting
// at the table's round-robin rank; twrw shards rows within a group of `group_size` consecutive
// ranks (the ranks of one host), groups taken round-robin.
#ifndef EMBER_APP_SHARDING_H
#define EMBER_APP_SHARDING_H

#include <stdint.h>

#include "ember/shard.h"

#define SHARDING_AUTO (-1)
// "plan": every table placed by the library's planner (include/ember/plan.h) from the tables,
// the world size and the local batch; must be given for all tables at once.
#define SHARDING_PLANNER (-3)
#define SHARDING_DP_MAX_BYTES ((double)(1u << 20))
#define SHARDING_RW_MIN_BYTES ((double)(4u << 20))

// "auto", "plan", "dp", "tw", "cw", "rw", "twrw" -> SHARDING_AUTO, SHARDING_PLANNER or an
// ember_shard_scheme; -2 if unknown.
int sharding_parse(const char *name);
const char *sharding_name(int scheme);

// plan[t] for each table t of rows[t] x dim from choice[t] (SHARDING_AUTO or a scheme).
// group_size: ranks per TWRW group (a divisor of world; anything else means all ranks).
// Returns EMBER_ERR_INVALID_ARG when a scheme needs more ranks than a plan can list.
ember_status sharding_plan(ember_ctx *ctx, int32_t num_tables, const int64_t *rows, int32_t dim, const int *choice,
                           int32_t world, int32_t group_size, ember_table_plan *plan);

// Bytes of weights and optimizer state (ember/ebc.h's layouts) that `rank` holds of a table.
double sharding_table_bytes(const ember_table_plan *plan, int64_t rows, int32_t dim, ember_optim_kind kind,
                            int32_t rank, int32_t world);

#endif
