// The planner (see include/ember/plan.h): enumerate each table's options, estimate their
// per-rank storage and step bytes, place tables largest first on the option that keeps the
// busiest rank least busy within the memory budget.
#include <stdio.h>
#include <string.h>

#include "ember/plan.h"
#include "shard/internal.h"

// Weights plus optimizer state of a whole table (the optimizer descriptor's count).
static size_t table_bytes(const ember_table_config *t) {
    size_t w = 0, st = 0;
    ember_table_config_bytes(t, &w, &st);
    return w + st;
}

// One candidate: the scheme, its ranks, and what it adds to each rank.
typedef struct option {
    ember_table_plan plan;
    size_t storage[EMBER_PLAN_MAX_RANKS];
    double step[EMBER_PLAN_MAX_RANKS];
} option;

// Option o's per-step bytes, from its scheme's estimate (L = ids per sample of the table, B
// samples per rank, row = bytes of one stored row, out = bytes of one pooled output row).
static void cost(option *o, int W, double B, double L, double row, double out, double rows) {
    ember__scheme(o->plan.scheme)->step_bytes(&o->plan, W, B, L, row, out, rows, o->step);
}

// A candidate plan of scheme s (every other field zero).
static void option_init(option *o, ember_shard_scheme s) {
    memset(o, 0, sizeof *o);
    o->plan.scheme = s;
}

ember_status ember_plan_create(ember_ctx *ctx, const ember_ebc_config *ec, const ember_plan_config *pc,
                               ember_table_plan *plan, ember_plan_stats *stats) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_plan_create";
    EMBER_CHECK(ctx, ec && pc && plan, EMBER_ERR_INVALID_ARG, "%s: NULL argument", fn);
    EMBER_CHECK(ctx, ec->num_tables >= 1 && ec->tables && ec->num_features >= 0, EMBER_ERR_INVALID_ARG,
                "%s: %d tables", fn, (int)ec->num_tables);
    const int W = pc->world_size;
    EMBER_CHECK(ctx, W >= 1 && W <= EMBER_PLAN_MAX_RANKS, EMBER_ERR_INVALID_ARG,
                "%s: world size %d outside [1, %d]", fn, W, EMBER_PLAN_MAX_RANKS);
    EMBER_CHECK(ctx, pc->batch_size >= 1, EMBER_ERR_INVALID_ARG, "%s: batch size %d", fn, (int)pc->batch_size);
    const int T = ec->num_tables;
    const int32_t allow = pc->allow ? pc->allow : 0x1f;
    const size_t dp_max = pc->dp_max_bytes ? pc->dp_max_bytes : ((size_t)1 << 20);
    // Ids per sample of each table: the sum over the features that read it.
    double L_small[64], *Lt = L_small;
    size_t order_small[64], *order = order_small;
    ember__buf lb = {0}, ob = {0};
    if (T > 64) {
        Lt = ember__buf_reserve(ctx, &lb, sizeof(double) * (size_t)T);
        order = ember__buf_reserve(ctx, &ob, sizeof(size_t) * (size_t)T);
        if (!Lt || !order) {
            ember__buf_free(ctx, &lb);
            ember__buf_free(ctx, &ob);
            return EMBER_ERR_NOMEM;
        }
    }
    for (int t = 0; t < T; t++) Lt[t] = 0;
    for (int f = 0; f < ec->num_features; f++) {
        const int t = ec->features[f].table;
        if (t >= 0 && t < T) Lt[t] += pc->pooling_factor ? pc->pooling_factor[f] : 1.0;
    }
    // Largest tables first (stable: equal sizes keep configuration order).
    for (int t = 0; t < T; t++) order[t] = (size_t)t;
    for (int i = 1; i < T; i++) {
        size_t v = order[i];
        int j = i - 1;
        while (j >= 0 && table_bytes(&ec->tables[order[j]]) < table_bytes(&ec->tables[v])) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    ember_plan_stats acc;
    memset(&acc, 0, sizeof acc);
    ember_status st = EMBER_OK;
    const double B = pc->batch_size;
    for (int i = 0; i < T && st == EMBER_OK; i++) {
        const int t = (int)order[i];
        const ember_table_config *tc = &ec->tables[t];
        const size_t bytes = table_bytes(tc);
        size_t wbytes = 0;
        ember_table_config_bytes(tc, &wbytes, NULL);
        const double row = (double)wbytes / (double)tc->rows, out = 4.0 * tc->dim, L = Lt[t];
        option best, cand;
        double best_score = -1, best_total = 0;
        // Ranks by current step load, least first: the candidates for single placements.
        int by_load[EMBER_PLAN_MAX_RANKS];
        for (int q = 0; q < W; q++) by_load[q] = q;
        for (int a = 1; a < W; a++) {
            int v = by_load[a], b = a - 1;
            while (b >= 0 && acc.step_bytes[by_load[b]] > acc.step_bytes[v]) {
                by_load[b + 1] = by_load[b];
                b--;
            }
            by_load[b + 1] = v;
        }
        for (int kind = 0; kind < 5 + W; kind++) {
            if (kind == 0) {
                if (!(allow & (1 << EMBER_SHARD_DATA_PARALLEL)) || bytes > dp_max) continue;
                option_init(&cand, EMBER_SHARD_DATA_PARALLEL);
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                for (int q = 0; q < W; q++) cand.storage[q] = bytes;
            } else if (kind == 1) {
                if (!(allow & (1 << EMBER_SHARD_ROW_WISE)) || W == 1 || tc->rows < W) continue;
                option_init(&cand, EMBER_SHARD_ROW_WISE);
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                for (int q = 0; q < W; q++) cand.storage[q] = bytes / (size_t)W + bytes % (size_t)W;
            } else if (kind == 2 || kind == 3) {
                // Column-wise in 2 or 4 slices of at least 16 columns, on the least loaded ranks.
                const int k = kind == 2 ? 2 : 4;
                if (!(allow & (1 << EMBER_SHARD_COLUMN_WISE)) || k > W || tc->dim < 16 * k) continue;
                ember_optim_info oi;
                if (ember_optim_info_get(tc->optim.kind, &oi) != EMBER_OK || !oi.column_wise ||
                    tc->pooling == EMBER_POOL_NONE)
                    continue;
                option_init(&cand, EMBER_SHARD_COLUMN_WISE);
                cand.plan.num_shards = k;
                for (int j = 0; j < k; j++) cand.plan.ranks[j] = by_load[j];
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                for (int s = 0; s < k; s++) cand.storage[by_load[s]] = bytes / (size_t)k + bytes % (size_t)k;
            } else if (kind == 4 + W) {
                // Grid, only when named in pc->allow: 2 column slices of at least 16 columns, each
                // row-wise over W / 2 of the least loaded ranks.
                const int k = 2, g = W / 2;
                if (!(pc->allow & (1 << EMBER_SHARD_GRID)) || W < 4 || tc->dim < 16 * k || tc->rows < g) continue;
                ember_optim_info oi;
                if (ember_optim_info_get(tc->optim.kind, &oi) != EMBER_OK || !oi.column_wise ||
                    tc->pooling == EMBER_POOL_NONE)
                    continue;
                option_init(&cand, EMBER_SHARD_GRID);
                cand.plan.num_shards = k;
                cand.plan.group_size = g;
                for (int j = 0; j < k * g; j++) cand.plan.ranks[j] = by_load[j];
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                const size_t n = (size_t)(k * g);
                for (int s = 0; s < k * g; s++) cand.storage[by_load[s]] = bytes / n + bytes % n;
            } else {
                if (!(allow & (1 << EMBER_SHARD_TABLE_WISE))) continue;
                const int r = kind - 4;
                option_init(&cand, EMBER_SHARD_TABLE_WISE);
                cand.plan.ranks[0] = r;
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                cand.storage[r] = bytes;
            }
            double score = 0, total = 0;
            int fits = 1;
            for (int q = 0; q < W; q++) {
                if (pc->memory_per_rank && acc.storage_bytes[q] + cand.storage[q] > pc->memory_per_rank) fits = 0;
                double s = acc.step_bytes[q] + cand.step[q];
                if (s > score) score = s;
                total += cand.step[q];
            }
            if (!fits) continue;
            if (best_score < 0 || score < best_score * (1 - 1e-9) ||
                (score <= best_score * (1 + 1e-9) && total < best_total)) {
                best = cand;
                best_score = score;
                best_total = total;
            }
        }
        if (best_score < 0) {
            st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s' (%zu bytes) fits on no rank within %zu bytes", fn,
                              tc->name ? tc->name : "?", bytes, pc->memory_per_rank);
            break;
        }
        plan[t] = best.plan;
        for (int q = 0; q < W; q++) {
            acc.storage_bytes[q] += best.storage[q];
            acc.step_bytes[q] += best.step[q];
        }
    }
    if (st == EMBER_OK && stats) *stats = acc;
    ember__buf_free(ctx, &lb);
    ember__buf_free(ctx, &ob);
    return st;
}

size_t ember_plan_describe(const ember_ebc_config *ec, const ember_table_plan *plan, char *buf, size_t cap) {
    size_t n = 0;
    if (buf && cap) buf[0] = '\0';
    for (int t = 0; ec && plan && t < ec->num_tables; t++) {
        const ember_table_plan *p = &plan[t];
        char line[256], ranks[160] = "";
        const int count = ember_table_plan_num_ranks(p);
        size_t rl = 0;
        for (int i = 0; i < count && rl + 8 < sizeof ranks; i++)
            rl += (size_t)snprintf(ranks + rl, sizeof ranks - rl, "%s%d", i ? "," : "", (int)p->ranks[i]);
        int len = snprintf(line, sizeof line, "%s %s%s%s\n", ec->tables[t].name ? ec->tables[t].name : "?",
                           ember_shard_scheme_name(p->scheme), count ? " ranks=" : "", ranks);
        if (len < 0) continue;
        if (buf && n + (size_t)len < cap) memcpy(buf + n, line, (size_t)len + 1);
        n += (size_t)len;
    }
    return n;
}
