// The backend seam of the table-batched collection: where a collection's weights and optimizer
// state live, and the kernels that run over them. A collection picks its backend at creation
// (ember_ebc_config.backend); everything above the seam (configuration, validation, the state
// dict, the row maps of tiered and hashed tables, the sharded layer) goes through these calls
// and never touches a row's bytes, so a backend whose memory is not the host's (a GPU's) plugs in
// here. Two today: `cpu` (cpu/): host memory, and the ISA kernel variants; `cuda` (cuda/): one
// NVIDIA GPU's memory and CUDA kernels, in builds made where nvcc is present.
//
// Every compute call takes a KJT whose ids are rows of the storage: the collection has already
// validated it and had its row maps translate their tables' ids (-1: absent, resolved as SKIP by
// the kernels, as kbounds says). Results are the same bits on every backend (the promise of
// docs/semantics.md): fixed summation orders, no atomics.
#ifndef EMBER_TBE_BACKEND_H
#define EMBER_TBE_BACKEND_H

#include "tbe/internal.h"

typedef struct ember__backend_ops {
    ember_backend kind;
    // ---- Storage ----------------------------------------------------------------------------
    // Allocates every table's slab_rows rows of weights (its dtype) and optimizer state (fp32,
    // m1_cols and m2_cols wide), zeroed, and points each table's w/m1/m2 at them. EMBER_OK or
    // EMBER_ERR_NOMEM (message set); free undoes it and accepts a collection it never served.
    ember_status (*alloc)(ember_ebc *ebc);
    void (*free)(ember_ebc *ebc);
    // Writes every row of table tb with its initial values (ember__init_row of its coordinates)
    // and fresh optimizer state. EMBER_OK or EMBER_ERR_NOMEM.
    ember_status (*init)(ember_ebc *ebc, ember__table *tb);
    // Rows [r0, r0 + n) of one of tb's tensors, which 0: the weights (as the table's dtype, its
    // native bits, or as fp32), 1 and 2: the optimizer states (fp32), to or from host memory laid
    // out [n, cols]. The caller checked the range and the dtype. EMBER_OK, or the backend's
    // device error (EMBER_ERR_DEVICE with the runtime's message; the cpu backend cannot fail).
    ember_status (*read_rows)(const ember_ebc *ebc, const ember__table *tb, int which, int64_t r0, int64_t n,
                              ember_dtype dtype, void *dst);
    ember_status (*write_rows)(ember_ebc *ebc, const ember__table *tb, int which, int64_t r0, int64_t n,
                               ember_dtype dtype, const void *src);
    // tb's stored weights in host memory (row r at + r * row_bytes), or NULL when they are not
    // host memory (ember_ebc_weights_view then refuses).
    const void *(*host_rows)(const ember_ebc *ebc, const ember__table *tb);
    // A dtype change (ember__dtype_change): prepare allocates the re-laid-out storage into
    // c->prepared, commit converts every row into it and frees the old, abort frees it.
    ember_status (*convert_prepare)(ember_ebc *ebc, ember__dtype_change *c);
    void (*convert_commit)(ember_ebc *ebc, ember__dtype_change *c);
    void (*convert_abort)(ember_ebc *ebc, ember__dtype_change *c);
    // ---- Compute (ids are storage rows; `off` the KJT's offsets [F*B+1]) -----------------------
    // Pools every bag into out (the collection's output layout). resolve: some id is outside its
    // table and must go through kbounds. EMBER_OK, or a device error (as read_rows).
    ember_status (*forward)(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int resolve, float *out);
    // The fused backward in two steps (ember__ebc_backward_prepare/apply): prepare sorts the
    // entries into *s and reserves all that apply needs (EMBER_OK or EMBER_ERR_NOMEM, nothing
    // changes); apply counts the step and updates every touched row once, allocating nothing:
    // it fails only on a device error (as read_rows), never on the cpu backend.
    ember_status (*backward_prepare)(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, ember__segments *s);
    ember_status (*backward_apply)(ember_ebc *ebc, const ember__segments *s, const float *grad_out,
                                   float *grad_weights);
    // The coalesced gradient (ember__ebc_coalesce), one update per row of a given gradient
    // (ember__ebc_apply), the rows' sums of squared gradients (ember__ebc_row_sumsq).
    ember_status (*coalesce)(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, const float *grad_out,
                             ember__sparse_grad *out);
    ember_status (*apply)(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad, int64_t n,
                          const float *row_sumsq);
    ember_status (*row_sumsq)(ember_ebc *ebc, const ember__sparse_grad *g, float *out);
    // ---- Calls on device memory (ember_ebc_forward_device/backward_device: the KJT's arrays,
    // out and grad_out in the backend's memory; the caller checked what the host can see, the
    // backend checks the rest on the device). NULL: the backend has no memory of its own.
    ember_status (*forward_device)(ember_ebc *ebc, const ember_kjt *kjt, float *out);
    ember_status (*backward_device)(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out);
} ember__backend_ops;

// The slab layout every backend uses, in its own memory: every table's weights back to back in
// its dtype, each table's block 64-byte aligned (ember__weight_block bytes in dtype dt), and one
// fp32 state slab holding each table's m1 then m2 ([slab_rows, m1_cols], [slab_rows, m2_cols]).
size_t ember__weight_block(const ember__table *tb, ember_dtype dt);
// The two slabs' sizes for the tables' current dtypes.
void ember__slab_sizes(const ember_ebc *ebc, size_t *weight_bytes, size_t *state_floats);
// Points every table's w, m1 and m2 into the slabs (m1/m2 NULL where the optimizer keeps none).
void ember__slab_layout(ember_ebc *ebc, unsigned char *weights, float *state);

// The backend `kind` in this build, or NULL.
const ember__backend_ops *ember__backend(ember_backend kind);

extern const ember__backend_ops ember__backend_cpu;
#ifdef EMBER_WITH_CUDA
extern const ember__backend_ops ember__backend_cuda;
// 1 when this process can use a CUDA device; else 0 and the runtime's reason in why. (cuda/)
int ember__cuda_usable(char *why, size_t why_len);
#endif

#endif
