// interaction.h — DLRM's pairwise dot interaction (TorchRec's InteractionArch) in the trainer:
// the buffers of ember_dot_interaction_forward/backward (ember/dense.h: the layout, the order of
// every sum, the bits) for batches up to max_batch, T kept from the forward for the backward.
#ifndef EMBER_APP_INTERACTION_H
#define EMBER_APP_INTERACTION_H

#include <stdint.h>

#include "ember/core.h"

typedef struct interaction {
    ember_ctx *ctx; // borrowed
    int32_t num_sparse, dim, max_batch;
    float *t;       // [max_batch, F+1, D] the last forward's T (the backward's other operand)
} interaction;

// D + (F+1)F/2.
int32_t interaction_out_dim(int32_t num_sparse, int32_t dim);

// Buffers for `max_batch` samples. On failure *ia is zeroed and nothing leaks. Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (a size below 1), EMBER_ERR_NOMEM.
ember_status interaction_create(ember_ctx *ctx, int32_t num_sparse, int32_t dim, int32_t max_batch,
                                interaction *ia);
void interaction_destroy(interaction *ia);

// dense [B, D], emb [B, F*D] (features in order, the collection's output layout)
// -> out [B, interaction_out_dim(F, D)]. B <= max_batch. Keeps T for the backward.
// Returns EMBER_OK or EMBER_ERR_NOMEM (the products' packing buffers).
ember_status interaction_forward(interaction *ia, int32_t batch, const float *dense, const float *emb, float *out);

// The backward of the preceding forward (same batch): dout [B, interaction_out_dim] ->
// ddense [B, D] (the dense slice of dout plus the products' part), demb [B, F*D] (overwritten).
// Returns as interaction_forward.
ember_status interaction_backward(interaction *ia, int32_t batch, const float *dout, float *ddense, float *demb);

#endif
