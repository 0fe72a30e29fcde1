// Column-wise: the columns split into num_shards contiguous slices (the first dim % n slices
// one wider), slice i on ranks[i]. Each owner pools complete bags over its slice; the home rank
// concatenates the slices along D.
#include "shard/internal.h"

static ember_status validate(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W) {
    EMBER_CHECK(ctx, p->num_shards >= 1 && p->num_shards <= t->dim,
                EMBER_ERR_INVALID_ARG, "ember_sebc_create: table '%s': column-wise num_shards %d outside [1, dim %d]",
                t->name, (int)p->num_shards, (int)t->dim);
    for (int32_t i = 0; i < p->num_shards; i++) {
        EMBER_CHECK(ctx, p->ranks[i] >= 0 && p->ranks[i] < W, EMBER_ERR_INVALID_ARG,
                    "ember_sebc_create: table '%s': column shard %d on rank %d outside [0, %d)", t->name, (int)i,
                    (int)p->ranks[i], (int)W);
    }
    return ember__check_column_slices(ctx, t, "column-wise sharding");
}

static int32_t cut(const ember_table_config *t, const ember_table_plan *p, int32_t W, ember__shard *out) {
    (void)W;
    if (out) {
        for (int32_t i = 0; i < p->num_shards; i++) {
            out[i] = (ember__shard){p->ranks[i], 0, t->rows, (int32_t)ember__split_begin(t->dim, p->num_shards, i),
                                    (int32_t)ember__split_begin(t->dim, p->num_shards, i + 1), -1};
        }
    }
    return p->num_shards;
}

// Every rank sends its ids and lengths to each slice; each slice's owner pools every bag over
// its columns and returns them.
static void step_traffic(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, ember__traffic *tr) {
    (void)rows;
    const int k = p->num_shards;
    for (int i = 0; i < k; i++) {
        const int o = p->ranks[i];
        tr->read[o] += W * B * L * row / k;
        for (int q = 0; q < W; q++) {
            ember__traffic_send(tr, q, o, B * L * 8 + B * 4 + B * out / k); // ids, lengths, gradients
            if (q != o) ember__traffic_send(tr, o, q, B * out / k);          // the slice's pools
        }
    }
}

// 2 or 4 slices of at least 16 columns, on the least loaded ranks.
static void candidates(const ember_table_config *t, size_t bytes, const ember__plan_view *v, int32_t *ranks,
                       ember__plan_emit emit, void *arg) {
    (void)bytes;
    for (int32_t k = 2; k <= 4; k *= 2) {
        if (k > v->W || !ember__plan_column_slices(t, k)) continue;
        for (int32_t j = 0; j < k; j++) ranks[j] = v->by_load[j];
        emit(arg,
             &(ember_table_plan){.scheme = EMBER_SHARD_COLUMN_WISE, .num_shards = k, .num_ranks = k, .ranks = ranks});
    }
}

static void default_plan(int32_t t, int32_t dim, int32_t W, int32_t group, int32_t *ranks, ember_table_plan *out) {
    (void)group;
    const int32_t k = W < dim ? W : dim;
    for (int32_t i = 0; i < k; i++) ranks[i] = (t + i) % W;
    *out = (ember_table_plan){.scheme = EMBER_SHARD_COLUMN_WISE, .num_shards = k, .num_ranks = k, .ranks = ranks};
}

const ember__scheme_ops ember__scheme_cw = {
    .scheme = EMBER_SHARD_COLUMN_WISE, .name = "column_wise", .short_name = "cw",
    .plan_fields = EMBER_PLAN_USES_RANKS | EMBER_PLAN_USES_SHARDS,
    .validate = validate, .cut = cut, .partial = 0, .column_slices = 1, .bucket = ember__bucket_one_block,
    .step_traffic = step_traffic, .candidates = candidates, .storage = ember__storage_over_ranks, .plan_order = 20,
    .default_plan = default_plan,
};
