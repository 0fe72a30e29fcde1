// Internal KJT helpers for the layers above kjt.
#ifndef EMBER_KJT_INTERNAL_H
#define EMBER_KJT_INTERNAL_H

#include <stdio.h>

#include "core/internal.h"
#include "ember/kjt.h"
#include "ember/rng.h" // EMBER_HD: the bounds resolver runs in the cuda backend's kernels too

// Validation with the caller's name and feature names (NULL: numbers) in messages.
ember_status ember__kjt_validate(ember_ctx *ctx, const char *caller, const ember_kjt *kjt, int32_t expected_features,
                                 const int64_t *rows_per_feature, const char *const *feature_names,
                                 ember_bounds_mode mode, int64_t *num_out_of_range);
// A 64-bit digest of a validated KJT's contents (shape, bag lengths whichever way they are given,
// ids, weights): equal KJTs have equal digests; the backward compares its KJT's with the
// forward's.
uint64_t ember__kjt_digest(const ember_kjt *kjt);
// Writes the exclusive prefix sum [F*B+1] of a validated KJT.
void ember__kjt_offsets(const ember_kjt *kjt, int64_t *offsets);

// The one bounds-mode resolver: the row an id of a `rows`-row table reads, or -1 when the id is
// dropped (SKIP). In-range ids are themselves; CLAMP (and ERROR, whose ids were refused at
// validation) moves the others to row 0 or rows - 1.
static inline EMBER_HD int64_t ember__resolve_id(int64_t id, int64_t rows, ember_bounds_mode mode) {
    if (id >= 0 && id < rows) return id;
    if (mode == EMBER_BOUNDS_SKIP) return -1;
    return id < 0 ? 0 : rows - 1;
}

#endif
