// Naive reference EmbeddingBagCollection for tests: double accumulators, plain loops, written
// from docs/semantics.md §2 and §4 and shares no code with src/. Only the public config structs are
// reused, to describe the same collection.
#ifndef EMBER_TEST_ORACLE_H
#define EMBER_TEST_ORACLE_H

#include <stdint.h>

#include "ember.h"

typedef struct oracle_table {
    ember_table_config cfg;
    double *w;   // [rows * dim]
    double *m1;  // Adagrad [rows*dim]; row-wise Adagrad [rows]; Adam/LAMB/partial/LARS [rows*dim]
    double *m2;  // Adam/LAMB [rows*dim]; partial row-wise Adam/LAMB [rows]
    int64_t step;
} oracle_table;

typedef struct oracle {
    int T, F;
    oracle_table *t;
    int *ftab;        // [F]
    int *fcol;        // [F]
    int out_dim;
    int seq;          // all tables pooling NONE
    ember_bounds_mode bounds;
} oracle;

// Builds the oracle for cfg with initial weights/state copied from `ebc` (through the public
// state-dict API, as fp32).
oracle *oracle_create(const ember_ebc_config *cfg, const ember_ebc *ebc);
void oracle_destroy(oracle *o);
// out: [B, out_dim] (pooled) or [nnz, D] (NONE), double.
void oracle_forward(const oracle *o, const ember_kjt *kjt, double *out);
// dL/dw per id (NULL to skip) and one exact-optimizer step of every touched row.
void oracle_backward(oracle *o, const ember_kjt *kjt, const float *grad_out, double *grad_weights);

// Largest |a - b| / (atol + rtol * |b|) over n; <= 1 means within tolerance.
double rel_err_f(const float *a, const double *b, int64_t n, double atol, double rtol);

#endif
