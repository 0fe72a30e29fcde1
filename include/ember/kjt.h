// ember/kjt.h — keyed jagged tensors: the sparse input of one rank's batch (docs/semantics.md §1).
//
// A KJT is a borrowed view; ember never frees or modifies the arrays it points to.
//   F features, local batch size B, bags in feature-major order: bag (f, b) is number f*B + b.
//   lengths  int32 [F*B]   ids per bag (or NULL when offsets is given)
//   offsets  int64 [F*B+1] exclusive prefix sum of lengths, offsets[0] = 0 (or NULL)
//   values   int64 [nnz]   row ids of the feature's table, bag after bag
//   weights  float [nnz]   per-id weights, or NULL (every weight is 1)
// Exactly one of lengths/offsets may be NULL; when both are given they must agree.
//
// Variable batch size per feature (VBE; TorchRec's stride_per_key and inverse_indices): when
// feature_batch_sizes is given, feature f has its own number of bags B_f, still feature-major
// (feature f's bags are numbers S_f .. S_f + B_f - 1, S_f = B_0 + ... + B_{f-1}), and lengths
// [sum B_f], offsets [sum B_f + 1]. A batch that repeats a bag across samples (a user's features
// across the candidates of one request) then carries it once:
//   inverse_indices  int32 [F*B]  sample b of feature f reads bag inverse_indices[f*B + b] of f,
//                                 in [0, B_f), each bag read by some sample (an unread bag
//                                 would still touch its rows); the batch has B = batch_size
//                                 samples. Outputs are those of the expanded KJT (every
//                                 sample's bag written out): [B, sum_f D_f], and its gradients
//                                 are taken in that layout.
//   NULL                          no samples: the output holds each feature's own bags, feature
//                                 f's block [B_f, D_f] row-major after the blocks of features
//                                 0..f-1 (sum_f B_f D_f floats; batch_size is not read).
// Pooled collections only (a sequence collection refuses a VBE KJT: EMBER_ERR_UNSUPPORTED).
// Both fields NULL (as a KJT initialised with named fields leaves them): every feature has B bags.
#ifndef EMBER_KJT_H
#define EMBER_KJT_H

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_kjt {
    int32_t num_features;   // F
    int32_t batch_size;     // B (may be 0)
    const int32_t *lengths; // [F*B] or NULL
    const int64_t *offsets; // [F*B+1] or NULL
    const int64_t *values;  // [nnz]
    const float *weights;   // [nnz] or NULL
    int64_t nnz;
    const int32_t *feature_batch_sizes; // [F] B_f, or NULL (every feature has batch_size bags)
    const int32_t *inverse_indices;     // [F*B] or NULL; only with feature_batch_sizes
} ember_kjt;

// What to do with an id outside [0, rows) (FBGEMM's bounds-check modes).
typedef enum ember_bounds_mode {
    EMBER_BOUNDS_ERROR = 0, // the call fails with EMBER_ERR_OUT_OF_RANGE, nothing changes
    EMBER_BOUNDS_CLAMP = 1, // the id is clamped into [0, rows-1]; a warning is logged once per call
    EMBER_BOUNDS_SKIP = 2,  // the id is dropped: it contributes nothing and does not count in MEAN
} ember_bounds_mode;
#define EMBER_BOUNDS_COUNT 3
// "error", "clamp", "skip" ("unknown" outside the enum); parse: EMBER_OK and *out set, or
// EMBER_ERR_INVALID_ARG (*out unchanged). Local.
EMBER_API const char *ember_bounds_mode_name(ember_bounds_mode m);
EMBER_API ember_status ember_bounds_mode_parse(const char *name, ember_bounds_mode *out);

// Validates `kjt` against an expected feature count and, when rows_per_feature is not NULL, each
// feature's table size under `mode` (ERROR fails on the first bad id; CLAMP/SKIP accept it and
// report how many ids were out of range in *num_out_of_range when that is not NULL). A negative
// size accepts every id (a hashed table's ids are arbitrary 64-bit keys).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL arrays, F mismatch, negative B or length,
// offsets not starting at 0 or decreasing, sum(lengths) != nnz, lengths and offsets disagreeing;
// VBE: a negative B_f, inverse indices without feature_batch_sizes or outside [0, B_f), a bag
// no sample reads), EMBER_ERR_NOMEM (VBE: its workspace), EMBER_ERR_OUT_OF_RANGE (mode ERROR:
// id < 0 or >= rows). The message names feature, bag and value.
EMBER_API ember_status ember_kjt_validate(ember_ctx *ctx, const ember_kjt *kjt, int32_t expected_features,
                                          const int64_t *rows_per_feature, ember_bounds_mode mode,
                                          int64_t *num_out_of_range);

// Start of bag `bag` (= f*B + b; VBE: S_f + b) in values, whichever of lengths/offsets the KJT carries.
// Only for validated KJTs; O(1) with offsets, O(bag) with lengths (the layers build offsets once).
EMBER_API int64_t ember_kjt_bag_start(const ember_kjt *kjt, int64_t bag);

#ifdef __cplusplus
}
#endif
#endif
