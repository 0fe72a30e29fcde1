// Hand-made plans for the distributed tests (plans.h).
#include <string.h>

#include "plans.h"

ember_table_plan test_plan_for(ember_shard_scheme sc, int t, int32_t dim, int W, int32_t *store) {
    ember_table_plan p;
    memset(&p, 0, sizeof p);
    p.scheme = sc;
    p.ranks = store;
    switch (sc) {
    case EMBER_SHARD_TABLE_WISE: p.ranks[p.num_ranks++] = (t + 1) % W; break;
    case EMBER_SHARD_COLUMN_WISE:
        p.num_shards = dim < 3 ? dim : 3;
        for (int i = 0; i < p.num_shards; i++) p.ranks[p.num_ranks++] = (t + i) % W;
        break;
    case EMBER_SHARD_TABLE_ROW_WISE:
        p.group_size = W < 2 ? W : 2;
        for (int i = 0; i < p.group_size; i++) p.ranks[p.num_ranks++] = (W - 1 - i + t) % W;
        break;
    case EMBER_SHARD_GRID:
        p.num_shards = dim < 2 ? dim : 2;
        p.group_size = W < 2 ? W : 2;
        p.num_ranks = p.num_shards * p.group_size;
        for (int c = 0; c < p.num_shards; c++)
            for (int k = 0; k < p.group_size; k++) p.ranks[c * p.group_size + k] = (t + k + (t % 2 ? c : 0)) % W;
        break;
    default: break;
    }
    return p;
}

ember_table_plan test_plan_named(const char *scheme, int W, int32_t *store) {
    ember_table_plan p;
    memset(&p, 0, sizeof p);
    p.ranks = store;
    if (!strcmp(scheme, "dp")) p.scheme = EMBER_SHARD_DATA_PARALLEL;
    else if (!strcmp(scheme, "tw")) { p.scheme = EMBER_SHARD_TABLE_WISE; p.ranks[0] = W - 1; }
    else if (!strcmp(scheme, "cw")) { p.scheme = EMBER_SHARD_COLUMN_WISE; p.num_shards = 2; p.ranks[0] = 0; p.ranks[1] = W - 1; }
    else if (!strcmp(scheme, "twrw")) {
        p.scheme = EMBER_SHARD_TABLE_ROW_WISE;
        p.group_size = W;
        for (int i = 0; i < W; i++) p.ranks[i] = W - 1 - i;
    } else if (!strcmp(scheme, "grid")) {
        p.scheme = EMBER_SHARD_GRID;
        p.num_shards = 2;
        p.group_size = W;
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < W; k++) p.ranks[c * W + k] = (k + c) % W;
    } else p.scheme = EMBER_SHARD_ROW_WISE;
    p.num_ranks = ember_table_plan_ranks_needed(&p);
    if (!p.num_ranks) p.ranks = NULL;
    return p;
}
