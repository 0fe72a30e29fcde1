// Grid: the columns split into num_shards contiguous slices (as column-wise), each slice
// row-wise over a group of group_size ranks (as table-row-wise): slice c's row block k lives on
// ranks[c * group_size + k]. Each id travels to the num_shards shards of its row block; each
// owner pools a partial SUM over its rows and columns, the home rank adds the row blocks'
// partials into each slice's columns and MEAN divides once by the global bag length.
#include "shard/internal.h"

static ember_status validate(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W) {
    EMBER_CHECK(ctx, p->num_shards >= 1 && p->num_shards <= t->dim, EMBER_ERR_INVALID_ARG,
                "ember_sebc_create: table '%s': grid num_shards %d outside [1, dim %d]", t->name, (int)p->num_shards,
                (int)t->dim);
    EMBER_CHECK(ctx, p->group_size >= 1 && p->group_size <= W, EMBER_ERR_INVALID_ARG,
                "ember_sebc_create: table '%s': grid group size %d outside [1, %d]", t->name, (int)p->group_size,
                (int)W);
    const int32_t g = p->group_size;
    for (int32_t c = 0; c < p->num_shards; c++) {
        for (int32_t k = 0; k < g; k++) {
            const int32_t r = p->ranks[c * g + k];
            EMBER_CHECK(ctx, r >= 0 && r < W, EMBER_ERR_INVALID_ARG,
                        "ember_sebc_create: table '%s': grid slice %d row block %d on rank %d outside [0, %d)",
                        t->name, (int)c, (int)k, (int)r, (int)W);
        }
        const int32_t twice = ember__repeated_rank(ctx, p->ranks + (size_t)c * (size_t)g, g, W);
        EMBER_CHECK(ctx, twice != -2, EMBER_ERR_NOMEM, "ember_sebc_create: table '%s': out of memory", t->name);
        EMBER_CHECK(ctx, twice < 0, EMBER_ERR_INVALID_ARG,
                    "ember_sebc_create: table '%s': rank %d twice in the group of grid slice %d", t->name, (int)twice,
                    (int)c);
    }
    return ember__check_column_slices(ctx, t, "grid sharding");
}

// Block-major: row block k's column slices are shards [k * num_shards, (k + 1) * num_shards).
// A table with fewer rows than group_size leaves the last row blocks empty: they get no shards.
static int32_t cut(const ember_table_config *t, const ember_table_plan *p, int32_t W, ember__shard *out) {
    (void)W;
    const int32_t g = p->group_size, nc = p->num_shards;
    int32_t n = 0;
    for (int32_t k = 0; k < g; k++) {
        const int64_t r0 = ember__block_begin(t, g, k), r1 = ember__block_begin(t, g, k + 1);
        if (r1 == r0) continue;
        for (int32_t c = 0; c < nc; c++) {
            if (out)
                out[n] = (ember__shard){p->ranks[c * g + k], r0, r1, (int32_t)ember__split_begin(t->dim, nc, c),
                                        (int32_t)ember__split_begin(t->dim, nc, c + 1), -1};
            n++;
        }
    }
    return n;
}

// Every rank sends each id to the num_shards slices of its row block, and the lengths to every
// shard; each shard pools its rows' share of every bag over its columns and returns partial
// slices, the gradients travel back the same way.
static void step_traffic(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, ember__traffic *tr) {
    (void)rows;
    const int k = p->num_shards, g = p->group_size;
    for (int i = 0; i < k * g; i++) tr->read[p->ranks[i]] += W * B * L * row / (k * g);
    ember__traffic_to_set(tr, p->ranks, k * g, B * L * 8 / g + B * 4 + 2 * B * out / k, 2 * B * out / k);
}

// Only when named: 2 column slices of at least 16 columns, each row-wise over W / 2 of the least
// loaded ranks (W >= 4); with several hosts of equal size, one slice per host, row-wise over its
// ranks.
static void candidates(const ember_table_config *t, size_t bytes, const ember__plan_view *v, int32_t *ranks,
                       ember__plan_emit emit, void *arg) {
    (void)bytes;
    if (!v->named) return;
    for (int per_host = 0; per_host < 2; per_host++) {
        const int32_t k = per_host ? v->H : 2, g = v->W / k;
        if ((per_host ? !v->hosts_even : v->W < 4) || t->rows < g || !ember__plan_column_slices(t, k)) continue;
        for (int32_t j = 0; j < k * g; j++) ranks[j] = per_host ? v->host_ranks[j] : v->by_load[j];
        emit(arg, &(ember_table_plan){.scheme = EMBER_SHARD_GRID, .num_shards = k, .group_size = g, .num_ranks = k * g,
                                      .ranks = ranks});
    }
}

static void default_plan(int32_t t, int32_t dim, int32_t W, int32_t group, int32_t *ranks, ember_table_plan *out) {
    (void)group;
    const int32_t k = dim < 2 ? dim : 2, g = W < 2 ? 1 : W / 2;
    for (int32_t i = 0; i < k * g; i++) ranks[i] = (t + i) % W;
    *out = (ember_table_plan){
        .scheme = EMBER_SHARD_GRID, .num_shards = k, .group_size = g, .num_ranks = k * g, .ranks = ranks};
}

const ember__scheme_ops ember__scheme_grid = {
    .scheme = EMBER_SHARD_GRID, .name = "grid_shard", .short_name = "grid",
    .plan_fields = EMBER_PLAN_USES_RANKS | EMBER_PLAN_USES_SHARDS | EMBER_PLAN_USES_GROUP,
    .validate = validate, .cut = cut, .partial = 1, .column_slices = 1, .bucket = ember__bucket_row_split,
    .step_traffic = step_traffic, .candidates = candidates, .storage = ember__storage_over_ranks, .plan_order = 40,
    .planned_only_when_named = 1, .default_plan = default_plan,
};
