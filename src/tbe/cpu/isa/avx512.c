// The AVX-512 kernel variant (F, BW, VL, DQ; compiled with those target flags only): 16-lane
// registers for the pooled forward and for the fused backward of the common optimizers, masked
// loads and stores for row widths below 128. Every path performs the operations of the portable
// loops in impl.h in the same order, so the bits are the generic variant's.
#include "tbe/cpu/isa/impl.h"

// ---- forward -----------------------------------------------------------------------------------

// 16 consecutive elements of a stored row as fp32. bf16 -> fp32 is a 16-bit left shift of the
// zero-extended bits (exact); fp16 -> fp32 is vcvtph2ps (exact, subnormals included).
static inline __attribute__((always_inline)) __m512 load16(ember_dtype dt, const unsigned char *p) {
    if (dt == EMBER_DTYPE_F32) return _mm512_loadu_ps((const float *)p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (dt == EMBER_DTYPE_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

// Columns [c0, c0 + 16*NV) of every bag of the run, the accumulators held in NV registers
// (NV <= 8: 128 columns) across the whole bag. Only the first column block prefetches.
// dt, NV and weighted are compile-time constants after inlining: one specialised loop each.
static inline __attribute__((always_inline)) void pool_block(const ember__bag_run *r, int32_t c0, const ember_dtype dt,
                                                             const int NV, const int weighted, const int prefetch) {
    const size_t es = ember_dtype_size(dt);
    const unsigned char *base = r->base + (size_t)c0 * es;
    for (int64_t k = 0; k < r->nb; k++) {
        __m512 acc[8];
        for (int v = 0; v < NV; v++) acc[v] = _mm512_setzero_ps();
        const int64_t j0 = r->off[k], j1 = r->off[k + 1];
        for (int64_t j = j0; j < j1; j++) {
            if (prefetch && j + r->pd < r->pf_end)
                ember__prefetch_row(r->base + (size_t)r->values[j + r->pd] * r->rb, r->rb);
            const unsigned char *x = base + (size_t)r->values[j] * r->rb;
            if (weighted) {
                const __m512 w = _mm512_set1_ps(r->weights[j]);
                for (int v = 0; v < NV; v++)
                    acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(w, load16(dt, x + 16 * es * v)));
            } else {
                for (int v = 0; v < NV; v++) acc[v] = _mm512_add_ps(acc[v], load16(dt, x + 16 * es * v));
            }
        }
        if (r->mean && j1 > j0) {
            const __m512 inv = _mm512_set1_ps(1.0f / (float)(j1 - j0));
            for (int v = 0; v < NV; v++) acc[v] = _mm512_mul_ps(acc[v], inv);
        }
        float *o = r->out + (size_t)k * r->out_stride + c0;
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(o + 16 * v, acc[v]);
    }
}

// bf16 with D % 32 == 0: each 32-bit word holds two columns, so `w << 16` is the even column's
// fp32 and `w & 0xffff0000` the odd one's. One load, a shift, an and and two adds per 32
// columns (instead of two widening loads, two shifts, two adds): fewer micro-ops per row keep
// more rows' misses in flight. Even/odd sums are interleaved back once per bag. Each column
// still sums its own values in id order: the same bits as the portable loop.
static inline __attribute__((always_inline)) void pool_block_bf16(const ember__bag_run *r, int32_t c0, const int NW,
                                                                  const int weighted, const int prefetch) {
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    // Output k of a 16-column half takes even[k/2] or odd[k/2] (k odd), from the low or high
    // 8 pairs of the 32-column group.
    const __m512i idx_lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i idx_hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    const unsigned char *base = r->base + (size_t)c0 * 2;
    for (int64_t k = 0; k < r->nb; k++) {
        __m512 ev[4], od[4];
        for (int v = 0; v < NW; v++) ev[v] = od[v] = _mm512_setzero_ps();
        const int64_t j0 = r->off[k], j1 = r->off[k + 1];
        for (int64_t j = j0; j < j1; j++) {
            if (prefetch && j + r->pd < r->pf_end)
                ember__prefetch_row(r->base + (size_t)r->values[j + r->pd] * r->rb, r->rb);
            const unsigned char *x = base + (size_t)r->values[j] * r->rb;
            for (int v = 0; v < NW; v++) {
                const __m512i w = _mm512_loadu_si512((const void *)(x + 64 * v));
                __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
                __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(w, hi_mask));
                if (weighted) {
                    const __m512 wt = _mm512_set1_ps(r->weights[j]);
                    lo = _mm512_mul_ps(wt, lo);
                    hi = _mm512_mul_ps(wt, hi);
                }
                ev[v] = _mm512_add_ps(ev[v], lo);
                od[v] = _mm512_add_ps(od[v], hi);
            }
        }
        if (r->mean && j1 > j0) {
            const __m512 inv = _mm512_set1_ps(1.0f / (float)(j1 - j0));
            for (int v = 0; v < NW; v++) {
                ev[v] = _mm512_mul_ps(ev[v], inv);
                od[v] = _mm512_mul_ps(od[v], inv);
            }
        }
        float *o = r->out + (size_t)k * r->out_stride + c0;
        for (int v = 0; v < NW; v++) {
            _mm512_storeu_ps(o + 32 * v, _mm512_permutex2var_ps(ev[v], idx_lo, od[v]));
            _mm512_storeu_ps(o + 32 * v + 16, _mm512_permutex2var_ps(ev[v], idx_hi, od[v]));
        }
    }
}

// Dispatch on the block width: full 128-column blocks, then the remainder (D % 16 == 0).
static inline __attribute__((always_inline)) void pool_run_dt(const ember__bag_run *r, const ember_dtype dt,
                                                              const int weighted) {
    for (int32_t c0 = 0; c0 < r->D; c0 += 128) {
        const int nv = (r->D - c0) >= 128 ? 8 : (r->D - c0) / 16, pf = c0 == 0;
        if (dt == EMBER_DTYPE_BF16 && nv % 2 == 0) {
            switch (nv / 2) {
            case 4: pf ? pool_block_bf16(r, c0, 4, weighted, 1) : pool_block_bf16(r, c0, 4, weighted, 0); break;
            case 3: pf ? pool_block_bf16(r, c0, 3, weighted, 1) : pool_block_bf16(r, c0, 3, weighted, 0); break;
            case 2: pf ? pool_block_bf16(r, c0, 2, weighted, 1) : pool_block_bf16(r, c0, 2, weighted, 0); break;
            default: pf ? pool_block_bf16(r, c0, 1, weighted, 1) : pool_block_bf16(r, c0, 1, weighted, 0); break;
            }
            continue;
        }
#define EMBER_POOL_NV(N)                                                   \
    case N:                                                                \
        if (pf) pool_block(r, c0, dt, N, weighted, 1);                     \
        else pool_block(r, c0, dt, N, weighted, 0);                        \
        break;
        switch (nv) {
            EMBER_POOL_NV(1) EMBER_POOL_NV(2) EMBER_POOL_NV(3) EMBER_POOL_NV(4)
            EMBER_POOL_NV(5) EMBER_POOL_NV(6) EMBER_POOL_NV(7) EMBER_POOL_NV(8)
        default: break;
        }
#undef EMBER_POOL_NV
    }
}

static void pool_run(const ember__bag_run *r) {
    if (r->resolve_ids || r->D % 16 != 0) {
        pool_run_portable(r);
        return;
    }
    const int w = r->weights != NULL;
    switch (r->dtype) {
    case EMBER_DTYPE_F32: w ? pool_run_dt(r, EMBER_DTYPE_F32, 1) : pool_run_dt(r, EMBER_DTYPE_F32, 0); break;
    case EMBER_DTYPE_BF16: w ? pool_run_dt(r, EMBER_DTYPE_BF16, 1) : pool_run_dt(r, EMBER_DTYPE_BF16, 0); break;
    case EMBER_DTYPE_F16: w ? pool_run_dt(r, EMBER_DTYPE_F16, 1) : pool_run_dt(r, EMBER_DTYPE_F16, 0); break;
    default: break; // not a storage dtype
    }
}

// ---- backward ----------------------------------------------------------------------------------

// Columns [c0, c0 + 16*NV) of segment k's gradient, accumulated in NV registers: the same
// mul-then-add, entry after entry, as the portable loop.
static inline __attribute__((always_inline)) void reduce_block(const ember_ebc *ebc, const ember__segments *s,
                                                               const float *grad_out, int64_t e0, int64_t e1,
                                                               int32_t c0, const int NV, float *restrict g) {
    __m512 acc[8];
    for (int v = 0; v < NV; v++) acc[v] = _mm512_setzero_ps();
    for (int64_t e = e0; e < e1; e++) {
        float sc;
        const float *go = ember__entry_grad(ebc, s, grad_out, e, &sc) + c0;
        const __m512 vs = _mm512_set1_ps(sc);
        for (int v = 0; v < NV; v++) acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(vs, _mm512_loadu_ps(go + 16 * v)));
    }
    for (int v = 0; v < NV; v++) _mm512_storeu_ps(g + c0 + 16 * v, acc[v]);
}

static void reduce_segment(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k, int32_t D,
                           float *restrict g) {
    if (D % 16 != 0) {
        reduce_segment_portable(ebc, s, grad_out, k, D, g);
        return;
    }
    const int64_t e0 = s->seg[k], e1 = s->seg[k + 1];
    for (int32_t c0 = 0; c0 < D; c0 += 128) {
        switch ((D - c0) >= 128 ? 8 : (D - c0) / 16) {
        case 8: reduce_block(ebc, s, grad_out, e0, e1, c0, 8, g); break;
        case 7: reduce_block(ebc, s, grad_out, e0, e1, c0, 7, g); break;
        case 6: reduce_block(ebc, s, grad_out, e0, e1, c0, 6, g); break;
        case 5: reduce_block(ebc, s, grad_out, e0, e1, c0, 5, g); break;
        case 4: reduce_block(ebc, s, grad_out, e0, e1, c0, 4, g); break;
        case 3: reduce_block(ebc, s, grad_out, e0, e1, c0, 3, g); break;
        case 2: reduce_block(ebc, s, grad_out, e0, e1, c0, 2, g); break;
        default: reduce_block(ebc, s, grad_out, e0, e1, c0, 1, g); break;
        }
    }
}

static int fused_kind_of(const ember__table *tb) { return fused_kind(tb, 16); }

// fp32 -> bf16 with round to nearest even, exactly as ember__f32_to_bf16 (NaN: quieted upper
// half). Not vcvtneps2bf16, which treats denormal inputs as zero.
static inline __m512i f32_to_bf16_rne(__m512 x) {
    const __m512i u = _mm512_castps_si512(x), hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

// ember__sr_hash of 16 columns d0 .. d0+15.
static inline __m512i sr_hash16(uint32_t row_key, int32_t d0) {
    const __m512i d = _mm512_add_epi32(_mm512_set1_epi32(d0), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4,
                                                                                3, 2, 1, 0));
    __m512i h = _mm512_xor_si512(_mm512_set1_epi32((int)row_key),
                                 _mm512_mullo_epi32(d, _mm512_set1_epi32((int)0x9e3779b9u)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32((int)0x85ebca6bu));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32((int)0xc2b2ae35u));
    return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}

// ember__f32_to_bf16_sr on 16 lanes (32-bit lanes holding the 16-bit results).
static inline __m512i f32_to_bf16_sr(__m512 x, __m512i rnd) {
    const __m512i u = _mm512_castps_si512(x), expm = _mm512_set1_epi32(0x7f800000);
    const __m512i r = _mm512_add_epi32(u, _mm512_and_si512(rnd, _mm512_set1_epi32(0xffff)));
    const __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expm), expm) |
                              _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, expm), expm);
    return _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16), special, f32_to_bf16_rne(x));
}

// ember__f32_to_f16_sr on 16 lanes (32-bit lanes holding the 16-bit results).
static inline __m512i f32_to_f16_sr(__m512 x, __m512i rnd) {
    const __m512i u = _mm512_castps_si512(x), a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000));
    const __m512 ax = _mm512_castsi512_ps(a);
    // Normal range: add 13 random bits below the kept mantissa, truncate, re-bias.
    const __m512i nrm = _mm512_sub_epi32(
        _mm512_srli_epi32(_mm512_add_epi32(a, _mm512_and_si512(rnd, _mm512_set1_epi32(0x1fff))), 13),
        _mm512_set1_epi32(112 << 10));
    // Subnormal range: x = |f| 2^24, up when (rnd >> 8) 2^-24 < frac(x).
    const __m512 xs = _mm512_mul_ps(ax, _mm512_set1_ps(0x1p24f));
    const __m512i t = _mm512_cvttps_epi32(xs);
    const __m512 frac = _mm512_sub_ps(xs, _mm512_cvtepi32_ps(t));
    const __m512 r = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(rnd, 8)), _mm512_set1_ps(0x1p-24f));
    const __m512i sub = _mm512_mask_add_epi32(t, _mm512_cmp_ps_mask(r, frac, _CMP_LT_OQ), t, _mm512_set1_epi32(1));
    const __mmask16 normal = _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x38800000));
    __m512i res = _mm512_or_si512(sign, _mm512_mask_mov_epi32(sub, normal, nrm));
    // NaN, inf and |f| >= 65504: nearest.
    const __mmask16 big = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(65504.0f), _CMP_NLT_UQ);
    const __m512i near = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return _mm512_mask_mov_epi32(res, big, near);
}

// Segment k of a table served by a fused path: the coalesced gradient stays in 8 registers
// (lanes beyond D masked off) from the reduce to the update of the stored row and its state:
// no call and no round trip through memory. At E = 1e6 nearly every segment is a single id and
// this per-segment overhead was 20-27% of the step (measured A/B). The same operations in the
// same order as reduce_segment + optim_row (row-wise Adagrad's sum of squares in
// ember__sum16's lane order; masked lanes add exact zeros), hence the same bits.
static inline __attribute__((always_inline)) void fused_segment(const ember_ebc *ebc, const ember__segments *s,
                                                                const float *grad_out, int64_t k,
                                                                const ember__table *tb, const ember__optim_step *st,
                                                                const int OPT, const int STORE) {
    const int32_t D = tb->cfg.dim;
    __mmask16 m[8];
    __m512 g[8];
    for (int v = 0; v < 8; v++) {
        m[v] = 16 * v < D ? (__mmask16)0xffff : (__mmask16)0;
        g[v] = _mm512_setzero_ps();
    }
    for (int64_t e = s->seg[k]; e < s->seg[k + 1]; e++) {
        float sc;
        const float *go = ember__entry_grad(ebc, s, grad_out, e, &sc);
        const __m512 vs = _mm512_set1_ps(sc);
        for (int v = 0; v < 8; v++)
            g[v] = _mm512_add_ps(g[v], _mm512_mul_ps(vs, _mm512_maskz_loadu_ps(m[v], go + 16 * v)));
    }
    const int64_t row = s->row[s->seg[k]];
    unsigned char *p = ember__row_ptr(tb, row);
    const int dt = STORE & (STORE_BF16 | STORE_F16);
    __m512 w[8];
    for (int v = 0; v < 8; v++) {
        if (dt == STORE_F32) {
            w[v] = _mm512_maskz_loadu_ps(m[v], (const float *)p + 16 * v);
        } else {
            const __m256i h = _mm256_maskz_loadu_epi16(m[v], (const uint16_t *)p + 16 * v);
            w[v] = dt == STORE_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                                    : _mm512_cvtph_ps(h);
        }
    }
    const ember_optim_config *o = &tb->cfg.optim;
    if (OPT == FUSED_ADAM) {
        // m1 <- b1 m1 + (1-b1) g;  m2 <- b2 m2 + (1-b2) g^2;  w <- w - lr (m1/c1) / (sqrt(m2/c2) + eps)
        float *m1 = tb->m1 + (size_t)row * (size_t)D, *m2 = tb->m2 + (size_t)row * (size_t)D;
        const __m512 b1 = _mm512_set1_ps(o->beta1), b2 = _mm512_set1_ps(o->beta2);
        const __m512 nb1 = _mm512_set1_ps(1.0f - o->beta1), nb2 = _mm512_set1_ps(1.0f - o->beta2);
        const __m512 c1 = _mm512_set1_ps(st->c1), c2 = _mm512_set1_ps(st->c2), eps = _mm512_set1_ps(o->eps);
        const __m512 lr = _mm512_set1_ps(o->lr);
        for (int v = 0; v < 8; v++) {
            __m512 a = _mm512_maskz_loadu_ps(m[v], m1 + 16 * v), b = _mm512_maskz_loadu_ps(m[v], m2 + 16 * v);
            a = _mm512_add_ps(_mm512_mul_ps(b1, a), _mm512_mul_ps(nb1, g[v]));
            b = _mm512_add_ps(_mm512_mul_ps(b2, b), _mm512_mul_ps(_mm512_mul_ps(nb2, g[v]), g[v]));
            _mm512_mask_storeu_ps(m1 + 16 * v, m[v], a);
            _mm512_mask_storeu_ps(m2 + 16 * v, m[v], b);
            const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(b, c2)), eps);
            const __m512 r = _mm512_div_ps(_mm512_div_ps(a, c1), den);
            w[v] = _mm512_sub_ps(w[v], _mm512_mul_ps(lr, r));
        }
    } else {
        float mult = o->lr;
        if (OPT == FUSED_ROWWISE_ADAGRAD) {
            __m512 sq = _mm512_mul_ps(g[0], g[0]);
            for (int v = 1; v < 8; v++) sq = _mm512_add_ps(sq, _mm512_mul_ps(g[v], g[v]));
            float lane[16];
            _mm512_storeu_ps(lane, sq);
            float *m1 = tb->m1 + row;
            *m1 += ember__sum16(lane) / (float)D;
            mult = o->lr / (sqrtf(*m1) + o->eps);
        }
        const __m512 vm = _mm512_set1_ps(mult);
        for (int v = 0; v < 8; v++) w[v] = _mm512_sub_ps(w[v], _mm512_mul_ps(vm, g[v]));
    }
    const uint32_t key = (STORE & STORE_SR) ? ember__sr_row_key(st->sr_key, row) : 0;
    for (int v = 0; v < 8; v++) {
        if (dt == STORE_F32) {
            _mm512_mask_storeu_ps((float *)p + 16 * v, m[v], w[v]);
            continue;
        }
        __m512i h;
        if (STORE & STORE_SR) {
            const __m512i rnd = sr_hash16(key, 16 * v);
            h = dt == STORE_BF16 ? f32_to_bf16_sr(w[v], rnd) : f32_to_f16_sr(w[v], rnd);
        } else {
            h = dt == STORE_BF16 ? f32_to_bf16_rne(w[v])
                                 : _mm512_cvtepu16_epi32(_mm512_cvtps_ph(w[v], _MM_FROUND_TO_NEAREST_INT |
                                                                                    _MM_FROUND_NO_EXC));
        }
        _mm256_mask_storeu_epi16((uint16_t *)p + 16 * v, m[v], _mm512_cvtepi32_epi16(h));
    }
}

EMBER__DEFINE_FUSED_RUN(fused_segment)

static void update_segments(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k0,
                            int64_t k1, float *g, float *w) {
    update_segments_impl(ebc, s, grad_out, k0, k1, g, w, reduce_segment, fused_kind_of, fused_run);
}

EMBER__TBE_KERNELS(avx512, EMBER_ISA_AVX512)
