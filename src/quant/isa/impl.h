// What every quantized pooling variant shares, included by generic.c, avx2.c and avx512.c (so
// compiled with each variant's target flags; everything here is static). The variant defines,
// before including this file:
//
//   VW   its vector width in floats (1 for generic)
//   static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float *acc)
//        pools elements [d0, d0 + nv*VW) of every id of the bag into acc (zeroed by the caller),
//        nv in [1, 4], returning 1, or 0 to leave those elements to the portable loop (a type it
//        does not vectorise)
//
// and this file gives the element decoding, the portable loop and the bag loop (columns in
// chunks of up to 4 vectors, the ids of the bag in order within each chunk), and defines the
// variant's table with EMBER__QUANT_KERNELS. The arithmetic of an element is quant.h's: v =
// scale * q (rounded), + bias (rounded), w * v (rounded) when weighted, then added to the sum, so
// every variant gives the same bits.
#ifndef EMBER_QUANT_ISA_IMPL_H
#define EMBER_QUANT_ISA_IMPL_H

#include <string.h>

#include "core/dtype.h"
#include "quant/internal.h"

// Ids ahead whose rows are prefetched.
#define QUANT_PREFETCH 8

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
    case EMBER_QTYPE_INT8: return scale * (float)row[d] + bias;
    case EMBER_QTYPE_INT4: return scale * (float)((row[d >> 1] >> (4 * (d & 1))) & 15) + bias;
    case EMBER_QTYPE_INT2: return scale * (float)((row[d >> 2] >> (2 * (d & 3))) & 3) + bias;
    }
    return 0.0f;
}

// Elements [d0, d0 + w) of every id into acc, one element at a time.
static void pool_portable(const ember__qbag *b, int32_t d0, int32_t w, float *acc) {
    for (int64_t j = 0; j < b->n; j++) {
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

static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float *acc);

static void pool_bag(const ember__qbag *b) {
    enum { CW = 4 * VW };
    int64_t kept = 0;
    for (int64_t j = 0; j < b->n; j++) kept += b->rows[j] >= 0;
    for (int32_t d0 = 0; d0 < b->D; d0 += CW) {
        const int32_t w = b->D - d0 < CW ? b->D - d0 : CW;
        float acc[CW];
        memset(acc, 0, sizeof acc);
        const int nv = VW > 1 ? w / VW : 0;
        int32_t done = 0;
        if (nv > 0 && pool_vectors(b, d0, nv, acc)) done = nv * VW;
        if (done < w) pool_portable(b, d0 + done, w - done, acc + done);
        if (b->mean && kept > 0) {
            const float inv = 1.0f / (float)kept;
            for (int32_t i = 0; i < w; i++) acc[i] *= inv;
        }
        memcpy(b->out + d0, acc, sizeof(float) * (size_t)w);
    }
}

#define EMBER__QUANT_KERNELS(suffix, isa_value) \
    const ember__quant_kernels ember__quant_kernels_##suffix = {isa_value, pool_bag};

#endif
