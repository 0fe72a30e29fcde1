// The planner (see include/ember/plan.h): enumerate each table's options, estimate their
// per-rank storage and step bytes, place tables largest first on the option that keeps the
// busiest rank least busy within the memory budget.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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
    ember__traffic tr;
} option;

static double **traffic_array(ember__traffic *tr, int i) {
    double **a[EMBER__TRAFFIC_ARRAYS] = {&tr->read, &tr->self, &tr->intra, &tr->intra_in, &tr->inter, &tr->inter_in};
    return a[i];
}

// The machine the plan is for: hosts, bandwidths (time mode when intra_bw > 0) and per-host sums.
typedef struct model {
    int W, H;
    const int32_t *host_of; // [W], NULL: one host
    int32_t *host_first;    // [H + 1] offsets into host_ranks
    int32_t *host_ranks;    // [W] ranks of host h: host_ranks[host_first[h] .. host_first[h + 1])
    int32_t *host_size;     // [W] ranks on rank q's host
    double intra_bw, inter_bw, mem_bw, disk_bw;
    double round_s;             // seconds of one collective round
    double *host_out, *host_in; // [H] scratch
    double *before;             // [W] scratch of table_traffic
    const double *speed;        // [W] ember_plan_config.rank_speed, or NULL (all 1)
} model;

// Rank q's modelled load (bytes or seconds) as the placement weighs it: over its speed.
static double weighed(const model *m, int q, double load) { return m->speed ? load / m->speed[q] : load; }

// Bytes of one stored row of tc (its weights in its dtype), wherever the rows are kept.
static double row_bytes(const ember_table_config *tc) {
    ember_table_config ram = *tc;
    ram.cache_rows = 0;
    size_t w = 0;
    ember_table_config_bytes(&ram, &w, NULL);
    return (double)w / (double)tc->rows;
}

// Plan p's per-step traffic of table tc into tr (L = ids per sample of the table, B samples per
// rank, row = bytes of one stored row, out = bytes of one pooled output row), from its scheme's
// estimate; a tiered table's file traffic is added to the rows each rank reads, in bytes of
// memory time (x mem_bw / disk_bw): of the rows it touches, 1 - cache/rows miss (uniform ids;
// Zipf ids miss less) and each miss reads a record (row and optimizer state) and writes one back.
static void table_traffic(const model *m, const ember_table_plan *p, const ember_table_config *tc, int W, double B,
                          double L, double row, double out, ember__traffic *tr) {
    const int tiered = tc->cache_rows > 0 && tc->cache_rows < tc->rows;
    double *before = m->before;
    for (int q = 0; q < W && tiered; q++) before[q] = tr->read[q];
    ember__scheme(p->scheme)->step_traffic(p, W, B, L, row, out, (double)tc->rows, tr);
    if (!tiered) return;
    // The plan's row blocks: its shards over its column slices.
    const ember__scheme_ops *ops = ember__scheme(p->scheme);
    const int32_t nshards = ops->cut(tc, p, W, NULL);
    const int32_t slices = (ops->plan_fields & EMBER_PLAN_USES_SHARDS) && p->num_shards > 0 ? p->num_shards : 1;
    const double blocks = nshards >= slices ? (double)(nshards / slices) : 1.0;
    size_t w = 0, s = 0;
    ember_table_config ram = *tc;
    ram.cache_rows = 0;
    ember_table_config_bytes(&ram, &w, &s);
    const double record = (double)(w + s) / (double)tc->rows;
    for (int q = 0; q < W; q++) {
        const double touched = (tr->read[q] - before[q]) / row;
        // Each shard keeps cache_rows rows of its row block.
        const double shard_rows = (double)tc->rows / blocks;
        const double miss = shard_rows > (double)tc->cache_rows ? 1.0 - (double)tc->cache_rows / shard_rows : 0.0;
        tr->read[q] += touched * miss * 2.0 * record * m->mem_bw / m->disk_bw;
    }
}

// A candidate plan of scheme s (every other field and cost zero).
static void option_init(option *o, ember_shard_scheme s, int W) {
    int32_t *ranks = o->plan.ranks;
    memset(&o->plan, 0, sizeof o->plan);
    o->plan.scheme = s;
    o->plan.ranks = ranks;
    memset(o->storage, 0, sizeof(size_t) * (size_t)W);
    for (int i = 0; i < EMBER__TRAFFIC_ARRAYS; i++) memset(*traffic_array(&o->tr, i), 0, sizeof(double) * (size_t)W);
}

// Bytes rank q reads and sends per step with acc and c (c may be NULL).
static double rank_bytes(const ember__traffic *a, const ember__traffic *c, int q) {
    double v = a->read[q] + a->self[q] + a->intra[q] + a->inter[q];
    if (c) v += c->read[q] + c->self[q] + c->intra[q] + c->inter[q];
    return v;
}

// Fills m->host_out/host_in with each host's inter-host bytes sent/received with acc and c.
static void host_sums(model *m, const ember__traffic *a, const ember__traffic *c) {
    for (int h = 0; h < m->H; h++) m->host_out[h] = m->host_in[h] = 0;
    if (!m->host_of) return;
    for (int q = 0; q < m->W; q++) {
        m->host_out[m->host_of[q]] += a->inter[q] + (c ? c->inter[q] : 0);
        m->host_in[m->host_of[q]] += a->inter_in[q] + (c ? c->inter_in[q] : 0);
    }
}

// Predicted seconds of rank q (after host_sums): its rows read at memory bandwidth, the busier
// direction of its traffic inside the host, and the busier direction of its host's link.
static double rank_seconds(const model *m, const ember__traffic *a, const ember__traffic *c, int q) {
    const double read = a->read[q] + (c ? c->read[q] : 0);
    const double out = a->intra[q] + (c ? c->intra[q] : 0), in = a->intra_in[q] + (c ? c->intra_in[q] : 0);
    double t = read / m->mem_bw + (out > in ? out : in) / m->intra_bw;
    if (m->host_of) {
        const int h = m->host_of[q];
        t += (m->host_out[h] > m->host_in[h] ? m->host_out[h] : m->host_in[h]) / m->inter_bw;
    }
    return t;
}

// Collective rounds of a step (src/shard/forward.c, backward.c, dp.c: counts, ids, lengths,
// outputs, gradients and the status agreements), with routed tables and with data-parallel ones.
#define ROUNDS_ROUTED 15
#define ROUNDS_DP 6
static double rounds_seconds(const model *m, int routed, int dp) {
    return m->round_s * ((routed ? ROUNDS_ROUTED : 0) + (dp ? ROUNDS_DP : 0));
}

// Checks the topology fields and fills m (host_of from ranks_per_host into own_host_of[W]).
// fn names the caller in messages.
static ember_status model_init(ember_ctx *ctx, const char *fn, const ember_plan_config *pc, model *m,
                               int32_t *own_host_of, int32_t *host_first, int32_t *host_ranks, int32_t *host_size) {
    const int W = pc->world_size;
    m->W = W;
    m->H = 1;
    m->host_of = NULL;
    EMBER_CHECK(ctx, pc->ranks_per_host >= 0 && (pc->ranks_per_host == 0 || W % pc->ranks_per_host == 0),
                EMBER_ERR_INVALID_ARG, "%s: ranks_per_host %d does not divide the world size %d", fn,
                (int)pc->ranks_per_host, W);
    const double bw[5] = {pc->intra_host_bw, pc->inter_host_bw, pc->mem_bw, pc->round_s, pc->disk_bw};
    const char *bw_name[5] = {"intra_host_bw", "inter_host_bw", "mem_bw", "round_s", "disk_bw"};
    for (int i = 0; i < 5; i++)
        EMBER_CHECK(ctx, bw[i] >= 0 && isfinite(bw[i]), EMBER_ERR_INVALID_ARG, "%s: %s %g%s", fn, bw_name[i], bw[i],
                    i == 3 ? " s" : " bytes/s");
    if (pc->host_of || (pc->ranks_per_host > 0 && pc->ranks_per_host < W)) {
        int H = 0;
        for (int q = 0; q < W; q++) {
            const int32_t h = pc->host_of ? pc->host_of[q] : q / pc->ranks_per_host;
            EMBER_CHECK(ctx, h >= 0 && h < W, EMBER_ERR_INVALID_ARG, "%s: rank %d on host %d, outside [0, %d)", fn, q,
                        (int)h, W);
            own_host_of[q] = h;
            if (h + 1 > H) H = h + 1;
        }
        for (int h = 0; h <= H; h++) host_first[h] = 0;
        for (int q = 0; q < W; q++) host_first[own_host_of[q] + 1]++;
        for (int h = 0; h < H; h++) {
            EMBER_CHECK(ctx, host_first[h + 1] > 0, EMBER_ERR_INVALID_ARG,
                        "%s: no rank on host %d of 0..%d (hosts are numbered without gaps)", fn, h, H - 1);
            host_first[h + 1] += host_first[h];
        }
        // Ranks of each host in rank order: each host's next slot (host_size as the cursor).
        for (int h = 0; h < H; h++) host_size[h] = host_first[h];
        for (int q = 0; q < W; q++) host_ranks[host_size[own_host_of[q]]++] = q;
        if (H > 1) {
            m->H = H;
            m->host_of = own_host_of;
        }
    }
    if (m->H == 1) {
        host_first[0] = 0;
        host_first[1] = W;
        for (int q = 0; q < W; q++) host_ranks[q] = q;
    }
    for (int q = 0; q < W; q++)
        host_size[q] = m->H > 1 ? host_first[own_host_of[q] + 1] - host_first[own_host_of[q]] : W;
    m->host_first = host_first;
    m->host_ranks = host_ranks;
    m->host_size = host_size;
    m->intra_bw = pc->intra_host_bw;
    m->inter_bw = pc->inter_host_bw;
    m->mem_bw = pc->mem_bw > 0 ? pc->mem_bw : 2e9;
    m->disk_bw = pc->disk_bw > 0 ? pc->disk_bw : 1e9;
    m->round_s = pc->round_s;
    m->speed = pc->rank_speed;
    for (int q = 0; pc->rank_speed && q < W; q++)
        EMBER_CHECK(ctx, pc->rank_speed[q] > 0 && isfinite(pc->rank_speed[q]), EMBER_ERR_INVALID_ARG,
                    "%s: rank_speed[%d] %g is not a positive finite number", fn, q, pc->rank_speed[q]);
    // One rank per host (a rank per node with many threads): nothing travels inside a host, and
    // no probe can measure it; its bandwidth only has to be positive for the time model.
    bool shared = m->H == 1;
    for (int h = 0; h < m->H && !shared; h++) shared = host_first[h + 1] - host_first[h] > 1;
    if (!shared && m->intra_bw == 0) m->intra_bw = m->inter_bw;
    EMBER_CHECK(ctx, m->H == 1 || (m->intra_bw > 0 && m->inter_bw > 0), EMBER_ERR_INVALID_ARG,
                "%s: %d hosts need %s (given %g and %g bytes/s)", fn, m->H,
                shared ? "intra_host_bw and inter_host_bw" : "inter_host_bw", m->intra_bw, m->inter_bw);
    EMBER_CHECK(ctx, m->intra_bw > 0 || m->inter_bw == 0, EMBER_ERR_INVALID_ARG,
                "%s: inter_host_bw %g bytes/s without intra_host_bw", fn, m->inter_bw);
    return EMBER_OK;
}

// The schemes by increasing plan_order (stable).
static void schemes_by_plan_order(const ember__scheme_ops **out) {
    for (int k = 0; k < EMBER_SHARD_COUNT; k++) {
        const ember__scheme_ops *ops = ember__scheme((ember_shard_scheme)k);
        int j = k;
        while (j > 0 && out[j - 1]->plan_order > ops->plan_order) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = ops;
    }
}

// The placement of one table in progress: the machine, what is placed so far, the table, and the
// best candidate yet (best/cand swap their arrays when a candidate wins).
typedef struct placing {
    model *m;
    const ember_plan_config *pc;
    const ember__traffic *acc;
    const size_t *acc_storage;
    int timed, W;
    double B;
    int has_routed, has_dp; // the placed tables' kinds, for the collective rounds
    const ember_table_config *tc;
    size_t bytes;
    double row, out, L;
    option *best, *cand;
    double best_score, best_total;
} placing;

// A scheme's candidate p for the table being placed: its traffic and storage, its score (the
// busiest rank's seconds or bytes with it), kept when it beats the best so far and fits.
static void consider(void *arg, const ember_table_plan *p) {
    placing *pl = arg;
    option *cand = pl->cand;
    const int W = pl->W;
    option_init(cand, p->scheme, W);
    int32_t *ranks = cand->plan.ranks;
    cand->plan = *p;
    cand->plan.ranks = ranks;
    if (p->num_ranks > 0) memcpy(ranks, p->ranks, sizeof(int32_t) * (size_t)p->num_ranks);
    table_traffic(pl->m, &cand->plan, pl->tc, W, pl->B, pl->L, pl->row, pl->out, &cand->tr);
    ember__scheme(p->scheme)->storage(&cand->plan, W, pl->bytes, cand->storage);
    double score = 0, total = 0;
    int fits = 1;
    if (pl->timed) host_sums(pl->m, pl->acc, &cand->tr);
    for (int q = 0; q < W; q++) {
        if (pl->pc->memory_per_rank && pl->acc_storage[q] + cand->storage[q] > pl->pc->memory_per_rank) fits = 0;
        const double s = weighed(pl->m, q, pl->timed ? rank_seconds(pl->m, pl->acc, &cand->tr, q)
                                                     : rank_bytes(pl->acc, &cand->tr, q));
        if (s > score) score = s;
        total += pl->timed ? s : rank_bytes(&cand->tr, NULL, q);
    }
    if (!fits) return;
    if (pl->timed) {
        const int dp = ember__scheme(p->scheme)->build_home != NULL; // a scheme kept at home
        score += rounds_seconds(pl->m, pl->has_routed || !dp, pl->has_dp || dp);
    }
    if (pl->best_score < 0 || score < pl->best_score * (1 - 1e-9) ||
        (score <= pl->best_score * (1 + 1e-9) && total < pl->best_total)) {
        pl->cand = pl->best; // the new best; the old one's arrays become the next candidate's
        pl->best = cand;
        pl->best_score = score;
        pl->best_total = total;
    }
}

// Ids per sample of each table (Lt: the sum over the features that read it), and the tables in
// the order they are placed: largest first (stable: equal sizes keep configuration order).
static void table_order(const ember_ebc_config *ec, const ember_plan_config *pc, double *Lt, size_t *order) {
    const int T = ec->num_tables;
    for (int t = 0; t < T; t++) Lt[t] = 0;
    for (int f = 0; f < ec->num_features; f++) {
        const int t = ec->features[f].table;
        if (t >= 0 && t < T) Lt[t] += pc->pooling_factor ? pc->pooling_factor[f] : 1.0;
    }
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
}

// A rank's load for sort_by_load: its seconds (or bytes) so far, the rank breaking ties.
typedef struct load_key {
    double load;
    int32_t rank;
} load_key;

static int by_key(const void *a, const void *b) {
    const load_key *x = a, *y = b;
    if (x->load != y->load) return x->load < y->load ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

// Ranks by their step load so far (seconds when timed, else bytes), least first, lower rank
// first among equals: the candidates for single placements. keys: [W] scratch.
static void sort_by_load(model *m, const ember__traffic *acc, int timed, load_key *keys, int32_t *by_load) {
    host_sums(m, acc, NULL);
    for (int q = 0; q < m->W; q++)
        keys[q] = (load_key){weighed(m, q, timed ? rank_seconds(m, acc, NULL, q) : rank_bytes(acc, NULL, q)), q};
    qsort(keys, (size_t)m->W, sizeof *keys, by_key);
    for (int q = 0; q < m->W; q++) by_load[q] = keys[q].rank;
}

// The plan's figures per rank (whichever arrays stats gives): storage, step bytes, predicted
// seconds (0 when the plan is on bytes), bytes sent to other hosts.
static void fill_stats(placing *pl, const ember__traffic *acc, const size_t *acc_storage, ember_plan_stats *stats) {
    model *m = pl->m;
    if (stats->storage_bytes) memcpy(stats->storage_bytes, acc_storage, sizeof(size_t) * (size_t)m->W);
    host_sums(m, acc, NULL);
    for (int q = 0; q < m->W; q++) {
        if (stats->step_bytes) stats->step_bytes[q] = rank_bytes(acc, NULL, q);
        if (stats->step_seconds)
            stats->step_seconds[q] =
                pl->timed ? rank_seconds(m, acc, NULL, q) + rounds_seconds(m, pl->has_routed, pl->has_dp) : 0;
        if (stats->inter_bytes) stats->inter_bytes[q] = acc->inter[q];
    }
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
    int32_t allow = pc->allow;
    for (int k = 0; k < EMBER_SHARD_COUNT && !pc->allow; k++) // by default, every scheme not planned only when named
        allow |= ember__scheme((ember_shard_scheme)k)->planned_only_when_named ? 0 : 1 << k;
    const size_t dp_max = pc->dp_max_bytes ? pc->dp_max_bytes : ((size_t)1 << 20);
    for (int t = 0; t < T; t++) plan[t] = (ember_table_plan){0};
    // Scratch: per table Lt, order; per rank three traffics (running totals, two candidates),
    // three storages, the ranks by load, two candidates' ranks, hosts and per-host sums.
    const size_t Wz = (size_t)W, Tz = (size_t)T, NA = EMBER__TRAFFIC_ARRAYS;
    ember__buf scratch = {0};
    char *mem = ember__buf_reserve(ctx, &scratch,
                                   Tz * (sizeof(double) + sizeof(size_t)) +
                                       Wz * ((3 * NA + 3) * sizeof(double) + 3 * sizeof(size_t) + 10 * sizeof(int32_t) +
                                             sizeof(load_key) + 1) +
                                       sizeof(int32_t) + 16);
    if (!mem) return EMBER_ERR_NOMEM;
    double *Lt = (double *)mem, *d = Lt + T;
    ember__traffic acc = {.W = W};
    option best = {.tr = {.W = W}}, cand = {.tr = {.W = W}};
    for (size_t i = 0; i < NA; i++) {
        *traffic_array(&acc, (int)i) = d + i * Wz;
        *traffic_array(&best.tr, (int)i) = d + (NA + i) * Wz;
        *traffic_array(&cand.tr, (int)i) = d + (2 * NA + i) * Wz;
    }
    model m = {0};
    m.host_out = d + 3 * NA * Wz;
    m.host_in = m.host_out + W;
    m.before = m.host_in + W;
    size_t *order = (size_t *)(m.before + W), *acc_storage = order + T;
    best.storage = acc_storage + W;
    cand.storage = best.storage + W;
    int32_t *by_load = (int32_t *)(cand.storage + W);
    best.plan.ranks = by_load + W;
    cand.plan.ranks = best.plan.ranks + W;
    int32_t *own_host_of = cand.plan.ranks + W, *host_ranks = own_host_of + W, *host_first = host_ranks + W;
    int32_t *scheme_ranks = host_first + W + 1; // a scheme's scratch for its candidates' ranks
    int32_t *host_size = scheme_ranks + W, *host_by_load = host_size + W, *traffic_scratch = host_by_load + W;
    load_key *keys = (load_key *)(((uintptr_t)(traffic_scratch + W) + 15) & ~(uintptr_t)15);
    unsigned char *seen = (unsigned char *)(keys + W);
    ember_status st = model_init(ctx, fn, pc, &m, own_host_of, host_first, host_ranks, host_size);
    if (st != EMBER_OK) {
        ember__buf_free(ctx, &scratch);
        return st;
    }
    best.tr.host_of = cand.tr.host_of = acc.host_of = m.host_of;
    best.tr.host_size = cand.tr.host_size = acc.host_size = m.host_size;
    best.tr.scratch = cand.tr.scratch = acc.scratch = traffic_scratch;
    const int timed = m.intra_bw > 0;
    for (size_t i = 0; i < NA; i++) memset(*traffic_array(&acc, (int)i), 0, sizeof(double) * Wz);
    memset(acc_storage, 0, sizeof(size_t) * Wz);
    table_order(ec, pc, Lt, order);
    // Grid with one column slice per host needs hosts of equal size, at least 2 ranks each.
    int hosts_even = m.H > 1;
    for (int h = 0; h < m.H && hosts_even; h++)
        hosts_even = host_first[h + 1] - host_first[h] == W / m.H && W / m.H >= 2;
    const ember__scheme_ops *by_order[EMBER_SHARD_COUNT];
    schemes_by_plan_order(by_order);
    placing pl = {.m = &m, .pc = pc, .acc = &acc, .acc_storage = acc_storage, .timed = timed, .W = W,
                  .B = pc->batch_size, .best = &best, .cand = &cand};
    ember__plan_view view = {.W = W, .H = m.H, .by_load = by_load, .host_first = host_first, .host_ranks = host_ranks,
                             .hosts_even = hosts_even, .dp_max = dp_max, .host_by_load = host_by_load};
    for (int i = 0; i < T && st == EMBER_OK; i++) {
        const int t = (int)order[i];
        const ember_table_config *tc = &ec->tables[t];
        const size_t bytes = table_bytes(tc);
        pl.tc = tc;
        pl.bytes = bytes;
        pl.row = row_bytes(tc);
        pl.out = 4.0 * tc->dim;
        pl.L = Lt[t];
        pl.best_score = -1;
        pl.best_total = 0;
        sort_by_load(&m, &acc, timed, keys, by_load);
        // Hosts by the load of their least loaded rank.
        memset(seen, 0, (size_t)m.H);
        for (int q = 0, nh = 0; q < W && nh < m.H; q++) {
            const int32_t h = m.host_of ? m.host_of[by_load[q]] : 0;
            if (!seen[h]) seen[h] = 1, host_by_load[nh++] = h;
        }
        // Every allowed scheme proposes its placements, by plan_order (the first of equal scores wins).
        for (int k = 0; k < EMBER_SHARD_COUNT; k++) {
            const ember__scheme_ops *ops = by_order[k];
            view.named = (pc->allow >> ops->scheme) & 1;
            if (!((allow >> ops->scheme) & 1) || (ops->planned_only_when_named && !view.named)) continue;
            ops->candidates(tc, bytes, &view, scheme_ranks, consider, &pl);
        }
        const double best_score = pl.best_score;
        option *win = pl.best;
        if (best_score < 0) {
            st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s' (%zu bytes) fits on no rank within %zu bytes", fn,
                              tc->name ? tc->name : "?", bytes, pc->memory_per_rank);
            break;
        }
        plan[t] = win->plan;
        plan[t].ranks = NULL;
        if (win->plan.num_ranks > 0) {
            plan[t].ranks = ember_ctx_alloc(ctx, sizeof(int32_t) * (size_t)win->plan.num_ranks);
            if (!plan[t].ranks) {
                plan[t].num_ranks = 0;
                st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s': out of memory", fn, tc->name ? tc->name : "?");
                break;
            }
            memcpy(plan[t].ranks, win->plan.ranks, sizeof(int32_t) * (size_t)win->plan.num_ranks);
        }
        if (ember__scheme(win->plan.scheme)->build_home) pl.has_dp = 1;
        else pl.has_routed = 1;
        for (int q = 0; q < W; q++) {
            acc_storage[q] += win->storage[q];
            for (size_t a = 0; a < NA; a++) (*traffic_array(&acc, (int)a))[q] += (*traffic_array(&win->tr, (int)a))[q];
        }
    }
    if (st == EMBER_OK && stats) fill_stats(&pl, &acc, acc_storage, stats);
    if (st != EMBER_OK) { // as at the start: no ranks array, no half-made plan
        ember_plan_release(ctx, plan, T);
        for (int t = 0; t < T; t++) plan[t] = (ember_table_plan){0};
    }
    ember__buf_free(ctx, &scratch);
    return st;
}

// Adds the exact bytes each rank holds of table tc under p into per_rank[W] (each piece's weights
// and state, as ember_shard_rank_bytes counts them), cutting the table once: O(W).
static ember_status add_storage(ember_ctx *ctx, const char *fn, const ember_table_config *tc, const ember_table_plan *p,
                                int32_t W, size_t *per_rank) {
    const ember__scheme_ops *ops = ember__scheme(p->scheme);
    const int32_t n = ops->cut(tc, p, W, NULL);
    if (n == 0) { // kept at home: a whole replica on every rank
        size_t w = 0, s = 0;
        ember_table_config_bytes(tc, &w, &s);
        for (int32_t q = 0; q < W; q++) per_rank[q] += w + s;
        return EMBER_OK;
    }
    ember__shard *sh = ember__xalloc(ctx, sizeof(ember__shard) * (size_t)n, "shard list");
    if (!sh) return ember__error(ctx, EMBER_ERR_NOMEM, "%s: table '%s': out of memory", fn, tc->name ? tc->name : "?");
    ops->cut(tc, p, W, sh);
    for (int32_t i = 0; i < n; i++) {
        ember_table_config piece = *tc;
        piece.rows = sh[i].r1 - sh[i].r0;
        piece.dim = sh[i].c1 - sh[i].c0;
        size_t w = 0, s = 0;
        ember_table_config_bytes(&piece, &w, &s);
        per_rank[sh[i].owner] += w + s;
    }
    ember__free(ctx, sh);
    return EMBER_OK;
}

ember_status ember_plan_predict(ember_ctx *ctx, const ember_ebc_config *ec, const ember_plan_config *pc,
                                const ember_table_plan *plan, ember_plan_stats *stats) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_plan_predict";
    EMBER_CHECK(ctx, ec && pc && plan && stats, EMBER_ERR_INVALID_ARG, "%s: NULL argument", fn);
    EMBER_CHECK(ctx, ec->num_tables >= 1 && ec->tables && ec->num_features >= 0, EMBER_ERR_INVALID_ARG,
                "%s: %d tables", fn, (int)ec->num_tables);
    const int W = pc->world_size, T = ec->num_tables;
    EMBER_CHECK(ctx, W >= 1, EMBER_ERR_INVALID_ARG, "%s: world size %d, expected at least 1", fn, W);
    EMBER_CHECK(ctx, pc->batch_size >= 1, EMBER_ERR_INVALID_ARG, "%s: batch size %d", fn, (int)pc->batch_size);
    for (int t = 0; t < T; t++) {
        const ember_table_plan *p = &plan[t];
        const char *name = ec->tables[t].name ? ec->tables[t].name : "?";
        EMBER_CHECK(ctx, (int)p->scheme >= 0 && p->scheme < EMBER_SHARD_COUNT, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': unknown scheme %d", fn, name, (int)p->scheme);
        const int32_t need = ember_table_plan_ranks_needed(p);
        EMBER_CHECK(ctx, need >= 0 && p->num_ranks == need && (need == 0 || p->ranks), EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': %d ranks given, the %s plan needs %d", fn, name, (int)p->num_ranks,
                    ember_shard_scheme_name(p->scheme), (int)need);
        ember_status vs = ember__scheme(p->scheme)->validate(ctx, &ec->tables[t], p, W);
        if (vs != EMBER_OK) return vs;
    }
    const size_t Wz = (size_t)W, NA = EMBER__TRAFFIC_ARRAYS;
    ember__buf scratch = {0};
    char *mem = ember__buf_reserve(ctx, &scratch, Wz * ((NA + 3) * sizeof(double) + 5 * sizeof(int32_t)) + 4);
    if (!mem) return EMBER_ERR_NOMEM;
    double *d = (double *)mem;
    ember__traffic acc = {.W = W};
    for (size_t i = 0; i < NA; i++) {
        *traffic_array(&acc, (int)i) = d + i * Wz;
        memset(d + i * Wz, 0, sizeof(double) * Wz);
    }
    model m = {0};
    m.host_out = d + NA * Wz;
    m.host_in = m.host_out + W;
    m.before = m.host_in + W;
    int32_t *own_host_of = (int32_t *)(m.before + W), *host_ranks = own_host_of + W, *host_first = host_ranks + W;
    int32_t *host_size = host_first + W + 1;
    ember_status st = model_init(ctx, fn, pc, &m, own_host_of, host_first, host_ranks, host_size);
    acc.host_of = m.host_of;
    acc.host_size = m.host_size;
    acc.scratch = host_size + W;
    int has_routed = 0, has_dp = 0;
    for (int t = 0; t < T && st == EMBER_OK; t++) {
        const ember_table_config *tc = &ec->tables[t];
        if (ember__scheme(plan[t].scheme)->build_home) has_dp = 1;
        else has_routed = 1;
        double L = 0;
        for (int f = 0; f < ec->num_features; f++)
            if (ec->features[f].table == t) L += pc->pooling_factor ? pc->pooling_factor[f] : 1.0;
        table_traffic(&m, &plan[t], tc, W, pc->batch_size, L, row_bytes(tc), 4.0 * tc->dim, &acc);
        if (stats->storage_bytes) {
            if (t == 0) memset(stats->storage_bytes, 0, sizeof(size_t) * Wz);
            st = add_storage(ctx, fn, tc, &plan[t], W, stats->storage_bytes);
        }
    }
    if (st == EMBER_OK) {
        host_sums(&m, &acc, NULL);
        for (int q = 0; q < W; q++) {
            if (stats->step_bytes) stats->step_bytes[q] = rank_bytes(&acc, NULL, q);
            if (stats->step_seconds)
                stats->step_seconds[q] =
                    m.intra_bw > 0 ? rank_seconds(&m, &acc, NULL, q) + rounds_seconds(&m, has_routed, has_dp) : 0;
            if (stats->inter_bytes) stats->inter_bytes[q] = acc.inter[q];
        }
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
