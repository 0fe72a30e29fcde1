// Data sources (source.h): a rank's share of each global batch, agreed across the ranks.
#include <stdbool.h>

#include "appctx.h"
#include "source.h"

ember_status source_rewind(source *s) {
    s->next = 0;
    return s->reader ? criteo_rewind(s->reader) : EMBER_OK;
}

ember_status source_seek(source *s, int64_t batch) {
    s->next = batch;
    return s->reader ? criteo_seek(s->reader, batch) : EMBER_OK;
}

// This rank's share of the next global batch; *eof when the pass is over. Local.
static ember_status source_next(source *s, dlrm_batch *b, bool *eof) {
    b->size = 0;
    *eof = s->limit > 0 && s->next >= s->limit;
    if (*eof) return EMBER_OK;
    if (s->reader) {
        APP_TRY(criteo_next(s->reader, b, eof));
    } else {
        int64_t first, n = dlrm_share(s->global_batch, s->rank, s->world, &first);
        synth_fill(s->syn, s->split, s->next * s->global_batch + first, (int32_t)n, b);
    }
    if (!*eof) s->next++;
    return EMBER_OK;
}

ember_status source_fetch(ember_comm *comm, source *s, dlrm_batch *b, int64_t *sizes, fetched *what,
                          int64_t *global) {
    bool eof = false;
    ember_status st = source_next(s, b, &eof);
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
