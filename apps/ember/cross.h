// cross.h — DCN-v2's low-rank cross network (Wang et al., 2021; TorchRec's LowRankCrossNet), the
// interaction of DLRM-DCNv2 (dlrm.h, --interaction dcn).
//
// Over an input x0 [B, N] (for DLRM: per sample the dense vector then the F pooled embeddings,
// N = (F+1) D, TorchRec's InteractionDCNArch), layer l = 0 .. L-1 computes
//
//     u_l     = x_l V_l^T              V_l [r, N]     (u_l [B, r], r the low rank)
//     t_l     = u_l W_l^T + b_l        W_l [N, r], b_l [N]
//     x_{l+1} = x0 * t_l + x_l         elementwise: the product rounded, then the sum
//
// and the output is x_L [B, N], TorchRec's `x_0 * (W(V x_l) + b) + x_l`. The parameters of layer
// l lie in the caller's slab as V_l (row-major [r, N]), W_l ([N, r]), b_l ([N]), layer after layer;
// the gradients at the same offsets of a second slab (TorchRec's V_kernels[l], W_kernels[l],
// bias[l], the same shapes). The cross net owns its activations and backward scratch, sized once
// for `max_batch` rows.
//
// Every product is one ember_gemm call (bias in the forward's epilogue, the residual of the
// backward in its accumulate), the bias gradient an ember_colsum, the elementwise parts plain
// loops on the caller's OpenMP threads: the bits are the same under every kernel variant and
// thread count, as mlp.h's.
#ifndef EMBER_APP_CROSS_H
#define EMBER_APP_CROSS_H

#include <stdint.h>

#include "ember/core.h"

typedef struct cross {
    ember_ctx *ctx; // borrowed
    int32_t width, num_layers, rank, max_batch;
    float *params;  // [cross_num_params] borrowed: V_0, W_0, b_0, V_1, ...
    float *grads;   // [cross_num_params] borrowed, same layout
    float *x;       // [L+1, max_batch, N] x_0 (the input, cross_input) .. x_L (the output)
    float *u;       // [L, max_batch, r]
    float *t;       // [L, max_batch, N]
    float *g;       // [max_batch, N] backward: dL/dx_l
    float *dt;      // [max_batch, N] backward: dL/dt_l
    float *du;      // [max_batch, r] backward: dL/du_l
} cross;

// Parameters of `num_layers` layers of width N and rank r: L (2 N r + N).
int64_t cross_num_params(int32_t width, int32_t num_layers, int32_t rank);

// Lays the layers out in params/grads (cross_num_params floats each) and allocates the buffers
// for max_batch rows. On failure *c is zeroed and nothing leaks. Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (a size below 1), EMBER_ERR_NOMEM.
ember_status cross_create(ember_ctx *ctx, int32_t width, int32_t num_layers, int32_t rank, int32_t max_batch,
                          float *params, float *grads, cross *c);
void cross_destroy(cross *c);

// TorchRec's initialisation: V_l and W_l Xavier normal (std sqrt(2 / (N + r))), b_l zero; drawn
// from (seed, stream, layer) so that every rank starts from the same values.
void cross_init_params(cross *c, uint64_t seed, uint64_t stream);

// Where the caller writes x0 [max_batch, N] before cross_forward (the net keeps it for the
// backward: no copy).
float *cross_input(cross *c);

// x0 (in cross_input, B rows) -> *y = x_L [B, N] (owned by the cross net). B <= max_batch. Keeps
// what the backward needs. Returns EMBER_OK or EMBER_ERR_NOMEM (the products' packing buffers).
ember_status cross_forward(cross *c, int32_t batch, const float **y);

// The backward of the preceding forward (same batch): dy [B, N] = dL/dx_L -> every gradient of
// the parameter slab overwritten, dx0 [B, N] = dL/dx0 (both through the layers' x_l and through
// the products with x0). Returns as cross_forward.
ember_status cross_backward(cross *c, int32_t batch, const float *dy, float *dx0);

#endif
