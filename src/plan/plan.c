// The planner (see include/ember/plan.h): enumerate each table's options, estimate their
// per-rank storage and step bytes, place tables largest first on the option that keeps the
// busiest rank least busy within the memory budget.
#include <stdarg.h>
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

// One candidate: the scheme, its ranks, and what it adds to each rank ([W] arrays).
typedef struct option {
    ember_table_plan plan; // plan.ranks: [W] scratch
    size_t *storage;
    double *step;
} option;

// Option o's per-step bytes, from its scheme's estimate (L = ids per sample of the table, B
// samples per rank, row = bytes of one stored row, out = bytes of one pooled output row).
static void cost(option *o, int W, double B, double L, double row, double out, double rows) {
    ember__scheme(o->plan.scheme)->step_bytes(&o->plan, W, B, L, row, out, rows, o->step);
}

// A candidate plan of scheme s (every other field and cost zero).
static void option_init(option *o, ember_shard_scheme s, int W) {
    int32_t *ranks = o->plan.ranks;
    memset(&o->plan, 0, sizeof o->plan);
    o->plan.scheme = s;
    o->plan.ranks = ranks;
    memset(o->storage, 0, sizeof(size_t) * (size_t)W);
    memset(o->step, 0, sizeof(double) * (size_t)W);
}

void ember_plan_release(ember_ctx *ctx, ember_table_plan *plan, int32_t num_tables) {
    for (int32_t t = 0; plan && t < num_tables; t++) {
        ember_ctx_free(ctx, plan[t].ranks);
        plan[t].ranks = NULL;
        plan[t].num_ranks = 0;
    }
}

ember_status ember_plan_create(ember_ctx *ctx, const ember_ebc_config *ec, const ember_plan_config *pc,
                               ember_table_plan *plan, ember_plan_stats *stats) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_plan_create";
    EMBER_CHECK(ctx, ec && pc && plan, EMBER_ERR_INVALID_ARG, "%s: NULL argument", fn);
    EMBER_CHECK(ctx, ec->num_tables >= 1 && ec->tables && ec->num_features >= 0, EMBER_ERR_INVALID_ARG,
                "%s: %d tables", fn, (int)ec->num_tables);
    const int W = pc->world_size;
    EMBER_CHECK(ctx, W >= 1, EMBER_ERR_INVALID_ARG, "%s: world size %d, expected at least 1", fn, W);
    EMBER_CHECK(ctx, pc->batch_size >= 1, EMBER_ERR_INVALID_ARG, "%s: batch size %d", fn, (int)pc->batch_size);
    const int T = ec->num_tables;
    const int32_t allow = pc->allow ? pc->allow : 0x1f;
    const size_t dp_max = pc->dp_max_bytes ? pc->dp_max_bytes : ((size_t)1 << 20);
    for (int t = 0; t < T; t++) plan[t] = (ember_table_plan){0};
    // Scratch: per table Lt, order; per rank the running totals, two candidates and the ranks by load.
    const size_t Wz = (size_t)W, Tz = (size_t)T;
    ember__buf scratch = {0};
    char *mem = ember__buf_reserve(ctx, &scratch, Tz * (sizeof(double) + sizeof(size_t)) +
                                                      Wz * (3 * sizeof(size_t) + 3 * sizeof(double) + 3 * sizeof(int32_t)));
    if (!mem) return EMBER_ERR_NOMEM;
    double *Lt = (double *)mem, *acc_step = Lt + T;
    option best = {.step = acc_step + W}, cand = {.step = best.step + W};
    size_t *order = (size_t *)(cand.step + W), *acc_storage = order + T;
    best.storage = acc_storage + W;
    cand.storage = best.storage + W;
    int32_t *by_load = (int32_t *)(cand.storage + W);
    best.plan.ranks = by_load + W;
    cand.plan.ranks = best.plan.ranks + W;
    memset(acc_step, 0, sizeof(double) * Wz);
    memset(acc_storage, 0, sizeof(size_t) * Wz);
    // Ids per sample of each table: the sum over the features that read it.
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
    ember_status st = EMBER_OK;
    const double B = pc->batch_size;
    for (int i = 0; i < T && st == EMBER_OK; i++) {
        const int t = (int)order[i];
        const ember_table_config *tc = &ec->tables[t];
        const size_t bytes = table_bytes(tc);
        size_t wbytes = 0;
        ember_table_config_bytes(tc, &wbytes, NULL);
        const double row = (double)wbytes / (double)tc->rows, out = 4.0 * tc->dim, L = Lt[t];
        double best_score = -1, best_total = 0;
        // Ranks by current step load, least first: the candidates for single placements.
        for (int q = 0; q < W; q++) by_load[q] = q;
        for (int a = 1; a < W; a++) {
            int v = by_load[a], b = a - 1;
            while (b >= 0 && acc_step[by_load[b]] > acc_step[v]) {
                by_load[b + 1] = by_load[b];
                b--;
            }
            by_load[b + 1] = v;
        }
        for (int kind = 0; kind < 5 + W; kind++) {
            if (kind == 0) {
                if (!(allow & (1 << EMBER_SHARD_DATA_PARALLEL)) || bytes > dp_max) continue;
                option_init(&cand, EMBER_SHARD_DATA_PARALLEL, W);
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                for (int q = 0; q < W; q++) cand.storage[q] = bytes;
            } else if (kind == 1) {
                if (!(allow & (1 << EMBER_SHARD_ROW_WISE)) || W == 1 || tc->rows < W) continue;
                option_init(&cand, EMBER_SHARD_ROW_WISE, W);
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
                option_init(&cand, EMBER_SHARD_COLUMN_WISE, W);
                cand.plan.num_shards = k;
                cand.plan.num_ranks = k;
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
                option_init(&cand, EMBER_SHARD_GRID, W);
                cand.plan.num_shards = k;
                cand.plan.group_size = g;
                cand.plan.num_ranks = k * g;
                for (int j = 0; j < k * g; j++) cand.plan.ranks[j] = by_load[j];
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                const size_t n = (size_t)(k * g);
                for (int s = 0; s < k * g; s++) cand.storage[by_load[s]] = bytes / n + bytes % n;
            } else {
                if (!(allow & (1 << EMBER_SHARD_TABLE_WISE))) continue;
                const int r = kind - 4;
                option_init(&cand, EMBER_SHARD_TABLE_WISE, W);
                cand.plan.num_ranks = 1;
                cand.plan.ranks[0] = r;
                cost(&cand, W, B, L, row, out, (double)tc->rows);
                cand.storage[r] = bytes;
            }
            double score = 0, total = 0;
            int fits = 1;
            for (int q = 0; q < W; q++) {
                if (pc->memory_per_rank && acc_storage[q] + cand.storage[q] > pc->memory_per_rank) fits = 0;
                double s = acc_step[q] + cand.step[q];
                if (s > score) score = s;
                total += cand.step[q];
            }
            if (!fits) continue;
            if (best_score < 0 || score < best_score * (1 - 1e-9) ||
                (score <= best_score * (1 + 1e-9) && total < best_total)) {
                const option keep = best; // the new best; the old one's arrays become scratch
                best = cand;
                cand = keep;
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
        plan[t].ranks = NULL;
        if (best.plan.num_ranks > 0) {
            plan[t].ranks = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)best.plan.num_ranks);
            if (!plan[t].ranks) {
                plan[t].num_ranks = 0;
                st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s': out of memory", fn, tc->name ? tc->name : "?");
                break;
            }
            memcpy(plan[t].ranks, best.plan.ranks, sizeof(int32_t) * (size_t)best.plan.num_ranks);
        }
        for (int q = 0; q < W; q++) {
            acc_storage[q] += best.storage[q];
            acc_step[q] += best.step[q];
        }
    }
    if (st == EMBER_OK && stats) {
        if (stats->storage_bytes) memcpy(stats->storage_bytes, acc_storage, sizeof(size_t) * Wz);
        if (stats->step_bytes) memcpy(stats->step_bytes, acc_step, sizeof(double) * Wz);
    }
    if (st != EMBER_OK) { // as at the start: no ranks array, no half-made plan
        ember_plan_release(ctx, plan, T);
        for (int t = 0; t < T; t++) plan[t] = (ember_table_plan){0};
    }
    ember__buf_free(ctx, &scratch);
    return st;
}

// Appends to buf[cap] at *n (kept NUL-terminated while it fits), counting what it needed.
static void put(char *buf, size_t cap, size_t *n, const char *fmt, ...) EMBER__PRINTF(4, 5);
static void put(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int len = vsnprintf(buf && *n < cap ? buf + *n : NULL, buf && *n < cap ? cap - *n : 0, fmt, ap);
    va_end(ap);
    if (len > 0) *n += (size_t)len;
}

size_t ember_plan_describe(const ember_ebc_config *ec, const ember_table_plan *plan, char *buf, size_t cap) {
    size_t n = 0;
    if (buf && cap) buf[0] = '\0';
    for (int t = 0; ec && plan && t < ec->num_tables; t++) {
        const ember_table_plan *p = &plan[t];
        const size_t start = n;
        put(buf, cap, &n, "%s %s", ec->tables[t].name ? ec->tables[t].name : "?", ember_shard_scheme_name(p->scheme));
        const int count = p->ranks ? p->num_ranks : 0;
        for (int i = 0; i < count; i++) put(buf, cap, &n, "%s%d", i ? "," : " ranks=", (int)p->ranks[i]);
        put(buf, cap, &n, "\n");
        // A line that did not fit whole is not left half-written.
        if (buf && n >= cap && start < cap) buf[start] = '\0';
    }
    return n;
}
