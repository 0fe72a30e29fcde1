// The quantized inference collection (include/ember/quant.h): the front end (quant.c: rows,
// remaps, checks, threads) and the pooling kernel variants it calls (isa/: one file per
// instruction set, the shared bag loop in isa/impl.h, the table picked in isa/dispatch.c).
#ifndef EMBER_QUANT_INTERNAL_H
#define EMBER_QUANT_INTERNAL_H

#include <stdint.h>

#include "core/internal.h"
#include "ember/quant.h"

// ---- rows ---------------------------------------------------------------------------------------

// One finite fp32 row of D elements into dst, in type t's layout by quant.h's rule (FBGEMM's), and
// back: the element values (the kernels' arithmetic: one fused multiply-add). Local; no checks.
// The sharded collection's int8 wire precision sends its row pieces this way (src/shard/wire.c).
void ember__quantize_row(ember_qtype t, int32_t D, const float *x, unsigned char *dst);
void ember__dequantize_row(ember_qtype t, int32_t D, const unsigned char *row, float *x);

// ---- the kernels ------------------------------------------------------------------------------

// One bag for a pooling kernel: the rows it reads, in id order (negative: pruned or skipped), and
// where the sum goes.
typedef struct ember__qbag {
    const unsigned char *base; // the table's row 0
    size_t rb;                 // bytes per row
    int32_t D;
    ember_qtype qtype;
    int mean;
    const int64_t *rows;       // [n] rows; < 0: the id contributes nothing and does not count
    const float *weights;      // [n] or NULL
    int64_t n;
    int64_t pf_n;              // rows[0 .. pf_n) may be read for prefetching (the table's next bags)
    float *out;                // [D]: the bag's pooled value in fp32
} ember__qbag;

typedef struct ember__quant_kernels {
    ember_isa isa;
    // Pools one bag into b->out (quant.h's order: per element, id after id; MEAN scaled once).
    void (*pool_bag)(const ember__qbag *b);
} ember__quant_kernels;

// The table of a variant this build holds (GENERIC always exists); NULL otherwise.
const ember__quant_kernels *ember__quant_kernels_for(ember_isa isa);

extern const ember__quant_kernels ember__quant_kernels_generic;
extern const ember__quant_kernels ember__quant_kernels_avx2;
extern const ember__quant_kernels ember__quant_kernels_avx512;


// ---- the collection (quant.c; its bundles: bundle.c) -------------------------------------------

// A table's remap: ARRAY row_of[num_embeddings] (-1: pruned); HASH slots of (id, row), row -1
// empty, mask + 1 slots (a power of two, at most half full), linear probing from the id's hash.
typedef struct ember__qremap {
    ember_qremap_kind kind;
    int32_t *row_of;
    int64_t *slot_id, *slot_row;
    uint64_t mask;
    size_t bytes;
} ember__qremap;

typedef struct ember__qtable {
    ember_qtable_config cfg; // name owned
    size_t rb;               // bytes per row
    unsigned char *rows;
    ember__qremap map;
} ember__qtable;

struct ember_qebc {
    ember_ctx *ctx;
    const ember__quant_kernels *kern;
    int32_t T, F;
    ember__qtable *tables;
    int32_t *feature_table;
    char **feature_names;
    int32_t *out_off; // [F]: feature f's columns in an output row
    int32_t out_dim;
    ember_bounds_mode bounds;
    ember_dtype out_dtype;
};

// The kept (id, row) pairs of table t's ember__qremap, in id order for ARRAY and slot order for HASH;
// returns their count (ids/rows may be NULL to count).
int64_t ember__qebc_remap_pairs(const ember_qebc *q, int32_t t, int64_t *ids, int64_t *rows);

#endif
