// Data sources (source.h): a rank's share of each global batch, agreed across the ranks.
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "appctx.h"
#include "source.h"


ember_status source_rewind(source *s) { return source_seek(s, 0); }

ember_status source_seek(source *s, int64_t batch) {
    // The loader stops (after the batch it is producing), drops what it made ahead, and goes on
    // from the new position: the producer's state is this thread's meanwhile.
    if (s->loader) loader_pause(s->loader);
    s->next = s->cursor = batch;
    ember_status st = EMBER_OK;
    if (s->reader) st = criteo_seek(s->reader, batch);
    if (s->npy) criteo_npy_seek(s->npy, batch);
    if (s->loader) {
        if (st != EMBER_OK) st = loader_forward_error(s->owner, s->loader, st); // the reader's context is the loader's
        loader_resume(s->loader);
    }
    return st;
}

// This rank's share of global batch s->cursor, its dense features checked (ctx: the producing
// thread's context); *eof when the pass is over. Runs on the loader thread when s has one, which
// reads only what does not change while it runs (the data, the limit, the shape) and the cursor,
// its own. Local.
static ember_status produce(source *s, ember_ctx *ctx, dlrm_batch *b, bool *eof) {
    b->size = 0;
    *eof = s->limit > 0 && s->cursor >= s->limit;
    if (*eof) return EMBER_OK;
    if (s->reader) {
        APP_TRY(criteo_next(s->reader, b, eof));
    } else if (s->npy) {
        APP_TRY(criteo_npy_next(ctx, s->npy, b, eof));
    } else if (s->pool) {
        dlrm_batch_copy(b, &s->pool[s->cursor % s->pool_size]);
    } else {
        int64_t first, n = dlrm_share(s->global_batch, s->rank, s->world, &first);
        synth_fill(s->syn, s->split, s->cursor * s->global_batch + first, (int32_t)n, b);
    }
    if (!*eof) s->cursor++;
    return source_check_dense(ctx, s, b);
}

ember_status source_generate(ember_ctx *ctx, source *s, int64_t n, int32_t capacity) {
    APP_ASSERT(s->syn && !s->pool && n >= 1);
    dlrm_batch *pool = app_alloc(ctx, sizeof *pool * (size_t)n, "generated batches");
    if (!pool) return EMBER_ERR_NOMEM;
    memset(pool, 0, sizeof *pool * (size_t)n);
    s->pool = pool;
    s->pool_size = n;
    int64_t first, share = dlrm_share(s->global_batch, s->rank, s->world, &first);
    for (int64_t k = 0; k < n; k++) {
        if (dlrm_batch_create(ctx, capacity, DLRM_NUM_DENSE, DLRM_NUM_SPARSE, &pool[k]) != EMBER_OK) {
            source_free_pool(ctx, s);
            return EMBER_ERR_NOMEM;
        }
        synth_fill(s->syn, s->split, k * s->global_batch + first, (int32_t)share, &pool[k]);
    }
    return EMBER_OK;
}

void source_free_pool(ember_ctx *ctx, source *s) {
    for (int64_t k = 0; s->pool && k < s->pool_size; k++) dlrm_batch_destroy(ctx, &s->pool[k]);
    ember_ctx_free(ctx, s->pool);
    s->pool = NULL;
    s->pool_size = 0;
}

static ember_status produce_on_loader(void *arg, ember_ctx *ctx, dlrm_batch *b, bool *eof) {
    return produce(arg, ctx, b, eof);
}

ember_status source_start_loader(ember_ctx *ctx, source *s, int32_t depth, const char *cpus, const dlrm_batch *b) {
    APP_ASSERT(!s->loader);
    if (depth <= 0) return EMBER_OK;
    const loader_config cfg = {.depth = depth,
                               .capacity = b->capacity,
                               .num_dense = b->num_dense,
                               .num_sparse = b->num_sparse,
                               .bag_width = b->bag_width,
                               .cpus = cpus,
                               .produce = produce_on_loader,
                               .arg = s};
    APP_TRY(loader_create(ctx, &cfg, &s->loader));
    s->owner = ctx;
    // The reader allocates and records its errors on the thread that reads it.
    if (s->reader) criteo_set_ctx(s->reader, loader_ctx(s->loader));
    return EMBER_OK;
}

void source_stop_loader(ember_ctx *ctx, source *s) {
    if (!s->loader) return;
    loader_pause(s->loader); // the reader is this thread's again
    if (s->reader) criteo_set_ctx(s->reader, ctx);
    loader_destroy(ctx, s->loader);
    s->loader = NULL;
    s->owner = NULL;
}

ember_status source_check_dense(ember_ctx *ctx, const source *s, const dlrm_batch *b) {
    int32_t j;
    const int32_t i = dlrm_batch_first_nonfinite(b, &j);
    if (i == b->size) return EMBER_OK;
    char where[320];
    if (s->reader) {
        snprintf(where, sizeof where, "line %lld of '%s'", (long long)b->origin[i], criteo_path(s->reader));
    } else if (s->npy) {
        criteo_npy_where(s->npy, b->origin[i], where, sizeof where);
    } else {
        snprintf(where, sizeof where, "synthetic %s sample %lld", s->split ? "eval" : "train", (long long)b->origin[i]);
    }
    return ember_ctx_set_error(ctx, EMBER_ERR_NUMERIC, "dense feature %d (int_%d) of %s is %g: not a finite number",
                               (int)j, (int)j, where, (double)b->dense[(size_t)i * (size_t)b->num_dense + (size_t)j]);
}

ember_status source_fetch(ember_comm *comm, source *s, dlrm_batch *b, int64_t *sizes, fetched *what,
                          int64_t *global) {
    ember_ctx *ctx = ember_comm_ctx(comm);
    bool eof = false;
    ember_status st;
    double waited = 0.0;
    if (s->loader) {
        st = loader_take(ctx, s->loader, b, &eof, &waited);
    } else {
        const double t0 = app_now_s();
        st = produce(s, ctx, b, &eof);
        waited = app_now_s() - t0;
    }
    s->waited_s += waited;
    if (st == EMBER_OK && !eof) s->next++;
    APP_TRY(ember_comm_agree(comm, st));
    APP_TRY(ember_comm_allgather_i64(comm, eof ? -1 : b->size, sizes));
    bool all_eof = true;
    *global = 0;
    for (int32_t r = 0; r < ember_comm_size(comm); r++) {
        if (sizes[r] >= 0) all_eof = false;
        if (sizes[r] > 0) *global += sizes[r];
    }
    *what = all_eof ? FETCH_END : *global == 0 ? FETCH_SKIP : FETCH_OK;
    return EMBER_OK;
}

ember_status source_gather_stats(ember_comm *comm, const source *s, criteo_stats *all) {
    if (!s->reader) return EMBER_OK;
    APP_ASSERT(!s->loader); // the stats would be the loader thread's, and ahead of the caller
    ember_ctx *ctx = ember_comm_ctx(comm);
    const int32_t W = ember_comm_size(comm);
    int64_t *counts = app_alloc(ctx, sizeof(int64_t) * (size_t)W, "malformed line statistics");
    ember_status st = ember_comm_agree(comm, counts ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st == EMBER_OK) {
        for (int32_t r = 0; r < W; r++) counts[r] = 1;
        st = ember_comm_allgatherv(comm, criteo_get_stats(s->reader), 1, all, counts, sizeof(criteo_stats));
    }
    ember_ctx_free(ctx, counts);
    return st;
}

ember_status source_scan_data(ember_comm *comm, source *s, dlrm_batch *b, int64_t *sizes, source_scan *scan) {
    memset(scan, 0, sizeof *scan);
    scan->usable = true;
    if (!s->reader) return EMBER_OK;
    APP_ASSERT(!s->loader); // a loader reads ahead: lines the caller would not have read
    ember_ctx *ctx = ember_comm_ctx(comm);
    APP_TRY(ember_comm_agree(comm, source_rewind(s)));
    fetched what;
    int64_t global = 0;
    do {
        APP_TRY(source_fetch(comm, s, b, sizes, &what, &global));
    } while (what == FETCH_SKIP);
    if (what == FETCH_OK) return EMBER_OK;
    // Not one usable line: the pass has read the whole window. What did it hold?
    scan->usable = false;
    const int32_t W = ember_comm_size(comm);
    criteo_stats *all = app_alloc(ctx, sizeof(criteo_stats) * (size_t)W, "malformed line statistics");
    APP_TRY(ember_comm_agree(comm, all ? EMBER_OK : EMBER_ERR_NOMEM));
    ember_status st = source_gather_stats(comm, s, all);
    int32_t first = -1;
    for (int32_t r = 0; r < W && st == EMBER_OK; r++) {
        if (all[r].lines_read > scan->lines_read) scan->lines_read = all[r].lines_read;
        scan->malformed += all[r].malformed;
        if (all[r].num_lines > 0 && (first < 0 || all[r].lines[0] < all[first].lines[0])) first = r;
    }
    if (st == EMBER_OK && first >= 0) {
        scan->first_bad = all[first].lines[0];
        snprintf(scan->reason, sizeof scan->reason, "%s", all[first].first_reason);
    }
    ember_ctx_free(ctx, all);
    return st;
}

ember_status source_unusable(ember_ctx *ctx, const source_desc *d, const source_scan *scan) {
    const int64_t read = scan->lines_read, in_window = read > d->first_line ? read - d->first_line : 0;
    const char *use = d->use ? d->use : "", *sep = d->use ? " " : "";
    if (read == 0) {
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s '%s': no %s%sdata: the file is empty", d->flag, d->path,
                                   use, sep);
    }
    if (in_window == 0 || scan->first_bad == 0) {
        return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT, "%s '%s': no %s%sdata: its %lld line%s %s", d->flag, d->path,
                                   use, sep, (long long)read, read > 1 ? "s" : "",
                                   d->empty_window ? d->empty_window : "hold no sample");
    }
    return ember_ctx_set_error(ctx, EMBER_ERR_FORMAT,
                               "%s '%s': no usable %s%sdata: 0 usable lines of %lld (%s%s%lld malformed: first at "
                               "line %lld: %s)",
                               d->flag, d->path, use, sep, (long long)in_window, d->window ? d->window : "",
                               d->window ? "; " : "", (long long)scan->malformed, (long long)scan->first_bad,
                               scan->reason);
}
