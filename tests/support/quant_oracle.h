// Naive reference for the quantized inference tables (include/ember/quant.h): row decoding and
// pooling in double, written from the header's layouts and rules; shares no code with src/.
#ifndef EMBER_TEST_QUANT_ORACLE_H
#define EMBER_TEST_QUANT_ORACLE_H

#include <stdint.h>

#include "ember.h"

// Bytes of one row of dim elements of type t.
size_t qoracle_row_bytes(ember_qtype t, int32_t dim);
// The values of one row, and its scale (0 for fp32/fp16), in double; mag (when not NULL)
// receives per element |scale * q| + |bias| (|value| for fp32/fp16): the scale of the roundings
// of the fp32 product and sum.
void qoracle_decode(ember_qtype t, int32_t dim, const unsigned char *row, double *out, double *scale, double *mag);
// A half-precision value in double (IEEE binary16).
double qoracle_half(uint16_t h);

// A table as the oracle sees it: its rows' bytes, and optionally a remap: ids[i] reads rows[i]
// (n of them), every other id pruned (kind NONE: the id is the row).
typedef struct qoracle_table {
    ember_qtype qtype;
    int32_t dim;
    int64_t rows;
    ember_pooling pooling;
    const unsigned char *data;
    ember_qremap_kind kind;
    int64_t num_embeddings;
    int64_t n;
    const int64_t *ids, *map_rows;
} qoracle_table;

// Pooled output [B][sum_f dim] in double; feature f reads tables[ftab[f]]; out-of-space ids follow
// `bounds` (CLAMP or SKIP: the KJT was accepted). *mag receives, per output element, the sum over
// ids of |w_j| times decode's mag (the scale of its rounding error) when mag is not NULL.
void qoracle_forward(const qoracle_table *tables, const int32_t *ftab, int32_t F, ember_bounds_mode bounds,
                     const ember_kjt *kjt, double *out, double *mag);

#endif
