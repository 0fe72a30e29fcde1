// The cuda backend (tbe/backend.h, docs/cuda.md): a collection's weights and optimizer state in the
// memory of one CUDA device, laid out as the cpu backend lays its slabs out (each table's rows back
// to back in its dtype, 64-byte aligned; fp32 optimizer state), and kernels that give the cpu
// backend's bits:
//   forward   a group of lanes per bag (4 columns a lane, 16-byte loads, 4 rows in flight), each
//             output column summed in bag order by one lane;
//   backward  the entries (row key, position) made per bag, a stable radix sort (CUB), segments
//             by run-length encoding; one warp per touched row sums its gradient in position order
//             and applies the optimizer once; rows of more than HOT_ENTRIES entries (Zipf's head)
//             go to a block each, whose threads stage the scaled gradient rows in shared memory
//             for one thread per column to add, in the same order;
//   checks    ember_ebc_forward_device/backward_device take device memory and check on the device
//             what the host cannot see (offsets, ids under EMBER_BOUNDS_ERROR, weights, dL/dy);
//             the host calls copy the KJT, outputs and gradients per call.
// Same bits as the cpu backend and run to run, by construction:
//   - every float operation is the cpu's, in the cpu's order: compiled with --fmad=false (no
//     contraction of a * b + c, the cpu's -ffp-contract=off), IEEE division and square root
//     (nvcc's defaults, never --use_fast_math), denormals kept; no float atomics anywhere;
//   - row reductions (norms, mean squares) in ember__sum16's order: lane k accumulates columns
//     k, k + 16, ... then the 8-4-2-1 tree;
//   - the optimizers are cpu/optim_rows.h's formulas, operation for operation (held together by
//     the cross-backend test, tests/unit/test_isa.c), their per-step constants (Adam's bias
//     corrections, the stochastic-rounding key) from the host's ember__optim_prepare;
//   - conversions and stochastic rounding are core/dtype.h's functions themselves (EMBER_HD).
// CUDA errors are EMBER_ERR_DEVICE with the runtime's message (EMBER_ERR_NOMEM for allocations).
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/dtype.h"
#include "tbe/backend.h"
}

namespace {

// A KJT in device memory: offsets [F*B+1], values [nnz], weights [nnz] or NULL.
struct dbatch {
    int32_t batch_size;
    int64_t nnz;
    const int64_t *offsets, *values;
    const float *weights;
};

// What the device checks of a device-memory call: a bit per finding and the first bag (or the
// first dL/dy element) where it was made.
enum { CK_RANGE = 0, CK_OFFSETS = 1, CK_WEIGHT = 2, CK_GRAD = 3, CK_COUNT = 4 };
struct dcheck {
    unsigned int bits, pad;
    unsigned long long first[CK_COUNT];
};

// How the kernels take the batch's ids: as rows (the host validated them), resolved by the bounds
// mode (the host validated them and some are outside), or checked here (a device-memory call).
enum { IDS_ROWS = 0, IDS_RESOLVE = 1, IDS_CHECK = 2 };

// ---- what the kernels read of a table ----------------------------------------------------------

struct dtab {
    unsigned char *w;
    float *m1, *m2;
    int64_t rows, key_base, row_bytes;
    int32_t dim, global_dim, m1_cols, m2_cols;
    int32_t dtype, pooling, sr, l2_in_update, rowwise_sumsq;
    ember_optim_config o;
};

// A grow-on-demand device buffer.
struct dbuf {
    void *p;
    size_t cap;
};

enum { B_OFF, B_VAL, B_WGT, B_OUT, B_GRAD, B_GW, B_KEY, B_KEY2, B_ITEM, B_ITEM2, B_UKEY, B_CNT, B_SEG, B_NRUN, B_TMP,
       B_BAGC, B_BAGOF, B_GOFF, B_RSS, B_CHECK, B_HOT, B_COUNT };

struct cuda_state {
    int device;
    cudaStream_t stream;
    unsigned char *slab;
    size_t slab_bytes;
    float *state;
    size_t state_floats;
    dtab *tabs;             // device [T]
    dtab *htabs, *sent;     // host [T]: this call's descriptors, the ones on the device
    int32_t *ftab, *fcol;   // device [F]
    ember__optim_step *steps; // device [T]
    ember__optim_step *hsteps; // host [T]
    dbuf buf[B_COUNT];
    int warps_per_block;    // of the row-update kernels (shared memory: two rows per warp)
    size_t smem_per_warp;
    int hot_blocks, hot_chunk; // the hot-row kernel: its grid, entries staged per round
    size_t hot_smem;
};

cuda_state *state_of(const ember_ebc *ebc) { return (cuda_state *)ebc->bs; }

// EMBER_ERR_DEVICE (EMBER_ERR_NOMEM for an allocation) with the runtime's message.
ember_status cu_fail(ember_ctx *ctx, cudaError_t e, const char *what) {
    const ember_status st = e == cudaErrorMemoryAllocation ? EMBER_ERR_NOMEM : EMBER_ERR_DEVICE;
    (void)cudaGetLastError(); // clear a non-sticky error
    return ember__error(ctx, st, "cuda backend: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define CU_TRY(ctx, expr, what)                                                                                        \
    do {                                                                                                               \
        const cudaError_t e_ = (expr);                                                                                 \
        if (e_ != cudaSuccess) return cu_fail((ctx), e_, (what));                                                      \
    } while (0)

void *dget(ember_ebc *ebc, int which, size_t bytes) {
    cuda_state *c = state_of(ebc);
    dbuf *b = &c->buf[which];
    if (bytes == 0) bytes = 16;
    if (b->cap >= bytes) return b->p;
    if (b->p) cudaFree(b->p);
    b->p = NULL;
    b->cap = 0;
    const size_t want = bytes + bytes / 4;
    const cudaError_t e = cudaMalloc(&b->p, want);
    if (e != cudaSuccess) {
        b->p = NULL;
        cu_fail(ebc->ctx, e, "device workspace");
        return NULL;
    }
    b->cap = want;
    return b->p;
}

// The table descriptors and per-table step constants the next kernels read (learning rates and
// dtypes change between calls on the host).
ember_status sync_tables(ember_ebc *ebc) {
    cuda_state *c = state_of(ebc);
    for (int32_t t = 0; t < ebc->T; t++) {
        const ember__table *tb = &ebc->tables[t];
        dtab *d = &c->htabs[t];
        memset(d, 0, sizeof *d); // padding too: the descriptors are compared as bytes
        d->w = tb->w;
        d->m1 = tb->m1;
        d->m2 = tb->m2;
        d->rows = tb->cfg.rows;
        d->key_base = tb->key_base;
        d->row_bytes = (int64_t)tb->row_bytes;
        d->dim = tb->cfg.dim;
        d->global_dim = tb->origin.global_dim;
        d->m1_cols = tb->m1_cols;
        d->m2_cols = tb->m2_cols;
        d->dtype = (int32_t)tb->cfg.dtype;
        d->pooling = (int32_t)tb->cfg.pooling;
        d->sr = tb->cfg.dtype != EMBER_DTYPE_F32 && tb->cfg.stochastic_rounding;
        d->l2_in_update = tb->optim->l2_in_update;
        d->rowwise_sumsq = tb->optim->rowwise_sumsq;
        d->o = tb->cfg.optim;
    }
    const size_t bytes = sizeof(dtab) * (size_t)ebc->T;
    if (!memcmp(c->htabs, c->sent, bytes)) return EMBER_OK;
    CU_TRY(ebc->ctx, cudaMemcpyAsync(c->tabs, c->htabs, bytes, cudaMemcpyHostToDevice, c->stream), "table descriptors");
    CU_TRY(ebc->ctx, cudaStreamSynchronize(c->stream), "table descriptors"); // htabs is rewritten next call
    memcpy(c->sent, c->htabs, bytes);
    return EMBER_OK;
}

// Counts a step on every table (as the cpu's begin_step) and sends the step constants.
ember_status begin_step(ember_ebc *ebc) {
    cuda_state *c = state_of(ebc);
    for (int32_t t = 0; t < ebc->T; t++) {
        ebc->tables[t].step++;
        ember__optim_prepare(&ebc->tables[t], ebc->seed, &c->hsteps[t]);
    }
    CU_TRY(ebc->ctx,
           cudaMemcpyAsync(c->steps, c->hsteps, sizeof(ember__optim_step) * (size_t)ebc->T, cudaMemcpyHostToDevice,
                           c->stream),
           "step constants");
    return EMBER_OK;
}

ember_status finish(ember_ebc *ebc, const char *what) {
    CU_TRY(ebc->ctx, cudaGetLastError(), what);
    CU_TRY(ebc->ctx, cudaStreamSynchronize(state_of(ebc)->stream), what);
    return EMBER_OK;
}

unsigned blocks_for(int64_t threads, int per_block) { return (unsigned)((threads + per_block - 1) / per_block); }

// ---- rows on the device --------------------------------------------------------------------------

__device__ inline float load_one(const dtab &t, const unsigned char *row, int d) {
    switch (t.dtype) {
    case EMBER_DTYPE_F32: return ((const float *)row)[d];
    case EMBER_DTYPE_BF16: return ember__bf16_to_f32(((const uint16_t *)row)[d]);
    default: return ember__f16_to_f32(((const uint16_t *)row)[d]);
    }
}

// Columns [c, c + n) of `row`, n <= 4, one vector load where the row allows it.
__device__ inline void load4(const dtab &t, const unsigned char *row, int c, int n, float x[4]) {
    if (n == 4 && t.dtype == EMBER_DTYPE_F32 && (t.row_bytes & 15) == 0) {
        const float4 v = *(const float4 *)(row + (size_t)c * 4);
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    } else if (n == 4 && t.dtype != EMBER_DTYPE_F32 && (t.row_bytes & 7) == 0) {
        const uint2 v = *(const uint2 *)(row + (size_t)c * 2);
        const uint16_t h[4] = {(uint16_t)(v.x & 0xffffu), (uint16_t)(v.x >> 16), (uint16_t)(v.y & 0xffffu),
                               (uint16_t)(v.y >> 16)};
        for (int k = 0; k < 4; k++)
            x[k] = t.dtype == EMBER_DTYPE_BF16 ? ember__bf16_to_f32(h[k]) : ember__f16_to_f32(h[k]);
    } else {
        for (int k = 0; k < 4; k++) x[k] = k < n ? load_one(t, row, c + k) : 0.0f;
    }
}

__device__ inline void note(dcheck *ck, int what, unsigned long long where) {
    atomicOr(&ck->bits, 1u << what);
    atomicMin(&ck->first[what], where);
}

// The row an id reads (-1: none), by the batch's mode (IDS_*).
__device__ inline int64_t row_of(int64_t id, const dtab &t, int kb, int mode, dcheck *ck, int64_t bag) {
    if (mode == IDS_ROWS || (id >= 0 && id < t.rows)) return id;
    if (mode == IDS_CHECK && kb == EMBER_BOUNDS_ERROR) {
        note(ck, CK_RANGE, (unsigned long long)bag);
        return -1;
    }
    return ember__resolve_id(id, t.rows, (ember_bounds_mode)kb);
}

// The ids of a bag, [*j0, *j1); false (and noted) when a device call's offsets are not a prefix
// sum from 0 to nnz there.
__device__ inline bool bag_range(const dbatch &b, int64_t bag, int64_t nbags, int mode, dcheck *ck, int64_t *j0,
                                 int64_t *j1) {
    *j0 = b.offsets[bag];
    *j1 = b.offsets[bag + 1];
    if (mode != IDS_CHECK) return true;
    if (*j0 < 0 || *j1 < *j0 || *j1 > b.nnz || (bag == 0 && *j0 != 0) || (bag == nbags - 1 && *j1 != b.nnz)) {
        note(ck, CK_OFFSETS, (unsigned long long)bag);
        return false;
    }
    return true;
}

// A device call's weight of position j (noted when not finite).
__device__ inline float weight_at(const dbatch &b, int64_t j, int mode, dcheck *ck, int64_t bag) {
    const float w = b.weights[j];
    if (mode == IDS_CHECK && !isfinite(w)) note(ck, CK_WEIGHT, (unsigned long long)bag);
    return w;
}

// ---- forward --------------------------------------------------------------------------------------

// TPB lanes per bag, each lane 4 columns at a time; ids in bag order, 4 row loads in flight.
template <int TPB>
__global__ void k_pool(const dtab *tabs, const int32_t *ftab, const int32_t *fcol, dbatch b, int64_t nbags,
                       int32_t out_dim, int kb, int mode, dcheck *ck, float *out) {
    const int64_t gt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t bag = gt / TPB;
    const int lane = (int)(gt % TPB);
    if (bag >= nbags) return;
    const int32_t B = b.batch_size, f = (int32_t)(bag / B), bi = (int32_t)(bag % B);
    const dtab &t = tabs[ftab[f]];
    float *o = out + (int64_t)bi * out_dim + fcol[f];
    int64_t j0, j1;
    if (!bag_range(b, bag, nbags, mode, ck, &j0, &j1)) return;
    const int D = t.dim;
    for (int c = lane * 4; c < D; c += TPB * 4) {
        const int n = D - c < 4 ? D - c : 4;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int64_t kept = 0;
        int64_t j = j0;
        for (; j + 4 <= j1; j += 4) {
            int64_t r[4];
            float x[4][4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                r[u] = row_of(b.values[j + u], t, kb, mode, ck, bag);
                if (r[u] >= 0) load4(t, t.w + r[u] * t.row_bytes, c, n, x[u]);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (r[u] < 0) continue;
                kept++;
                if (b.weights) {
                    const float wj = weight_at(b, j + u, mode, ck, bag);
#pragma unroll
                    for (int k = 0; k < 4; k++) acc[k] = acc[k] + wj * x[u][k];
                } else {
#pragma unroll
                    for (int k = 0; k < 4; k++) acc[k] = acc[k] + x[u][k];
                }
            }
        }
        for (; j < j1; j++) {
            const int64_t r = row_of(b.values[j], t, kb, mode, ck, bag);
            if (r < 0) continue;
            kept++;
            float x[4];
            load4(t, t.w + r * t.row_bytes, c, n, x);
            const float wj = b.weights ? weight_at(b, j, mode, ck, bag) : 1.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) acc[k] = b.weights ? acc[k] + wj * x[k] : acc[k] + x[k];
        }
        // MEAN divides by the ids kept; an empty bag stays 0.
        if (t.pooling == EMBER_POOL_MEAN && kept > 0) {
            const float inv = 1.0f / (float)kept;
#pragma unroll
            for (int k = 0; k < 4; k++) acc[k] = acc[k] * inv;
        }
        if (n == 4 && ((uintptr_t)(o + c) & 15) == 0) {
            *(float4 *)(o + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        } else {
            for (int k = 0; k < n; k++) o[c + k] = acc[k];
        }
    }
}

// Sequence (NONE) tables: output row j is E[id_j] (times w_j), zeros for a dropped id.
__global__ void k_sequence(const dtab *tabs, const int32_t *ftab, dbatch b, int64_t nbags, int32_t D,
                           int kb, int mode, dcheck *ck, float *out) {
    const int64_t bag = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (bag >= nbags) return;
    const dtab &t = tabs[ftab[bag / b.batch_size]];
    int64_t j0, j1;
    if (!bag_range(b, bag, nbags, mode, ck, &j0, &j1)) return;
    for (int64_t j = j0; j < j1; j++) {
        float *o = out + j * D;
        const int64_t r = row_of(b.values[j], t, kb, mode, ck, bag);
        const float wj = b.weights ? weight_at(b, j, mode, ck, bag) : 1.0f;
        for (int d = lane; d < D; d += 32) {
            if (r < 0) {
                o[d] = 0.0f;
                continue;
            }
            const float x = load_one(t, t.w + r * t.row_bytes, d);
            o[d] = b.weights ? x * wj : x;
        }
    }
}

// ---- backward: entries, sort, segments -------------------------------------------------------------

// One thread per bag: the sort key (key_base + row, or `sentinel` for a dropped id) and the
// gradient source of each of its ids, the bag's MEAN scale, and (weighted) the bag of each id.
__global__ void k_entries(const dtab *tabs, const int32_t *ftab, dbatch b, int64_t nbags, int kb, int mode,
                          dcheck *ck, int item_is_bag, unsigned long long sentinel, unsigned long long *key,
                          int64_t *item, float *bag_c, int64_t *bag_of) {
    const int64_t bag = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bag >= nbags) return;
    const dtab &t = tabs[ftab[bag / b.batch_size]];
    int64_t kept = 0, j0, j1;
    if (!bag_range(b, bag, nbags, mode, ck, &j0, &j1)) return;
    for (int64_t j = j0; j < j1; j++) {
        if (b.weights) (void)weight_at(b, j, mode, ck, bag);
        const int64_t r = row_of(b.values[j], t, kb, mode, ck, bag);
        key[j] = r < 0 ? sentinel : (unsigned long long)(t.key_base + r);
        item[j] = item_is_bag ? bag : j;
        kept += r >= 0;
        if (bag_of) bag_of[j] = bag;
    }
    bag_c[bag] = t.pooling == EMBER_POOL_MEAN && kept > 0 ? 1.0f / (float)kept : 1.0f;
}

// The number of runs that are rows (the sentinel's run, last when present, is not).
__global__ void k_rows_runs(const unsigned long long *ukey, const int64_t *nruns, unsigned long long sentinel,
                            int64_t *u) {
    const int64_t n = *nruns;
    *u = n > 0 && ukey[n - 1] == sentinel ? n - 1 : n;
}

// Where the segments are, for the row-update kernels.
struct segs {
    const unsigned long long *key; // [m] sorted keys
    const int64_t *item;           // [m]
    const int64_t *seg;            // [u+1]
    const float *bag_c;
    const int64_t *bag_of;         // weighted pooled: bag of each position
    const float *weights;          // the KJT's, or NULL
    const int32_t *fcol;
    int32_t B, out_dim, kind;      // kind: enum ember__item_kind
};

// Table of a key: the last table whose key_base <= key.
__device__ inline int32_t table_of_key(const dtab *tabs, int32_t T, unsigned long long key) {
    int32_t lo = 0, hi = T - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if ((unsigned long long)tabs[mid].key_base <= key) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Entry e's dL/dy row and scale (ember__entry_grad's rule).
__device__ inline const float *entry_grad(const segs &s, const float *grad, int64_t e, float *sc) {
    const int64_t it = s.item[e];
    if (s.kind == EMBER__ITEM_BAG) {
        *sc = s.bag_c[it];
        return grad + (it % s.B) * s.out_dim + s.fcol[it / s.B];
    }
    if (s.kind == EMBER__ITEM_POS_POOLED) {
        const int64_t bag = s.bag_of[it];
        *sc = s.weights[it] * s.bag_c[bag];
        return grad + (bag % s.B) * s.out_dim + s.fcol[bag / s.B];
    }
    *sc = s.weights ? s.weights[it] : 1.0f;
    return grad + it * s.out_dim;
}

// ---- the optimizers, one warp per row (cpu/optim_rows.h, operation for operation) -------------------

#define FULL 0xffffffffu

// sum_d a[d] * b[d] in ember__sum16's order, on every lane.
__device__ inline float dot16(const float *a, const float *b, int D, int lane) {
    __syncwarp();
    float acc = 0.0f;
    if (lane < 16)
        for (int d = lane; d < D; d += 16) acc = acc + a[d] * b[d];
    acc = acc + __shfl_down_sync(FULL, acc, 8);
    acc = acc + __shfl_down_sync(FULL, acc, 4);
    acc = acc + __shfl_down_sync(FULL, acc, 2);
    acc = acc + __shfl_down_sync(FULL, acc, 1);
    return __shfl_sync(FULL, acc, 0);
}

__device__ inline float row_mean_sq(const dtab &t, const ember__optim_step &st, const float *g, int lane) {
    if (st.row_sumsq >= 0.0f) return st.row_sumsq / (float)t.global_dim;
    return dot16(g, g, t.dim, lane) / (float)t.dim;
}

// w <- w - scale * r (apply_direction), r = g in place.
__device__ inline void apply_direction(const dtab &t, float *w, float *r, int decoupled, int lamb, int lane) {
    const ember_optim_config &o = t.o;
    const int D = t.dim;
    if (decoupled)
        for (int d = lane; d < D; d += 32) r[d] = r[d] + o.weight_decay * w[d];
    float scale = o.lr;
    if (lamb) {
        const float wn = dot16(w, w, D, lane), rn = dot16(r, r, D, lane);
        if (wn > 0.0f && rn > 0.0f) scale = o.lr * sqrtf(wn) / sqrtf(rn);
    }
    __syncwarp();
    for (int d = lane; d < D; d += 32) w[d] = w[d] - scale * r[d];
}

__device__ inline void adam_moments(const dtab &t, const ember__optim_step &st, int64_t row, float *g, int lane) {
    const ember_optim_config &o = t.o;
    float *m1 = t.m1 + row * t.dim, *m2 = t.m2 + row * t.dim;
    for (int d = lane; d < t.dim; d += 32) {
        m1[d] = o.beta1 * m1[d] + (1.0f - o.beta1) * g[d];
        m2[d] = o.beta2 * m2[d] + (1.0f - o.beta2) * g[d] * g[d];
        g[d] = (m1[d] / st.c1) / (sqrtf(m2[d] / st.c2) + o.eps);
    }
}

__device__ inline void partial_rowwise_moments(const dtab &t, const ember__optim_step &st, int64_t row, float *g,
                                               int lane) {
    const ember_optim_config &o = t.o;
    float *m1 = t.m1 + row * t.dim, *m2 = t.m2 + row;
    const float ms = row_mean_sq(t, st, g, lane);
    const float m2v = o.beta2 * *m2 + (1.0f - o.beta2) * ms;
    __syncwarp();
    if (lane == 0) *m2 = m2v;
    const float den = sqrtf(m2v / st.c2) + o.eps;
    for (int d = lane; d < t.dim; d += 32) {
        m1[d] = o.beta1 * m1[d] + (1.0f - o.beta1) * g[d];
        g[d] = (m1[d] / st.c1) / den;
    }
}

// optim_row: the generic L2 step unless the optimizer decays inside its formula, then the update.
// w and g are the warp's shared rows; every lane calls it.
__device__ void optim_row(const dtab &t, const ember__optim_step &st, int64_t row, float *w, float *g, int lane) {
    const ember_optim_config &o = t.o;
    const int D = t.dim;
    const float lr = o.lr, wd = o.weight_decay;
    if (o.weight_decay_mode == EMBER_WD_L2 && wd != 0.0f && !t.l2_in_update)
        for (int d = lane; d < D; d += 32) g[d] = g[d] + wd * w[d];
    const int decoupled = o.weight_decay_mode == EMBER_WD_DECOUPLED && wd != 0.0f;
    switch (o.kind) {
    case EMBER_OPT_SGD:
        for (int d = lane; d < D; d += 32) w[d] = decoupled ? w[d] - lr * (g[d] + wd * w[d]) : w[d] - lr * g[d];
        break;
    case EMBER_OPT_ADAGRAD: {
        float *m1 = t.m1 + row * D;
        for (int d = lane; d < D; d += 32) {
            m1[d] = m1[d] + g[d] * g[d];
            w[d] = decoupled ? w[d] - lr * (g[d] / (sqrtf(m1[d]) + o.eps) + wd * w[d])
                             : w[d] - lr * (g[d] / (sqrtf(m1[d]) + o.eps));
        }
        break;
    }
    case EMBER_OPT_ROWWISE_ADAGRAD: {
        float *m1 = t.m1 + row;
        const float ms = row_mean_sq(t, st, g, lane);
        const float m1v = *m1 + ms;
        __syncwarp();
        if (lane == 0) *m1 = m1v;
        const float mult = lr / (sqrtf(m1v) + o.eps);
        for (int d = lane; d < D; d += 32) w[d] = decoupled ? w[d] - (mult * g[d] + lr * wd * w[d]) : w[d] - mult * g[d];
        break;
    }
    case EMBER_OPT_ADAM:
    case EMBER_OPT_LAMB:
        adam_moments(t, st, row, g, lane);
        apply_direction(t, w, g, decoupled, o.kind == EMBER_OPT_LAMB, lane);
        break;
    case EMBER_OPT_PARTIAL_ROWWISE_ADAM:
    case EMBER_OPT_PARTIAL_ROWWISE_LAMB:
        partial_rowwise_moments(t, st, row, g, lane);
        apply_direction(t, w, g, decoupled, o.kind == EMBER_OPT_PARTIAL_ROWWISE_LAMB, lane);
        break;
    case EMBER_OPT_LARS_SGD: {
        const float l2 = o.weight_decay_mode == EMBER_WD_L2 ? wd : 0.0f;
        const float wn = sqrtf(dot16(w, w, D, lane)), gn = sqrtf(dot16(g, g, D, lane));
        const float local = wn > 0.0f && gn > 0.0f ? o.eta * wn / (gn + l2 * wn) : 1.0f;
        const float rate = lr * local, mom = o.momentum;
        float *m1 = t.m1 + row * D;
        for (int d = lane; d < D; d += 32) {
            m1[d] = mom * m1[d] + rate * (g[d] + l2 * w[d]);
            w[d] = decoupled ? w[d] - (m1[d] + lr * wd * w[d]) : w[d] - m1[d];
        }
        break;
    }
    default: break;
    }
    __syncwarp();
}

// One warp per row: the row's gradient (summed from its segment's entries in position order, or
// given), the optimizer, the store (16-bit: nearest or stochastic, as update_row).
// The optimizer step of `row` of table t with gradient g (the warp's shared rows g and w, every
// lane calls it), then the store: fp32 as is, 16-bit rounded to nearest or stochastically (the
// cpu's update_row).
__device__ void update_row(const dtab &t, const ember__optim_step &st, int64_t row, float *g, float *w, int lane) {
    const int D = t.dim;
    unsigned char *p = t.w + row * t.row_bytes;
    for (int d = lane; d < D; d += 32) w[d] = load_one(t, p, d);
    optim_row(t, st, row, w, g, lane);
    if (t.dtype == EMBER_DTYPE_F32) {
        for (int d = lane; d < D; d += 32) ((float *)p)[d] = w[d];
        return;
    }
    uint16_t *h = (uint16_t *)p;
    const uint32_t rk = t.sr ? ember__sr_row_key(st.sr_key, row) : 0u;
    for (int d = lane; d < D; d += 32) {
        const float v = w[d];
        if (t.dtype == EMBER_DTYPE_BF16) h[d] = t.sr ? ember__f32_to_bf16_sr(v, ember__sr_hash(rk, (uint32_t)d)) : ember__f32_to_bf16(v);
        else h[d] = t.sr ? ember__f32_to_f16_sr(v, ember__sr_hash(rk, (uint32_t)d)) : ember__f32_to_f16(v);
    }
}

// Segments longer than this go to the hot-row kernel (k_update_hot).
#define HOT_ENTRIES 64

// One warp per row: the row's gradient (summed from its segment's entries in position order, or
// given), then update_row. Segments of more than HOT_ENTRIES entries are left to k_update_hot.
template <bool GIVEN>
__global__ void k_update(const dtab *tabs, int32_t T, const ember__optim_step *steps, segs s, const float *grad,
                         const unsigned long long *gkey, const int64_t *goff, const float *rss, int64_t u,
                         int32_t max_dim) {
    extern __shared__ float smem[];
    const int wib = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t k = (int64_t)blockIdx.x * (blockDim.x / 32) + wib;
    if (k >= u) return;
    if (!GIVEN && s.seg[k + 1] - s.seg[k] > HOT_ENTRIES) return;
    float *g = smem + (size_t)wib * 2 * (size_t)max_dim, *w = g + max_dim;
    const unsigned long long key = GIVEN ? gkey[k] : s.key[s.seg[k]];
    const int32_t ti = table_of_key(tabs, T, key);
    const dtab &t = tabs[ti];
    const int D = t.dim;
    if (GIVEN) {
        for (int d = lane; d < D; d += 32) g[d] = grad[goff[k] + d];
    } else {
        for (int d = lane; d < D; d += 32) g[d] = 0.0f;
        // Four entries' sources found before their adds (a shorter chain of dependent loads);
        // the adds stay in position order.
        const int64_t e1 = s.seg[k + 1];
        for (int64_t e = s.seg[k]; e < e1; e += 4) {
            const int n = e1 - e < 4 ? (int)(e1 - e) : 4;
            const float *go[4];
            float sc[4];
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (q < n) go[q] = entry_grad(s, grad, e + q, &sc[q]);
            for (int d = lane; d < D; d += 32) {
                float v[4];
#pragma unroll
                for (int q = 0; q < 4; q++)
                    if (q < n) v[q] = go[q][d];
                float acc = g[d];
#pragma unroll
                for (int q = 0; q < 4; q++)
                    if (q < n) acc = acc + sc[q] * v[q];
                g[d] = acc;
            }
        }
    }
    ember__optim_step st = steps[ti];
    if (GIVEN && rss && rss[k] >= 0.0f) st.row_sumsq = rss[k];
    update_row(t, st, (int64_t)(key - (unsigned long long)t.key_base), g, w, lane);
}

// The hot-row kernel's shared memory: g, w [max_dim], prod [chunk * max_dim], msc [chunk] floats
// (an even count), then moff [chunk] int64.
__host__ __device__ inline size_t hot_floats(int32_t max_dim, int32_t chunk) {
    const size_t n = (size_t)2 * (size_t)max_dim + (size_t)chunk * (size_t)max_dim + (size_t)chunk;
    return n + (n & 1);
}

// The segments longer than HOT_ENTRIES (hot rows), in any order: the list's order only says which
// block takes which row.
__global__ void k_hot_list(const int64_t *seg, int64_t u, int64_t *hot, unsigned long long *nhot) {
    const int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < u && seg[k + 1] - seg[k] > HOT_ENTRIES) hot[atomicAdd(nhot, 1ull)] = k;
}

// A block per hot row, for long segments (Zipf's head: tens of thousands of entries): the block's
// threads find `chunk` entries' sources, then fetch their scaled gradient rows (sc_j * dL/dy_j,
// the cpu's product) into shared memory together, then one thread per column adds them in
// position order: the cpu's sum, with many loads in flight instead of one entry at a time. Warp 0
// then updates the row.
__global__ void k_update_hot(const dtab *tabs, int32_t T, const ember__optim_step *steps, segs s, const float *grad,
                             const int64_t *hot, const unsigned long long *nhot, int32_t max_dim, int32_t chunk) {
    extern __shared__ float smem[];
    float *g = smem, *w = g + max_dim, *prod = w + max_dim, *msc = prod + (size_t)chunk * (size_t)max_dim;
    int64_t *moff = (int64_t *)(void *)(smem + hot_floats(max_dim, chunk)); // 8-byte aligned
    const int tid = threadIdx.x, nth = blockDim.x;
    const int64_t n = (int64_t)*nhot;
    for (int64_t h = blockIdx.x; h < n; h += gridDim.x) {
        const int64_t k = hot[h], e0 = s.seg[k], e1 = s.seg[k + 1];
        const unsigned long long key = s.key[e0];
        const int32_t ti = table_of_key(tabs, T, key);
        const dtab &t = tabs[ti];
        const int D = t.dim;
        for (int d = tid; d < D; d += nth) g[d] = 0.0f;
        for (int64_t c0 = e0; c0 < e1; c0 += chunk) {
            const int m = e1 - c0 < chunk ? (int)(e1 - c0) : chunk;
            __syncthreads(); // the previous chunk is summed
            for (int i = tid; i < m; i += nth) { // each entry's source, once
                float sc;
                moff[i] = entry_grad(s, grad, c0 + i, &sc) - grad;
                msc[i] = sc;
            }
            __syncthreads();
#pragma unroll 4
            for (int i = tid; i < m * D; i += nth) prod[i] = msc[i / D] * grad[moff[i / D] + i % D];
            __syncthreads();
            for (int d = tid; d < D; d += nth) {
                float acc = g[d];
#pragma unroll 8
                for (int i = 0; i < m; i++) acc = acc + prod[i * D + d];
                g[d] = acc;
            }
        }
        __syncthreads();
        if (tid < 32) update_row(t, steps[ti], (int64_t)(key - (unsigned long long)t.key_base), g, w, tid);
        __syncthreads();
    }
}

// The coalesced gradient of each segment into out + goff[k] (ember__ebc_coalesce).
__global__ void k_reduce(const dtab *tabs, int32_t T, segs s, const float *grad, const int64_t *goff, int64_t u,
                         float *out) {
    const int lane = threadIdx.x % 32;
    const int64_t k = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (k >= u) return;
    const dtab &t = tabs[table_of_key(tabs, T, s.key[s.seg[k]])];
    float *g = out + goff[k];
    for (int d = lane; d < t.dim; d += 32) {
        float acc = 0.0f;
        for (int64_t e = s.seg[k]; e < s.seg[k + 1]; e++) {
            float sc;
            const float *go = entry_grad(s, grad, e, &sc);
            acc = acc + sc * go[d];
        }
        g[d] = acc;
    }
}

// dL/dw_j = c_bag * <dL/dy, E[id_j]> with the weights before the update (one thread per bag,
// the dot product in column order, as the cpu's weight_grads).
__global__ void k_weight_grads(const dtab *tabs, const int32_t *ftab, dbatch b, int64_t nbags, int kb, int mode,
                               segs s, const float *grad, float *gw) {
    const int64_t bag = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bag >= nbags) return;
    const dtab &t = tabs[ftab[bag / b.batch_size]];
    for (int64_t j = b.offsets[bag]; j < b.offsets[bag + 1]; j++) {
        const int64_t r = row_of(b.values[j], t, kb, mode, NULL, bag);
        if (r < 0) {
            gw[j] = 0.0f;
            continue;
        }
        const unsigned char *p = t.w + r * t.row_bytes;
        const float *go = s.kind == EMBER__ITEM_POS_SEQ
                              ? grad + j * s.out_dim
                              : grad + (bag % b.batch_size) * s.out_dim + s.fcol[bag / b.batch_size];
        float dot = 0.0f;
        for (int d = 0; d < t.dim; d++) dot = dot + go[d] * load_one(t, p, d);
        gw[j] = s.bag_c[bag] * dot;
    }
}

// out[k] = sum_d (g_d + l2 w_d)^2 over row key[k] for the row-wise optimizers, -1 for the others
// (one thread per row, in column order, as the cpu's row_sumsq).
__global__ void k_row_sumsq(const dtab *tabs, int32_t T, const unsigned long long *key, const int64_t *goff,
                            const float *grad, int64_t n, float *out) {
    const int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const dtab &t = tabs[table_of_key(tabs, T, key[k])];
    if (!t.rowwise_sumsq) {
        out[k] = -1.0f;
        return;
    }
    const float l2 = t.o.weight_decay_mode == EMBER_WD_L2 ? t.o.weight_decay : 0.0f;
    const unsigned char *p = t.w + (int64_t)(key[k] - (unsigned long long)t.key_base) * t.row_bytes;
    float ss = 0.0f;
    for (int d = 0; d < t.dim; d++) {
        const float v = grad[goff[k] + d] + l2 * load_one(t, p, d);
        ss = ss + v * v;
    }
    out[k] = ss;
}

// A device call's dL/dy: the first element that is not finite.
__global__ void k_check_finite(const float *x, int64_t n, dcheck *ck) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (!isfinite(x[i])) note(ck, CK_GRAD, (unsigned long long)i);
}

// The key of each segment's row.
__global__ void k_seg_keys(const unsigned long long *key, const int64_t *seg, int64_t u, unsigned long long *out) {
    const int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < u) out[k] = key[seg[k]];
}

__global__ void k_fill(float *p, int64_t n, float v) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}

// n values from one storage dtype to another (fp32 in between; stores round to nearest even).
__global__ void k_convert(const void *src, int sdt, void *dst, int ddt, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = sdt == EMBER_DTYPE_F32    ? ((const float *)src)[i]
                    : sdt == EMBER_DTYPE_BF16 ? ember__bf16_to_f32(((const uint16_t *)src)[i])
                                              : ember__f16_to_f32(((const uint16_t *)src)[i]);
    if (ddt == EMBER_DTYPE_F32) ((float *)dst)[i] = v;
    else if (ddt == EMBER_DTYPE_BF16) ((uint16_t *)dst)[i] = ember__f32_to_bf16(v);
    else ((uint16_t *)dst)[i] = ember__f32_to_f16(v);
}

// ---- the calls ----------------------------------------------------------------------------------

ember_status set_device(const ember_ebc *ebc) {
    CU_TRY(ebc->ctx, cudaSetDevice(state_of(ebc)->device), "cudaSetDevice");
    return EMBER_OK;
}

void cuda_free(ember_ebc *ebc) {
    cuda_state *c = state_of(ebc);
    if (!c) return;
    cudaSetDevice(c->device);
    for (int i = 0; i < B_COUNT; i++) cudaFree(c->buf[i].p);
    cudaFree(c->slab);
    cudaFree(c->state);
    cudaFree(c->tabs);
    cudaFree(c->ftab);
    cudaFree(c->fcol);
    cudaFree(c->steps);
    if (c->stream) cudaStreamDestroy(c->stream);
    ember__free(ebc->ctx, c->htabs);
    ember__free(ebc->ctx, c->sent);
    ember__free(ebc->ctx, c->hsteps);
    ember__free(ebc->ctx, c);
    ebc->bs = NULL;
}

ember_status cuda_alloc(ember_ebc *ebc) {
    ember_ctx *ctx = ebc->ctx;
    char why[256];
    EMBER_CHECK(ctx, ember__cuda_usable(why, sizeof why), EMBER_ERR_UNSUPPORTED, "ember_ebc_create: backend cuda: %s",
                why);
    // Two rows of shared memory per warp in the row-update kernels.
    const size_t per_warp = sizeof(float) * 2 * (size_t)ebc->max_dim;
    EMBER_CHECK(ctx, (size_t)ebc->max_dim * 3 * sizeof(float) <= 200 * 1024, EMBER_ERR_UNSUPPORTED,
                "ember_ebc_create: backend cuda: dim %d is wider than the row-update kernels hold (17066)",
                (int)ebc->max_dim);
    cuda_state *c = (cuda_state *)ember__xalloc(ctx, sizeof *c, "collection");
    if (!c) return EMBER_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    ebc->bs = c;
    c->htabs = (dtab *)ember__xalloc(ctx, sizeof(dtab) * (size_t)ebc->T, "collection");
    c->sent = (dtab *)ember__calloc(ctx, sizeof(dtab) * (size_t)ebc->T); // all zero: never a table's
    c->hsteps = (ember__optim_step *)ember__xalloc(ctx, sizeof(ember__optim_step) * (size_t)ebc->T, "collection");
    if (!c->htabs || !c->sent || !c->hsteps) return EMBER_ERR_NOMEM;
    CU_TRY(ctx, cudaGetDevice(&c->device), "cudaGetDevice");
    CU_TRY(ctx, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    c->smem_per_warp = per_warp;
    c->warps_per_block = (int)(48 * 1024 / per_warp);
    if (c->warps_per_block > 8) c->warps_per_block = 8;
    if (c->warps_per_block < 1) c->warps_per_block = 1;
    const size_t smem = per_warp * (size_t)c->warps_per_block;
    if (smem > 48 * 1024) {
        CU_TRY(ctx, cudaFuncSetAttribute(k_update<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "shared memory");
        CU_TRY(ctx, cudaFuncSetAttribute(k_update<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "shared memory");
    }
    // The hot-row kernel: two rows and `chunk` staged gradient rows of shared memory (64 KiB of
    // them), two blocks per multiprocessor.
    c->hot_chunk = (int)((64 * 1024 / sizeof(float)) / (size_t)ebc->max_dim);
    if (c->hot_chunk < 1) c->hot_chunk = 1;
    if (c->hot_chunk > 256) c->hot_chunk = 256;
    c->hot_smem = sizeof(float) * hot_floats(ebc->max_dim, c->hot_chunk) + sizeof(int64_t) * (size_t)c->hot_chunk;
    CU_TRY(ctx, cudaFuncSetAttribute(k_update_hot, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->hot_smem),
           "shared memory");
    int sms = 0;
    CU_TRY(ctx, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device), "cudaDeviceGetAttribute");
    c->hot_blocks = 2 * sms;
    ember__slab_sizes(ebc, &c->slab_bytes, &c->state_floats);
    CU_TRY(ctx, cudaMalloc(&c->slab, c->slab_bytes), "embedding weights");
    CU_TRY(ctx, cudaMemset(c->slab, 0, c->slab_bytes), "embedding weights");
    if (c->state_floats) {
        CU_TRY(ctx, cudaMalloc(&c->state, c->state_floats * sizeof(float)), "optimizer state");
        CU_TRY(ctx, cudaMemset(c->state, 0, c->state_floats * sizeof(float)), "optimizer state");
    }
    CU_TRY(ctx, cudaMalloc(&c->tabs, sizeof(dtab) * (size_t)ebc->T), "table descriptors");
    CU_TRY(ctx, cudaMalloc(&c->steps, sizeof(ember__optim_step) * (size_t)ebc->T), "step constants");
    CU_TRY(ctx, cudaMalloc(&c->ftab, sizeof(int32_t) * (size_t)ebc->F), "features");
    CU_TRY(ctx, cudaMalloc(&c->fcol, sizeof(int32_t) * (size_t)ebc->F), "features");
    CU_TRY(ctx, cudaMemcpy(c->ftab, ebc->feature_table, sizeof(int32_t) * (size_t)ebc->F, cudaMemcpyHostToDevice),
           "features");
    CU_TRY(ctx, cudaMemcpy(c->fcol, ebc->feature_col, sizeof(int32_t) * (size_t)ebc->F, cudaMemcpyHostToDevice),
           "features");
    ember__slab_layout(ebc, c->slab, c->state);
    return EMBER_OK;
}

// Initial values on the host (the same function the cpu backend calls), sent in chunks.
ember_status cuda_init(ember_ebc *ebc, ember__table *tb) {
    ember_ctx *ctx = ebc->ctx;
    EMBER_TRY(set_device(ebc));
    if (tb->m1 && tb->optim->adagrad_init) {
        const int64_t n1 = tb->slab_rows * (int64_t)tb->m1_cols;
        k_fill<<<blocks_for(n1, 256), 256>>>(tb->m1, n1, tb->cfg.optim.initial_accumulator);
        CU_TRY(ctx, cudaGetLastError(), "initial optimizer state");
        CU_TRY(ctx, cudaDeviceSynchronize(), "initial optimizer state");
    }
    if (tb->cfg.init.kind == EMBER_INIT_ZEROS) return EMBER_OK;
    const int32_t D = tb->cfg.dim;
    int64_t chunk = (int64_t)((size_t)(16 << 20) / (sizeof(float) * (size_t)D));
    if (chunk < 1) chunk = 1;
    if (chunk > tb->slab_rows) chunk = tb->slab_rows;
    float *row = (float *)ember__xalloc(ctx, sizeof(float) * (size_t)D, "initial weights");
    unsigned char *buf = (unsigned char *)ember__xalloc(ctx, (size_t)chunk * tb->row_bytes, "initial weights");
    ember_status st = row && buf ? EMBER_OK : EMBER_ERR_NOMEM;
    for (int64_t r0 = 0; st == EMBER_OK && r0 < tb->slab_rows; r0 += chunk) {
        const int64_t n = tb->slab_rows - r0 < chunk ? tb->slab_rows - r0 : chunk;
        if (D <= 1024) { // rows in parallel, each thread with its own scratch row
#pragma omp parallel for schedule(static) num_threads(ember__threads(ctx))
            for (int64_t r = 0; r < n; r++) {
                float tmp[1024];
                ember__init_row(ebc, tb, r0 + r, tmp);
                ember__store_row(tb->cfg.dtype, buf + (size_t)r * tb->row_bytes, tmp, D);
            }
        } else {
            for (int64_t r = 0; r < n; r++) {
                ember__init_row(ebc, tb, r0 + r, row);
                ember__store_row(tb->cfg.dtype, buf + (size_t)r * tb->row_bytes, row, D);
            }
        }
        const cudaError_t e = cudaMemcpy(tb->w + (size_t)r0 * tb->row_bytes, buf, (size_t)n * tb->row_bytes,
                                         cudaMemcpyHostToDevice);
        if (e != cudaSuccess) st = cu_fail(ctx, e, "initial weights");
    }
    ember__free(ctx, row);
    ember__free(ctx, buf);
    return st;
}

float *state_ptr(const ember__table *tb, int which) { return which == 1 ? tb->m1 : tb->m2; }
int32_t cols_of(const ember__table *tb, int which) { return which == 0 ? tb->cfg.dim : which == 1 ? tb->m1_cols : tb->m2_cols; }

ember_status cuda_read_rows(const ember_ebc *ebc, const ember__table *tb, int which, int64_t r0, int64_t n,
                            ember_dtype dtype, void *dst) {
    ember_ctx *ctx = ebc->ctx;
    EMBER_TRY(set_device(ebc));
    const int32_t cols = cols_of(tb, which);
    if (which) {
        CU_TRY(ctx, cudaMemcpy(dst, state_ptr(tb, which) + (size_t)r0 * (size_t)cols, sizeof(float) * (size_t)n * (size_t)cols,
                               cudaMemcpyDeviceToHost),
               "reading rows");
        return EMBER_OK;
    }
    if (dtype == tb->cfg.dtype) {
        CU_TRY(ctx, cudaMemcpy(dst, tb->w + (size_t)r0 * tb->row_bytes, (size_t)n * tb->row_bytes, cudaMemcpyDeviceToHost),
               "reading rows");
        return EMBER_OK;
    }
    void *tmp = ember__xalloc(ctx, (size_t)n * tb->row_bytes, "reading rows");
    if (!tmp) return EMBER_ERR_NOMEM;
    const cudaError_t e = cudaMemcpy(tmp, tb->w + (size_t)r0 * tb->row_bytes, (size_t)n * tb->row_bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        for (int64_t r = 0; r < n; r++)
            ember__load_row(tb->cfg.dtype, (unsigned char *)tmp + (size_t)r * tb->row_bytes, (float *)dst + r * cols, cols);
    ember__free(ctx, tmp);
    return e == cudaSuccess ? EMBER_OK : cu_fail(ctx, e, "reading rows");
}

ember_status cuda_write_rows(ember_ebc *ebc, const ember__table *tb, int which, int64_t r0, int64_t n,
                             ember_dtype dtype, const void *src) {
    ember_ctx *ctx = ebc->ctx;
    EMBER_TRY(set_device(ebc));
    const int32_t cols = cols_of(tb, which);
    if (which) {
        CU_TRY(ctx, cudaMemcpy(state_ptr(tb, which) + (size_t)r0 * (size_t)cols, src, sizeof(float) * (size_t)n * (size_t)cols,
                               cudaMemcpyHostToDevice),
               "writing rows");
        return EMBER_OK;
    }
    if (dtype == tb->cfg.dtype) {
        CU_TRY(ctx, cudaMemcpy(tb->w + (size_t)r0 * tb->row_bytes, src, (size_t)n * tb->row_bytes, cudaMemcpyHostToDevice),
               "writing rows");
        return EMBER_OK;
    }
    unsigned char *tmp = (unsigned char *)ember__xalloc(ctx, (size_t)n * tb->row_bytes, "writing rows");
    if (!tmp) return EMBER_ERR_NOMEM;
    for (int64_t r = 0; r < n; r++)
        ember__store_row(tb->cfg.dtype, tmp + (size_t)r * tb->row_bytes, (const float *)src + r * cols, cols);
    const cudaError_t e = cudaMemcpy(tb->w + (size_t)r0 * tb->row_bytes, tmp, (size_t)n * tb->row_bytes, cudaMemcpyHostToDevice);
    ember__free(ctx, tmp);
    return e == cudaSuccess ? EMBER_OK : cu_fail(ctx, e, "writing rows");
}

const void *cuda_host_rows(const ember_ebc *ebc, const ember__table *tb) {
    (void)ebc;
    (void)tb;
    return NULL; // device memory
}

struct cuda_change {
    unsigned char *slab;
    size_t bytes;
};

void cuda_convert_abort(ember_ebc *ebc, ember__dtype_change *c) {
    cuda_change *p = (cuda_change *)c->prepared;
    if (p) {
        cudaFree(p->slab);
        ember__free(ebc->ctx, p);
    }
    c->prepared = NULL;
}

ember_status cuda_convert_prepare(ember_ebc *ebc, ember__dtype_change *c) {
    c->prepared = NULL;
    EMBER_TRY(set_device(ebc));
    size_t bytes = 0;
    int change = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        bytes += ember__weight_block(&ebc->tables[t], ember__dtype_change_new(ebc, c, t));
        change |= ember__dtype_change_new(ebc, c, t) != ebc->tables[t].cfg.dtype;
    }
    if (!change) return EMBER_OK;
    cuda_change *p = (cuda_change *)ember__xalloc(ebc->ctx, sizeof *p, "dtype conversion");
    if (!p) return EMBER_ERR_NOMEM;
    p->bytes = bytes;
    const cudaError_t e = cudaMalloc(&p->slab, bytes);
    if (e != cudaSuccess) {
        ember__free(ebc->ctx, p);
        return cu_fail(ebc->ctx, e, "dtype conversion");
    }
    c->prepared = p;
    return EMBER_OK;
}

// Cannot fail by contract; a launch that fails leaves the runtime's error for the next call.
void cuda_convert_commit(ember_ebc *ebc, ember__dtype_change *c) {
    cuda_change *p = (cuda_change *)c->prepared;
    if (!p) return;
    cuda_state *cs = state_of(ebc);
    cudaSetDevice(cs->device);
    size_t off = 0;
    for (int32_t t = 0; t < ebc->T; t++) {
        ember__table *tb = &ebc->tables[t];
        const ember_dtype dt = ember__dtype_change_new(ebc, c, t);
        unsigned char *dst = p->slab + off;
        const int64_t n = tb->slab_rows * (int64_t)tb->cfg.dim;
        if (n > 0) k_convert<<<blocks_for(n, 256), 256, 0, cs->stream>>>(tb->w, (int)tb->cfg.dtype, dst, (int)dt, n);
        tb->cfg.dtype = dt;
        tb->w = dst;
        tb->row_bytes = (size_t)tb->cfg.dim * ember_dtype_size(dt);
        off += ember__weight_block(tb, dt);
    }
    cudaStreamSynchronize(cs->stream);
    cudaFree(cs->slab);
    cs->slab = p->slab;
    cs->slab_bytes = p->bytes;
    p->slab = NULL;
    cuda_convert_abort(ebc, c);
}

// ---- compute calls ------------------------------------------------------------------------------

// The check block of a device call, cleared (no bits; every "first" at its maximum).
dcheck *check_reset(ember_ebc *ebc) {
    cuda_state *c = state_of(ebc);
    dcheck *ck = (dcheck *)dget(ebc, B_CHECK, sizeof(dcheck));
    if (!ck) return NULL;
    if (cudaMemsetAsync(ck, 0, sizeof(unsigned int) * 2, c->stream) != cudaSuccess ||
        cudaMemsetAsync(ck->first, 0xff, sizeof ck->first, c->stream) != cudaSuccess)
        return NULL;
    return ck;
}

// The status of a device call's findings (h: the check block, back on the host).
ember_status check_status(ember_ebc *ebc, const char *fn, const dcheck &h, int32_t B) {
    if (!h.bits) return EMBER_OK;
    ember_ctx *ctx = ebc->ctx;
    const int what = h.bits & (1u << CK_OFFSETS) ? CK_OFFSETS
                     : h.bits & (1u << CK_RANGE) ? CK_RANGE
                     : h.bits & (1u << CK_WEIGHT) ? CK_WEIGHT
                                                  : CK_GRAD;
    const unsigned long long at = h.first[what];
    if (what == CK_GRAD)
        return ember__error(ctx, EMBER_ERR_NUMERIC, "%s: grad_out[%lld][%lld] is not finite", fn,
                            (long long)(at / (unsigned long long)ebc->out_dim), (long long)(at % (unsigned long long)ebc->out_dim));
    const int32_t f = (int32_t)(at / (unsigned long long)(B > 0 ? B : 1)), b = (int32_t)(at % (unsigned long long)(B > 0 ? B : 1));
    const ember__table *tb = &ebc->tables[ebc->feature_table[f]];
    if (what == CK_OFFSETS)
        return ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: feature '%s' bag %d: the offsets are not a prefix sum from 0 to nnz",
                            fn, ebc->feature_names[f], (int)b);
    if (what == CK_RANGE)
        return ember__error(ctx, EMBER_ERR_OUT_OF_RANGE, "%s: feature '%s' bag %d: an id outside table '%s' (rows %lld)", fn,
                            ebc->feature_names[f], (int)b, tb->label, (long long)tb->cfg.rows);
    return ember__error(ctx, EMBER_ERR_NUMERIC, "%s: feature '%s' bag %d: a weight is not finite", fn, ebc->feature_names[f],
                        (int)b);
}

// Queues the pooled forward of a device batch.
void launch_forward(ember_ebc *ebc, const dbatch *b, int mode, dcheck *ck, float *out) {
    cuda_state *c = state_of(ebc);
    const int64_t nbags = (int64_t)ebc->F * b->batch_size;
    if (nbags == 0) return;
    const int kb = (int)ebc->kbounds;
    if (ebc->sequence) {
        k_sequence<<<blocks_for(nbags, 8), 256, 0, c->stream>>>(c->tabs, c->ftab, *b, nbags, ebc->out_dim, kb, mode, ck,
                                                                 out);
        return;
    }
    // Lanes per bag: enough for the widest row at 4 columns a lane, 4 to 32.
    int tpb = 4;
    while (tpb < 32 && tpb * 4 < ebc->max_dim) tpb *= 2;
    const unsigned grid = blocks_for(nbags * tpb, 256);
#define POOL(N) k_pool<N><<<grid, 256, 0, c->stream>>>(c->tabs, c->ftab, c->fcol, *b, nbags, ebc->out_dim, kb, mode, ck, out)
    switch (tpb) {
    case 4: POOL(4); break;
    case 8: POOL(8); break;
    case 16: POOL(16); break;
    default: POOL(32); break;
    }
#undef POOL
}

// The sorted entries and segments of a device batch: u unique rows, segments in s.
struct sorted {
    segs s;
    int64_t u;
};

unsigned long long key_sentinel(const ember_ebc *ebc) { return (unsigned long long)ebc->total_keys; }

int key_bits(const ember_ebc *ebc) {
    int b = 1;
    while (b < 64 && (1ull << b) <= key_sentinel(ebc)) b++;
    return b;
}

// Makes, sorts and segments the entries of a device batch, then waits for them (the segment count
// comes back to the host; a device call's check block with it, into *h when ck is given).
ember_status sort_entries(ember_ebc *ebc, const dbatch *b, int mode, dcheck *ck, dcheck *h, sorted *out) {
    ember_ctx *ctx = ebc->ctx;
    cuda_state *c = state_of(ebc);
    const int64_t nbags = (int64_t)ebc->F * b->batch_size, nnz = b->nnz;
    const enum ember__item_kind kind = ebc->sequence ? EMBER__ITEM_POS_SEQ
                                       : b->weights  ? EMBER__ITEM_POS_POOLED
                                                     : EMBER__ITEM_BAG;
    EMBER_CHECK(ctx, nnz < (int64_t)1 << 31, EMBER_ERR_UNSUPPORTED, "cuda backend: %lld ids in one call (at most 2^31 - 1)",
                (long long)nnz);
    const size_t n = (size_t)(nnz > 0 ? nnz : 1);
    unsigned long long *key = (unsigned long long *)dget(ebc, B_KEY, sizeof(unsigned long long) * n);
    unsigned long long *key2 = (unsigned long long *)dget(ebc, B_KEY2, sizeof(unsigned long long) * n);
    int64_t *item = (int64_t *)dget(ebc, B_ITEM, sizeof(int64_t) * n);
    int64_t *item2 = (int64_t *)dget(ebc, B_ITEM2, sizeof(int64_t) * n);
    unsigned long long *ukey = (unsigned long long *)dget(ebc, B_UKEY, sizeof(unsigned long long) * n);
    int64_t *cnt = (int64_t *)dget(ebc, B_CNT, sizeof(int64_t) * n);
    int64_t *seg = (int64_t *)dget(ebc, B_SEG, sizeof(int64_t) * (n + 1));
    int64_t *nrun = (int64_t *)dget(ebc, B_NRUN, sizeof(int64_t) * 2);
    float *bag_c = (float *)dget(ebc, B_BAGC, sizeof(float) * (size_t)(nbags > 0 ? nbags : 1));
    int64_t *bag_of = kind == EMBER__ITEM_POS_POOLED ? (int64_t *)dget(ebc, B_BAGOF, sizeof(int64_t) * n) : NULL;
    // The hot-row list of the update: [u] segment indices and its count (u <= n).
    int64_t *hot = (int64_t *)dget(ebc, B_HOT, sizeof(int64_t) * (n + 1));
    if (!key || !key2 || !item || !item2 || !ukey || !cnt || !seg || !nrun || !bag_c || !hot ||
        (kind == EMBER__ITEM_POS_POOLED && !bag_of))
        return EMBER_ERR_NOMEM;
    size_t t1 = 0, t2 = 0, t3 = 0;
    const int bits = key_bits(ebc), items = (int)n;
    CU_TRY(ctx, cub::DeviceRadixSort::SortPairs(NULL, t1, key, key2, item, item2, items, 0, bits, c->stream), "sort");
    CU_TRY(ctx, cub::DeviceRunLengthEncode::Encode(NULL, t2, key2, ukey, cnt, nrun, items, c->stream), "segments");
    CU_TRY(ctx, cub::DeviceScan::InclusiveSum(NULL, t3, cnt, seg + 1, items, c->stream), "segments");
    size_t tb = t1 > t2 ? t1 : t2;
    tb = tb > t3 ? tb : t3;
    void *tmp = dget(ebc, B_TMP, tb);
    if (!tmp) return EMBER_ERR_NOMEM;
    out->s = segs{key2, item2, seg, bag_c, bag_of, b->weights, c->fcol, b->batch_size, ebc->out_dim, (int32_t)kind};
    out->u = 0;
    int64_t u = 0;
    CU_TRY(ctx, cudaMemsetAsync(seg, 0, sizeof(int64_t), c->stream), "segments");
    if (nbags > 0)
        k_entries<<<blocks_for(nbags, 256), 256, 0, c->stream>>>(c->tabs, c->ftab, *b, nbags, (int)ebc->kbounds, mode, ck,
                                                                  kind == EMBER__ITEM_BAG, key_sentinel(ebc), key, item,
                                                                  bag_c, bag_of);
    if (nnz > 0) {
        CU_TRY(ctx, cub::DeviceRadixSort::SortPairs(tmp, t1, key, key2, item, item2, items, 0, bits, c->stream), "sort");
        CU_TRY(ctx, cub::DeviceRunLengthEncode::Encode(tmp, t2, key2, ukey, cnt, nrun, items, c->stream), "segments");
        CU_TRY(ctx, cub::DeviceScan::InclusiveSum(tmp, t3, cnt, seg + 1, items, c->stream), "segments");
        k_rows_runs<<<1, 1, 0, c->stream>>>(ukey, nrun, key_sentinel(ebc), nrun + 1);
        CU_TRY(ctx, cudaMemcpyAsync(&u, nrun + 1, sizeof u, cudaMemcpyDeviceToHost, c->stream), "segments");
    }
    if (ck) CU_TRY(ctx, cudaMemcpyAsync(h, ck, sizeof *h, cudaMemcpyDeviceToHost, c->stream), "checks");
    EMBER_TRY(finish(ebc, "backward"));
    out->u = u;
    return EMBER_OK;
}

// Counts the step and queues one update per segment.
ember_status update_segments(ember_ebc *ebc, const sorted *so, const float *grad) {
    cuda_state *c = state_of(ebc);
    EMBER_TRY(begin_step(ebc));
    if (so->u > 0) {
        const int wpb = c->warps_per_block;
        int64_t *hot = (int64_t *)c->buf[B_HOT].p; // reserved by sort_entries
        unsigned long long *nhot = (unsigned long long *)(hot + so->u);
        CU_TRY(ebc->ctx, cudaMemsetAsync(nhot, 0, sizeof *nhot, c->stream), "hot rows");
        k_hot_list<<<blocks_for(so->u, 256), 256, 0, c->stream>>>(so->s.seg, so->u, hot, nhot);
        k_update<false><<<blocks_for(so->u, wpb), 32 * wpb, c->smem_per_warp * (size_t)wpb, c->stream>>>(
            c->tabs, ebc->T, c->steps, so->s, grad, NULL, NULL, NULL, so->u, ebc->max_dim);
        k_update_hot<<<c->hot_blocks, 256, c->hot_smem, c->stream>>>(c->tabs, ebc->T, c->steps, so->s, grad, hot, nhot,
                                                                      ebc->max_dim, c->hot_chunk);
    }
    return EMBER_OK;
}

// A host KJT with offsets `off` copied to the device workspace.
ember_status upload_batch(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, dbatch *b) {
    ember_ctx *ctx = ebc->ctx;
    cuda_state *c = state_of(ebc);
    const size_t nb = (size_t)ebc->F * (size_t)kjt->batch_size + 1, nnz = (size_t)kjt->nnz;
    int64_t *doff = (int64_t *)dget(ebc, B_OFF, sizeof(int64_t) * nb);
    int64_t *dval = (int64_t *)dget(ebc, B_VAL, sizeof(int64_t) * (nnz ? nnz : 1));
    float *dw = kjt->weights ? (float *)dget(ebc, B_WGT, sizeof(float) * (nnz ? nnz : 1)) : NULL;
    if (!doff || !dval || (kjt->weights && !dw)) return EMBER_ERR_NOMEM;
    CU_TRY(ctx, cudaMemcpyAsync(doff, off, sizeof(int64_t) * nb, cudaMemcpyHostToDevice, c->stream), "copying the KJT");
    if (nnz) {
        CU_TRY(ctx, cudaMemcpyAsync(dval, kjt->values, sizeof(int64_t) * nnz, cudaMemcpyHostToDevice, c->stream),
               "copying the KJT");
        if (dw)
            CU_TRY(ctx, cudaMemcpyAsync(dw, kjt->weights, sizeof(float) * nnz, cudaMemcpyHostToDevice, c->stream),
                   "copying the KJT");
    }
    *b = dbatch{kjt->batch_size, kjt->nnz, doff, dval, dw};
    return EMBER_OK;
}

int64_t output_floats(const ember_ebc *ebc, const ember_kjt *kjt) {
    return ebc->sequence ? kjt->nnz * ebc->out_dim : (int64_t)kjt->batch_size * ebc->out_dim;
}

ember_status cuda_forward(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, int resolve, float *out) {
    EMBER_TRY(set_device(ebc));
    dbatch b;
    EMBER_TRY(upload_batch(ebc, kjt, off, &b));
    EMBER_TRY(sync_tables(ebc));
    const int64_t n = output_floats(ebc, kjt);
    float *dout = (float *)dget(ebc, B_OUT, sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!dout) return EMBER_ERR_NOMEM;
    launch_forward(ebc, &b, resolve ? IDS_RESOLVE : IDS_ROWS, NULL, dout);
    if (n > 0)
        CU_TRY(ebc->ctx, cudaMemcpyAsync(out, dout, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost, state_of(ebc)->stream),
               "copying the output");
    return finish(ebc, "forward");
}

ember_status cuda_forward_device(ember_ebc *ebc, const ember_kjt *kjt, float *out) {
    EMBER_TRY(set_device(ebc));
    EMBER_TRY(sync_tables(ebc));
    dcheck *ck = check_reset(ebc), h;
    if (!ck) return EMBER_ERR_NOMEM;
    const dbatch b = {kjt->batch_size, kjt->nnz, kjt->offsets, kjt->values, kjt->weights};
    launch_forward(ebc, &b, IDS_CHECK, ck, out);
    CU_TRY(ebc->ctx, cudaMemcpyAsync(&h, ck, sizeof h, cudaMemcpyDeviceToHost, state_of(ebc)->stream), "checks");
    EMBER_TRY(finish(ebc, "ember_ebc_forward_device"));
    return check_status(ebc, "ember_ebc_forward_device", h, kjt->batch_size);
}

ember_status cuda_backward_device(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out) {
    EMBER_TRY(set_device(ebc));
    cuda_state *c = state_of(ebc);
    EMBER_TRY(sync_tables(ebc));
    dcheck *ck = check_reset(ebc), h;
    if (!ck) return EMBER_ERR_NOMEM;
    const int64_t n = output_floats(ebc, kjt);
    if (n > 0) k_check_finite<<<blocks_for(n < (1 << 22) ? n : (1 << 22), 256), 256, 0, c->stream>>>(grad_out, n, ck);
    const dbatch b = {kjt->batch_size, kjt->nnz, kjt->offsets, kjt->values, kjt->weights};
    sorted so;
    EMBER_TRY(sort_entries(ebc, &b, IDS_CHECK, ck, &h, &so));
    EMBER_TRY(check_status(ebc, "ember_ebc_backward_device", h, kjt->batch_size));
    EMBER_TRY(update_segments(ebc, &so, grad_out));
    return finish(ebc, "ember_ebc_backward_device");
}

// prepare: the batch on the device, sorted, and every buffer apply needs reserved. The segments
// handed back carry the device arrays (only this backend reads them).
ember_status cuda_backward_prepare(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, ember__segments *s) {
    EMBER_TRY(set_device(ebc));
    dbatch b;
    EMBER_TRY(upload_batch(ebc, kjt, off, &b));
    EMBER_TRY(sync_tables(ebc));
    const int mode = ebc->kbounds != EMBER_BOUNDS_ERROR ? IDS_RESOLVE : IDS_ROWS;
    sorted so;
    EMBER_TRY(sort_entries(ebc, &b, mode, NULL, NULL, &so));
    const int64_t n = output_floats(ebc, kjt);
    if (!dget(ebc, B_GRAD, sizeof(float) * (size_t)(n > 0 ? n : 1))) return EMBER_ERR_NOMEM;
    if (kjt->weights && !dget(ebc, B_GW, sizeof(float) * (size_t)(kjt->nnz > 0 ? kjt->nnz : 1))) return EMBER_ERR_NOMEM;
    *s = ember__segments{kjt, off, (enum ember__item_kind)so.s.kind, kjt->nnz, so.u, NULL, so.s.item, so.s.seg, NULL,
                         so.s.bag_c, NULL, so.s.bag_of, NULL};
    return EMBER_OK;
}

ember_status cuda_backward_apply(ember_ebc *ebc, const ember__segments *s, const float *grad_out, float *grad_weights) {
    EMBER_TRY(set_device(ebc));
    cuda_state *c = state_of(ebc);
    const ember_kjt *kjt = s->kjt;
    const int64_t n = output_floats(ebc, kjt);
    float *dgrad = (float *)c->buf[B_GRAD].p; // reserved by prepare
    if (n > 0)
        CU_TRY(ebc->ctx, cudaMemcpyAsync(dgrad, grad_out, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, c->stream),
               "copying the gradient");
    sorted so;
    so.s = segs{(const unsigned long long *)c->buf[B_KEY2].p, s->item, s->seg, s->bag_c, s->bag_of,
                kjt->weights ? (const float *)c->buf[B_WGT].p : NULL, c->fcol, kjt->batch_size, ebc->out_dim,
                (int32_t)s->kind};
    so.u = s->u;
    if (grad_weights) {
        const int64_t nbags = (int64_t)ebc->F * kjt->batch_size;
        const dbatch b = {kjt->batch_size, kjt->nnz, (const int64_t *)c->buf[B_OFF].p, (const int64_t *)c->buf[B_VAL].p,
                          (const float *)c->buf[B_WGT].p};
        float *dgw = (float *)c->buf[B_GW].p;
        if (nbags > 0)
            k_weight_grads<<<blocks_for(nbags, 128), 128, 0, c->stream>>>(
                c->tabs, c->ftab, b, nbags, (int)ebc->kbounds,
                ebc->kbounds != EMBER_BOUNDS_ERROR ? IDS_RESOLVE : IDS_ROWS, so.s, dgrad, dgw);
        if (kjt->nnz > 0)
            CU_TRY(ebc->ctx,
                   cudaMemcpyAsync(grad_weights, dgw, sizeof(float) * (size_t)kjt->nnz, cudaMemcpyDeviceToHost, c->stream),
                   "copying the weight gradients");
    }
    EMBER_TRY(update_segments(ebc, &so, dgrad));
    return finish(ebc, "backward");
}

// Host workspace slots of coalesce (the sparse gradient it hands back lives in host memory).
enum { WS_UKEY = 1, WS_GOFF = 2, WS_GRAD = 3 };

ember_status cuda_coalesce(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, const float *grad_out,
                           ember__sparse_grad *out) {
    ember_ctx *ctx = ebc->ctx;
    EMBER_TRY(set_device(ebc));
    cuda_state *c = state_of(ebc);
    dbatch b;
    EMBER_TRY(upload_batch(ebc, kjt, off, &b));
    EMBER_TRY(sync_tables(ebc));
    sorted so;
    EMBER_TRY(sort_entries(ebc, &b, ebc->kbounds != EMBER_BOUNDS_ERROR ? IDS_RESOLVE : IDS_ROWS, NULL, NULL, &so));
    const int64_t u = so.u, n = output_floats(ebc, kjt);
    int64_t *ukey = (int64_t *)ember__ws_get(ebc, WS_UKEY, sizeof(int64_t) * (size_t)(u > 0 ? u : 1));
    int64_t *goff = (int64_t *)ember__ws_get(ebc, WS_GOFF, sizeof(int64_t) * (size_t)(u + 1));
    if (!ukey || !goff) return EMBER_ERR_NOMEM;
    // The segments' keys, then the gradient offsets from their tables' dims.
    if (u > 0) {
        unsigned long long *dkeys = (unsigned long long *)dget(ebc, B_UKEY, sizeof(int64_t) * (size_t)u);
        if (!dkeys) return EMBER_ERR_NOMEM;
        k_seg_keys<<<blocks_for(u, 256), 256, 0, c->stream>>>(so.s.key, so.s.seg, u, dkeys);
        CU_TRY(ctx, cudaMemcpyAsync(ukey, dkeys, sizeof(int64_t) * (size_t)u, cudaMemcpyDeviceToHost, c->stream),
               "segments");
        EMBER_TRY(finish(ebc, "coalesce"));
    }
    goff[0] = 0;
    for (int64_t k = 0; k < u; k++) goff[k + 1] = goff[k] + ebc->tables[ember__ebc_key_table(ebc, ukey[k])].cfg.dim;
    float *grad = (float *)ember__ws_get(ebc, WS_GRAD, sizeof(float) * (size_t)(goff[u] > 0 ? goff[u] : 1));
    float *dgrad = (float *)dget(ebc, B_GRAD, sizeof(float) * (size_t)(n > 0 ? n : 1));
    int64_t *dgoff = (int64_t *)dget(ebc, B_GOFF, sizeof(int64_t) * (size_t)(u + 1));
    float *dout = (float *)dget(ebc, B_OUT, sizeof(float) * (size_t)(goff[u] > 0 ? goff[u] : 1));
    // And ember__ebc_apply's: it allocates nothing after a coalesce.
    float *drss = (float *)dget(ebc, B_RSS, sizeof(float) * (size_t)(u > 0 ? u : 1));
    if (!grad || !dgrad || !dgoff || !dout || !drss) return EMBER_ERR_NOMEM;
    if (u > 0) {
        if (n > 0)
            CU_TRY(ctx, cudaMemcpyAsync(dgrad, grad_out, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, c->stream),
                   "copying the gradient");
        CU_TRY(ctx, cudaMemcpyAsync(dgoff, goff, sizeof(int64_t) * (size_t)(u + 1), cudaMemcpyHostToDevice, c->stream),
               "segments");
        k_reduce<<<blocks_for(u, 8), 256, 0, c->stream>>>(c->tabs, ebc->T, so.s, dgrad, dgoff, u, dout);
        CU_TRY(ctx, cudaMemcpyAsync(grad, dout, sizeof(float) * (size_t)goff[u], cudaMemcpyDeviceToHost, c->stream),
               "coalesce");
        EMBER_TRY(finish(ebc, "coalesce"));
    }
    *out = ember__sparse_grad{u, ukey, goff, grad};
    return EMBER_OK;
}

// A host sparse gradient (keys, offsets, values, optional row sums) copied to the device.
ember_status upload_sparse(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad, int64_t n,
                           const float *rss, unsigned long long **dkey, int64_t **dgoff, float **dgrad, float **drss) {
    ember_ctx *ctx = ebc->ctx;
    cuda_state *c = state_of(ebc);
    const size_t nn = (size_t)(n > 0 ? n : 1), nf = (size_t)(goff[n] > 0 ? goff[n] : 1);
    *dkey = (unsigned long long *)dget(ebc, B_UKEY, sizeof(int64_t) * nn);
    *dgoff = (int64_t *)dget(ebc, B_GOFF, sizeof(int64_t) * (nn + 1));
    *dgrad = (float *)dget(ebc, B_OUT, sizeof(float) * nf);
    *drss = rss ? (float *)dget(ebc, B_RSS, sizeof(float) * nn) : NULL;
    if (!*dkey || !*dgoff || !*dgrad || (rss && !*drss)) return EMBER_ERR_NOMEM;
    CU_TRY(ctx, cudaMemcpyAsync(*dkey, key, sizeof(int64_t) * (size_t)n, cudaMemcpyHostToDevice, c->stream), "apply");
    CU_TRY(ctx, cudaMemcpyAsync(*dgoff, goff, sizeof(int64_t) * (size_t)(n + 1), cudaMemcpyHostToDevice, c->stream),
           "apply");
    CU_TRY(ctx, cudaMemcpyAsync(*dgrad, grad, sizeof(float) * (size_t)goff[n], cudaMemcpyHostToDevice, c->stream), "apply");
    if (rss) CU_TRY(ctx, cudaMemcpyAsync(*drss, rss, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, c->stream), "apply");
    return EMBER_OK;
}

ember_status cuda_apply(ember_ebc *ebc, const int64_t *key, const int64_t *goff, const float *grad, int64_t n,
                        const float *row_sumsq) {
    EMBER_TRY(set_device(ebc));
    cuda_state *c = state_of(ebc);
    EMBER_TRY(sync_tables(ebc));
    unsigned long long *dkey = NULL;
    int64_t *dgoff = NULL;
    float *dgrad = NULL, *drss = NULL;
    if (n > 0) EMBER_TRY(upload_sparse(ebc, key, goff, grad, n, row_sumsq, &dkey, &dgoff, &dgrad, &drss));
    EMBER_TRY(begin_step(ebc));
    if (n > 0) {
        const int wpb = c->warps_per_block;
        const segs none = {};
        k_update<true><<<blocks_for(n, wpb), 32 * wpb, c->smem_per_warp * (size_t)wpb, c->stream>>>(
            c->tabs, ebc->T, c->steps, none, dgrad, dkey, dgoff, drss, n, ebc->max_dim);
    }
    return finish(ebc, "apply");
}

ember_status cuda_row_sumsq(ember_ebc *ebc, const ember__sparse_grad *g, float *out) {
    EMBER_TRY(set_device(ebc));
    cuda_state *c = state_of(ebc);
    if (g->n == 0) return EMBER_OK;
    EMBER_TRY(sync_tables(ebc));
    unsigned long long *dkey;
    int64_t *dgoff;
    float *dgrad, *drss;
    EMBER_TRY(upload_sparse(ebc, g->key, g->goff, g->grad, g->n, NULL, &dkey, &dgoff, &dgrad, &drss));
    float *dout = (float *)dget(ebc, B_RSS, sizeof(float) * (size_t)g->n);
    if (!dout) return EMBER_ERR_NOMEM;
    k_row_sumsq<<<blocks_for(g->n, 128), 128, 0, c->stream>>>(c->tabs, ebc->T, dkey, dgoff, dgrad, g->n, dout);
    CU_TRY(ebc->ctx, cudaMemcpyAsync(out, dout, sizeof(float) * (size_t)g->n, cudaMemcpyDeviceToHost, c->stream),
           "row sums of squares");
    return finish(ebc, "row sums of squares");
}

} // namespace

extern "C" {

int ember__cuda_usable(char *why, size_t why_len) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, why_len, "no CUDA device: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) {
        snprintf(why, why_len, "no CUDA device: the runtime found none");
        return 0;
    }
    return 1;
}

const ember__backend_ops ember__backend_cuda = {
    EMBER_BACKEND_CUDA,    cuda_alloc,       cuda_free,        cuda_init,           cuda_read_rows,
    cuda_write_rows,       cuda_host_rows,   cuda_convert_prepare, cuda_convert_commit, cuda_convert_abort,
    cuda_forward,          cuda_backward_prepare, cuda_backward_apply, cuda_coalesce, cuda_apply,
    cuda_row_sumsq,        cuda_forward_device, cuda_backward_device,
};

} // extern "C"
