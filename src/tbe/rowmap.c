// The translation step of collections with mapped tables (rowmap.h), and the choice of a
// table's row map.
#include <string.h>

#include "tbe/rowmap.h"

const ember__rowmap_kind *ember__rowmap_kind_of(const ember_table_config *t) {
    // ember__ebc_check_config refuses a table that is both.
    return t->hash.enabled ? &ember__rowmap_hashed : t->cache_rows > 0 ? &ember__rowmap_tiered : NULL;
}

ember_status ember__ebc_admit(ember_ebc *ebc, const ember_kjt *kjt) {
    return ebc->mapped ? ember__ebc_map(ebc, kjt, kjt->offsets, EMBER__MAP_FORWARD) : EMBER_OK;
}

ember_status ember_ebc_set_training(ember_ebc *ebc, int training) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    ebc->training = training != 0;
    return EMBER_OK;
}

// Workspace slots of the translation (backward.c uses 0..7).
enum { WS_MAP_VALUES = 12, WS_MAP_IDS = 13 };

ember_status ember__ebc_map(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, enum ember__map_phase phase) {
    const size_t nnz = (size_t)kjt->nnz, n1 = nnz ? nnz : 1;
    int64_t *vals = ember__ws_get(ebc, WS_MAP_VALUES, sizeof(int64_t) * n1);
    int64_t *buf = ember__ws_get(ebc, WS_MAP_IDS, sizeof(int64_t) * 2 * n1);
    if (!vals || !buf) return EMBER_ERR_NOMEM;
    const int32_t B = kjt->batch_size;
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        if (!tb->map) {
            // Resolved by the collection's bounds mode (CLAMP: a row; SKIP: -1).
            for (int32_t f = 0; f < ebc->F; f++) {
                if (ebc->feature_table[f] != t) continue;
                for (int64_t j = off[(int64_t)f * B]; j < off[(int64_t)(f + 1) * B]; j++)
                    vals[j] = ember__resolve_id(kjt->values[j], tb->cfg.rows, ebc->bounds);
            }
            continue;
        }
        // The table's ids, its features in order (each a contiguous run of values).
        int64_t *ids = buf, *rows = buf + n1, n = 0;
        for (int32_t f = 0; f < ebc->F; f++) {
            if (ebc->feature_table[f] != t) continue;
            const int64_t j0 = off[(int64_t)f * B], j1 = off[(int64_t)(f + 1) * B];
            if (tb->ids == EMBER_IDS_HASHED) {
                if (j1 > j0) memcpy(ids + n, kjt->values + j0, sizeof(int64_t) * (size_t)(j1 - j0));
                n += j1 - j0;
            } else {
                for (int64_t j = j0; j < j1; j++)
                    ids[n++] = ember__resolve_id(kjt->values[j], tb->cfg.rows, ebc->bounds);
            }
        }
        EMBER_TRY(tb->map->ops->map(ebc, tb, ids, n, rows, phase));
        if (phase == EMBER__MAP_BACKWARD && ember__table_cached(tb)) // the rows its update changes, by id
            for (int64_t j = 0; j < n; j++)
                if (ids[j] >= 0) ember__dirty_mark(tb, ids[j]);
        n = 0;
        for (int32_t f = 0; f < ebc->F; f++) {
            if (ebc->feature_table[f] != t) continue;
            const int64_t j0 = off[(int64_t)f * B], j1 = off[(int64_t)(f + 1) * B];
            if (j1 > j0) memcpy(vals + j0, rows + n, sizeof(int64_t) * (size_t)(j1 - j0));
            n += j1 - j0;
        }
    }
    ebc->mkjt = (ember_kjt){.num_features = kjt->num_features, .batch_size = B, .offsets = off, .values = vals,
                            .weights = kjt->weights, .nnz = kjt->nnz};
    return EMBER_OK;
}
