// mlp.h — a stack of fully connected layers over a batch, y = act(x W^T + b), on ember_gemm.
//
// Layer l maps [B, in_l] to [B, out_l] with W_l [out_l, in_l] (torch.nn.Linear's layout) and
// b_l [out_l]; ReLU follows every layer, or every layer but the last (`relu_last` false), which
// gives TorchRec's DenseArch (ReLU everywhere) and OverArch (a final linear layer) respectively.
// The parameters and their gradients live in slabs owned by the caller (the model keeps all
// dense parameters in one slab so that one allreduce moves every gradient); the MLP owns only
// its activations and backward scratch, sized once for `max_batch` rows.
//
// Every product is one ember_gemm call (ember/dense.h), bias and ReLU fused into the forward's,
// the bias gradient an ember_colsum: the bits are the same under every kernel variant and thread
// count (the context's, ember_ctx_set_num_threads), so on every x86-64 host. The ReLU mask of the
// backward runs on the caller's OpenMP threads (elementwise: any split gives the same bits).
#ifndef EMBER_APP_MLP_H
#define EMBER_APP_MLP_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/core.h"

typedef struct mlp_layer {
    int32_t in, out;
    bool relu;
    float *w;  // [out, in] row-major, in the parameter slab
    float *b;  // [out]
    float *dw; // [out, in] gradient, same offset in the gradient slab
    float *db; // [out]
    float *y;  // [max_batch, out] output (after ReLU where there is one)
} mlp_layer;

typedef struct mlp {
    ember_ctx *ctx;    // borrowed: the products' threads, variant and packing buffers
    int32_t num_layers;
    int32_t in;        // input width
    int32_t max_batch;
    mlp_layer *layers; // [num_layers]
    float *scratch[2]; // [max_batch, widest layer] backward ping-pong buffers
} mlp;

// Parameters (weights and biases) of the layers in -> sizes[0] -> ... -> sizes[n-1].
int64_t mlp_num_params(int32_t in, const int32_t *sizes, int32_t n);

// Lays the layers out in params/grads (mlp_num_params floats each, weights then bias per layer)
// and allocates activations for max_batch rows. On failure *m is zeroed and nothing leaks.
ember_status mlp_create(ember_ctx *ctx, int32_t in, const int32_t *sizes, int32_t n, bool relu_last,
                        int32_t max_batch, float *params, float *grads, mlp *m);
void mlp_destroy(ember_ctx *ctx, mlp *m);

// torch.nn.Linear's default initialisation: weights and biases uniform in +-1/sqrt(in), drawn
// from (seed, stream, index) so that every rank starts from the same values.
void mlp_init_params(mlp *m, uint64_t seed, uint64_t stream);

// x [B, in] -> *y = the last layer's output [B, out_last] (owned by the MLP). B <= max_batch.
// Returns EMBER_OK or EMBER_ERR_NOMEM (the products' packing buffers; the message says which).
ember_status mlp_forward(mlp *m, const float *x, int32_t batch, const float **y);

// Backward of the preceding forward on the same x: dy [B, out_last] = dL/d(output). Overwrites
// every dW, db with dL/dW, dL/db and writes dx [B, in] = dL/dx unless dx is NULL. With B = 0
// the gradients are +0. Returns as mlp_forward.
ember_status mlp_backward(mlp *m, const float *x, int32_t batch, const float *dy, float *dx);

static inline int32_t mlp_out_dim(const mlp *m) { return m->layers[m->num_layers - 1].out; }

#endif
