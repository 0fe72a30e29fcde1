// Internal KJT helpers for the layers above kjt.
#ifndef EMBER_KJT_INTERNAL_H
#define EMBER_KJT_INTERNAL_H

#include <stdio.h>

#include "core/internal.h"
#include "ember/kjt.h"

// Validation with the caller's name and feature names (NULL: numbers) in messages.
ember_status ember__kjt_validate(ember_ctx *ctx, const char *caller, const ember_kjt *kjt, int32_t expected_features,
                                 const int64_t *rows_per_feature, const char *const *feature_names,
                                 ember_bounds_mode mode, int64_t *num_out_of_range);
// Writes the exclusive prefix sum [F*B+1] of a validated KJT.
void ember__kjt_offsets(const ember_kjt *kjt, int64_t *offsets);

#endif
