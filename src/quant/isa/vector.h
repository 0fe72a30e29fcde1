// The vector loops of the quantized pooling variants (avx2.c, avx512.c), written once over the
// primitives each variant defines before including this file (after quant/isa/impl.h):
//
//   vf                                a vector of VW floats
//   vf v_zero(void), v_set1(float), v_add(vf, vf), v_mul(vf, vf), void v_store(float *, vf)
//   (and, for the variant's own primitives below, v_fma(vf a, vf b, vf c): a*b + c, one rounding)
//   vf v_levels(ember_qtype T, vf scale, vf bias)
//                                     what a row's decoding needs beyond its scale and bias (AVX-512,
//                                     INT4 and INT2: a table of the row's level values
//                                     fmaf(scale, q, bias), one vector; otherwise v_zero())
//   vf v_values(ember_qtype T, const unsigned char *row, int32_t d, vf scale, vf bias, vf levels)
//                                     the values of elements d .. d+VW-1 of a row (the integer
//                                     types: fmaf(scale, q, bias)); d a multiple of VW
//   void v_scale_bias16(const unsigned char *p, vf *scale, vf *bias)
//                                     the fp16 scale and bias at p, widened and broadcast
//   void v_int4_pairs(const unsigned char *p, vf scale, vf bias, vf levels, vf *even, vf *odd)
//                                     the values of 2*VW INT4 elements from the VW bytes at p: the
//                                     even elements (low nibbles) and the odd ones (high nibbles)
//   void v_store_pairs(float *out, vf even, vf odd)
//                                     the 2*VW elements back in order
//
// Every element gets impl.h's operations in impl.h's order, so every variant's bits are the
// generic variant's.
#ifndef EMBER_QUANT_ISA_VECTOR_H
#define EMBER_QUANT_ISA_VECTOR_H

// The row's scale and bias, broadcast (INT8: fp32 after the D values; INT4/INT2: fp16 after the
// packed ones).
static inline __attribute__((always_inline)) void v_scale_bias(ember_qtype T, const unsigned char *row, int32_t D,
                                                               vf *scale, vf *bias) {
    if (T == EMBER_QTYPE_INT8) {
        float f[2];
        memcpy(f, row + D, 8);
        *scale = v_set1(f[0]);
        *bias = v_set1(f[1]);
    } else {
        v_scale_bias16(row + (T == EMBER_QTYPE_INT4 ? ((size_t)D + 1) / 2 : ((size_t)D + 3) / 4), scale, bias);
    }
}

// Elements [d0, d0 + NV*VW) of every id of the bag, in NV accumulators.
static inline __attribute__((always_inline)) void pool_fixed(const ember__qbag *b, int32_t d0, float inv, float *out,
                                                             const int NV, const ember_qtype T, const int W) {
    vf acc[8];
    for (int v = 0; v < NV; v++) acc[v] = v_zero();
    const int quant = T >= EMBER_QTYPE_INT8;
    const int64_t pd = prefetch_ids(b->rb);
    for (int64_t j = 0; j < b->n; j++) {
        if (d0 == 0) prefetch_ahead(b, j, pd);
        const int64_t r = b->rows[j];
        if (r < 0) continue;
        const unsigned char *row = b->base + (size_t)r * b->rb;
        vf scale = v_zero(), bias = v_zero();
        if (quant) v_scale_bias(T, row, b->D, &scale, &bias);
        const vf levels = v_levels(T, scale, bias);
        const vf wj = v_set1(W ? b->weights[j] : 1.0f);
        for (int v = 0; v < NV; v++) {
            vf x = v_values(T, row, d0 + VW * v, scale, bias, levels);
            if (W) x = v_mul(wj, x);
            acc[v] = v_add(acc[v], x);
        }
    }
    for (int v = 0; v < NV; v++) v_store(out + VW * v, inv != 0.0f ? v_mul(acc[v], v_set1(inv)) : acc[v]);
}

// INT4 in groups of 2*VW elements: the even and odd elements summed in accumulators of their own
// (each element still sums its ids in order, with the same operations) and interleaved back once
// per bag: half the instructions per row of pool_fixed's path.
static inline __attribute__((always_inline)) void pool_int4_pairs(const ember__qbag *b, int32_t d0, float inv,
                                                                  float *out, const int NP, const int W) {
    vf ev[4], od[4];
    for (int v = 0; v < NP; v++) ev[v] = od[v] = v_zero();
    const int64_t pd = prefetch_ids(b->rb);
    for (int64_t j = 0; j < b->n; j++) {
        if (d0 == 0) prefetch_ahead(b, j, pd);
        const int64_t r = b->rows[j];
        if (r < 0) continue;
        const unsigned char *row = b->base + (size_t)r * b->rb;
        vf scale, bias;
        v_scale_bias(EMBER_QTYPE_INT4, row, b->D, &scale, &bias);
        const vf levels = v_levels(EMBER_QTYPE_INT4, scale, bias);
        const vf wj = v_set1(W ? b->weights[j] : 1.0f);
        for (int v = 0; v < NP; v++) {
            vf lo, hi;
            v_int4_pairs(row + d0 / 2 + VW * v, scale, bias, levels, &lo, &hi);
            if (W) lo = v_mul(wj, lo), hi = v_mul(wj, hi);
            ev[v] = v_add(ev[v], lo);
            od[v] = v_add(od[v], hi);
        }
    }
    for (int v = 0; v < NP; v++) {
        if (inv != 0.0f) ev[v] = v_mul(ev[v], v_set1(inv)), od[v] = v_mul(od[v], v_set1(inv));
        v_store_pairs(out + 2 * VW * v, ev[v], od[v]);
    }
}

#define POOL_NV_(T, W)                                          \
    switch (nv) {                                               \
    case 1: pool_fixed(b, d0, inv, out, 1, T, W); return 1;     \
    case 2: pool_fixed(b, d0, inv, out, 2, T, W); return 1;     \
    case 3: pool_fixed(b, d0, inv, out, 3, T, W); return 1;     \
    case 4: pool_fixed(b, d0, inv, out, 4, T, W); return 1;     \
    case 5: pool_fixed(b, d0, inv, out, 5, T, W); return 1;     \
    case 6: pool_fixed(b, d0, inv, out, 6, T, W); return 1;     \
    case 7: pool_fixed(b, d0, inv, out, 7, T, W); return 1;     \
    default: pool_fixed(b, d0, inv, out, 8, T, W); return 1;    \
    }
#define POOL_T_(T)                  \
    if (b->weights) POOL_NV_(T, 1)  \
    else POOL_NV_(T, 0)
#define POOL_PAIRS_(W)                                              \
    switch (nv / 2) {                                               \
    case 1: pool_int4_pairs(b, d0, inv, out, 1, W); return 1;       \
    case 2: pool_int4_pairs(b, d0, inv, out, 2, W); return 1;       \
    case 3: pool_int4_pairs(b, d0, inv, out, 3, W); return 1;       \
    default: pool_int4_pairs(b, d0, inv, out, 4, W); return 1;      \
    }

// impl.h's entry: every type vectorised, INT4 in pairs when the vectors pair up.
static int pool_vectors(const ember__qbag *b, int32_t d0, int nv, float inv, float *out) {
    switch (b->qtype) {
    case EMBER_QTYPE_FP32: POOL_T_(EMBER_QTYPE_FP32)
    case EMBER_QTYPE_FP16: POOL_T_(EMBER_QTYPE_FP16)
    case EMBER_QTYPE_INT8: POOL_T_(EMBER_QTYPE_INT8)
    case EMBER_QTYPE_INT4:
        if (nv % 2 == 0) {
            if (b->weights) POOL_PAIRS_(1)
            else POOL_PAIRS_(0)
        }
        POOL_T_(EMBER_QTYPE_INT4)
    case EMBER_QTYPE_INT2: POOL_T_(EMBER_QTYPE_INT2)
    }
    return 0;
}

#undef POOL_NV_
#undef POOL_T_
#undef POOL_PAIRS_

#endif
