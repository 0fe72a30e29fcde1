// What every quantized pooling variant shares, included by generic.c, avx2.c and avx512.c (so
// compiled with each variant's target flags; everything here is static). The variant defines
// VW, its vector width in floats (1 for generic), before including this file, and after it
//
//   static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float inv, float *out)
//        pools elements [d0, d0 + nv*VW) of every id of the bag, times inv when inv is not 0
//        (MEAN), into out[0 .. nv*VW), nv in [1, 8], returning 1, or 0 to leave those elements
//        to the portable loop; prefetches ahead (prefetch_ahead) when d0 is 0 (the vector
//        variants take it from quant/isa/vector.h)
//
// and this file gives the element decoding, the portable loop and the bag loop (columns in
// chunks of up to 8 vectors, the ids of the bag in order within each chunk), and defines the
// variant's table with EMBER__QUANT_KERNELS. The arithmetic of an element is quant.h's: v =
// fmaf(scale, q, bias) (one rounding), w * v (rounded) when weighted, then added to the sum, so
// every variant gives the same bits.
#ifndef EMBER_QUANT_ISA_IMPL_H
#define EMBER_QUANT_ISA_IMPL_H

#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "quant/internal.h"

// Rows are prefetched (into L2) this many ids ahead, across the bags of a table: about 128 lines
// in flight (the TBE kernels' rule), 4 to 32 ids.
static inline int64_t prefetch_ids(size_t rb) {
    const size_t n = (size_t)(128 * 64) / rb;
    return n < 4 ? 4 : n > 32 ? 32 : (int64_t)n;
}

// Every cache line of the row `pd` ids after id j: a line every 64 bytes from its start, and its
// last byte's line. A loop over the lines the row spans would branch on the row's offset in its
// line (a 36-byte int2 row spans one or two, at random: a mispredicted branch an id); this count
// is the table's alone, and a line prefetched twice costs one instruction.
static inline __attribute__((always_inline)) void prefetch_ahead(const ember__qbag *b, int64_t j, int64_t pd) {
    if (j + pd >= b->pf_n) return;
    const int64_t r = b->rows[j + pd];
    if (r < 0) return;
    const unsigned char *p = b->base + (size_t)r * b->rb;
    for (size_t o = 0; o < b->rb; o += 64) __builtin_prefetch(p + o, 0, 1);
    __builtin_prefetch(p + b->rb - 1, 0, 1);
}

// The row's scale and bias (INT8: fp32 after the D values; INT4/INT2: fp16 after the packed ones).
static inline void scale_bias(ember_qtype t, const unsigned char *row, int32_t D, float *scale, float *bias) {
    if (t == EMBER_QTYPE_INT8) {
        memcpy(scale, row + D, 4);
        memcpy(bias, row + D + 4, 4);
        return;
    }
    const int per = t == EMBER_QTYPE_INT4 ? 2 : 4;
    const unsigned char *sb = row + (D + per - 1) / per;
    uint16_t s, bb;
    memcpy(&s, sb, 2);
    memcpy(&bb, sb + 2, 2);
    *scale = ember__f16_to_f32(s);
    *bias = ember__f16_to_f32(bb);
}

// Element d of a row.
static inline float element(ember_qtype t, const unsigned char *row, int32_t d, float scale, float bias) {
    switch (t) {
    case EMBER_QTYPE_FP32: {
        float x;
        memcpy(&x, row + 4 * (size_t)d, 4);
        return x;
    }
    case EMBER_QTYPE_FP16: {
        uint16_t h;
        memcpy(&h, row + 2 * (size_t)d, 2);
        return ember__f16_to_f32(h);
    }
    case EMBER_QTYPE_INT8: return fmaf(scale, (float)row[d], bias);
    case EMBER_QTYPE_INT4: return fmaf(scale, (float)((row[d >> 1] >> (4 * (d & 1))) & 15), bias);
    case EMBER_QTYPE_INT2: return fmaf(scale, (float)((row[d >> 2] >> (2 * (d & 3))) & 3), bias);
    }
    return 0.0f;
}

// Elements [d0, d0 + w) of every id into acc, one element at a time.
static void pool_portable(const ember__qbag *b, int32_t d0, int32_t w, float *acc) {
    const int64_t pd = prefetch_ids(b->rb);
    for (int64_t j = 0; j < b->n; j++) {
        if (d0 == 0) prefetch_ahead(b, j, pd);
        const int64_t r = b->rows[j];
        if (r < 0) continue;
        const unsigned char *row = b->base + (size_t)r * b->rb;
        float scale = 0.0f, bias = 0.0f;
        if (b->qtype >= EMBER_QTYPE_INT8) scale_bias(b->qtype, row, b->D, &scale, &bias);
        const float wj = b->weights ? b->weights[j] : 1.0f;
        for (int32_t i = 0; i < w; i++) {
            const float v = element(b->qtype, row, d0 + i, scale, bias);
            acc[i] += b->weights ? wj * v : v;
        }
    }
}

static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float inv, float *out);

// MEAN's factor: 1 / (ids that reached a row), or 0 for SUM and for a bag none reached.
static inline float mean_factor(const ember__qbag *b) {
    if (!b->mean) return 0.0f;
    int64_t kept = 0;
    for (int64_t j = 0; j < b->n; j++) kept += b->rows[j] >= 0;
    return kept > 0 ? 1.0f / (float)kept : 0.0f;
}

static void pool_bag(const ember__qbag *b) {
    enum { CW = 8 * VW };
    const float inv = mean_factor(b);
    for (int32_t d0 = 0; d0 < b->D; d0 += CW) {
        const int32_t w = b->D - d0 < CW ? b->D - d0 : CW;
        const int nv = VW > 1 ? w / VW : 0;
        int32_t done = 0;
        if (nv > 0 && pool_vectors(b, d0, nv, inv, b->out + d0)) done = nv * VW;
        if (done < w) {
            float *o = b->out + d0 + done;
            memset(o, 0, sizeof(float) * (size_t)(w - done));
            pool_portable(b, d0 + done, w - done, o);
            if (inv != 0.0f)
                for (int32_t i = 0; i < w - done; i++) o[i] *= inv;
        }
    }
}

#define EMBER__QUANT_KERNELS(suffix, isa_value) \
    const ember__quant_kernels ember__quant_kernels_##suffix = {isa_value, pool_bag};

#endif
