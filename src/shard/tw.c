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

// One row block: every id goes to all of the table's shards.
static int32_t bucket(const ember__table_shards *ts, int64_t id) {
    (void)ts; (void)id;
    return 0;
}

const ember__scheme_ops ember__scheme_tw = {.name = "table_wise", .validate = validate, .cut = cut, .partial = 0, .bucket = bucket};
