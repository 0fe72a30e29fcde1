// Internal KJT helpers for the layers above kjt.
#ifndef EMBER_KJT_INTERNAL_H
#define EMBER_KJT_INTERNAL_H

#include <stdio.h>

#include "core/internal.h"
#include "ember/kjt.h"
#include "ember/rng.h" // EMBER_HD: the bounds resolver runs in the cuda backend's kernels too

// "feature 'name'" (or "feature 3" when names or names[f] is NULL) into buf[n], for messages.
const char *ember__feature_name(const char *const *names, int32_t f, char *buf, size_t n);
// Validation with the caller's name and feature names (NULL: numbers) in messages.
ember_status ember__kjt_validate(ember_ctx *ctx, const char *caller, const ember_kjt *kjt, int32_t expected_features,
                                 const int64_t *rows_per_feature, const char *const *feature_names,
                                 ember_bounds_mode mode, int64_t *num_out_of_range);
// A 64-bit digest of a validated KJT's contents (shape, bag lengths whichever way they are given,
// ids, weights; a VBE KJT's batch sizes and inverse indices): equal KJTs have equal digests; the
// backward compares its KJT's with the forward's.
uint64_t ember__kjt_digest(const ember_kjt *kjt);
// Writes the exclusive prefix sum [F*B+1] of a validated KJT (not VBE: its padded KJT).
void ember__kjt_offsets(const ember_kjt *kjt, int64_t *offsets);

// Variable batch size per feature (kjt.h; vbe.c). A VBE KJT is one with feature_batch_sizes.
static inline int ember__kjt_is_vbe(const ember_kjt *kjt) { return kjt && kjt->feature_batch_sizes; }
// Checks what is VBE's own in kjt (feature count, B_f, inverse indices, lengths against offsets)
// and writes its padded KJT to *out: max_f B_f bags per feature, feature f's bags first, then
// empty ones; lengths in `lengths`, values and weights the caller's (their order is unchanged).
// The rest (sum of lengths, ids, weights) is the ordinary validator's, on *out: its bag numbers
// are the caller's within each feature. EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_NOMEM.
ember_status ember__vbe_pad(ember_ctx *ctx, const char *fn, const ember_kjt *kjt, int32_t expected_features,
                            const char *const *feature_names, ember__buf *lengths, ember_kjt *out);
// Floats of the caller's output (and gradient) of a valid VBE KJT, whose features' columns
// in an [.., out_dim] row start at fcol[f] (configuration order, contiguous).
int64_t ember__vbe_output_size(const ember_kjt *kjt, const int32_t *fcol, int32_t out_dim);
// The caller's output from the padded KJT's [max B_f, out_dim] rows. With inverse indices and
// max B_f <= B the padded rows may be computed in `out` itself (padded == out): then `scratch`
// holds ember__vbe_scratch floats (the largest [B_f, D_f] of a feature whose samples do not
// simply read their own bags), and only those features' columns move.
static inline int ember__vbe_in_place(const ember_kjt *kjt, int32_t padded_batch) {
    return kjt->inverse_indices && padded_batch <= kjt->batch_size;
}
int64_t ember__vbe_scratch(const ember_kjt *kjt, const int32_t *fcol, int32_t out_dim);
void ember__vbe_expand(ember_ctx *ctx, const ember_kjt *kjt, const int32_t *fcol, int32_t out_dim, const float *padded,
                       float *out, float *scratch);
// The padded KJT's gradient [padded_batch, out_dim] from the caller's: each bag's the sum of its
// samples' rows, in sample order.
void ember__vbe_reduce(ember_ctx *ctx, const ember_kjt *kjt, int32_t padded_batch, const int32_t *fcol, int32_t out_dim,
                       const float *grad, float *padded);
// EMBER_ERR_NUMERIC naming the first non-finite value of the caller's gradient, or EMBER_OK.
ember_status ember__vbe_check_grad(ember_ctx *ctx, const char *fn, const ember_kjt *kjt, const int32_t *fcol,
                                   int32_t out_dim, const char *const *feature_names, const float *grad);

// The one bounds-mode resolver: the row an id of a `rows`-row table reads, or -1 when the id is
// dropped (SKIP). In-range ids are themselves; CLAMP (and ERROR, whose ids were refused at
// validation) moves the others to row 0 or rows - 1.
static inline EMBER_HD int64_t ember__resolve_id(int64_t id, int64_t rows, ember_bounds_mode mode) {
    if (id >= 0 && id < rows) return id;
    if (mode == EMBER_BOUNDS_SKIP) return -1;
    return id < 0 ? 0 : rows - 1;
}

#endif
