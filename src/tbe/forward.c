// Pooled forward (DESIGN.md §1.2): a random row gather per bag, the memory-bound kernel.
//
// Threads take contiguous ranges of bags (balanced by ids + bags) and every output element is
// summed in bag order by one thread, so the result does not depend on the thread count.
// Within a range the kernel walks one feature at a time: the feature's ids are one contiguous
// run of `values`, so the row `ember__prefetch_ids` ids ahead is prefetched across bag
// boundaries (a bag of L = 20 ids is shorter than the prefetch pipeline; prefetching only
// inside a bag would leave its first rows unprefetched).
#include <string.h>

#include "tbe/dtype.h"
#include "tbe/kernels.h"

// Resolves an id under the bounds mode: the row to read, or -1 to skip it.
static inline int64_t resolve(int64_t id, int64_t rows, ember_bounds_mode mode) {
    if (id >= 0 && id < rows) return id;
    if (mode == EMBER_BOUNDS_SKIP) return -1;
    return id < 0 ? 0 : rows - 1;
}

// One feature's run of bags: bag k has ids values[off[k] .. off[k+1]) and writes
// out[k * out_stride .. + D). Ids from off[0] up to pf_end may be prefetched.
typedef struct bag_run {
    const unsigned char *base; // the table's row 0
    size_t rb;                 // row bytes
    int32_t D;
    ember_dtype dtype;
    int mean;
    const int64_t *values;
    const float *weights; // NULL: unweighted
    const int64_t *off;   // [nb + 1], absolute positions in values
    int64_t nb;
    int64_t pf_end;
    int pd;               // prefetch distance in ids
    float *out;
    size_t out_stride;
} bag_run;

// Portable kernel: acc[d] += w * x[d] in id order (auto-vectorised over d). Also the path for
// ids outside the table (CLAMP/SKIP), where `mode` resolves each id and MEAN counts kept ids.
static void pool_run_portable(const bag_run *r, int64_t rows, ember_bounds_mode mode, int resolve_ids) {
    const int32_t D = r->D;
    for (int64_t k = 0; k < r->nb; k++) {
        float *restrict acc = r->out + (size_t)k * r->out_stride;
        memset(acc, 0, sizeof(float) * (size_t)D);
        int64_t kept = 0;
        for (int64_t j = r->off[k]; j < r->off[k + 1]; j++) {
            if (j + r->pd < r->pf_end) {
                int64_t p = resolve_ids ? resolve(r->values[j + r->pd], rows, mode) : r->values[j + r->pd];
                if (p >= 0) ember__prefetch_row(r->base + (size_t)p * r->rb, r->rb);
            }
            const int64_t row = resolve_ids ? resolve(r->values[j], rows, mode) : r->values[j];
            if (row < 0) continue;
            kept++;
            const void *x = r->base + (size_t)row * r->rb;
            if (r->weights) {
                const float w = r->weights[j];
                switch (r->dtype) {
                case EMBER_DTYPE_F32: for (int32_t d = 0; d < D; d++) acc[d] += w * ((const float *)x)[d]; break;
                case EMBER_DTYPE_BF16:
                    for (int32_t d = 0; d < D; d++) acc[d] += w * ember__bf16_to_f32(((const uint16_t *)x)[d]);
                    break;
                case EMBER_DTYPE_F16:
                    for (int32_t d = 0; d < D; d++) acc[d] += w * ember__f16_to_f32(((const uint16_t *)x)[d]);
                    break;
                }
            } else {
                switch (r->dtype) {
                case EMBER_DTYPE_F32: for (int32_t d = 0; d < D; d++) acc[d] += ((const float *)x)[d]; break;
                case EMBER_DTYPE_BF16:
                    for (int32_t d = 0; d < D; d++) acc[d] += ember__bf16_to_f32(((const uint16_t *)x)[d]);
                    break;
                case EMBER_DTYPE_F16:
                    for (int32_t d = 0; d < D; d++) acc[d] += ember__f16_to_f32(((const uint16_t *)x)[d]);
                    break;
                }
            }
        }
        // MEAN divides by the number of ids, as FBGEMM does; an empty bag stays 0.
        if (r->mean && kept > 0) {
            const float inv = 1.0f / (float)kept;
            for (int32_t d = 0; d < D; d++) acc[d] *= inv;
        }
    }
}

#ifdef __AVX512F__
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
static inline __attribute__((always_inline)) void pool_block(const bag_run *r, int32_t c0, const ember_dtype dt,
                                                             const int NV, const int weighted, const int prefetch) {
    const size_t es = dt == EMBER_DTYPE_F32 ? 4 : 2;
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
static inline __attribute__((always_inline)) void pool_block_bf16(const bag_run *r, int32_t c0, const int NW,
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
static inline __attribute__((always_inline)) void pool_run_dt(const bag_run *r, const ember_dtype dt,
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

static void pool_run_avx512(const bag_run *r) {
    const int w = r->weights != NULL;
    switch (r->dtype) {
    case EMBER_DTYPE_F32: w ? pool_run_dt(r, EMBER_DTYPE_F32, 1) : pool_run_dt(r, EMBER_DTYPE_F32, 0); break;
    case EMBER_DTYPE_BF16: w ? pool_run_dt(r, EMBER_DTYPE_BF16, 1) : pool_run_dt(r, EMBER_DTYPE_BF16, 0); break;
    case EMBER_DTYPE_F16: w ? pool_run_dt(r, EMBER_DTYPE_F16, 1) : pool_run_dt(r, EMBER_DTYPE_F16, 0); break;
    }
}
#endif

ember_status ember__ebc_check_forward(ember_ebc *ebc, const char *fn, const ember_kjt *kjt, const void *buf,
                                      const char *bufname, int64_t *oor) {
    *oor = 0;
    EMBER_TRY(ember__kjt_validate(ebc->ctx, fn, kjt, ebc->F, ebc->feature_rows, (const char *const *)ebc->feature_names,
                                  ebc->bounds, oor));
    EMBER_CHECK(ebc->ctx, buf != NULL || ember_ebc_output_size(ebc, kjt) == 0, EMBER_ERR_INVALID_ARG, "%s: %s is NULL",
                fn, bufname);
    if (*oor > 0 && ebc->bounds == EMBER_BOUNDS_CLAMP)
        ember__log(ebc->ctx, EMBER_LOG_WARN, "%s: %lld ids outside their tables were clamped", fn, (long long)*oor);
    return EMBER_OK;
}

const int64_t *ember__ebc_offsets(ember_ebc *ebc, const ember_kjt *kjt) {
    if (kjt->offsets) return kjt->offsets;
    int64_t *o = ember__ws_get(ebc, 0, sizeof(int64_t) * ((size_t)kjt->num_features * (size_t)kjt->batch_size + 1));
    if (o) ember__kjt_offsets(kjt, o);
    return o;
}

// Bags [i0, i1) (feature-major numbering), one feature at a time.
static void pool_range(const ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int64_t i0, int64_t i1,
                       int resolve_ids, float *out) {
    const int32_t B = kjt->batch_size;
    for (int64_t i = i0; i < i1;) {
        const int32_t f = (int32_t)(i / B), b = (int32_t)(i % B);
        const int64_t end = (int64_t)(f + 1) * B < i1 ? (int64_t)(f + 1) * B : i1;
        const ember__table *tb = &ebc->tables[ebc->feature_table[f]];
        float *o = out + (size_t)b * (size_t)ebc->out_dim + (size_t)ebc->feature_col[f];
        bag_run r = {ebc->slab + tb->weight_offset, tb->row_bytes, tb->cfg.dim, tb->cfg.dtype,
                     tb->cfg.pooling == EMBER_POOL_MEAN, kjt->values, kjt->weights, off + i, end - i, off[end],
                     ember__prefetch_ids(tb->row_bytes), o, (size_t)ebc->out_dim};
#ifdef __AVX512F__
        if (!resolve_ids && r.D % 16 == 0) pool_run_avx512(&r);
        else pool_run_portable(&r, tb->cfg.rows, ebc->bounds, resolve_ids);
#else
        pool_run_portable(&r, tb->cfg.rows, ebc->bounds, resolve_ids);
#endif
        i = end;
    }
}

static void sequence_forward(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, float *out) {
    const int32_t B = kjt->batch_size, D = ebc->out_dim;
    const int64_t nbags = (int64_t)ebc->F * B;
#pragma omp parallel for schedule(dynamic, 64) num_threads(ember__threads(ebc->ctx))
    for (int64_t i = 0; i < nbags; i++) {
        const ember__table *tb = &ebc->tables[ebc->feature_table[i / B]];
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            float *o = out + j * D;
            int64_t r = resolve(kjt->values[j], tb->cfg.rows, ebc->bounds);
            if (r < 0) {
                memset(o, 0, sizeof(float) * (size_t)D);
                continue;
            }
            ember__load_row(tb->cfg.dtype, ember__row_ptr(ebc, tb, r), o, D);
            if (kjt->weights) {
                const float w = kjt->weights[j];
                for (int32_t d = 0; d < D; d++) o[d] *= w;
            }
        }
    }
}

ember_status ember_ebc_forward(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    if (!ebc) return EMBER_ERR_INVALID_ARG;
    int64_t oor;
    EMBER_TRY(ember__ebc_check_forward(ebc, "ember_ebc_forward", kjt, out, "out", &oor));
    const int64_t *off = ember__ebc_offsets(ebc, kjt);
    if (!off) return EMBER_ERR_NOMEM;
    if (ebc->sequence) {
        sequence_forward(ebc, kjt, off, out);
        return EMBER_OK;
    }
    const int64_t nbags = (int64_t)ebc->F * kjt->batch_size;
    const int nt = ember__threads(ebc->ctx), nc = ember__chunks(nt);
    // Chunks of bags balanced by ids plus a bag's fixed cost (zeroing and storing its output row).
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int c = 0; c < nc; c++)
        pool_range(ebc, kjt, off, ember__split(off, nbags, 8, c, nc), ember__split(off, nbags, 8, c + 1, nc), oor > 0,
                   out);
    return EMBER_OK;
}
