// planfile.h — plan files: the JSON form of a table plan that `ember plan --output` writes and
// `ember train --plan` reads.
//
//   {"world_size": 2,
//    "tables": [{"name": "t_cat_0", "scheme": "data_parallel", "ranks": []},
//               {"name": "t_cat_1", "scheme": "table_wise", "ranks": [1]},
//               {"name": "t_cat_2", "scheme": "column_wise", "shards": 2, "ranks": [0, 1]},
//               {"name": "t_cat_3", "scheme": "row_wise", "ranks": []},
//               {"name": "t_cat_4", "scheme": "table_row_wise", "group": 2, "ranks": [0, 1]}, ...]}
//
// Schemes by the library's names (ember_shard_scheme_name); "ranks" lists ranks[] as the planner
// returns them: the rank of a table-wise table, one per column shard, the group of table-row-wise.
#ifndef EMBER_APP_PLANFILE_H
#define EMBER_APP_PLANFILE_H

#include "ember/ebc.h"
#include "ember/shard.h"

// Writes plan[ec->num_tables] for the tables of ec, planned for `world` ranks, to `path`.
ember_status planfile_write(ember_ctx *ctx, const char *path, const ember_ebc_config *ec,
                            const ember_table_plan *plan, int32_t world);

// Reads `path` into plan[ec->num_tables] (in ec's table order, matched by name) and checks it
// against the model and the run: one entry per table of ec, each named once, known schemes,
// shard and group counts in range, every rank in [0, world), world_size == world. A failure
// records one message naming the file, the table and the value and leaves nothing allocated;
// on success each ranks array comes from ctx's allocator (ember_plan_release frees them). ec has at
// least one table. Local.
ember_status planfile_read(ember_ctx *ctx, const char *path, const ember_ebc_config *ec, int32_t world,
                           ember_table_plan *plan);

#endif
