// interaction.h — DLRM's pairwise dot interaction (TorchRec's InteractionArch).
//
// For sample b, stack the bottom-MLP output and the F pooled embeddings as the rows of
// T_b [F+1, D] (row 0 the dense vector, row 1+f feature f's embedding). The output is
//   out[b] = [ dense[b] (D values), <T_i, T_j> for 0 <= i < j <= F in row-major order ]
// i.e. the upper triangle of T_b T_b^T without its diagonal (torch.triu_indices(F+1, F+1, 1)),
// concatenated after the dense vector: D + (F+1)F/2 values.
#ifndef EMBER_APP_INTERACTION_H
#define EMBER_APP_INTERACTION_H

#include <stdint.h>

// D + (F+1)F/2.
int32_t interaction_out_dim(int32_t num_sparse, int32_t dim);

// dense [B, D], emb [B, F*D] (features in order, the collection's output layout)
// -> out [B, interaction_out_dim(F, D)].
void interaction_forward(int32_t batch, int32_t num_sparse, int32_t dim, const float *dense, const float *emb,
                         float *out);

// dout [B, interaction_out_dim] -> ddense [B, D], demb [B, F*D] (overwritten).
void interaction_backward(int32_t batch, int32_t num_sparse, int32_t dim, const float *dense, const float *emb,
                          const float *dout, float *ddense, float *demb);

#endif
