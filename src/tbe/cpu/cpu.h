// The cpu backend (backend.h): tables in host memory, one weight slab (every table's rows back to
// back, each table 64-byte aligned, in its own dtype) and one fp32 optimizer-state slab, and the
// kernels of the context's instruction-set variant (isa/). storage.c lays the slabs out and moves
// rows; forward.c and backward.c split the calls' work over threads and run the variant's loops.
#ifndef EMBER_TBE_CPU_H
#define EMBER_TBE_CPU_H

#include "tbe/backend.h"

typedef struct ember__tbe_kernels ember__tbe_kernels; // cpu/isa/isa.h

typedef struct ember__cpu {
    const ember__tbe_kernels *kern; // the context's kernel variant
    unsigned char *slab;            // weights, slab_bytes
    size_t slab_bytes;
    float *state;                   // optimizer state, state_floats
    size_t state_floats;
} ember__cpu;

static inline ember__cpu *ember__cpu_of(const ember_ebc *ebc) { return (ember__cpu *)ebc->bs; }
static inline const ember__tbe_kernels *ember__cpu_kern(const ember_ebc *ebc) { return ember__cpu_of(ebc)->kern; }

// Row r of table t's weights.
static inline unsigned char *ember__row_ptr(const ember__table *t, int64_t r) { return t->w + (size_t)r * t->row_bytes; }

// Installs another kernel table on a collection of this backend (the isa tests' emulated AVX-512).
void ember__cpu_set_kernels(ember_ebc *ebc, const ember__tbe_kernels *kern);

// forward.c, backward.c: the compute calls of backend.h.
ember_status ember__cpu_forward(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int resolve, float *out);
ember_status ember__cpu_backward_prepare(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, ember__segments *s);
ember_status ember__cpu_backward_apply(ember_ebc *ebc, const ember__segments *s, const float *grad_out, float *grad_weights);
ember_status ember__cpu_coalesce(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, const float *grad_out,
                                 ember__sparse_grad *out);
ember_status ember__cpu_apply(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad, int64_t n,
                              const float *row_sumsq);
ember_status ember__cpu_row_sumsq(ember_ebc *ebc, const ember__sparse_grad *g, float *out);

#endif
