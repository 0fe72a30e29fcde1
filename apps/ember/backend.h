// backend.h — what the DLRM dense part needs from the library, behind one small table:
// the sharded EmbeddingBagCollection (forward, backward with its fused optimizer) and the
// allreduce of the dense gradients under the model's gradient convention (docs/semantics.md §3).
//
// The CLI uses dlrm_backend_sebc_create (include/ember/shard.h). Tests can pass another factory,
// e.g. the naive replicated collection in tests/support/dlrm/, to check the dense part and the
// training loop against an independent embedding implementation; the same tests then run
// unchanged on the sharded collection.
#ifndef EMBER_APP_BACKEND_H
#define EMBER_APP_BACKEND_H

#include <stddef.h>

#include "ember/shard.h"
#include "ember/state.h"

typedef struct dlrm_backend {
    void *impl;
    // out [B_local, sum_f D_f] = pooled embeddings of the local batch. Collective.
    ember_status (*forward)(void *impl, const ember_kjt *kjt, float *out);
    // grad_out [B_local, sum_f D_f] = dL_r/d(out); applies the fused optimizer. Collective.
    ember_status (*backward)(void *impl, const ember_kjt *kjt, const float *grad_out);
    // grad [n] := the convention's combination over ranks (sum, or sum / W). Collective.
    ember_status (*reduce_dense_grads)(void *impl, float *grad, size_t n);
    // dst [rows, cols] := table t's named tensor in dtype (F32, or I64 for a hashed table's
    // "ids"/"candidates"; ember_sebc_read_as), on rank 0 only. Collective. NULL when the backend
    // cannot (ember train --digest then leaves the tables out).
    ember_status (*read)(void *impl, int32_t table, const char *tensor, ember_dtype dtype, void *dst);
    // Checkpoints (include/ember/state.h): save writes every table, its optimizer state and step
    // counter, and opts' blobs, into checkpoint directory `dir`; load reads every table back
    // (any world size and plan). Collective. NULL when the backend cannot: ember train then
    // refuses --save_dir and --resume, and ember eval --load, with a message saying so.
    ember_status (*save)(void *impl, const char *dir, const ember_checkpoint_options *opts);
    ember_status (*load)(void *impl, const char *dir);
    // Wire precision of the pooled outputs and their gradients between ranks, and its loss scales
    // (ember_sebc_set_wire_precision, ember_sebc_set_wire_loss_scale). Collective. NULL when the
    // backend has none: ember train then refuses --wire_precision other than fp32.
    ember_status (*set_wire)(void *impl, ember_dtype forward, ember_dtype backward, float forward_scale,
                             float backward_scale);
    // Training (1) or evaluation (0): an evaluation forward changes no table (a hashed table
    // admits no id). Local, the same on every rank. NULL when the backend's forwards never change
    // a table.
    ember_status (*set_training)(void *impl, int training);
    void (*destroy)(void *impl); // collective; impl NULL accepted
    // Overlap (ember train --overlap on; NULL when the backend cannot, then the step is plain):
    // prefetch starts the next batch's input dist after the current forward; backward_start /
    // backward_finish split backward around the dense backward; progress lets the exchanges in
    // flight advance between dense layers (Local). The results are bitwise the plain step's.
    ember_status (*prefetch)(void *impl, const ember_kjt *next_kjt);
    ember_status (*backward_start)(void *impl, const ember_kjt *kjt, const float *grad_out);
    ember_status (*backward_finish)(void *impl);
    void (*progress)(void *impl);
    // Cache counters of tiered table t on this rank's pieces (ember_sebc_tier_stats). Local. NULL
    // when the backend has no tiered tables' counters: ember train then prints none.
    ember_status (*tier_stats)(void *impl, int32_t table, ember_tier_stats *out);
    // Rebalancing (ember train --rebalance_every; NULL when the backend cannot): busy_seconds is
    // this rank's time inside the embedding calls (forward, backward and their halves, prefetch)
    // less the time they waited for other ranks, since the last call that reset it (Local);
    // reshard moves every table to `plan` while the run goes on (ember_sebc_reshard: the next
    // step is bitwise that of a collection created with plan and loaded from this one). Collective.
    double (*busy_seconds)(void *impl, int reset);
    ember_status (*reshard)(void *impl, const ember_table_plan *plan, ember_reshard_stats *stats);
} dlrm_backend;

// Creates a backend: the arguments of ember_sebc_create_2d (group_size 0: one group, the plan's
// ranks the world's). Collective on comm; every rank returns the same status. On failure *out is
// zeroed.
typedef ember_status (*dlrm_backend_factory)(ember_comm *comm, const ember_ebc_config *cfg,
                                             const ember_table_plan *plan, ember_grad_convention conv,
                                             int32_t group_size, dlrm_backend *out);

// The sharded embedding collection of include/ember/shard.h with ember_comm_allreduce_grads.
ember_status dlrm_backend_sebc_create(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                                      ember_grad_convention conv, int32_t group_size, dlrm_backend *out);
// A serving bundle's quantized tables (include/ember/quant.h), forward and load only: every rank
// loads the whole bundle and pools its own batch (`ember eval --load BUNDLE`). The table
// configurations give the names and dims the bundle must hold; plan and conv are not used.
ember_status dlrm_backend_quant_create(ember_comm *comm, const ember_ebc_config *cfg, const ember_table_plan *plan,
                                       ember_grad_convention conv, int32_t group_size, dlrm_backend *out);

#endif
