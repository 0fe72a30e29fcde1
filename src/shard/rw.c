// Row-wise: rows split into W contiguous blocks (the first rows % W blocks one row longer),
// block r on rank r. Each id travels to its block's owner; owners return partial SUMs that the
// home rank adds up, and MEAN divides once by the global bag length afterwards (never "local
// mean then sum").
#include "shard/internal.h"

static ember_status validate(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W) {
    (void)ctx; (void)t; (void)p; (void)W;
    return EMBER_OK;
}

static int32_t cut(const ember_table_config *t, const ember_table_plan *p, int32_t W, ember__shard *out) {
    (void)p;
    // A table with fewer rows than ranks leaves the last blocks empty: they get no shard.
    int32_t n = 0;
    for (int32_t r = 0; r < W; r++) {
        int64_t r0 = ember__block_begin(t, W, r), r1 = ember__block_begin(t, W, r + 1);
        if (r1 == r0) continue;
        if (out) out[n] = (ember__shard){r, r0, r1, 0, t->dim, -1};
        n++;
    }
    return n;
}

// Every rank pools its block's share of all bags, sends the ids of the other blocks and the
// lengths, returns partial rows and sends gradients.
static void step_traffic(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, ember__traffic *tr) {
    (void)p; (void)rows;
    for (int q = 0; q < W; q++) tr->read[q] += B * L * row;
    // To every other rank: its share of the ids, the lengths, partial pools and their gradients.
    ember__traffic_all_pairs(tr, B * L * 8 / W + B * 4 + 2 * B * out);
}

// Over every rank, when there are several and each gets a row.
static void candidates(const ember_table_config *t, size_t bytes, const ember__plan_view *v, int32_t *ranks,
                       ember__plan_emit emit, void *arg) {
    (void)bytes; (void)ranks;
    if (v->W > 1 && t->rows >= v->W) emit(arg, &(ember_table_plan){.scheme = EMBER_SHARD_ROW_WISE});
}

// An equal share of the table on every rank (the remainder counted on each).
static void storage(const ember_table_plan *p, int32_t W, size_t bytes, size_t *per_rank) {
    (void)p;
    for (int32_t q = 0; q < W; q++) per_rank[q] += bytes / (size_t)W + bytes % (size_t)W;
}

static void default_plan(int32_t t, int32_t dim, int32_t W, int32_t group, int32_t *ranks, ember_table_plan *out) {
    (void)t; (void)dim; (void)W; (void)group; (void)ranks;
    *out = (ember_table_plan){.scheme = EMBER_SHARD_ROW_WISE};
}

const ember__scheme_ops ember__scheme_rw = {
    .scheme = EMBER_SHARD_ROW_WISE, .name = "row_wise", .short_name = "rw", .plan_fields = 0,
    .validate = validate, .cut = cut, .partial = 1, .bucket = ember__bucket_row_split,
    .step_traffic = step_traffic, .candidates = candidates, .storage = storage, .plan_order = 10,
    .default_plan = default_plan,
};
