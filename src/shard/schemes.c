// The sharding schemes: their table (indexed by ember_shard_scheme; each entry is one file's ops,
// src/shard/<scheme>.c), their public vocabulary (names, plan fields, default placements) and the
// helpers several schemes share. A new scheme is its file, its enum value and its line here.
#include <string.h>

#include "shard/internal.h"

extern const ember__scheme_ops ember__scheme_dp, ember__scheme_tw, ember__scheme_cw, ember__scheme_rw,
    ember__scheme_twrw, ember__scheme_grid;

const ember__scheme_ops *const ember__schemes[EMBER_SHARD_COUNT] = {
    &ember__scheme_dp, &ember__scheme_tw, &ember__scheme_cw, &ember__scheme_rw, &ember__scheme_twrw,
    &ember__scheme_grid};

const char *ember_shard_scheme_name(ember_shard_scheme s) {
    return s >= 0 && s < EMBER_SHARD_COUNT ? ember__schemes[s]->name : "unknown";
}

const char *ember_shard_scheme_short_name(ember_shard_scheme s) {
    return s >= 0 && s < EMBER_SHARD_COUNT ? ember__schemes[s]->short_name : "unknown";
}

ember_status ember__check_column_slices(ember_ctx *ctx, const ember_table_config *t, const char *scheme) {
    EMBER_CHECK(ctx, t->pooling != EMBER_POOL_NONE, EMBER_ERR_UNSUPPORTED,
                "ember_sebc_create: table '%s': %s of a sequence (NONE) table", t->name, scheme);
    EMBER_CHECK(ctx, ember__optim(t->optim.kind)->info.column_wise, EMBER_ERR_UNSUPPORTED,
                "ember_sebc_create: table '%s': optimizer %s needs whole-row norms: not supported by %s", t->name,
                ember_optim_name(t->optim.kind), scheme);
    return EMBER_OK;
}

void ember__storage_over_ranks(const ember_table_plan *p, int32_t W, size_t bytes, size_t *per_rank) {
    (void)W;
    const size_t n = (size_t)p->num_ranks;
    for (int32_t i = 0; i < p->num_ranks; i++) per_rank[p->ranks[i]] += bytes / n + bytes % n;
}

int ember__plan_column_slices(const ember_table_config *t, int32_t k) {
    return t->dim >= 16 * k && t->pooling != EMBER_POOL_NONE && ember__optim(t->optim.kind)->info.column_wise;
}

ember_status ember_table_plan_default(ember_shard_scheme scheme, int32_t t, int32_t dim, int32_t W, int32_t group,
                                      int32_t *ranks, ember_table_plan *out) {
    if (scheme < 0 || scheme >= EMBER_SHARD_COUNT || t < 0 || dim < 1 || W < 1 || !ranks || !out)
        return EMBER_ERR_INVALID_ARG;
    if (group < 1 || group > W || W % group != 0) group = W;
    ember__schemes[scheme]->default_plan(t, dim, W, group, ranks, out);
    return EMBER_OK;
}

unsigned ember_shard_scheme_plan_fields(ember_shard_scheme s) {
    return s >= 0 && s < EMBER_SHARD_COUNT ? ember__schemes[s]->plan_fields : 0u;
}

int32_t ember_table_plan_ranks_needed(const ember_table_plan *p) {
    const unsigned u = p ? ember_shard_scheme_plan_fields(p->scheme) : 0u;
    if (!(u & EMBER_PLAN_USES_RANKS)) return 0;
    const int64_t k = (u & EMBER_PLAN_USES_SHARDS) ? p->num_shards : 1,
                  g = (u & EMBER_PLAN_USES_GROUP) ? p->group_size : 1;
    return k < 1 || g < 1 || k * g > INT32_MAX ? -1 : (int32_t)(k * g);
}

ember_status ember_shard_scheme_parse(const char *name, ember_shard_scheme *out) {
    for (int32_t k = 0; name && out && k < EMBER_SHARD_COUNT; k++) {
        if (strcmp(name, ember__schemes[k]->name) == 0 || strcmp(name, ember__schemes[k]->short_name) == 0) {
            *out = ember__schemes[k]->scheme;
            return EMBER_OK;
        }
    }
    return EMBER_ERR_INVALID_ARG;
}

void ember__traffic_to_set(ember__traffic *tr, const int32_t *owners, int32_t n, double x, double y) {
    const int32_t W = tr->W;
    int32_t *on_host = tr->scratch; // owners per host (host h counted at index h)
    for (int32_t h = 0; h < W; h++) on_host[h] = 0;
    for (int32_t i = 0; i < n; i++) on_host[tr->host_of ? tr->host_of[owners[i]] : 0]++;
    // Every rank sends x to every owner and receives y from each other owner.
    for (int32_t q = 0; q < W; q++) {
        const int32_t h = tr->host_of ? tr->host_of[q] : 0;
        const double same = (double)on_host[h], other = (double)(n - on_host[h]);
        tr->intra[q] += x * same; // an owner's x to itself is moved to self below
        tr->inter[q] += x * other;
        tr->intra_in[q] += y * same;
        tr->inter_in[q] += y * other;
    }
    // Each owner receives x from every rank and sends y to every other rank; its own share is self.
    for (int32_t i = 0; i < n; i++) {
        const int32_t o = owners[i];
        const double hs = tr->host_of ? (double)tr->host_size[o] : (double)W;
        tr->intra[o] -= x;
        tr->self[o] += x;
        tr->intra_in[o] -= y; // not received from itself
        tr->intra_in[o] += x * (hs - 1);
        tr->inter_in[o] += x * ((double)W - hs);
        tr->intra[o] += y * (hs - 1);
        tr->inter[o] += y * ((double)W - hs);
    }
}

int32_t ember__repeated_rank(ember_ctx *ctx, const int32_t *ranks, int32_t n, int32_t W) {
    unsigned char *seen = ember__calloc(ctx, ((size_t)W + 7) / 8);
    if (!seen) return -2;
    int32_t twice = -1;
    for (int32_t i = 0; i < n && twice < 0; i++) {
        const int32_t r = ranks[i];
        if (seen[r >> 3] & (1u << (r & 7))) twice = r;
        seen[r >> 3] |= (unsigned char)(1u << (r & 7));
    }
    ember__free(ctx, seen);
    return twice;
}
