// A naive float64 LFQ aux-loss oracle for the tests: plain loops over the explicit K x D
// codebook, a max-shifted softmax, no factorisation, and the distributed step written out as W
// explicit slices. It shares no code with src/lfq; the tests differentiate it by central
// finite differences to check ember_lfq_backward.
#ifndef EMBER_TEST_LFQ_ORACLE_H
#define EMBER_TEST_LFQ_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct lfq_ref_config {
    int dim, C, D;              // K = 2^D codes per codebook
    double scale, w_e, w_c, gamma, tau;
    double clamp;               // soft clamp value, 0: none
    double offset;              // softplus offset
    bool proj, bias, spherical, softplus;
    bool mean_tokens;           // pbar = global token mean (else mean of per-rank means)
} lfq_ref_config;

// One rank's slice of a data-parallel step.
typedef struct lfq_ref_slice {
    int B, N;
    const double *x;            // [B, N, dim]
    const uint8_t *mask;        // [B, N] or NULL
} lfq_ref_slice;

typedef struct lfq_ref_losses {
    double aux, entropy, pse, cbe, commit;
} lfq_ref_losses;

// Losses of every slice (per_slice[W], may be NULL) for project_in w_in [C*D, dim] and b_in
// [C*D] (ignored without projections / bias). Returns sum_r aux_r: the objective whose
// gradient with respect to slice r's inputs ember_lfq_backward(grad_out = NULL, grad_aux = 1)
// gives on rank r.
double lfq_ref_aux(const lfq_ref_config *c, const double *w_in, const double *b_in, int W,
                   const lfq_ref_slice *slices, lfq_ref_losses *per_slice);

// Central finite differences (step h) of lfq_ref_aux with respect to slice r's inputs and to
// project_in. x_r [n_x] must be the buffer slices[r].x points to (perturbed and restored);
// grad_x [n_x], grad_w [C*D*dim], grad_b [C*D] receive the derivatives (NULL: skipped).
void lfq_ref_fd(const lfq_ref_config *c, double *w_in, double *b_in, int W, const lfq_ref_slice *slices,
                double *x_r, int64_t n_x, double h, double *grad_x, double *grad_w, double *grad_b);

#endif
