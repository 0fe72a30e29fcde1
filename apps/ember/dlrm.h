// dlrm.h — the DLRM model (Naumov et al., 2019; TorchRec's torchrec.models.dlrm.DLRM):
//
//   dense [B, Dn] -> bottom MLP (ReLU after every layer)            -> d [B, D]
//   ids (one per sample and feature, or a bag of k_f: multihot.h) -> sharded EmbeddingBagCollection,
//                                                        SUM pooling -> e [B, F*D]
//   [d, e] -> the interaction                                         -> [B, I]
//          -> top MLP (ReLU after every layer but the last)          -> logit [B]
//   loss: BCE with logits.
//
// The interaction is DLRM's pairwise dot products (interaction.h, I = D + (F+1)F/2; TorchRec's
// DLRM) or DCN-v2's low-rank cross network over the concatenation [d, e] (cross.h, I = (F+1) D;
// TorchRec's DLRM_DCN, the model of MLPerf's recommendation benchmark).
//
// Dense parameters (bottom MLP, cross net, top MLP, in this order) live in one slab, their gradients in a second slab of the same
// layout, so one allreduce per step combines every dense gradient; initial values depend only on
// the seed (the same on every rank). Every buffer the step uses is allocated at creation for
// `max_batch` local samples: a training step allocates only the dense products' packing
// buffers (ember_gemm's, through the context), so it may return EMBER_ERR_NOMEM.
#ifndef EMBER_APP_DLRM_H
#define EMBER_APP_DLRM_H

#include <stdint.h>

#include "backend.h"
#include "batch.h"
#include "dense_optim.h"
#include "mlp.h"
#include "multihot.h"

typedef enum dlrm_interaction {
    DLRM_INTERACTION_DOT = 0, // pairwise dot products (DLRM)
    DLRM_INTERACTION_DCN = 1, // low-rank cross network (DLRM-DCNv2)
} dlrm_interaction;

typedef struct dlrm_config {
    int32_t num_dense;           // Dn
    int32_t num_sparse;          // F: one table per feature, each `embedding_dim` wide
    int32_t embedding_dim;       // D
    const int32_t *bottom_sizes; // layer sizes of the bottom MLP; the last must be D
    int32_t num_bottom;
    const int32_t *top_sizes;    // layer sizes of the top MLP; the last must be 1
    int32_t num_top;
    dlrm_interaction interaction;
    int32_t dcn_num_layers;      // DCN: cross layers (>= 1)
    int32_t dcn_low_rank_dim;    // DCN: the rank r of every layer (>= 1)
    const int32_t *hot_sizes;    // [F] ids per bag of each feature (multihot.h), or NULL: one each
    const int64_t *rows;         // [F] rows of each table (where an id of hot_sizes > 1 is materialised)
    multihot_dist hot_dist;      // how the extra ids are drawn
    uint32_t dedup;              // bit f: feature f's equal bags in a batch are looked up once
                                 // (its KJT then has a batch size per feature: include/ember/kjt.h)
    int32_t max_batch;           // largest local batch
    uint64_t seed;
    dense_optim_config optim;
} dlrm_config;

typedef struct dlrm_model dlrm_model;

// Checks the shapes; the message names the flag (--dense_arch_layer_sizes, --dcn_low_rank_dim ...). Local.
ember_status dlrm_validate(ember_ctx *ctx, const dlrm_config *cfg);

// The interaction's output width I (the top MLP's input): D + (F+1)F/2 (dot) or (F+1) D (DCN).
int64_t dlrm_interaction_width(const dlrm_config *cfg);

// Validates (dlrm_validate), lays out the slab and initialises it from the seed. `backend` is borrowed (its output must be F*D wide).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_NOMEM.
ember_status dlrm_create(ember_ctx *ctx, const dlrm_config *cfg, dlrm_backend *backend, dlrm_model **out);
void dlrm_destroy(dlrm_model *m);

// Forward of a local batch: *logits [B] stays valid until the next call. Collective (the
// embedding lookup), so every rank calls it, each with its own batch.
ember_status dlrm_forward(dlrm_model *m, const dlrm_batch *b, const float **logits);
// The deduplicated features' bags (dlrm_config.dedup) over every forward so far: one per sample
// (*bags_all) and the distinct ones looked up (*bags_kept). Local.
void dlrm_dedup_counts(const dlrm_model *m, int64_t *bags_all, int64_t *bags_kept);

// One training step on the local batch: forward, BCE, backward, dense gradient allreduce and
// optimizer step, embedding backward with its fused optimizer. `loss_scale` multiplies dl_i/dz_i,
// i.e. the local loss is L_r = loss_scale * sum_i l_i (1/B for the local mean). *loss_sum gets
// the unscaled sum_i l_i of this rank. Collective.
ember_status dlrm_train_step(dlrm_model *m, const dlrm_batch *b, float loss_scale, double *loss_sum);
// The same step overlapped with communication, when the backend offers it (else the plain step):
// `next` (NULL: none) is the batch the next step will train on, whose input dist the embedding
// backend starts after this step's forward (prefetch); the embedding backward is started once its
// gradient is known and finished after the dense backward, optimizer step included. The results
// are bitwise those of dlrm_train_step. Collective (next NULL or not on every rank alike).
ember_status dlrm_train_step_overlap(dlrm_model *m, const dlrm_batch *b, const dlrm_batch *next, float loss_scale,
                                     double *loss_sum);

// The dense parameter slab and its gradient slab [dlrm_num_dense_params].
int64_t dlrm_num_dense_params(const dlrm_model *m);
float *dlrm_dense_params(dlrm_model *m);
const float *dlrm_dense_grads(const dlrm_model *m);
// The dense optimizer: its state (m1, m2) and step counter, which checkpoints save and restore.
dense_optim *dlrm_dense_optim(dlrm_model *m);

#endif
