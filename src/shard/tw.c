// Table-wise: the whole table on ranks[0]. Every sample's bags of the table's features travel
// to the owner, which pools complete bags.
#include "shard/internal.h"

static ember_status validate(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W) {
    EMBER_CHECK(ctx, p->ranks[0] >= 0 && p->ranks[0] < W, EMBER_ERR_INVALID_ARG,
                "ember_sebc_create: table '%s': table-wise owner rank %d outside [0, %d)", t->name, (int)p->ranks[0],
                (int)W);
    return EMBER_OK;
}

static int32_t cut(const ember_table_config *t, const ember_table_plan *p, int32_t W, ember__shard *out) {
    (void)W;
    if (out) out[0] = (ember__shard){p->ranks[0], 0, t->rows, 0, t->dim, -1};
    return 1;
}

// The owner pools every rank's bags and returns their rows; the others send ids and lengths
// and receive rows, then send their gradients.
static void step_traffic(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, ember__traffic *tr) {
    (void)rows;
    const int r = p->ranks[0];
    tr->read[r] += W * B * L * row; // pools every bag
    for (int q = 0; q < W; q++) {
        if (q == r) continue;
        ember__traffic_send(tr, q, r, B * L * 8 + B * 4 + B * out); // ids, lengths, gradients in
        ember__traffic_send(tr, r, q, B * out);                     // pooled rows back
    }
}

// The whole table on each of the least loaded ranks, in rank order (every rank when there are
// at most EMBER__PLAN_TRIES).
static void candidates(const ember_table_config *t, size_t bytes, const ember__plan_view *v, int32_t *ranks,
                       ember__plan_emit emit, void *arg) {
    (void)t; (void)bytes;
    const int32_t k = v->W < EMBER__PLAN_TRIES ? v->W : EMBER__PLAN_TRIES;
    int32_t tries[EMBER__PLAN_TRIES];
    for (int32_t i = 0; i < k; i++) { // the k least loaded, sorted by rank
        int32_t j = i;
        while (j > 0 && tries[j - 1] > v->by_load[i]) {
            tries[j] = tries[j - 1];
            j--;
        }
        tries[j] = v->by_load[i];
    }
    for (int32_t i = 0; i < k; i++) {
        ranks[0] = tries[i];
        emit(arg, &(ember_table_plan){.scheme = EMBER_SHARD_TABLE_WISE, .num_ranks = 1, .ranks = ranks});
    }
}

static void default_plan(int32_t t, int32_t dim, int32_t W, int32_t group, int32_t *ranks, ember_table_plan *out) {
    (void)dim; (void)group;
    ranks[0] = t % W;
    *out = (ember_table_plan){.scheme = EMBER_SHARD_TABLE_WISE, .num_ranks = 1, .ranks = ranks};
}

const ember__scheme_ops ember__scheme_tw = {
    .scheme = EMBER_SHARD_TABLE_WISE, .name = "table_wise", .short_name = "tw", .plan_fields = EMBER_PLAN_USES_RANKS,
    .validate = validate, .cut = cut, .partial = 0, .bucket = ember__bucket_one_block,
    .step_traffic = step_traffic, .candidates = candidates, .storage = ember__storage_over_ranks, .plan_order = 30,
    .default_plan = default_plan,
};
