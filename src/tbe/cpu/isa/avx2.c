// The AVX2 kernel variant (AVX2, FMA, F16C; compiled with those target flags only): 8-lane
// registers for the pooled forward and the fused backward, F16C for fp16 rows. Sixteen ymm
// registers hold 64 columns of accumulators, so wider rows are walked in 64-column blocks per bag
// (the bag's rows are in L1 for the second block). Every path performs the operations of the
// portable loops in impl.h in the same order, so the bits are the generic variant's.
#include "tbe/cpu/isa/impl.h"

// ---- forward -----------------------------------------------------------------------------------

// 8 consecutive elements of a stored row as fp32 (bf16: exact shift; fp16: vcvtph2ps, exact).
static inline __attribute__((always_inline)) __m256 load8(ember_dtype dt, const unsigned char *p) {
    if (dt == EMBER_DTYPE_F32) return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (dt == EMBER_DTYPE_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

// Bag k, columns [c0, c0 + 8*NV), NV <= 8, accumulated in NV registers over the bag's ids.
static inline __attribute__((always_inline)) void pool_bag(const ember__bag_run *r, int64_t k, int32_t c0,
                                                           const ember_dtype dt, const int NV, const int weighted,
                                                           const int prefetch) {
    const size_t es = ember_dtype_size(dt);
    const unsigned char *base = r->base + (size_t)c0 * es;
    __m256 acc[8];
    for (int v = 0; v < NV; v++) acc[v] = _mm256_setzero_ps();
    const int64_t j0 = r->off[k], j1 = r->off[k + 1];
    for (int64_t j = j0; j < j1; j++) {
        if (prefetch && j + r->pd < r->pf_end)
            ember__prefetch_row(r->base + (size_t)r->values[j + r->pd] * r->rb, r->rb);
        const unsigned char *x = base + (size_t)r->values[j] * r->rb;
        if (weighted) {
            const __m256 w = _mm256_set1_ps(r->weights[j]);
            for (int v = 0; v < NV; v++) acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(w, load8(dt, x + 8 * es * v)));
        } else {
            for (int v = 0; v < NV; v++) acc[v] = _mm256_add_ps(acc[v], load8(dt, x + 8 * es * v));
        }
    }
    if (r->mean && j1 > j0) {
        const __m256 inv = _mm256_set1_ps(1.0f / (float)(j1 - j0));
        for (int v = 0; v < NV; v++) acc[v] = _mm256_mul_ps(acc[v], inv);
    }
    float *o = r->out + (size_t)k * r->out_stride + c0;
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + 8 * v, acc[v]);
}

// bf16, columns [c0, c0 + 16*NW), NW <= 4: each 32-bit word holds two columns, `w << 16` the
// even one and `w & 0xffff0000` the odd one, summed apart and interleaved back once per bag.
static inline __attribute__((always_inline)) void pool_bag_bf16(const ember__bag_run *r, int64_t k, int32_t c0,
                                                                const int NW, const int weighted, const int prefetch) {
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    const unsigned char *base = r->base + (size_t)c0 * 2;
    __m256 ev[4], od[4];
    for (int v = 0; v < NW; v++) ev[v] = od[v] = _mm256_setzero_ps();
    const int64_t j0 = r->off[k], j1 = r->off[k + 1];
    for (int64_t j = j0; j < j1; j++) {
        if (prefetch && j + r->pd < r->pf_end)
            ember__prefetch_row(r->base + (size_t)r->values[j + r->pd] * r->rb, r->rb);
        const unsigned char *x = base + (size_t)r->values[j] * r->rb;
        for (int v = 0; v < NW; v++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(x + 32 * v));
            __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
            __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(w, hi_mask));
            if (weighted) {
                const __m256 wt = _mm256_set1_ps(r->weights[j]);
                lo = _mm256_mul_ps(wt, lo);
                hi = _mm256_mul_ps(wt, hi);
            }
            ev[v] = _mm256_add_ps(ev[v], lo);
            od[v] = _mm256_add_ps(od[v], hi);
        }
    }
    if (r->mean && j1 > j0) {
        const __m256 inv = _mm256_set1_ps(1.0f / (float)(j1 - j0));
        for (int v = 0; v < NW; v++) {
            ev[v] = _mm256_mul_ps(ev[v], inv);
            od[v] = _mm256_mul_ps(od[v], inv);
        }
    }
    float *o = r->out + (size_t)k * r->out_stride + c0;
    for (int v = 0; v < NW; v++) {
        // [e0 o0 e1 o1 | e4 o4 e5 o5] and [e2 o2 e3 o3 | e6 o6 e7 o7] -> columns 0-7 and 8-15.
        const __m256 lo = _mm256_unpacklo_ps(ev[v], od[v]), hi = _mm256_unpackhi_ps(ev[v], od[v]);
        _mm256_storeu_ps(o + 16 * v, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(o + 16 * v + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}

// Columns [c0, c0 + 8*nv) of bag k, with nv a run-time value dispatched to a constant.
static inline __attribute__((always_inline)) void pool_block(const ember__bag_run *r, int64_t k, int32_t c0, int nv,
                                                             const ember_dtype dt, const int weighted, const int pf) {
    if (dt == EMBER_DTYPE_BF16 && nv % 2 == 0) {
        switch (nv / 2) {
        case 4: pf ? pool_bag_bf16(r, k, c0, 4, weighted, 1) : pool_bag_bf16(r, k, c0, 4, weighted, 0); break;
        case 3: pf ? pool_bag_bf16(r, k, c0, 3, weighted, 1) : pool_bag_bf16(r, k, c0, 3, weighted, 0); break;
        case 2: pf ? pool_bag_bf16(r, k, c0, 2, weighted, 1) : pool_bag_bf16(r, k, c0, 2, weighted, 0); break;
        default: pf ? pool_bag_bf16(r, k, c0, 1, weighted, 1) : pool_bag_bf16(r, k, c0, 1, weighted, 0); break;
        }
        return;
    }
#define EMBER_POOL_NV(N)                                                   \
    case N:                                                                \
        if (pf) pool_bag(r, k, c0, dt, N, weighted, 1);                    \
        else pool_bag(r, k, c0, dt, N, weighted, 0);                       \
        break;
    switch (nv) {
        EMBER_POOL_NV(1) EMBER_POOL_NV(2) EMBER_POOL_NV(3) EMBER_POOL_NV(4)
        EMBER_POOL_NV(5) EMBER_POOL_NV(6) EMBER_POOL_NV(7) EMBER_POOL_NV(8)
    default: break;
    }
#undef EMBER_POOL_NV
}

static inline __attribute__((always_inline)) void pool_run_dt(const ember__bag_run *r, const ember_dtype dt,
                                                              const int weighted) {
    for (int64_t k = 0; k < r->nb; k++)
        for (int32_t c0 = 0; c0 < r->D; c0 += 64)
            pool_block(r, k, c0, (r->D - c0) >= 64 ? 8 : (r->D - c0) / 8, dt, weighted, c0 == 0);
}

static void pool_run(const ember__bag_run *r) {
    if (r->resolve_ids || r->D % 8 != 0) {
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

// Columns [c0, c0 + 8*NV) of segment [e0, e1)'s gradient in NV registers, mul then add per entry.
static inline __attribute__((always_inline)) void reduce_block(const ember_ebc *ebc, const ember__segments *s,
                                                               const float *grad_out, int64_t e0, int64_t e1,
                                                               int32_t c0, const int NV, float *restrict g) {
    __m256 acc[8];
    for (int v = 0; v < NV; v++) acc[v] = _mm256_setzero_ps();
    for (int64_t e = e0; e < e1; e++) {
        float sc;
        const float *go = ember__entry_grad(ebc, s, grad_out, e, &sc) + c0;
        const __m256 vs = _mm256_set1_ps(sc);
        for (int v = 0; v < NV; v++) acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(vs, _mm256_loadu_ps(go + 8 * v)));
    }
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(g + c0 + 8 * v, acc[v]);
}

static inline __attribute__((always_inline)) void reduce_vec(const ember_ebc *ebc, const ember__segments *s,
                                                             const float *grad_out, int64_t k, int32_t D,
                                                             float *restrict g) {
    const int64_t e0 = s->seg[k], e1 = s->seg[k + 1];
    for (int32_t c0 = 0; c0 < D; c0 += 64) {
        switch ((D - c0) >= 64 ? 8 : (D - c0) / 8) {
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

static void reduce_segment(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k, int32_t D,
                           float *restrict g) {
    if (D % 8 != 0) reduce_segment_portable(ebc, s, grad_out, k, D, g);
    else reduce_vec(ebc, s, grad_out, k, D, g);
}

static int fused_kind_of(const ember__table *tb) { return fused_kind(tb, 8); }

// 8 int32 lanes holding 16-bit values -> 8 uint16.
static inline __m128i narrow16(__m256i x) {
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(x, x), 0x08));
}

// fp32 -> bf16, nearest even, exactly as ember__f32_to_bf16 (NaN: quieted upper half).
static inline __m256i f32_to_bf16_rne(__m256 x) {
    const __m256i u = _mm256_castps_si256(x), hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

// ember__sr_hash of 8 columns d0 .. d0+7.
static inline __m256i sr_hash8(uint32_t row_key, int32_t d0) {
    const __m256i d = _mm256_add_epi32(_mm256_set1_epi32(d0), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
    __m256i h = _mm256_xor_si256(_mm256_set1_epi32((int)row_key),
                                 _mm256_mullo_epi32(d, _mm256_set1_epi32((int)0x9e3779b9u)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)0x85ebca6bu));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)0xc2b2ae35u));
    return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

// ember__f32_to_bf16_sr on 8 lanes.
static inline __m256i f32_to_bf16_sr(__m256 x, __m256i rnd) {
    const __m256i u = _mm256_castps_si256(x), expm = _mm256_set1_epi32(0x7f800000);
    const __m256i r = _mm256_add_epi32(u, _mm256_and_si256(rnd, _mm256_set1_epi32(0xffff)));
    const __m256i special = _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_and_si256(u, expm), expm),
                                            _mm256_cmpeq_epi32(_mm256_and_si256(r, expm), expm));
    return _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), f32_to_bf16_rne(x), special);
}

// ember__f32_to_f16_sr on 8 lanes.
static inline __m256i f32_to_f16_sr(__m256 x, __m256i rnd) {
    const __m256i u = _mm256_castps_si256(x), a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
    const __m256 ax = _mm256_castsi256_ps(a);
    // Normal range: add 13 random bits below the kept mantissa, truncate, re-bias.
    const __m256i nrm = _mm256_sub_epi32(
        _mm256_srli_epi32(_mm256_add_epi32(a, _mm256_and_si256(rnd, _mm256_set1_epi32(0x1fff))), 13),
        _mm256_set1_epi32(112 << 10));
    // Subnormal range: x = |f| 2^24, up when (rnd >> 8) 2^-24 < frac(x).
    const __m256 xs = _mm256_mul_ps(ax, _mm256_set1_ps(0x1p24f));
    const __m256i t = _mm256_cvttps_epi32(xs);
    const __m256 frac = _mm256_sub_ps(xs, _mm256_cvtepi32_ps(t));
    const __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(rnd, 8)), _mm256_set1_ps(0x1p-24f));
    const __m256i sub = _mm256_sub_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(r, frac, _CMP_LT_OQ)));
    const __m256i normal = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x387fffff));
    const __m256i res = _mm256_or_si256(sign, _mm256_blendv_epi8(sub, nrm, normal));
    // NaN, inf and |f| >= 65504: nearest.
    const __m256i big = _mm256_castps_si256(_mm256_cmp_ps(ax, _mm256_set1_ps(65504.0f), _CMP_NLT_UQ));
    const __m256i near = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return _mm256_blendv_epi8(res, near, big);
}

// Segment k of a table served by a fused path: the coalesced gradient is reduced into an L1
// buffer in 64-column register blocks, then the row is updated 8 columns at a time, specialised
// per optimizer and storage (no call, no switch per element). The operations and their order
// are optim_row's (row-wise Adagrad's sum of squares in ember__sum16's 16 lanes: columns
// 16i..16i+7 in one register, 16i+8..16i+15 in another).
static inline __attribute__((always_inline)) void fused_segment(const ember_ebc *ebc, const ember__segments *s,
                                                                const float *grad_out, int64_t k,
                                                                const ember__table *tb, const ember__optim_step *st,
                                                                const int OPT, const int STORE) {
    const int32_t D = tb->cfg.dim;
    float g[128] __attribute__((aligned(32)));
    reduce_vec(ebc, s, grad_out, k, D, g);
    const int64_t row = s->row[s->seg[k]];
    unsigned char *p = ember__row_ptr(tb, row);
    const int dt = STORE & (STORE_BF16 | STORE_F16);
    const ember_optim_config *o = &tb->cfg.optim;
    float mult = o->lr;
    if (OPT == FUSED_ROWWISE_ADAGRAD) {
        __m256 sq[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int32_t d = 0; d < D; d += 8) {
            const __m256 x = _mm256_load_ps(g + d);
            sq[(d / 8) & 1] = _mm256_add_ps(sq[(d / 8) & 1], _mm256_mul_ps(x, x));
        }
        float lane[16];
        _mm256_storeu_ps(lane, sq[0]);
        _mm256_storeu_ps(lane + 8, sq[1]);
        float *m1 = tb->m1 + row;
        *m1 += ember__sum16(lane) / (float)D;
        mult = o->lr / (sqrtf(*m1) + o->eps);
    }
    const __m256 vm = _mm256_set1_ps(mult);
    const __m256 b1 = _mm256_set1_ps(o->beta1), b2 = _mm256_set1_ps(o->beta2);
    const __m256 nb1 = _mm256_set1_ps(1.0f - o->beta1), nb2 = _mm256_set1_ps(1.0f - o->beta2);
    const __m256 c1 = _mm256_set1_ps(st->c1), c2 = _mm256_set1_ps(st->c2), eps = _mm256_set1_ps(o->eps);
    float *m1 = OPT == FUSED_ADAM ? tb->m1 + (size_t)row * (size_t)D : NULL;
    float *m2 = OPT == FUSED_ADAM ? tb->m2 + (size_t)row * (size_t)D : NULL;
    const uint32_t key = (STORE & STORE_SR) ? ember__sr_row_key(st->sr_key, row) : 0;
    for (int32_t d = 0; d < D; d += 8) {
        __m256 w = dt == STORE_F32 ? _mm256_loadu_ps((const float *)p + d)
                                   : load8(dt == STORE_BF16 ? EMBER_DTYPE_BF16 : EMBER_DTYPE_F16, p + 2 * (size_t)d);
        const __m256 gv = _mm256_load_ps(g + d);
        if (OPT == FUSED_ADAM) {
            // m1 <- b1 m1 + (1-b1) g;  m2 <- b2 m2 + (1-b2) g^2;  w <- w - lr (m1/c1) / (sqrt(m2/c2) + eps)
            __m256 a = _mm256_loadu_ps(m1 + d), b = _mm256_loadu_ps(m2 + d);
            a = _mm256_add_ps(_mm256_mul_ps(b1, a), _mm256_mul_ps(nb1, gv));
            b = _mm256_add_ps(_mm256_mul_ps(b2, b), _mm256_mul_ps(_mm256_mul_ps(nb2, gv), gv));
            _mm256_storeu_ps(m1 + d, a);
            _mm256_storeu_ps(m2 + d, b);
            const __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(b, c2)), eps);
            w = _mm256_sub_ps(w, _mm256_mul_ps(vm, _mm256_div_ps(_mm256_div_ps(a, c1), den)));
        } else {
            w = _mm256_sub_ps(w, _mm256_mul_ps(vm, gv));
        }
        if (dt == STORE_F32) {
            _mm256_storeu_ps((float *)p + d, w);
            continue;
        }
        __m128i h;
        if (STORE & STORE_SR) {
            const __m256i rnd = sr_hash8(key, d);
            h = narrow16(dt == STORE_BF16 ? f32_to_bf16_sr(w, rnd) : f32_to_f16_sr(w, rnd));
        } else {
            h = dt == STORE_BF16 ? narrow16(f32_to_bf16_rne(w)) : _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT |
                                                                                         _MM_FROUND_NO_EXC);
        }
        _mm_storeu_si128((__m128i *)((uint16_t *)p + d), h);
    }
}

EMBER__DEFINE_FUSED_RUN(fused_segment)

static void update_segments(const ember_ebc *ebc, const ember__segments *s, const float *grad_out, int64_t k0,
                            int64_t k1, float *g, float *w) {
    update_segments_impl(ebc, s, grad_out, k0, k1, g, w, reduce_segment, fused_kind_of, fused_run);
}

EMBER__TBE_KERNELS(avx2, EMBER_ISA_AVX2)
