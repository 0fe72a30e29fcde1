// Internal layout of ember_lfq, shared by the API (lfq.c) and the dtype-generic kernels
// (kernels.c instantiates kernels_impl.h for float and double).
#ifndef EMBER_LFQ_INTERNAL_H
#define EMBER_LFQ_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/internal.h"
#include "core/internal.h"
#include "ember/lfq.h"
#include "ember/rng.h"

// Token flags in ember__lfq_ws.sel.
#define LFQ_SEL_T 1u // selected by the mask: counts in the commitment loss
#define LFQ_SEL_E 2u // in the entropy set E (T, or its random subset when frac < 1)

// H_eps clamps probabilities at 1e-5 (upstream's log(t.clamp(min = eps))); F.normalize's eps.
#define LFQ_ENTROPY_EPS 1e-5
#define LFQ_L2NORM_EPS 1e-12

// Per-token workspace, one block, pointers carved out for `cap` tokens. Element pointers are
// `void *` and have the module's dtype.
typedef struct ember__lfq_ws {
    int64_t cap;      // tokens the block holds
    void *block;
    void *x;          // [T, dim]  copy of the input (projections only: dW_in needs it)
    void *hc;         // [T, C*D]  after project_in and the soft clamp (sphere input)
    void *z;          // [T, C*D]  quantiser input (after the sphere)
    void *nrm;        // [T, C]    max(||hc_c||, eps) (spherical only)
    void *y;          // [T, C*D]  straight-through output (project_out input)
    void *dz;         // [T, C*D]  backward: dJ/dz, then dJ/dh in place
    uint8_t *sel;     // [T]       LFQ_SEL_* flags
    int64_t *perm;    // [T]       subsampling scratch
} ember__lfq_ws;

// What the last training forward leaves for backward (besides the workspace contents).
typedef struct ember__lfq_saved {
    bool valid;
    int32_t B, N;
    int64_t n_sel;        // |T| on this rank
    int64_t n_ent;        // |E| on this rank
    double pbar_denom;    // MEAN_RANKS: W (pbar_r = psum / n_ent); MEAN_TOKENS: global |E|
    double e_raw;         // PSE - gamma CBE (before the softplus)
    double tau;           // inverse temperature of that forward
    ember_comm *comm;     // communicator of that forward (NULL: local)
} ember__lfq_saved;

struct ember_lfq {
    ember_ctx *ctx;
    ember_lfq_config cfg; // resolved (see ember_lfq_get_config)
    int32_t D, CD;        // bits per codebook, quantised width C*D
    bool proj, bias;
    size_t esz;           // sizeof(float) or sizeof(double)
    // Parameter slab and gradient slab, same layout; offsets in elements, -1 if absent.
    void *params, *grads;
    int64_t n_params;
    int64_t off[EMBER_LFQ_NUM_PARAMS], numel[EMBER_LFQ_NUM_PARAMS];
    // Token-independent buffers (module dtype): [C, K] each; kbuf [2 K] per-token scratch;
    // row [3 C*D + C] one token's pipeline (eval forward, indices_to_codes).
    void *psum, *pbar, *gpbar, *kbuf, *row;
    ember__lfq_ws ws;
    ember__lfq_saved saved;
    uint64_t sample_seed, sample_counter;
    bool agreed;          // the ranks of cfg.comm agreed on the configuration (first training forward)
};

// The dtype-specific kernels, called with validated inputs and a workspace of >= B*N tokens.
// forward_train: everything after validation, including the all-reduce of pbar (when `comm`).
// forward_eval: token by token through q->row; touches neither the workspace nor q->saved.
// backward: everything, including the all-reduce of dL/dpbar. Both return EMBER_OK or the
// status of a failed collective.
typedef struct ember__lfq_kernels {
    ember_status (*forward_train)(ember_lfq *q, const void *x, int32_t B, int32_t N, const uint8_t *mask,
                                  ember_comm *comm, void *out, int64_t *indices, ember_lfq_losses *losses);
    void (*forward_eval)(ember_lfq *q, const void *x, int64_t T, void *out, int64_t *indices);
    ember_status (*backward)(ember_lfq *q, const void *grad_out, double grad_aux, void *grad_x);
    void (*indices_to_codes)(const ember_lfq *q, const int64_t *indices, int64_t n, bool project_out, void *codes);
    void (*init_params)(ember_lfq *q);
    // Index of the first non-finite element of buf[n], or -1.
    int64_t (*find_nonfinite)(const void *buf, int64_t n, double *value);
} ember__lfq_kernels;

extern const ember__lfq_kernels ember__lfq_kernels_f32;
extern const ember__lfq_kernels ember__lfq_kernels_f64;

// The module's random source (initialisation, subsampling): the next value of the library's
// generator (ember/rng.h) from state *s.
static inline uint64_t ember__lfq_mix(uint64_t *s) {
    ember_rng r = {*s};
    const uint64_t v = ember_rng_next(&r);
    *s = r.state;
    return v;
}

#endif
