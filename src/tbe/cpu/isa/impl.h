// The portable pieces of every kernel variant, included by generic.c, avx2.c and avx512.c and
// so compiled with each variant's target flags (the compiler vectorises the element loops at
// that width). Everything here is static: each variant gets its own copy.
//
//   pool_run_portable       the pooled forward of one bag run, any dtype, any D, any ids
//   load_row / store_row    fp32 <-> storage rows (F16C conversions where the target has them)
//   optim_row               the optimizer update of one fp32 row (tbe/optim_rows.h)
//   update_row              optim_row on a stored row, with 16-bit rounding (nearest or stochastic)
//   reduce_segment_portable the coalesced gradient of one touched row
//   update_segments_impl    the backward loop over touched rows, with the variant's fused path
#ifndef EMBER_TBE_ISA_IMPL_H
#define EMBER_TBE_ISA_IMPL_H

#include <math.h>
#include <string.h>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "tbe/cpu/isa/isa.h"

// ---- rows ------------------------------------------------------------------------------------

// fp16 -> fp32 of n values: vcvtph2ps is exact and bit-identical to ember__f16_to_f32.
static inline void f16_to_f32_n(const uint16_t *restrict src, float *restrict dst, int32_t n) {
    int32_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = ember__f16_to_f32(src[i]);
}

// fp32 -> fp16 of n values, nearest even: vcvtps2ph (immediate 0) is bit-identical to
// ember__f32_to_f16, NaN payloads included.
static inline void f32_to_f16_n(const float *restrict src, uint16_t *restrict dst, int32_t n) {
    int32_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
#endif
    for (; i < n; i++) dst[i] = ember__f32_to_f16(src[i]);
}

static inline void load_row(ember_dtype dt, const void *src, float *restrict dst, int32_t n) {
    switch (dt) {
    case EMBER_DTYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case EMBER_DTYPE_BF16:
        for (int32_t i = 0; i < n; i++) dst[i] = ember__bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case EMBER_DTYPE_F16: f16_to_f32_n(src, dst, n); break;
    default: break; // not a storage dtype
    }
}

// Stores an fp32 row into 16-bit storage: nearest even, or stochastic with the random bits of
// (row_key, column) (ember__sr_hash). fp32 storage is handled by the caller.
static inline void store_row16(ember_dtype dt, void *dst, const float *restrict src, int32_t n, int sr,
                               uint32_t row_key) {
    uint16_t *restrict h = dst;
    if (!sr) {
        if (dt == EMBER_DTYPE_F16) {
            f32_to_f16_n(src, h, n);
        } else {
            for (int32_t d = 0; d < n; d++) h[d] = ember__f32_to_bf16(src[d]);
        }
    } else if (dt == EMBER_DTYPE_BF16) {
        for (int32_t d = 0; d < n; d++) h[d] = ember__f32_to_bf16_sr(src[d], ember__sr_hash(row_key, (uint32_t)d));
    } else {
        for (int32_t d = 0; d < n; d++) h[d] = ember__f32_to_f16_sr(src[d], ember__sr_hash(row_key, (uint32_t)d));
    }
}

// ---- forward ---------------------------------------------------------------------------------

// acc[d] += w * x[d] in id order (vectorised over d). Also the path for ids outside the table
// (CLAMP/SKIP), where each id is resolved and MEAN counts kept ids.
static void pool_run_portable(const ember__bag_run *r) {
    const int32_t D = r->D;
    const int rs = r->resolve_ids;
    float *xs = NULL, xbuf[256];
    if (r->dtype == EMBER_DTYPE_F16 && D <= 256) xs = xbuf; // converted row (F16C) before the adds
    for (int64_t k = 0; k < r->nb; k++) {
        float *restrict acc = r->out + (size_t)k * r->out_stride;
        memset(acc, 0, sizeof(float) * (size_t)D);
        int64_t kept = 0;
        for (int64_t j = r->off[k]; j < r->off[k + 1]; j++) {
            if (j + r->pd < r->pf_end) {
                int64_t p = rs ? ember__resolve_id(r->values[j + r->pd], r->rows, r->bounds) : r->values[j + r->pd];
                if (p >= 0) ember__prefetch_row(r->base + (size_t)p * r->rb, r->rb);
            }
            const int64_t row = rs ? ember__resolve_id(r->values[j], r->rows, r->bounds) : r->values[j];
            if (row < 0) continue;
            kept++;
            const void *x = r->base + (size_t)row * r->rb;
            const float w = r->weights ? r->weights[j] : 1.0f;
            switch (r->dtype) {
            case EMBER_DTYPE_F32: {
                const float *restrict xf = x;
                if (r->weights) for (int32_t d = 0; d < D; d++) acc[d] += w * xf[d];
                else for (int32_t d = 0; d < D; d++) acc[d] += xf[d];
                break;
            }
            case EMBER_DTYPE_BF16: {
                const uint16_t *restrict xh = x;
                if (r->weights) for (int32_t d = 0; d < D; d++) acc[d] += w * ember__bf16_to_f32(xh[d]);
                else for (int32_t d = 0; d < D; d++) acc[d] += ember__bf16_to_f32(xh[d]);
                break;
            }
            case EMBER_DTYPE_F16: {
                const uint16_t *restrict xh = x;
                if (xs) {
                    f16_to_f32_n(xh, xs, D);
                    if (r->weights) for (int32_t d = 0; d < D; d++) acc[d] += w * xs[d];
                    else for (int32_t d = 0; d < D; d++) acc[d] += xs[d];
                } else {
                    if (r->weights) for (int32_t d = 0; d < D; d++) acc[d] += w * ember__f16_to_f32(xh[d]);
                    else for (int32_t d = 0; d < D; d++) acc[d] += ember__f16_to_f32(xh[d]);
                }
                break;
            }
            default: break; // not a storage dtype
            }
        }
        // MEAN divides by the number of ids, as FBGEMM does; an empty bag stays 0.
        if (r->mean && kept > 0) {
            const float inv = 1.0f / (float)kept;
            for (int32_t d = 0; d < D; d++) acc[d] *= inv;
        }
    }
}

#include "tbe/cpu/optim_rows.h"

// One optimizer update of `row` of table tb with gradient g (clobbered); w is scratch [D].
// fp32 rows are updated in place; 16-bit rows through an fp32 copy.
static void update_row(const ember_ebc *ebc, const ember__table *tb, const ember__optim_step *st, int64_t row,
                       float *restrict g, float *restrict w) {
    (void)ebc; // the table knows where its rows are
    const int32_t D = tb->cfg.dim;
    unsigned char *p = ember__row_ptr(tb, row);
    if (tb->cfg.dtype == EMBER_DTYPE_F32) {
        optim_row(tb, st, row, (float *)p, g);
        return;
    }
    load_row(tb->cfg.dtype, p, w, D);
    optim_row(tb, st, row, w, g);
    store_row16(tb->cfg.dtype, p, w, D, tb->cfg.stochastic_rounding,
                tb->cfg.stochastic_rounding ? ember__sr_row_key(st->sr_key, row) : 0);
}

// ---- backward ----------------------------------------------------------------------------------

static void reduce_segment_portable(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k,
                                    int32_t D, float *restrict g) {
    memset(g, 0, sizeof(float) * (size_t)D);
    for (int64_t e = s->seg[k]; e < s->seg[k + 1]; e++) {
        float sc;
        const float *restrict go = ember__entry_grad(ebc, s, grad_out, e, &sc);
        for (int32_t d = 0; d < D; d++) g[d] += sc * go[d];
    }
}

// Advances t to the table holding segment k (tseg non-decreasing; empty tables are skipped).
static inline int32_t table_of(const int64_t *tseg, int32_t T, int32_t t, int64_t k) {
    while (t + 1 < T && tseg[t + 1] <= k) t++;
    return t;
}

typedef void (*reduce_fn)(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k, int32_t D,
                          float *g);

// A variant's fused register path for a table's segments: `kind_of` says which (0: none, the
// segment takes reduce + update_row), `run` reduces and updates segment k in registers.
typedef int (*fused_kind_fn)(const ember__table *tb);
typedef void (*fused_run_fn)(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k,
                             const ember__table *tb, const ember__optim_step *st, int kind);

// Reduces and applies segments [k0, k1), prefetching the rows a few segments ahead. Inlined
// into each variant with its fused path (constant function pointers: no indirect calls).
static inline __attribute__((always_inline)) void
update_segments_impl(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k0, int64_t k1,
                     float *g, float *w, reduce_fn reduce, fused_kind_fn kind_of, fused_run_fn run) {
    if (k0 >= k1) return;
    int32_t t = table_of(s->tseg, ebc->T, 0, k0), tp = t;
    int fused = kind_of(&ebc->tables[t]);
    for (int64_t k = k0; k < k1; k++) {
        const int32_t t_prev = t;
        t = table_of(s->tseg, ebc->T, t, k);
        const ember__table *tb = &ebc->tables[t];
        if (t != t_prev) fused = kind_of(tb);
        const int64_t kp = k + ember__prefetch_ids(tb->row_bytes);
        if (kp < k1) {
            // The row and state of segment kp, and the dL/dy slice of its first entry: a random
            // read in the B x sum_f D_f gradient (L3 at best) that otherwise stalls the reduce.
            tp = table_of(s->tseg, ebc->T, tp, kp);
            const ember__table *tbp = &ebc->tables[tp];
            ember__prefetch_update(tbp, s->row[s->seg[kp]]);
            float sc;
            ember__prefetch_row(ember__entry_grad(ebc, s, grad_out, s->seg[kp], &sc),
                                sizeof(float) * (size_t)tbp->cfg.dim);
        }
        if (fused) {
            run(ebc, s, grad_out, k, tb, &s->step[t], fused);
            continue;
        }
        reduce(ebc, s, grad_out, k, tb->cfg.dim, g);
        update_row(ebc, tb, &s->step[t], s->row[s->seg[k]], g, w);
    }
}

// ---- the fused register paths of the wide variants ---------------------------------------------

// avx2.c and avx512.c reduce a segment's gradient and update its row and state in registers for
// the common optimizers, specialised per (optimizer, storage): `kind` packs both.
enum {
    FUSED_SGD = EMBER__FUSED_SGD,
    FUSED_ROWWISE_ADAGRAD = EMBER__FUSED_ROWWISE_ADAGRAD,
    FUSED_ADAM = EMBER__FUSED_ADAM
};
enum { STORE_F32 = 0, STORE_BF16 = 4, STORE_F16 = 8, STORE_SR = 16 };

// The fused kind of table tb for a variant whose registers hold `lanes` floats: the optimizer's
// register path (its descriptor's `fused`) for rows with D % lanes == 0 and D <= 128, without
// weight decay, any storage dtype and rounding; 0 (reduce + update_row) otherwise.
static inline int fused_kind(const ember__table *tb, int32_t lanes) {
    const ember_optim_config *o = &tb->cfg.optim;
    if (tb->cfg.dim % lanes != 0 || tb->cfg.dim > 128) return 0;
    if (o->weight_decay_mode != EMBER_WD_NONE && o->weight_decay != 0.0f) return 0;
    int kind = (int)tb->optim->fused;
    if (!kind) return 0;
    if (tb->cfg.dtype == EMBER_DTYPE_BF16) kind |= STORE_BF16;
    if (tb->cfg.dtype == EMBER_DTYPE_F16) kind |= STORE_F16;
    if (tb->cfg.dtype != EMBER_DTYPE_F32 && tb->cfg.stochastic_rounding) kind |= STORE_SR;
    return kind;
}

// Defines `static void fused_run(...)` (a fused_run_fn) calling the variant's always-inline
// SEGMENT(ebc, s, grad_out, k, tb, st, OPT, STORE) with constant OPT and STORE: 3 x 5 copies.
#define EMBER__FUSED_STORES(SEGMENT, OPT)                                                                   \
    switch (kind & ~3) {                                                                                    \
    case STORE_F32: SEGMENT(ebc, s, grad_out, k, tb, st, OPT, STORE_F32); break;                             \
    case STORE_BF16: SEGMENT(ebc, s, grad_out, k, tb, st, OPT, STORE_BF16); break;                           \
    case STORE_F16: SEGMENT(ebc, s, grad_out, k, tb, st, OPT, STORE_F16); break;                             \
    case STORE_BF16 | STORE_SR: SEGMENT(ebc, s, grad_out, k, tb, st, OPT, STORE_BF16 | STORE_SR); break;     \
    case STORE_F16 | STORE_SR: SEGMENT(ebc, s, grad_out, k, tb, st, OPT, STORE_F16 | STORE_SR); break;       \
    default: break;                                                                                         \
    }
#define EMBER__DEFINE_FUSED_RUN(SEGMENT)                                                                    \
    static void fused_run(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k,  \
                          const ember__table *tb, const ember__optim_step *st, int kind) {                  \
        switch (kind & 3) {                                                                                 \
        case FUSED_SGD: EMBER__FUSED_STORES(SEGMENT, FUSED_SGD) break;                                      \
        case FUSED_ROWWISE_ADAGRAD: EMBER__FUSED_STORES(SEGMENT, FUSED_ROWWISE_ADAGRAD) break;              \
        case FUSED_ADAM: EMBER__FUSED_STORES(SEGMENT, FUSED_ADAM) break;                                    \
        default: break;                                                                                     \
        }                                                                                                   \
    }

#endif
