// The limit loop's body, compiled once per variant with LIMIT_VW floats per vector (4: SSE2,
// 8: AVX2, 16: AVX-512). GNU C vectors of exactly the target's register width, 8 of them per
// column block: the accumulators of a 32/64/128-column block stay in registers.
#ifndef EMBER_BENCH_LIMIT_IMPL_H
#define EMBER_BENCH_LIMIT_IMPL_H

#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "limit/limit.h"

#define LIMIT_BLOCK (8 * LIMIT_VW) // columns per register block

typedef float vf __attribute__((vector_size(4 * LIMIT_VW)));
typedef uint32_t vu __attribute__((vector_size(4 * LIMIT_VW)));
typedef uint16_t vh __attribute__((vector_size(2 * LIMIT_VW)));

// Prefetch of a whole row: into L1 (hint 0, locality 3) or L2 (hint 1, locality 1). Inlined
// always: GCC deletes calls to a function whose only effect is a prefetch.
static inline __attribute__((always_inline)) void prefetch_lines(const unsigned char *p, size_t bytes, int hint) {
    if (hint) {
        for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 1);
    } else {
        for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
    }
}

// fp16 bits -> fp32 for finite values with integer ops (for targets without F16C): the
// magnitude shifted into fp32 position and scaled by 2^112 re-biases the exponent exactly,
// subnormals included; then the sign.
static inline vf f16_to_f32_int(vu u) {
    vu mag = (u & 0x7fffu) << 13, sign = (u & 0x8000u) << 16;
    vf f;
    memcpy(&f, &mag, sizeof f);
    f *= 0x1p112f;
    memcpy(&mag, &f, sizeof f);
    mag |= sign;
    memcpy(&f, &mag, sizeof f);
    return f;
}

static inline __attribute__((always_inline)) vf load_v(ember_dtype dt, const unsigned char *p) {
    vf f;
    if (dt == EMBER_DTYPE_F32) {
        memcpy(&f, p, sizeof f);
        return f;
    }
#if defined(__F16C__) && LIMIT_VW == 8
    if (dt == EMBER_DTYPE_F16) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        memcpy(&f, &x, sizeof f);
        return f;
    }
#elif defined(__AVX512F__) && LIMIT_VW == 16
    if (dt == EMBER_DTYPE_F16) {
        __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        memcpy(&f, &x, sizeof f);
        return f;
    }
#endif
    vh h;
    memcpy(&h, p, sizeof h);
    vu u = __builtin_convertvector(h, vu);
    if (dt == EMBER_DTYPE_BF16) {
        u <<= 16;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return f16_to_f32_int(u);
}

// One bag, columns [c0, c0 + LIMIT_VW*nv), accumulated in nv vector registers.
static inline __attribute__((always_inline)) void bag_vec(const unsigned char *base, size_t rb, ember_dtype dt,
                                                          const int64_t *restrict values, int64_t j0, int64_t j1,
                                                          int64_t jend, int pd, int hint, int32_t c0, int nv,
                                                          float *acc) {
    const size_t es = ember_dtype_size(dt);
    vf a[8] = {{0}};
    for (int64_t j = j0; j < j1; j++) {
        if (c0 == 0 && j + pd < jend) prefetch_lines(base + (size_t)values[j + pd] * rb, rb, hint);
        const unsigned char *x = base + (size_t)values[j] * rb + (size_t)c0 * es;
        for (int v = 0; v < nv; v++) a[v] += load_v(dt, x + LIMIT_VW * es * (size_t)v);
    }
    for (int v = 0; v < nv; v++) memcpy(acc + c0 + LIMIT_VW * v, &a[v], sizeof a[v]);
}

// bf16, columns [c0, c0 + 2*LIMIT_VW*nw): each 32-bit word holds two columns, so `w << 16` is the
// even column's fp32 and `w & 0xffff0000` the odd one's: one load, a shift, an and and two adds
// per 2*LIMIT_VW columns. Even and odd sums are interleaved back once per bag.
static inline __attribute__((always_inline)) void bag_bf16_pairs(const unsigned char *base, size_t rb,
                                                                 const int64_t *restrict values, int64_t j0,
                                                                 int64_t j1, int64_t jend, int pd, int hint,
                                                                 int32_t c0, int nw, float *acc) {
    vf ev[4] = {{0}}, od[4] = {{0}};
    for (int64_t j = j0; j < j1; j++) {
        if (c0 == 0 && j + pd < jend) prefetch_lines(base + (size_t)values[j + pd] * rb, rb, hint);
        const unsigned char *x = base + (size_t)values[j] * rb + (size_t)c0 * 2;
        for (int v = 0; v < nw; v++) {
            vu w, lo, hi;
            memcpy(&w, x + 4 * LIMIT_VW * (size_t)v, sizeof w);
            lo = w << 16;
            hi = w & 0xffff0000u;
            vf fl, fh;
            memcpy(&fl, &lo, sizeof fl);
            memcpy(&fh, &hi, sizeof fh);
            ev[v] += fl;
            od[v] += fh;
        }
    }
    for (int v = 0; v < nw; v++)
        for (int k = 0; k < LIMIT_VW; k++) {
            acc[c0 + 2 * LIMIT_VW * v + 2 * k] = ev[v][k];
            acc[c0 + 2 * LIMIT_VW * v + 2 * k + 1] = od[v][k];
        }
}

// Bags split over the threads like the kernel; the row `pd` ids ahead (across bag boundaries
// within a table) is prefetched, into L1 or L2; sums in memory or in registers. It does no
// bounds handling, weights or pooling mode: a floor, not a competitor.
static void gather_limit(const gather_in *g, limit_cfg lc, int threads) {
    const int pd = lc.pd, hint = lc.hint;
    const tbe_bench_shape *s = g->s;
    const int32_t B = s->B, L = s->L, D = s->D, T = s->T;
    const int64_t nbags = (int64_t)T * B, per_table = (int64_t)B * L;
    const size_t rb = g->row_bytes;
    const int64_t *restrict values = g->values;
    const int regs = lc.regs && D % LIMIT_VW == 0;
    // Contiguous chunks handed out dynamically, 8 per thread, as the kernels do (a static split
    // waits for a thread that the shared machine has descheduled).
    const int64_t chunk = nbags / (threads * 8) > 0 ? nbags / (threads * 8) : 1;
#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads)
    for (int64_t i = 0; i < nbags; i++) {
        const int32_t t = (int32_t)(i / B), b = (int32_t)(i % B);
        const unsigned char *base = g->base[t];
        const int64_t j0 = i * L, jend = (int64_t)(t + 1) * per_table;
        float *restrict acc = g->out + (size_t)b * (size_t)T * (size_t)D + (size_t)t * (size_t)D;
        if (regs) {
            // Full blocks with a constant vector count (so the accumulators stay in registers),
            // then the rest.
            for (int32_t c0 = 0; c0 < D; c0 += LIMIT_BLOCK) {
                const int nv = D - c0 >= LIMIT_BLOCK ? 8 : (D - c0) / LIMIT_VW;
#define LIMIT_BAG(DT)                                                                                 \
    if (nv == 8) bag_vec(base, rb, DT, values, j0, j0 + L, jend, pd, hint, c0, 8, acc);              \
    else bag_vec(base, rb, DT, values, j0, j0 + L, jend, pd, hint, c0, nv, acc);
                if (g->dtype == EMBER_DTYPE_BF16 && (D - c0) % (2 * LIMIT_VW) == 0) {
                    if (nv == 8) bag_bf16_pairs(base, rb, values, j0, j0 + L, jend, pd, hint, c0, 4, acc);
                    else bag_bf16_pairs(base, rb, values, j0, j0 + L, jend, pd, hint, c0, nv / 2, acc);
                    continue;
                }
                switch (g->dtype) {
                case EMBER_DTYPE_F32: LIMIT_BAG(EMBER_DTYPE_F32) break;
                case EMBER_DTYPE_BF16: LIMIT_BAG(EMBER_DTYPE_BF16) break;
                case EMBER_DTYPE_F16: LIMIT_BAG(EMBER_DTYPE_F16) break;
                default: break; // not a storage dtype
                }
#undef LIMIT_BAG
            }
            continue;
        }
        for (int32_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t j = j0; j < j0 + L; j++) {
            if (j + pd < jend) prefetch_lines(base + (size_t)values[j + pd] * rb, rb, hint);
            const unsigned char *row = base + (size_t)values[j] * rb;
            if (g->dtype == EMBER_DTYPE_F32) {
                const float *restrict x = (const float *)row;
                for (int32_t d = 0; d < D; d++) acc[d] += x[d];
            } else {
                int32_t d = 0;
                for (; d + LIMIT_VW <= D; d += LIMIT_VW) {
                    vf a;
                    memcpy(&a, acc + d, sizeof a);
                    a += load_v(g->dtype, row + 2 * (size_t)d);
                    memcpy(acc + d, &a, sizeof a);
                }
                for (; d < D; d++) {
                    const uint16_t h = ((const uint16_t *)row)[d];
                    vu u = {0};
                    u[0] = h;
                    acc[d] += g->dtype == EMBER_DTYPE_BF16 ? ((vf)(u << 16))[0] : f16_to_f32_int(u)[0];
                }
            }
        }
    }
}

#endif
