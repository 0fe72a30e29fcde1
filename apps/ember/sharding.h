// sharding.h — the table plan of `ember train` and `ember plan`: the tables' names, the explicit
// per-table schemes of --sharding, and the memory each rank then holds.
//
// The default (--sharding auto, or its synonym plan) is the library's planner
// (include/ember/plan.h), which places every table at once. Explicit schemes: tw places tables
// round-robin over the ranks in table order; cw splits the columns into min(W, dim) slices on
// consecutive ranks starting at the table's round-robin rank; twrw shards rows within a group of
// `group_size` consecutive ranks (the ranks of one host), groups taken round-robin; dp and rw
// use every rank.
#ifndef EMBER_APP_SHARDING_H
#define EMBER_APP_SHARDING_H

#include <stddef.h>
#include <stdint.h>

#include "ember/shard.h"

// Every table placed by the library's planner from the tables, the world size and the local
// batch; given for all tables at once.
#define SHARDING_AUTO (-1)

// "auto" or "plan" -> SHARDING_AUTO; "dp", "tw", "cw", "rw", "twrw" -> an ember_shard_scheme;
// -2 if unknown.
int sharding_parse(const char *name);
const char *sharding_name(int scheme);

// The name of table t, the same in `ember plan`, `ember train` and plan files: "t_cat_<t>".
void sharding_table_name(int32_t t, char *buf, size_t cap);

// plan[t] for each table t of `dim` columns from choice[t] (an explicit scheme each): the
// library's default placement (ember_table_plan_default: tw on rank t mod W, cw over min(W, dim)
// ranks from t, ...). group_size: ranks per TWRW group (a divisor of world; anything else means
// all ranks).
// Each ranks array comes from ctx's allocator: ember_plan_release frees them. Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (a choice outside the schemes), EMBER_ERR_NOMEM (nothing left allocated).
ember_status sharding_plan(ember_ctx *ctx, int32_t num_tables, int32_t dim, const int *choice,
                           int32_t world, int32_t group_size, ember_table_plan *plan);


#endif
