// ember/lfq.h — Lookup-Free Quantization (LFQ, MAGVIT-v2) with an entropy loss that stays
// correct under data parallelism (docs/lfq.md).
//
// What it computes. For x [B, N, dim] (B samples of N tokens), in this order:
//   h = x W_inᵀ + b_in                     project_in [C*D, dim] (identity without projections)
//   h = v tanh(h / v)                      optional soft clamp, v >= s
//   z[b,n,c,:] = h[b,n, c*D:(c+1)*D]       C codebooks of D = log2(K) bits each
//   z = s z / max(||z||, 1e-12)            optional spherical variant (BSQ), norm over D
//   q_j = +s' if z_j > 0 else -s'          z_j = 0 gives -s'; s' = s, or s/sqrt(D) if spherical
//   index = sum_j [z_j > 0] 2^(D-1-j)      component j = 0 is the most significant bit
//   y = z + (q - z)                        training (straight-through: dy/dz = 1); y = q in eval
//   out = y W_outᵀ + b_out                 project_out [dim, C*D] (identity without projections)
// The implicit codebook is the whole sign hypercube, E[k, j] = s' (2 bit(k, D-1-j) - 1).
//
// Losses (training only; all zero in eval). T is the set of selected tokens (all, or those with
// mask[b,n] != 0); the entropy terms use E ⊆ T (E = T unless frac_per_sample_entropy < 1):
//   p_{t,c}  = softmax_k(2 tau <z_{t,c}, E_k>)               the full K-way distribution
//   H_eps(p) = -sum_k p_k log(max(p_k, 1e-5))                  clamped entropy, as upstream
//   PSE      = (1/(|E| C)) sum_{t in E, c} H_eps(p_{t,c})      per-sample entropy
//   pbar_c   = (1/|E|) sum_{t in E} p_{t,c}                    code distribution of the batch
//   pbar     = distributed mean of pbar over the ranks (below)
//   CBE      = (1/C) sum_c H_eps(pbar_c)                       codebook ("batch") entropy
//   E_aux    = PSE - gamma CBE, or softplus(PSE - gamma CBE + offset) in the softplus variant
//   L_commit = mean over T x C x D of (z - q)^2 (0 when commitment_loss_weight is 0)
//   aux      = w_e E_aux + w_c L_commit                        the scalar backward differentiates
// A mean over an empty set (a mask selecting nothing) is 0, and so is its gradient.
// Masks follow the intended semantics of upstream 7c7c69f: a [B, N] mask selects tokens and every
// mean above is over the selected tokens of every codebook (upstream HEAD's mask regression,
// where CBE collapses to PSE, is not reproduced). The probabilities are the exact K-way softmax
// (O(K) per token and codebook), so results match vector-quantize-pytorch, not a factorised
// approximation.
//
// Distributed (docs/lfq.md). With a communicator (config.comm or ember_lfq_set_comm) the code
// distribution is a differentiable all-reduce, the only coupling between ranks:
//   EMBER_LFQ_MEAN_RANKS   forward  pbar = sum_r pbar_r / W
//                          backward dL/dpbar_r = sum_s dL_s/dpbar / W
//   EMBER_LFQ_MEAN_TOKENS  forward  pbar = sum_r sum_{t in E_r} p_t / sum_r |E_r|   (exact global
//                          token mean, for masks with unequal per-rank counts)
//                          backward dL/dp_t = sum_s dL_s/dpbar / sum_r |E_r|
// The reduced value is what every rank uses (never discarded), and the backward all-reduces the
// gradient (never the identity): each rank's gradients are the gradients of sum_s L_s with
// respect to its own inputs and, through them, the parameters. PSE and L_commit stay rank-local
// means. With equal token counts on every rank (no softplus), the mean over ranks of the
// parameter gradients equals the single-process gradient on the concatenated batch (DP
// averaging, ember_lfq_allreduce_grads with EMBER_GRAD_MEAN), and each rank's input gradient is W
// times the full-batch one (the gradient of sum_s L_s; divide by W for J = (1/W) sum_r L_r).
//
// Dtype. Every floating-point buffer passed to or read from a module (x, out, grad_out, grad_x,
// codes, parameters and gradients) has the module's dtype, float or double (config.dtype); the
// two paths are one implementation instantiated twice. Loss scalars are reported as double.
//
// Options of vector-quantize-pytorch not offered: straight_through_activation other than the
// identity, cosine_sim_project_in, orthogonal_rotation (HEAD only), channel-first inputs (pass
// [B, N, dim]), keep_num_codebooks_dim (indices are always [B, N, C] in memory, which for C = 1
// is upstream's [B, N]), force_quantization_f32 (the module computes in its dtype throughout).
//
// Determinism: single-threaded kernels with a fixed summation order; results are bitwise
// identical run to run. Threading: one module, one thread at a time (thread-compatible).
// Workspace: what backward needs is kept in a workspace owned by the module, sized by the
// largest B*N seen (config.max_tokens pre-sizes it); forward and backward allocate nothing else.
#ifndef EMBER_LFQ_H
#define EMBER_LFQ_H

#include <stdbool.h>

#include "ember/comm.h"
#include "ember/core.h"
#include "ember/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_lfq_projection {
    EMBER_LFQ_PROJ_AUTO = 0,   // projections iff dim != C*D (upstream's has_projections default)
    EMBER_LFQ_PROJ_NONE = 1,   // identity; requires dim == C*D
    EMBER_LFQ_PROJ_LINEAR = 2, // project_in and project_out, even when dim == C*D
} ember_lfq_projection;
#define EMBER_LFQ_PROJ_COUNT 3
// "auto", "none", "linear" ("unknown" outside); parse: EMBER_OK or EMBER_ERR_INVALID_ARG. Local.
EMBER_API const char *ember_lfq_projection_name(ember_lfq_projection p);
EMBER_API ember_status ember_lfq_projection_parse(const char *name, ember_lfq_projection *out);

typedef enum ember_lfq_dist_mean {
    EMBER_LFQ_MEAN_RANKS = 0,  // pbar = sum_r pbar_r / W (upstream; exact for equal token counts)
    EMBER_LFQ_MEAN_TOKENS = 1, // pbar = global sum of p_t / global token count (exact under masks)
} ember_lfq_dist_mean;
#define EMBER_LFQ_MEAN_COUNT 2
// "ranks", "tokens" ("unknown" outside); parse: EMBER_OK or EMBER_ERR_INVALID_ARG. Local.
EMBER_API const char *ember_lfq_dist_mean_name(ember_lfq_dist_mean m);
EMBER_API ember_status ember_lfq_dist_mean_parse(const char *name, ember_lfq_dist_mean *out);

// Configuration. Start from EMBER_LFQ_CONFIG_DEFAULT (upstream HEAD's defaults). Fields marked
// "0: default" treat zero as "library default"; for the others zero is a meaningful value.
typedef struct ember_lfq_config {
    int32_t dim;                   // width of x and out; 0: C * log2(codebook_size)
    int32_t codebook_size;         // K per codebook, a power of two in [2, 2^24]; 0: 2^dim
    int32_t num_codebooks;         // C >= 1; 0: 1
    double codebook_scale;         // s > 0; 0: 1
    double entropy_loss_weight;    // w_e >= 0 (default 0.1)
    double commitment_loss_weight; // w_c >= 0 (default 0 as at upstream HEAD; 0.25 at 7c7c69f)
    double diversity_gamma;        // gamma (default 1)
    double inv_temperature;        // tau > 0; 0: 100 (upstream's forward default)
    ember_lfq_projection projection;
    bool projection_has_bias;      // bias on both projections (default true)
    double soft_clamp_input_value; // v >= s: h <- v tanh(h / v); 0: no clamp
    bool spherical;                // BSQ: z and the codebook on the sphere of radius s
    bool softplus_entropy_loss;    // E_aux <- softplus(E_aux + entropy_loss_offset)
    double entropy_loss_offset;    // default 5
    double frac_per_sample_entropy;// f in (0, 1]; 0: 1. f < 1 computes PSE and pbar from a random
                                   // subset of floor(|T| f) selected tokens, drawn from `seed`,
                                   // the rank and a counter of training forwards
                                   // (ember_lfq_set_seed restarts the stream)
    ember_lfq_dist_mean dist_mean; // how pbar is averaged over ranks (ignored without comm)
    ember_dtype dtype;             // EMBER_DTYPE_F32 or EMBER_DTYPE_F64: every buffer and the compute
    uint64_t seed;                 // projection initialisation and token subsampling
    ember_comm *comm;              // borrowed; NULL: single process (see ember_lfq_set_comm)
    int64_t max_tokens;            // workspace hint: largest B*N expected; 0: sized on first use
} ember_lfq_config;
#define EMBER_LFQ_CONFIG_DEFAULT                                                                  \
    {.dim = 0, .codebook_size = 0, .num_codebooks = 1, .codebook_scale = 1.0, .entropy_loss_weight = 0.1, \
     .commitment_loss_weight = 0.0, .diversity_gamma = 1.0, .inv_temperature = 100.0,                  \
     .projection = EMBER_LFQ_PROJ_AUTO, .projection_has_bias = 1, .soft_clamp_input_value = 0.0,         \
     .spherical = 0, .softplus_entropy_loss = 0, .entropy_loss_offset = 5.0, .frac_per_sample_entropy = 1.0, \
     .dist_mean = EMBER_LFQ_MEAN_RANKS, .dtype = EMBER_DTYPE_F32, .seed = 0, .comm = NULL, .max_tokens = 0}

// The parameters, each a row-major tensor of the module's dtype, all in one slab in this order
// (linear weights are [out_features, in_features], y = x Wᵀ + b, as torch.nn.Linear).
typedef enum ember_lfq_param_id {
    EMBER_LFQ_PROJ_IN_WEIGHT = 0,  // [C*D, dim]   "project_in.weight"
    EMBER_LFQ_PROJ_IN_BIAS = 1,    // [C*D]        "project_in.bias"
    EMBER_LFQ_PROJ_OUT_WEIGHT = 2, // [dim, C*D]   "project_out.weight"
    EMBER_LFQ_PROJ_OUT_BIAS = 3,   // [dim]        "project_out.bias"
    EMBER_LFQ_NUM_PARAMS = 4,
} ember_lfq_param_id;

// What a training forward reports (all 0 in eval). Unweighted terms, as upstream's
// LossBreakdown; `codebook_entropy` is taken after the distributed mean.
typedef struct ember_lfq_losses {
    double aux;                // w_e * entropy + w_c * commitment: the differentiated scalar
    double entropy;            // E_aux (after softplus in that variant)
    double per_sample_entropy; // PSE
    double codebook_entropy;   // CBE
    double commitment;         // L_commit (0 when w_c == 0, as upstream)
    int64_t tokens;            // |T| on this rank
    int64_t entropy_tokens;    // |E| on this rank
} ember_lfq_losses;

typedef struct ember_lfq ember_lfq;

// Creates a module. Projections are initialised as torch.nn.Linear does, uniform in
// ±1/sqrt(fan_in) for weights and biases, from cfg->seed (same seed, same values on every rank).
// cfg->comm, when set, must have been created on `ctx`.
// Local. Returns EMBER_OK; EMBER_ERR_INVALID_ARG for ctx/cfg/out NULL, neither dim nor
// codebook_size given, codebook_size not a power of two (the message names it and suggests the
// next power), K outside [2, 2^24], dim or num_codebooks < 0, a scale, temperature or weight that
// is not finite or out of its range, soft_clamp_input_value < codebook_scale,
// frac_per_sample_entropy outside (0, 1], PROJ_NONE with dim != C*D, an unknown enum value;
// EMBER_ERR_NOMEM. On failure *out is NULL and nothing is leaked.
EMBER_API ember_status ember_lfq_create(ember_ctx *ctx, const ember_lfq_config *cfg, ember_lfq **out);
// Destroys a module; NULL is accepted. The communicator is borrowed and not freed.
EMBER_API void ember_lfq_destroy(ember_lfq *lfq);

// The resolved configuration: dim, codebook_size and num_codebooks derived, projection AUTO
// replaced by NONE or LINEAR, zero defaults filled in, the current comm and temperature.
EMBER_API const ember_lfq_config *ember_lfq_get_config(const ember_lfq *lfq);
// D = log2(codebook_size): bits per codebook. The quantised width is C * D.
EMBER_API int32_t ember_lfq_codebook_dim(const ember_lfq *lfq);

// Attaches a communicator (created on the module's context) or detaches it (NULL). Training
// forward and backward are then Collective on it. Drops the state saved by the last forward.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (lfq NULL, comm on another context).
EMBER_API ember_status ember_lfq_set_comm(ember_lfq *lfq, ember_comm *comm);
// Sets tau for the next forwards (upstream passes it per forward call; use this to anneal).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (not finite or <= 0).
EMBER_API ember_status ember_lfq_set_inv_temperature(ember_lfq *lfq, double inv_temperature);
// Restarts the token-subsampling stream (frac_per_sample_entropy < 1) at `seed`.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (lfq NULL).
EMBER_API ember_status ember_lfq_set_seed(ember_lfq *lfq, uint64_t seed);

// Parameter storage, read/write, and its gradient accumulator (module dtype, shapes above).
// *numel (may be NULL) receives the element count; a parameter the configuration does not have
// (no projections, no bias) gives NULL and 0. Writes take effect at the next forward.
EMBER_API void *ember_lfq_param(ember_lfq *lfq, ember_lfq_param_id id, int64_t *numel);
EMBER_API void *ember_lfq_grad(ember_lfq *lfq, ember_lfq_param_id id, int64_t *numel);
// The whole parameter slab and the gradient slab (same layout, the enum's order, absent
// parameters skipped), for optimisers and gradient all-reduces. NULL and 0 without parameters.
EMBER_API void *ember_lfq_params(ember_lfq *lfq, int64_t *numel);
EMBER_API void *ember_lfq_grads(ember_lfq *lfq, int64_t *numel);
// "project_in.weight", ... (the golden files' names); NULL for an unknown id.
EMBER_API const char *ember_lfq_param_name(ember_lfq_param_id id);
// Sets every gradient accumulator to zero. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG.
EMBER_API ember_status ember_lfq_zero_grad(ember_lfq *lfq);
// Data-parallel gradient synchronisation under the gradient convention (ember/comm.h):
// ember_comm_allreduce_grads on the gradient slab (EMBER_GRAD_MEAN: J = (1/W) sum_r L_r).
// Collective on the module's comm (local no-op without one). Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (unknown convention), EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_lfq_allreduce_grads(ember_lfq *lfq, ember_grad_convention conv);

// Forward pass.
// x        [B, N, dim] input, module dtype, borrowed (copied where backward needs it).
// mask     [B, N] token selection (nonzero: selected) or NULL (all tokens). Affects the losses
//          only: out and indices are produced for every token.
// training true: straight-through output, losses, and the state backward needs is saved;
//          false (eval): out = project_out(q), losses zero, no state saved.
// out      [B, N, dim] quantised output, module dtype.
// indices  [B, N, C] int64 codes in [0, K), or NULL.
// losses   receives the loss breakdown, or NULL.
// Collective on the module's comm in training mode (every rank calls it, each with its own B,
// N and mask); Local in eval mode or without comm. Inputs are validated on each rank and the
// verdict agreed before any communication, so a bad input on one rank fails every rank with
// the same status and that rank's message. The first training forward after creation or
// ember_lfq_set_comm also agrees on the resolved configuration (every field of ember_lfq_config
// but comm and max_tokens): ranks that differ all return EMBER_ERR_INVALID_ARG with the same
// message naming the first differing field, its values and the ranks.
// Returns EMBER_OK; EMBER_ERR_INVALID_ARG (lfq, x or out NULL, B or N < 1, B*N too large, ranks
// configured differently); EMBER_ERR_NUMERIC (a NaN or Inf in x, named by position and value);
// EMBER_ERR_NOMEM (workspace growth); EMBER_ERR_COMM; EMBER_ERR_TIMEOUT (ember/comm.h). On error
// out, indices, losses, parameters and gradients are unchanged, and so is the state saved by the
// previous training forward (its backward can still follow) on every rank, except after
// EMBER_ERR_COMM or EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_lfq_forward(ember_lfq *lfq, const void *x, int32_t B, int32_t N, const uint8_t *mask,
                                         bool training, void *out, int64_t *indices, ember_lfq_losses *losses);

// Backward of the last training forward, for the objective  <grad_out, out> + grad_aux * aux
// (summed over ranks, see "Distributed" above): straight-through estimator into z, the entropy
// and commitment gradients, the sphere, the clamp and both projections.
// grad_out [B, N, dim] dJ/d(out), module dtype, or NULL for zero (aux loss only).
// grad_aux dJ/d(aux), a scalar (1 for J = task loss + aux).
// grad_x   [B, N, dim] receives dJ/dx (overwritten), or NULL if not needed.
// Parameter gradients are accumulated (+=) into the module's gradient slab (ember_lfq_zero_grad
// clears it). project_out receives gradient from grad_out only. May be called more than once
// per forward (each call accumulates again).
// Collective on the module's comm when the forward was (it all-reduces dL/dpbar).
// Returns EMBER_OK; EMBER_ERR_INVALID_ARG (lfq NULL); EMBER_ERR_STATE (no training forward
// saved); EMBER_ERR_NUMERIC (NaN/Inf in grad_out or grad_aux); EMBER_ERR_COMM; EMBER_ERR_TIMEOUT. On error grad_x
// and the gradients are unchanged.
EMBER_API ember_status ember_lfq_backward(ember_lfq *lfq, const void *grad_out, double grad_aux, void *grad_x);

// Decodes codes: indices [n, C] (int64 in [0, K)) into codes [n, C*D] (the ±s' corners, module
// dtype) or, with project_out and projections, into [n, dim] = project_out(codes).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL, n < 0), EMBER_ERR_OUT_OF_RANGE (an index
// outside [0, K), named with its position); on error `codes` is unchanged.
EMBER_API ember_status ember_lfq_indices_to_codes(ember_lfq *lfq, const int64_t *indices, int64_t n,
                                                  bool project_out, void *codes);

#ifdef __cplusplus
}
#endif
#endif
