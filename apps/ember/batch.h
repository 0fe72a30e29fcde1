// batch.h — one rank's share of a global batch of click samples, as the data sets produce it.
//
// Samples are stored row by row (the order readers produce them); the model builds the
// feature-major KJT from `ids` itself. Every buffer is sized once for `capacity` samples.
#ifndef EMBER_APP_BATCH_H
#define EMBER_APP_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/core.h"

// The Criteo schema: 13 integer ("dense") features and 26 categorical ("sparse") features.
#define DLRM_NUM_DENSE 13
#define DLRM_NUM_SPARSE 26

typedef struct dlrm_batch {
    int32_t size;       // B: samples in this rank's share (0..capacity)
    int32_t capacity;
    int32_t num_dense;  // Dn
    int32_t num_sparse; // F
    float *dense;       // [capacity, Dn] transformed dense features
    int64_t *ids;       // [capacity, F] row id of each sample's feature f in table f
    float *labels;      // [capacity] 0 or 1
    float *planted;     // [capacity] planted model's logit (synthetic data; NaN when unknown)
    int64_t *origin;    // [capacity] where sample i came from, for messages: its 1-based line in
                        // the Criteo file, or its index in the synthetic split
    // Multi-hot bags read from the data (MLPerf's day_{d}_sparse_multi_hot.npz): sample i's ids
    // at bags[i * bag_width, ...): feature 0's k_0 ids, then feature 1's k_1, ... (row ids). The
    // source sets has_bags each time it fills the batch; without them the model draws the bags
    // from ids (multihot.h).
    int32_t bag_width;  // ids per sample the buffer holds (0: no buffer)
    bool has_bags;
    int64_t *bags;      // [capacity, bag_width]
} dlrm_batch;

// Allocates the buffers through ctx. On failure every pointer is NULL and nothing leaks.
ember_status dlrm_batch_create(ember_ctx *ctx, int32_t capacity, int32_t num_dense, int32_t num_sparse,
                               dlrm_batch *b);
void dlrm_batch_destroy(ember_ctx *ctx, dlrm_batch *b);
// Copies src's samples (dense, ids, labels, planted values, origins; not bags: has_bags false) into
// dst, whose capacity and shape must hold them. Local.
void dlrm_batch_copy(dlrm_batch *dst, const dlrm_batch *src);
// Gives b a bags buffer of `width` ids per sample (width >= 1). Returns EMBER_OK or EMBER_ERR_NOMEM
// (b unchanged).
ember_status dlrm_batch_reserve_bags(ember_ctx *ctx, dlrm_batch *b, int32_t width);

// The first sample of b (in order) with a dense feature that is NaN or infinite, its feature in
// *feature; b->size when every dense feature is finite. Local.
int32_t dlrm_batch_first_nonfinite(const dlrm_batch *b, int32_t *feature);

// Contiguous share of rank r among W ranks of a global batch of g samples: the first g % W ranks
// get one sample more (the row-wise split of include/ember/shard.h). Returns the share's size and
// its first sample in *first.
int64_t dlrm_share(int64_t g, int32_t rank, int32_t world, int64_t *first);

#endif
