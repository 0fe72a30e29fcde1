// Table-row-wise: row-wise within the group ranks[0..group_size); the other ranks hold nothing
// of the table (TorchRec's TWRW places a table's row blocks on the ranks of one host).
#include "shard/internal.h"

static ember_status validate(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W) {
    EMBER_CHECK(ctx, p->group_size >= 1 && p->group_size <= W,
                EMBER_ERR_INVALID_ARG, "ember_sebc_create: table '%s': table-row-wise group size %d outside [1, %d]",
                t->name, (int)p->group_size, (int)W);
    for (int32_t i = 0; i < p->group_size; i++) {
        EMBER_CHECK(ctx, p->ranks[i] >= 0 && p->ranks[i] < W, EMBER_ERR_INVALID_ARG,
                    "ember_sebc_create: table '%s': group member %d is rank %d outside [0, %d)", t->name, (int)i,
                    (int)p->ranks[i], (int)W);
    }
    const int32_t twice = ember__repeated_rank(ctx, p->ranks, p->group_size, W);
    EMBER_CHECK(ctx, twice != -2, EMBER_ERR_NOMEM, "ember_sebc_create: table '%s': out of memory", t->name);
    EMBER_CHECK(ctx, twice < 0, EMBER_ERR_INVALID_ARG, "ember_sebc_create: table '%s': rank %d twice in the group",
                t->name, (int)twice);
    return EMBER_OK;
}

static int32_t cut(const ember_table_config *t, const ember_table_plan *p, int32_t W, ember__shard *out) {
    (void)W;
    const int32_t g = p->group_size;
    int32_t n = 0;
    for (int32_t i = 0; i < g; i++) {
        int64_t r0 = ember__block_begin(t, g, i), r1 = ember__block_begin(t, g, i + 1);
        if (r1 == r0) continue;
        if (out) out[n] = (ember__shard){p->ranks[i], r0, r1, 0, t->dim, -1};
        n++;
    }
    return n;
}

// Row-wise inside the group: every rank sends each group member its share of the ids, the
// lengths and the gradients of the partial pools; each member pools its rows' share of every
// bag and returns the partials. With the group on one host, only ids, lengths and pools of
// the other hosts' samples cross hosts (as row-wise over all ranks would for every rank).
static void step_traffic(const ember_table_plan *p, int32_t W, double B, double L, double row, double out,
                         double rows, ember__traffic *tr) {
    (void)rows;
    const int g = p->group_size;
    for (int i = 0; i < g; i++) {
        const int o = p->ranks[i];
        tr->read[o] += W * B * L * row / g;
        for (int q = 0; q < W; q++) {
            if (q == o) continue;
            ember__traffic_send(tr, q, o, B * L * 8 / g + B * 4 + B * out);
            ember__traffic_send(tr, o, q, B * out);
        }
    }
}

// Row-wise over the ranks of each of the least loaded hosts, in host order (with more than one
// host, at least 2 ranks each; every host when there are at most EMBER__PLAN_TRIES).
static void candidates(const ember_table_config *t, size_t bytes, const ember__plan_view *v, int32_t *ranks,
                       ember__plan_emit emit, void *arg) {
    (void)bytes;
    const int32_t k = v->H < EMBER__PLAN_TRIES ? v->H : EMBER__PLAN_TRIES;
    int32_t tries[EMBER__PLAN_TRIES];
    for (int32_t i = 0; i < k; i++) { // the k least loaded hosts, sorted by index
        int32_t j = i;
        while (j > 0 && tries[j - 1] > v->host_by_load[i]) {
            tries[j] = tries[j - 1];
            j--;
        }
        tries[j] = v->host_by_load[i];
    }
    for (int32_t i = 0; v->H > 1 && i < k; i++) {
        const int32_t h = tries[i];
        const int32_t g = v->host_first[h + 1] - v->host_first[h];
        if (g < 2 || t->rows < g) continue;
        for (int32_t j = 0; j < g; j++) ranks[j] = v->host_ranks[v->host_first[h] + j];
        emit(arg, &(ember_table_plan){
                      .scheme = EMBER_SHARD_TABLE_ROW_WISE, .group_size = g, .num_ranks = g, .ranks = ranks});
    }
}

static void default_plan(int32_t t, int32_t dim, int32_t W, int32_t group, int32_t *ranks, ember_table_plan *out) {
    (void)dim;
    const int32_t g = t % (W / group);
    for (int32_t i = 0; i < group; i++) ranks[i] = g * group + i;
    *out = (ember_table_plan){
        .scheme = EMBER_SHARD_TABLE_ROW_WISE, .group_size = group, .num_ranks = group, .ranks = ranks};
}

const ember__scheme_ops ember__scheme_twrw = {
    .scheme = EMBER_SHARD_TABLE_ROW_WISE, .name = "table_row_wise", .short_name = "twrw",
    .plan_fields = EMBER_PLAN_USES_RANKS | EMBER_PLAN_USES_GROUP,
    .validate = validate, .cut = cut, .partial = 1, .bucket = ember__bucket_row_split,
    .step_traffic = step_traffic, .candidates = candidates, .storage = ember__storage_over_ranks, .plan_order = 50,
    .default_plan = default_plan,
};
