// Table plans for `ember train`.
#include <string.h>

#include "core/internal.h"
#include "sharding.h"

int sharding_parse(const char *name) {
    if (strcmp(name, "auto") == 0) return SHARDING_AUTO;
    if (strcmp(name, "plan") == 0) return SHARDING_PLANNER;
    ember_shard_scheme s;
    return ember_shard_scheme_parse(name, &s) == 0 ? (int)s : -2;
}

const char *sharding_name(int scheme) {
    if (scheme == SHARDING_AUTO) return "auto";
    if (scheme == SHARDING_PLANNER) return "plan";
    return ember_shard_scheme_short_name((ember_shard_scheme)scheme);
}

ember_status sharding_plan(ember_ctx *ctx, int32_t num_tables, const int64_t *rows, int32_t dim, const int *choice,
                           int32_t world, int32_t group_size, ember_table_plan *plan) {
    if (group_size < 1 || group_size > world || world % group_size != 0) group_size = world;
    int32_t next_rank = 0, next_group = 0;
    for (int32_t t = 0; t < num_tables; t++) {
        ember_table_plan *p = &plan[t];
        memset(p, 0, sizeof *p);
        int scheme = choice[t];
        if (scheme == SHARDING_AUTO) {
            double bytes = (double)rows[t] * (double)dim * 4.0;
            scheme = bytes <= SHARDING_DP_MAX_BYTES   ? EMBER_SHARD_DATA_PARALLEL
                     : bytes >= SHARDING_RW_MIN_BYTES ? EMBER_SHARD_ROW_WISE
                                                      : EMBER_SHARD_TABLE_WISE;
        }
        p->scheme = (ember_shard_scheme)scheme;
        switch (p->scheme) {
        case EMBER_SHARD_DATA_PARALLEL:
        case EMBER_SHARD_ROW_WISE:
            break;
        case EMBER_SHARD_TABLE_WISE:
            p->ranks[0] = next_rank;
            next_rank = (next_rank + 1) % world;
            break;
        case EMBER_SHARD_COLUMN_WISE:
            p->num_shards = world < dim ? world : dim;
            EMBER_CHECK(ctx, p->num_shards <= EMBER_PLAN_MAX_RANKS, EMBER_ERR_INVALID_ARG,
                        "--sharding cw: table %d would need %d column shards, at most %d", (int)t,
                        (int)p->num_shards, EMBER_PLAN_MAX_RANKS);
            for (int32_t i = 0; i < p->num_shards; i++) p->ranks[i] = (next_rank + i) % world;
            next_rank = (next_rank + 1) % world;
            break;
        case EMBER_SHARD_TABLE_ROW_WISE:
            EMBER_CHECK(ctx, group_size <= EMBER_PLAN_MAX_RANKS, EMBER_ERR_INVALID_ARG,
                        "--sharding twrw: a group of %d ranks, at most %d", (int)group_size, EMBER_PLAN_MAX_RANKS);
            p->group_size = group_size;
            for (int32_t i = 0; i < group_size; i++) p->ranks[i] = next_group * group_size + i;
            next_group = (next_group + 1) % (world / group_size);
            break;
        default:
            return ember__error(ctx, EMBER_ERR_INVALID_ARG, "--sharding: table %d: unknown scheme %d", (int)t, scheme);
        }
    }
    return EMBER_OK;
}

// Floats of optimizer state per row of a table of `dim` columns (the optimizer's descriptor).
static int64_t state_floats(ember_optim_kind kind, int32_t dim) {
    ember_optim_info oi;
    if (ember_optim_info_get(kind, &oi) != EMBER_OK) return 0;
    int64_t n = 0;
    for (int32_t i = 0; i < oi.num_states; i++) n += oi.state_per_row[i] ? 1 : dim;
    return n;
}

// Part i of n of a count split as evenly as possible, the first count % n parts one larger.
static int64_t part(int64_t count, int32_t i, int32_t n) { return count / n + (i < count % n ? 1 : 0); }

double sharding_table_bytes(const ember_table_plan *p, int64_t rows, int32_t dim, ember_optim_kind kind,
                            int32_t rank, int32_t world) {
    const double row_floats = (double)dim + (double)state_floats(kind, dim);
    switch (p->scheme) {
    case EMBER_SHARD_DATA_PARALLEL: return 4.0 * (double)rows * row_floats;
    case EMBER_SHARD_TABLE_WISE: return p->ranks[0] == rank ? 4.0 * (double)rows * row_floats : 0.0;
    case EMBER_SHARD_COLUMN_WISE: {
        double bytes = 0.0;
        for (int32_t i = 0; i < p->num_shards; i++) {
            if (p->ranks[i] != rank) continue;
            int32_t cols = (int32_t)part(dim, i, p->num_shards);
            bytes += 4.0 * (double)rows * ((double)cols + (double)state_floats(kind, cols));
        }
        return bytes;
    }
    case EMBER_SHARD_ROW_WISE: return 4.0 * (double)part(rows, rank, world) * row_floats;
    case EMBER_SHARD_TABLE_ROW_WISE:
        for (int32_t i = 0; i < p->group_size; i++) {
            if (p->ranks[i] == rank) return 4.0 * (double)part(rows, i, p->group_size) * row_floats;
        }
        return 0.0;
    }
    return 0.0;
}
