// Sharded collection: plan validation, cutting tables into shards, routes, local collections, the
// home schemes' states; creation, destruction and the small accessors.
#include <stdio.h>
#include <string.h>

#include "shard/overlap.h"

// The ranks array holds exactly the entries the scheme reads (after its counts are checked).
static ember_status check_plan_ranks(ember_ctx *ctx, const char *fn, const ember_table_config *t,
                                     const ember_table_plan *p) {
    const int32_t need = ember_table_plan_ranks_needed(p);
    EMBER_CHECK(ctx, need >= 0, EMBER_ERR_INVALID_ARG, "%s: table '%s': %s with %d shards x group %d", fn, t->name,
                ember_shard_scheme_name(p->scheme), (int)p->num_shards, (int)p->group_size);
    EMBER_CHECK(ctx, p->num_ranks == need && (need == 0 || p->ranks), EMBER_ERR_INVALID_ARG,
                "%s: table '%s': %d ranks given%s, %s reads %d", fn, t->name, (int)p->num_ranks,
                p->ranks || !p->num_ranks ? "" : " (ranks is NULL)", ember_shard_scheme_name(p->scheme), (int)need);
    return EMBER_OK;
}

static ember_status check_plan(ember_ctx *ctx, const ember_ebc_config *cfg, const ember_table_plan *plan,
                               ember_grad_convention conv, int32_t W) {
    const char *fn = "ember_sebc_create";
    EMBER_TRY(ember__ebc_check_config(ctx, fn, cfg));
    EMBER_CHECK(ctx, plan != NULL, EMBER_ERR_INVALID_ARG, "%s: plan is NULL", fn);
    EMBER_CHECK(ctx, conv == EMBER_GRAD_MEAN || conv == EMBER_GRAD_SUM, EMBER_ERR_INVALID_ARG,
                "%s: unknown gradient convention %d", fn, (int)conv);
    for (int32_t t = 0; t < cfg->num_tables; t++) {
        const ember_table_plan *p = &plan[t];
        EMBER_CHECK(ctx, p->scheme >= 0 && p->scheme < EMBER_SHARD_COUNT, EMBER_ERR_INVALID_ARG,
                    "%s: table '%s': unknown scheme %d", fn, cfg->tables[t].name, (int)p->scheme);
        EMBER_TRY(check_plan_ranks(ctx, fn, &cfg->tables[t], p));
        EMBER_TRY(ember__scheme(p->scheme)->validate(ctx, &cfg->tables[t], p, W));
        // A hashed table's absent ids are only known where its rows are: a mean over row blocks,
        // divided at home, would count them.
        EMBER_CHECK(ctx,
                    ember_table_id_space(&cfg->tables[t]) != EMBER_IDS_HASHED || !ember__scheme(p->scheme)->partial ||
                        cfg->tables[t].pooling != EMBER_POOL_MEAN,
                    EMBER_ERR_UNSUPPORTED,
                    "%s: table '%s': a hashed table with MEAN pooling cannot be %s (use SUM, "
                    "or table-wise or column-wise)",
                    fn, cfg->tables[t].name, ember__scheme(p->scheme)->name);
    }
    return EMBER_OK;
}

void ember_sebc_destroy(ember_sebc *s) {
    if (!s) return;
    ember_ctx *ctx = s->ctx;
    ember__overlap_destroy(s); // waits for exchanges still in flight first
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (s->home[k]) ember__schemes[k]->destroy_home(s, s->home[k]);
    ember__batch_destroy(s, s->in);
    ember_ebc_destroy(s->local);
    if (s->ts)
        for (int32_t t = 0; t < s->T; t++) ember__free(ctx, s->ts[t].shards);
    if (s->routes)
        for (int32_t q = 0; q < s->W; q++) ember__free(ctx, s->routes[q]);
    if (s->feature_names)
        for (int32_t f = 0; f < s->F; f++) ember__free(ctx, s->feature_names[f]);
    if (s->table_names)
        for (int32_t t = 0; t < s->T; t++) ember__free(ctx, s->table_names[t]);
    ember__buf *bufs[] = {&s->loc_off, &s->loc_val, &s->loc_w,   &s->loc_out, &s->snd_out,
                          &s->rcv_out, &s->ss_mine, &s->ss_send, &s->ss_recv,
                          &s->vbe_len, &s->vbe_io,  &s->vbe_fbs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ember__buf_free(ctx, bufs[i]);
    ember__wire_free(s);
    void *arrays[] = {s->tables,     s->feature_table, s->feature_col,   s->feature_rows, s->feature_names,
                      s->table_names, s->ts,           s->nroutes,       s->routes,       s->local_out_dim,
                      s->route_base, s->froute_off,    s->froute,        s->cnt,          s->ssd_dir};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) ember__free(ctx, arrays[i]);
    ember__replica_free(s, &s->rsum); // 2D's (zero otherwise)
    if (s->replica) { // 2D: the group's and the replicas' communicators are the collection's
        ember_comm_destroy(s->replica);
        ember_comm_destroy(s->comm);
    }
    ember__free(ctx, s);
}

#define ALLOC(p, n) do { if (!((p) = ember__calloc(s->ctx, sizeof(*(p)) * (size_t)(n)))) return EMBER_ERR_NOMEM; } while (0)

// Copies of the tables and features, each feature's output columns and the validator's bound.
static ember_status copy_config(ember_sebc *s, const ember_ebc_config *cfg) {
    for (int32_t t = 0; t < s->T; t++) {
        s->tables[t] = cfg->tables[t];
        s->table_names[t] = ember__strdup(s->ctx, cfg->tables[t].name);
        if (!s->table_names[t]) return EMBER_ERR_NOMEM;
        s->tables[t].name = s->table_names[t];
    }
    int32_t col = 0;
    for (int32_t f = 0; f < s->F; f++) {
        int32_t t = cfg->features[f].table;
        s->feature_table[f] = t;
        s->feature_col[f] = s->sequence ? 0 : col;
        s->feature_rows[f] = ember__id_limit(ember_table_id_space(&cfg->tables[t]), cfg->tables[t].rows);
        s->feature_names[f] = ember__strdup(s->ctx, cfg->features[f].name);
        if (!s->feature_names[f]) return EMBER_ERR_NOMEM;
        col += cfg->tables[t].dim;
    }
    s->out_dim = s->sequence ? cfg->tables[cfg->features[0].table].dim : col;
    return EMBER_OK;
}

// Every table's shards, with each block's index in its owner's local collection; *mine: the
// blocks this rank owns.
static ember_status cut_tables(ember_sebc *s, const ember_ebc_config *cfg, const ember_table_plan *plan, int32_t *mine) {
    ember__buf nl = {0};
    int32_t *nlocal = ember__buf_reserve(s->ctx, &nl, sizeof(int32_t) * (size_t)s->W);
    if (!nlocal) return EMBER_ERR_NOMEM;
    memset(nlocal, 0, sizeof(int32_t) * (size_t)s->W);
    *mine = 0;
    for (int32_t t = 0; t < s->T; t++) {
        ember__table_shards *ts = &s->ts[t];
        ts->scheme = plan[t].scheme;
        ts->rows = cfg->tables[t].rows;
        ts->ids = ember_table_id_space(&cfg->tables[t]);
        ts->unit = ember__row_unit(&cfg->tables[t]);
        const ember__scheme_ops *ops = ember__scheme(ts->scheme);
        ts->ops = ops;
        if (ops->column_slices && ember__optim(cfg->tables[t].optim.kind)->rowwise_sumsq)
            s->cw_rowwise = 1;
        ts->nshards = ops->cut(&cfg->tables[t], &plan[t], s->W, NULL);
        if (ts->nshards == 0) continue; // kept at home (build_home)
        ts->shards = ember__calloc(s->ctx, sizeof(ember__shard) * (size_t)ts->nshards);
        if (!ts->shards) { ember__buf_free(s->ctx, &nl); return EMBER_ERR_NOMEM; }
        ops->cut(&cfg->tables[t], &plan[t], s->W, ts->shards);
        for (int32_t i = 0; i < ts->nshards; i++) {
            ember__shard *sh = &ts->shards[i];
            sh->local_table = nlocal[sh->owner]++;
            if (sh->owner == s->rank) (*mine)++;
            ts->nblocks += sh->c0 == 0;
        }
    }
    ember__buf_free(s->ctx, &nl);
    return EMBER_OK;
}

// Routes per owner, in feature order then shard order.
static ember_status build_routes(ember_sebc *s) {
    const int32_t F = s->F;
    for (int32_t f = 0; f < F; f++) s->froute_off[f + 1] = s->froute_off[f] + s->ts[s->feature_table[f]].nshards;
    ALLOC(s->froute, s->froute_off[F] ? s->froute_off[F] : 1);
    for (int32_t q = 0; q < s->W; q++) {
        int32_t n = 0;
        for (int32_t f = 0; f < F; f++) {
            const ember__table_shards *ts = &s->ts[s->feature_table[f]];
            for (int32_t i = 0; i < ts->nshards; i++) n += ts->shards[i].owner == q;
        }
        s->nroutes[q] = n;
        ALLOC(s->routes[q], n ? n : 1);
        n = 0;
        int32_t lc = 0;
        for (int32_t f = 0; f < F; f++) {
            const int32_t t = s->feature_table[f];
            const ember__table_shards *ts = &s->ts[t];
            for (int32_t i = 0; i < ts->nshards; i++) {
                if (ts->shards[i].owner != q) continue;
                const ember__shard *sh = &ts->shards[i];
                s->froute[s->froute_off[f] + i] = s->route_base[q] + n;
                s->routes[q][n++] = (ember__route){f, t, sh, lc, ts->ops->partial};
                lc += sh->c1 - sh->c0;
            }
        }
        s->local_out_dim[q] = s->sequence ? s->out_dim : lc;
        s->route_base[q + 1] = s->route_base[q] + s->nroutes[q];
    }
    return EMBER_OK;
}

// This rank's local collection of blocks (`mine` of them): one local table per owned block, one
// local feature per route. Partial (row-block) pools are SUMs: MEAN divides at the home rank.
static ember_status build_local(ember_sebc *s, const ember_ebc_config *cfg, const ember_ebc_config *lc0, int32_t mine) {
    ember_ctx *ctx = s->ctx;
    const int32_t nr = s->nroutes[s->rank];
    ember__buf tb = {0}, fb = {0}, ob = {0}, names = {0};
    ember_table_config *lt = ember__buf_reserve(ctx, &tb, sizeof(ember_table_config) * (size_t)mine);
    ember__origin *lo = ember__buf_reserve(ctx, &ob, sizeof(ember__origin) * (size_t)mine);
    ember_feature_config *lf = ember__buf_reserve(ctx, &fb, sizeof(ember_feature_config) * (size_t)(nr ? nr : 1));
    char *nm = ember__buf_reserve(ctx, &names, 48 * (size_t)(mine + nr));
    ember_status st = lt && lo && lf && nm ? EMBER_OK : EMBER_ERR_NOMEM;
    for (int32_t t = 0; t < s->T && st == EMBER_OK; t++) {
        const ember__table_shards *ts = &s->ts[t];
        for (int32_t i = 0; i < ts->nshards; i++) {
            const ember__shard *sh = &ts->shards[i];
            if (sh->owner != s->rank) continue;
            ember_table_config c = cfg->tables[t];
            char *name = nm + 48 * (size_t)sh->local_table;
            snprintf(name, 48, "%d.%d", (int)t, (int)i); // unique within the local collection
            c.name = name;
            c.rows = sh->r1 - sh->r0;
            c.dim = sh->c1 - sh->c0;
            if (ts->ops->partial && c.pooling == EMBER_POOL_MEAN) c.pooling = EMBER_POOL_SUM;
            lt[sh->local_table] = c;
            lo[sh->local_table] = (ember__origin){sh->r0, cfg->tables[t].rows, sh->c0, cfg->tables[t].dim,
                                                   cfg->tables[t].name};
        }
    }
    for (int32_t k = 0; k < nr && st == EMBER_OK; k++) {
        const ember__route *r = &s->routes[s->rank][k];
        char *name = nm + 48 * (size_t)(mine + k);
        snprintf(name, 48, "route%d", (int)k);
        lf[k] = (ember_feature_config){.name = name, .table = r->shard->local_table};
    }
    if (st == EMBER_OK) {
        ember_ebc_config lc = *lc0;
        lc.tables = lt;
        lc.num_tables = mine;
        lc.features = lf;
        lc.num_features = nr;
        if (nr == 0) { // a block no feature reads (a table without features): a placeholder feature
            lf[0] = (ember_feature_config){.name = "unused", .table = 0};
            lc.num_features = 1;
        }
        st = ember__ebc_create_ex(ctx, &lc, lo, &s->local);
    }
    ember__buf_free(ctx, &tb);
    ember__buf_free(ctx, &fb);
    ember__buf_free(ctx, &ob);
    ember__buf_free(ctx, &names);
    return st;
}

// Builds shards, routes, this rank's local collection and the home schemes' states. Local: every
// rank computes the same shards and routes from the same plan.
static ember_status build(ember_sebc *s, const ember_ebc_config *cfg, const ember_table_plan *plan) {
    const int32_t W = s->W, T = s->T, F = s->F;
    ALLOC(s->tables, T);
    ALLOC(s->table_names, T);
    ALLOC(s->feature_table, F);
    ALLOC(s->feature_col, F);
    ALLOC(s->feature_rows, F);
    ALLOC(s->feature_names, F);
    ALLOC(s->ts, T);
    ALLOC(s->nroutes, W);
    ALLOC(s->routes, W);
    ALLOC(s->local_out_dim, W);
    ALLOC(s->route_base, W + 1);
    ALLOC(s->froute_off, F + 1);
    ALLOC(s->cnt, 4 * W);
    EMBER_TRY(ember__batch_create(s, &s->in));
    EMBER_TRY(ember__overlap_create(s));
    EMBER_TRY(copy_config(s, cfg));
    int32_t mine = 0;
    EMBER_TRY(cut_tables(s, cfg, plan, &mine));
    EMBER_TRY(build_routes(s));
    // The local collections' configuration: the home rank applies the bounds mode before routing.
    ember_ebc_config lc = *cfg;
    lc.bounds = EMBER_BOUNDS_ERROR;
    lc.max_batch_size = 0;
    lc.max_nnz = 0;
    if (mine > 0) EMBER_TRY(build_local(s, cfg, &lc, mine));
    // Schemes with rank-local state of their own (the data-parallel replicas).
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (ember__schemes[k]->build_home) EMBER_TRY(ember__schemes[k]->build_home(s, &lc, &s->home[k]));
    return EMBER_OK;
}
#undef ALLOC

ember_status ember_shard_rank_bytes(ember_ctx *ctx, const ember_table_config *t, const ember_table_plan *p, int32_t W,
                                    int32_t rank, size_t *weight_bytes, size_t *state_bytes) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, t && p && weight_bytes && state_bytes && W >= 1 && rank >= 0 && rank < W, EMBER_ERR_INVALID_ARG,
                "ember_shard_rank_bytes: NULL argument or rank %d outside [0, %d)", (int)rank, (int)W);
    EMBER_CHECK(ctx, p->scheme >= 0 && p->scheme < EMBER_SHARD_COUNT, EMBER_ERR_INVALID_ARG,
                "ember_shard_rank_bytes: table '%s': unknown scheme %d", t->name ? t->name : "?", (int)p->scheme);
    const ember__scheme_ops *ops = ember__schemes[p->scheme];
    EMBER_TRY(check_plan_ranks(ctx, "ember_shard_rank_bytes", t, p));
    EMBER_TRY(ops->validate(ctx, t, p, W));
    if (ops->build_home) { // a rank-local replica of the whole table on every rank
        ember_table_config_bytes(t, weight_bytes, state_bytes);
        return EMBER_OK;
    }
    const int32_t n = ops->cut(t, p, W, NULL);
    ember__shard *sh = ember__xalloc(ctx, sizeof(ember__shard) * (size_t)(n > 0 ? n : 1), "shard list");
    if (!sh) return EMBER_ERR_NOMEM; // the outputs as they were
    ops->cut(t, p, W, sh);
    *weight_bytes = *state_bytes = 0;
    for (int32_t i = 0; i < n; i++) {
        if (sh[i].owner != rank) continue;
        ember_table_config piece = *t;
        piece.rows = sh[i].r1 - sh[i].r0;
        piece.dim = sh[i].c1 - sh[i].c0;
        size_t w = 0, st = 0;
        ember_table_config_bytes(&piece, &w, &st);
        *weight_bytes += w;
        *state_bytes += st;
    }
    ember__free(ctx, sh);
    return EMBER_OK;
}

// The configuration, plan and convention as fields every rank must agree on (the workspace hints
// max_batch_size and max_nnz may differ). Enums by name; floats to the digits that round-trip.
static void describe(ember__fields *d, const ember_ebc_config *cfg, const ember_table_plan *plan,
                     ember_grad_convention conv) {
    ember__fields_add(d, "gradient convention: %s", ember_grad_convention_name(conv));
    ember__fields_add(d, "bounds: %s", ember_bounds_mode_name(cfg->bounds));
    ember__fields_add(d, "seed: %llu", (unsigned long long)cfg->seed);
    ember__fields_add(d, "tables: %d", (int)cfg->num_tables);
    for (int32_t t = 0; t < cfg->num_tables; t++) {
        const ember_table_config *c = &cfg->tables[t];
        const ember_optim_config *o = &c->optim;
        const ember_table_plan *p = &plan[t];
        ember__fields_add(d, "table %d name: '%s'", (int)t, c->name);
        ember__fields_add(d, "table '%s' rows: %lld", c->name, (long long)c->rows);
        ember__fields_add(d, "table '%s' dim: %d", c->name, (int)c->dim);
        ember__fields_add(d, "table '%s' pooling: %s", c->name, ember_pooling_name(c->pooling));
        ember__fields_add(d, "table '%s' dtype: %s", c->name, ember_dtype_name(c->dtype));
        ember__fields_add(d, "table '%s' init: %s(%.9g, %.9g, std %.9g)", c->name, ember_init_kind_name(c->init.kind),
                          (double)c->init.a, (double)c->init.b, (double)c->init.std);
        ember__fields_add(d, "table '%s' optimizer: %s", c->name, ember_optim_name(o->kind));
        ember__fields_add(d,
                          "table '%s' optimizer settings: lr %.9g eps %.9g betas %.9g %.9g weight_decay %.9g %s "
                          "initial_accumulator %.9g momentum %.9g eta %.9g",
                          c->name, (double)o->lr, (double)o->eps, (double)o->beta1, (double)o->beta2,
                          (double)o->weight_decay, ember_weight_decay_mode_name(o->weight_decay_mode),
                          (double)o->initial_accumulator, (double)o->momentum, (double)o->eta);
        ember__fields_add(d, "table '%s' stochastic rounding: %d", c->name, (int)c->stochastic_rounding);
        // Column shards on different ranks pick the same cache slots only with the same cache.
        ember__fields_add(d, "table '%s' cache: %lld rows, %s", c->name, (long long)c->cache_rows,
                          ember_evict_policy_name(c->cache_policy));
        ember__fields_add(d, "table '%s' hash: %s bucket_rows %d min_count %lld policy %s ttl %lld", c->name,
                          c->hash.enabled ? "on" : "off", (int)c->hash.bucket_rows, (long long)c->hash.min_count,
                          ember_evict_policy_name(c->hash.policy), (long long)c->hash.ttl_steps);
        const unsigned u = ember_shard_scheme_plan_fields(p->scheme);
        char how[192];
        size_t n = (size_t)snprintf(how, sizeof how, "%s", ember_shard_scheme_name(p->scheme));
        if (u & EMBER_PLAN_USES_SHARDS)
            n += (size_t)snprintf(how + n, sizeof how - n, ", shards %d", (int)p->num_shards);
        if (u & EMBER_PLAN_USES_GROUP) n += (size_t)snprintf(how + n, sizeof how - n, ", group %d", (int)p->group_size);
        ember__fields_add(d, "table '%s' plan: %s", c->name, how);
        for (int32_t k = 0; (u & EMBER_PLAN_USES_RANKS) && k < p->num_ranks; k++)
            ember__fields_add(d, "table '%s' plan ranks[%d]: %d", c->name, (int)k, (int)p->ranks[k]);
    }
    ember__fields_add(d, "features: %d", (int)cfg->num_features);
    for (int32_t f = 0; f < cfg->num_features; f++)
        ember__fields_add(d, "feature %d: '%s' of table '%s'", (int)f, cfg->features[f].name,
                          cfg->tables[cfg->features[f].table].name);
}

// The creation on comm (2D: a sharding group's, with the world's communicator and the
// replicas', which the collection owns once this succeeds).
static ember_status create_on(ember_comm *comm, ember_comm *world, ember_comm *replica, const ember_ebc_config *cfg,
                              const ember_table_plan *plan, ember_grad_convention conv, ember_sebc **out);

ember_status ember_sebc_create(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                               ember_grad_convention conv, ember_sebc **out) {
    return create_on(comm, comm, NULL, cfg, plan, conv, out);
}

static ember_status create_on(ember_comm *comm, ember_comm *world, ember_comm *replica, const ember_ebc_config *cfg,
                              const ember_table_plan *plan, ember_grad_convention conv, ember_sebc **out) {
    if (!comm) return EMBER_ERR_INVALID_ARG;
    ember_ctx *ctx = comm->ctx;
    ember_status st = EMBER_OK;
    ember_sebc *s = NULL;
    if (!out) st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "ember_sebc_create: out is NULL");
    else *out = NULL;
    if (st == EMBER_OK) st = check_plan(ctx, cfg, plan, conv, comm->size);
    // Every rank must describe the same collection before any rank builds its part of it (2D:
    // every group's ranks, each agreement over the world).
    EMBER_TRY(ember_comm_agree(world, st));
    ember__fields d = {ctx, {NULL, 0}, 0, EMBER_OK};
    describe(&d, cfg, plan, conv);
    st = ember__comm_agree_fields(comm, "ember_sebc_create", &d);
    ember__fields_free(&d);
    if (world != comm) st = ember_comm_agree(world, st);
    if (st != EMBER_OK) return st;
    {
        s = ember__calloc(ctx, sizeof *s);
        if (!s) st = ember__error(ctx, EMBER_ERR_NOMEM, "ember_sebc_create: out of memory");
    }
    if (st == EMBER_OK) {
        s->ctx = ctx;
        s->comm = comm;
        s->world = world;
        s->replica = replica;
        s->nrep = world->size / comm->size;
        s->W = comm->size;
        s->rank = comm->rank;
        s->conv = conv;
        s->wire_scale_fwd = s->wire_scale_bwd = 1.0f;
        s->training = 1;
        s->T = cfg->num_tables;
        s->F = cfg->num_features;
        s->bounds = cfg->bounds;
        s->seed = cfg->seed;
        s->max_batch_size = cfg->max_batch_size;
        s->max_nnz = cfg->max_nnz;
        s->backend = cfg->backend;
        if (cfg->ssd_dir && !(s->ssd_dir = ember__strdup(ctx, cfg->ssd_dir)))
            st = ember__error(ctx, EMBER_ERR_NOMEM, "ember_sebc_create: out of memory");
        s->sequence = cfg->tables[0].pooling == EMBER_POOL_NONE;
        if (st == EMBER_OK && replica) st = ember__replica_init(s, &s->rsum);
        if (st == EMBER_OK) st = build(s, cfg, plan);
        if (st != EMBER_OK && ember_ctx_last_status(ctx) != st)
            ember__error(ctx, st, "ember_sebc_create: cannot build the local shards");
    }
    // Every rank learns whether any rank failed before anyone uses the object.
    ember_status all = ember_comm_agree(world, st);
    if (all != EMBER_OK) {
        if (s) s->replica = NULL; // the caller's still
        ember_sebc_destroy(s);
        return all;
    }
    *out = s;
    return EMBER_OK;
}

ember_status ember_sebc_create_2d(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                                  ember_grad_convention conv, int32_t group_size, ember_sebc **out) {
    if (!comm) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_sebc_create_2d";
    ember_ctx *ctx = comm->ctx;
    const int32_t W = comm->size;
    ember_status st = EMBER_OK;
    if (!out) st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: out is NULL", fn);
    else *out = NULL;
    if (st == EMBER_OK && (group_size < 1 || W % group_size != 0))
        st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: sharding group size %d does not divide the %d ranks", fn,
                          (int)group_size, (int)W);
    if (st == EMBER_OK && group_size < W) st = ember__ebc_check_config(ctx, fn, cfg);
    // Replicas stay equal by summing their row gradients; a hashed table's id map and a tiered
    // table's cache evolve with each group's own ids.
    for (int32_t t = 0; st == EMBER_OK && group_size < W && t < cfg->num_tables; t++) {
        const ember_table_config *c = &cfg->tables[t];
        if (ember_table_id_space(c) == EMBER_IDS_HASHED || c->cache_rows > 0)
            st = ember__error(ctx, EMBER_ERR_UNSUPPORTED,
                              "%s: table '%s': a %s table cannot be replicated over sharding groups (group size %d "
                              "of %d ranks): use one group",
                              fn, c->name, c->cache_rows > 0 ? "tiered" : "hashed", (int)group_size, (int)W);
    }
    if (st == EMBER_OK && group_size < W) st = check_plan(ctx, cfg, plan, conv, group_size);
    const ember_arg args[] = {EMBER__ARG("sharding group size", group_size)};
    EMBER_TRY(ember_comm_agree_args(comm, st, fn, args, 1));
    if (group_size == W) return ember_sebc_create(comm, cfg, plan, conv, out);
    // Every group must build the same collection: the groups' creations agree within each.
    ember__fields d = {ctx, {NULL, 0}, 0, EMBER_OK};
    describe(&d, cfg, plan, conv);
    st = ember__comm_agree_fields(comm, fn, &d);
    ember__fields_free(&d);
    if (st != EMBER_OK) return st;
    // Group g: ranks [g G, (g + 1) G) (a host's ranks when the launcher places them by host);
    // replicas: the ranks at the same place in every group.
    ember_comm *group = NULL, *replica = NULL;
    st = ember_comm_agree(comm, ember__comm_split(comm, comm->rank / group_size, comm->rank, &group));
    if (st == EMBER_OK)
        st = ember_comm_agree(comm, ember__comm_split(comm, comm->rank % group_size, comm->rank, &replica));
    if (st == EMBER_OK) st = create_on(group, comm, replica, cfg, plan, conv, out);
    if (st != EMBER_OK) {
        ember_comm_destroy(replica);
        ember_comm_destroy(group);
        return st;
    }
    return EMBER_OK;
}

int ember__piece(const ember_sebc *s, int32_t t, int32_t i, ember_ebc **ebc, int32_t *local_table) {
    const ember__table_shards *ts = &s->ts[t];
    if (ts->ops->build_home) // kept at home: the scheme knows where
        return i == 0 && ts->ops->home_piece(s, s->home[ts->scheme], t, ebc, local_table);
    for (int32_t k = 0; k < ts->nshards; k++) {
        if (ts->shards[k].owner != s->rank || i-- > 0) continue;
        *ebc = s->local;
        *local_table = ts->shards[k].local_table;
        return 1;
    }
    return 0;
}

int32_t ember__local_collections(const ember_sebc *s, ember_ebc **out) {
    int32_t n = 0;
    if (s->local) out[n++] = s->local;
    for (int32_t k = 0; k < EMBER_SHARD_COUNT; k++)
        if (s->home[k]) out[n++] = ember__schemes[k]->home_ebc(s->home[k]);
    return n;
}

int32_t ember_sebc_output_dim(const ember_sebc *s) { return s ? s->out_dim : 0; }

int64_t ember_sebc_output_size(const ember_sebc *s, const ember_kjt *kjt) {
    if (!s || !kjt) return 0;
    if (ember__kjt_is_vbe(kjt) && !s->sequence) return ember__vbe_output_size(kjt, s->feature_col, s->out_dim);
    return s->sequence ? kjt->nnz * s->out_dim : (int64_t)kjt->batch_size * s->out_dim;
}
ember_comm *ember_sebc_comm(const ember_sebc *s) { return s ? s->world : NULL; }
ember_comm *ember__sebc_shard_comm(const ember_sebc *s) { return s ? s->comm : NULL; }
int32_t ember_sebc_group_size(const ember_sebc *s) { return s ? s->W : 0; }
int32_t ember_sebc_num_groups(const ember_sebc *s) { return s ? s->nrep : 0; }
int32_t ember_sebc_num_tables(const ember_sebc *s) { return s ? s->T : 0; }
const ember_table_config *ember_sebc_table(const ember_sebc *s, int32_t t) {
    return s && t >= 0 && t < s->T ? &s->tables[t] : NULL;
}

ember_status ember_sebc_step(ember_sebc *s, int32_t t, int64_t *step) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    ember_status st = EMBER_OK;
    if (t < 0 || t >= s->T)
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "ember_sebc_step: table %d outside [0, %d)", (int)t, (int)s->T);
    else if (!step)
        st = ember__error(s->ctx, EMBER_ERR_INVALID_ARG, "ember_sebc_step: step is NULL");
    const ember_arg args[] = {EMBER__ARG("table", t)};
    // 2D: within each group (checkpoints call it in group 0 alone); the groups' counters are equal.
    EMBER_TRY(ember_comm_agree_args(s->comm, st, "ember_sebc_step", args, 1));
    int64_t v = -1;
    ember_ebc *e;
    int32_t lt;
    for (int32_t i = 0; ember__piece(s, t, i, &e, &lt); i++) v = ember_ebc_step(e, lt);
    EMBER_TRY(ember__comm_allreduce_max_i64(s->comm, &v, 1));
    *step = v < 0 ? 0 : v;
    return EMBER_OK;
}

ember_status ember_sebc_tier_stats(const ember_sebc *s, int32_t t, ember_tier_stats *out) {
    if (!s || !out) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(s->ctx, t >= 0 && t < s->T, EMBER_ERR_INVALID_ARG, "ember_sebc_tier_stats: table %d outside [0, %d)",
                (int)t, (int)s->T);
    EMBER_CHECK(s->ctx, s->tables[t].cache_rows > 0, EMBER_ERR_INVALID_ARG,
                "ember_sebc_tier_stats: table '%s' is not tiered", s->table_names[t]);
    memset(out, 0, sizeof *out);
    ember_ebc *e;
    int32_t lt;
    for (int32_t i = 0; ember__piece(s, t, i, &e, &lt); i++) {
        ember_tier_stats x;
        EMBER_TRY(ember_ebc_tier_stats(e, lt, &x));
        out->hits += x.hits, out->misses += x.misses, out->evictions += x.evictions;
        out->rows_read += x.rows_read, out->rows_written += x.rows_written;
        out->bytes_read += x.bytes_read, out->bytes_written += x.bytes_written, out->prefetched += x.prefetched;
    }
    return EMBER_OK;
}

ember_status ember_sebc_set_step(ember_sebc *s, int32_t t, int64_t step) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(s->ctx, t >= 0 && t < s->T, EMBER_ERR_INVALID_ARG, "ember_sebc_set_step: table %d outside [0, %d)",
                (int)t, (int)s->T);
    EMBER_CHECK(s->ctx, step >= 0, EMBER_ERR_INVALID_ARG, "ember_sebc_set_step: table '%s': step %lld < 0",
                s->tables[t].name, (long long)step);
    ember_ebc *e;
    int32_t lt;
    for (int32_t i = 0; ember__piece(s, t, i, &e, &lt); i++) ember_ebc_set_step(e, lt, step);
    return EMBER_OK;
}
ember_grad_convention ember_sebc_grad_convention(const ember_sebc *s) { return s ? s->conv : EMBER_GRAD_MEAN; }
uint64_t ember_sebc_bytes_sent_last_step(const ember_sebc *s) { return s ? s->bytes_last_step : 0; }

ember_status ember_sebc_set_lr(ember_sebc *s, int32_t table, float lr) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(s->ctx, table >= -1 && table < s->T, EMBER_ERR_INVALID_ARG,
                "ember_sebc_set_lr: table %d outside [0, %d)", (int)table, (int)s->T);
    EMBER_CHECK(s->ctx, lr >= 0 && lr == lr, EMBER_ERR_INVALID_ARG, "ember_sebc_set_lr: learning rate %g", (double)lr);
    for (int32_t t = 0; t < s->T; t++) {
        if (table != -1 && t != table) continue;
        s->tables[t].optim.lr = lr;
        ember_ebc *e;
        int32_t lt;
        for (int32_t i = 0; ember__piece(s, t, i, &e, &lt); i++) EMBER_TRY(ember_ebc_set_lr(e, lt, lr));
    }
    return EMBER_OK;
}

ember_status ember_sebc_set_training(ember_sebc *s, int training) {
    if (!s) return EMBER_ERR_INVALID_ARG;
    s->training = training != 0;
    ember_ebc *local[1 + EMBER_SHARD_COUNT];
    const int32_t n = ember__local_collections(s, local);
    for (int32_t i = 0; i < n; i++) ember_ebc_set_training(local[i], training);
    return EMBER_OK;
}
