// Pairwise dot interaction. Per sample the Gram matrix is tiny ((F+1)^2 D multiply-adds, e.g.
// 27 x 27 x 16), far below where a BLAS call pays for itself, so it is a plain loop that the
// compiler vectorises over D, parallel over samples (each sample is independent: deterministic).
#include <string.h>

#include "interaction.h"

int32_t interaction_out_dim(int32_t num_sparse, int32_t dim) { return dim + (num_sparse + 1) * num_sparse / 2; }

// Row i of T_b: the dense vector for i = 0, else embedding i-1.
static inline const float *row(const float *dense_b, const float *emb_b, int32_t i, int32_t dim) {
    return i == 0 ? dense_b : emb_b + (size_t)(i - 1) * (size_t)dim;
}

static inline float dot(const float *a, const float *b, int32_t n) {
    float s = 0.0f;
    for (int32_t k = 0; k < n; k++) s += a[k] * b[k];
    return s;
}

void interaction_forward(int32_t batch, int32_t num_sparse, int32_t dim, const float *dense, const float *emb,
                         float *out) {
    const int32_t width = interaction_out_dim(num_sparse, dim), rows = num_sparse + 1;
#pragma omp parallel for schedule(static)
    for (int32_t b = 0; b < batch; b++) {
        const float *db = dense + (size_t)b * (size_t)dim;
        const float *eb = emb + (size_t)b * (size_t)num_sparse * (size_t)dim;
        float *o = out + (size_t)b * (size_t)width;
        memcpy(o, db, sizeof(float) * (size_t)dim);
        int32_t k = dim;
        for (int32_t i = 0; i < rows; i++) {
            const float *ti = row(db, eb, i, dim);
            for (int32_t j = i + 1; j < rows; j++) o[k++] = dot(ti, row(db, eb, j, dim), dim);
        }
    }
}

void interaction_backward(int32_t batch, int32_t num_sparse, int32_t dim, const float *dense, const float *emb,
                          const float *dout, float *ddense, float *demb) {
    const int32_t width = interaction_out_dim(num_sparse, dim), rows = num_sparse + 1;
#pragma omp parallel for schedule(static)
    for (int32_t b = 0; b < batch; b++) {
        const float *db = dense + (size_t)b * (size_t)dim;
        const float *eb = emb + (size_t)b * (size_t)num_sparse * (size_t)dim;
        const float *g = dout + (size_t)b * (size_t)width;
        float *gd = ddense + (size_t)b * (size_t)dim;
        float *ge = demb + (size_t)b * (size_t)num_sparse * (size_t)dim;
        // The dense vector is also copied to the output: its gradient starts as that slice.
        memcpy(gd, g, sizeof(float) * (size_t)dim);
        memset(ge, 0, sizeof(float) * (size_t)num_sparse * (size_t)dim);
        // z_ij = <T_i, T_j>  =>  dT_i += g_ij T_j and dT_j += g_ij T_i.
        int32_t k = dim;
        for (int32_t i = 0; i < rows; i++) {
            const float *ti = row(db, eb, i, dim);
            float *gi = i == 0 ? gd : ge + (size_t)(i - 1) * (size_t)dim;
            for (int32_t j = i + 1; j < rows; j++, k++) {
                const float gij = g[k];
                const float *tj = row(db, eb, j, dim);
                float *gj = ge + (size_t)(j - 1) * (size_t)dim;
                for (int32_t c = 0; c < dim; c++) {
                    gi[c] += gij * tj[c];
                    gj[c] += gij * ti[c];
                }
            }
        }
    }
}
