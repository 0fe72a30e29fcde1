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

ember_status sharding_plan(ember_ctx *ctx, int32_t num_tables, int32_t dim, const int *choice,
                           int32_t world, int32_t group_size, ember_table_plan *plan) {
    for (int32_t t = 0; t < num_tables; t++) plan[t] = (ember_table_plan){0};
    // The library's default placement of each table (ember_table_plan_default); its ranks copied
    // into an array of ctx's allocator, which ember_plan_release frees.
    int32_t *ranks = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)world);
    ember_status st =
        ranks ? EMBER_OK
              : ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "--sharding: out of memory for %d ranks", (int)world);
    for (int32_t t = 0; t < num_tables && st == EMBER_OK; t++) {
        ember_table_plan p;
        if (ember_table_plan_default((ember_shard_scheme)choice[t], t, dim, world, group_size, ranks, &p) != EMBER_OK) {
            char name[32];
            sharding_table_name(t, name, sizeof name);
            st = ember_ctx_set_error(ctx, EMBER_ERR_INVALID_ARG, "--sharding: table '%s': unknown scheme %d", name,
                                     choice[t]);
            break;
        }
        plan[t] = p;
        plan[t].ranks = NULL;
        if (p.num_ranks == 0) continue;
        plan[t].ranks = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)p.num_ranks);
        if (!plan[t].ranks) {
            plan[t].num_ranks = 0;
            st = ember_ctx_set_error(ctx, EMBER_ERR_NOMEM, "--sharding: out of memory for %d ranks", (int)p.num_ranks);
            break;
        }
        memcpy(plan[t].ranks, p.ranks, sizeof(int32_t) * (size_t)p.num_ranks);
    }
    ember_ctx_free(ctx, ranks);
    if (st != EMBER_OK) ember_plan_release(ctx, plan, num_tables);
    return st;
}
