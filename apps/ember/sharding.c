// Table names and the explicit --sharding plans of `ember train`, and the bytes a rank holds.
#include <stdio.h>
#include <string.h>

#include "appctx.h"
#include "ember/plan.h"
#include "sharding.h"

int sharding_parse(const char *name) {
    if (strcmp(name, "auto") == 0 || strcmp(name, "plan") == 0) return SHARDING_AUTO;
    ember_shard_scheme s;
    return ember_shard_scheme_parse(name, &s) == 0 ? (int)s : -2;
}

const char *sharding_name(int scheme) {
    if (scheme == SHARDING_AUTO) return "auto";
    return ember_shard_scheme_short_name((ember_shard_scheme)scheme);
}

void sharding_table_name(int32_t t, char *buf, size_t cap) { snprintf(buf, cap, "t_cat_%d", (int)t); }

// Table t's ranks array of n entries, through ctx's allocator (ember_plan_release frees it).
static int32_t *plan_ranks(ember_ctx *ctx, ember_table_plan *p, int32_t n) {
    p->num_ranks = n;
    p->ranks = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)n);
    if (!p->ranks) {
        p->num_ranks = 0;
        ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "--sharding: out of memory for %d ranks", (int)n);
    }
    return p->ranks;
}

ember_status sharding_plan(ember_ctx *ctx, int32_t num_tables, int32_t dim, const int *choice,
                           int32_t world, int32_t group_size, ember_table_plan *plan) {
    if (group_size < 1 || group_size > world || world % group_size != 0) group_size = world;
    int32_t next_rank = 0, next_group = 0;
    for (int32_t t = 0; t < num_tables; t++) plan[t] = (ember_table_plan){0};
    ember_status st = EMBER_OK;
    for (int32_t t = 0; t < num_tables && st == EMBER_OK; t++) {
        ember_table_plan *p = &plan[t];
        int scheme = choice[t];
        p->scheme = (ember_shard_scheme)scheme;
        switch (p->scheme) {
        case EMBER_SHARD_DATA_PARALLEL:
        case EMBER_SHARD_ROW_WISE:
            break;
        case EMBER_SHARD_TABLE_WISE:
            if (!plan_ranks(ctx, p, 1)) st = EMBER_ERR_NOMEM;
            else p->ranks[0] = next_rank;
            next_rank = (next_rank + 1) % world;
            break;
        case EMBER_SHARD_COLUMN_WISE:
            p->num_shards = world < dim ? world : dim;
            if (!plan_ranks(ctx, p, p->num_shards)) st = EMBER_ERR_NOMEM;
            else for (int32_t i = 0; i < p->num_shards; i++) p->ranks[i] = (next_rank + i) % world;
            next_rank = (next_rank + 1) % world;
            break;
        case EMBER_SHARD_TABLE_ROW_WISE:
            p->group_size = group_size;
            if (!plan_ranks(ctx, p, group_size)) st = EMBER_ERR_NOMEM;
            else for (int32_t i = 0; i < group_size; i++) p->ranks[i] = next_group * group_size + i;
            next_group = (next_group + 1) % (world / group_size);
            break;
        case EMBER_SHARD_GRID:
            // Two column slices (one if dim is 1), each row-wise over world / 2 ranks (1 if W = 1).
            p->num_shards = dim < 2 ? dim : 2;
            p->group_size = world < 2 ? 1 : world / 2;
            if (!plan_ranks(ctx, p, p->num_shards * p->group_size)) st = EMBER_ERR_NOMEM;
            else for (int32_t i = 0; i < p->num_ranks; i++) p->ranks[i] = (next_rank + i) % world;
            next_rank = (next_rank + 1) % world;
            break;
        default: {
            char name[32];
            sharding_table_name(t, name, sizeof name);
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "--sharding: table '%s': unknown scheme %d", name,
                                     scheme);
        }
        }
    }
    if (st != EMBER_OK) ember_plan_release(ctx, plan, num_tables);
    return st;
}
