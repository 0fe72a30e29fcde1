// The cuda backend (tbe/backend.h, docs/cuda.md): a collection's weights and optimizer state in the
// memory of one CUDA device, laid out as the cpu backend lays its slabs out (each table's rows back
// to back in its dtype, 64-byte aligned; fp32 optimizer state), and kernels that give the cpu
// backend's bits:
//   forward   a group of lanes per bag (16-byte loads: 4 fp32 or 8 16-bit columns a lane, 32/V
//             rows in flight), each id read and checked once and handed round by a shuffle, each
//             output column summed in bag order by one lane;
//   backward  the entries (32-bit row key, position) made a warp per 32 bags, a stable radix sort
//             (CUB), segments by run-length encoding, each entry's gradient source found once;
//             a warp (half a warp for rows of up to 128 columns) per touched row sums its
//             gradient in position order and applies the optimizer once; rows of more than HOT_ENTRIES entries (Zipf's head) are summed in
//             32-column slices, a block per slice staging the gradient slices in shared memory
//             (cp.async, two buffers) for one thread per column to add in the same order, on a
//             stream of their own beside the other rows; no wait between the sort and the update
//             (the row count, the hot-row queue and a device call's findings stay on the device);
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
#include <cuda_pipeline.h>

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

// The control block of a call: what the device checks of a device-memory call (a bit per
// finding and where it was first made, stored complemented so that all zero is the cleared
// state: one memset per call), the backward's row count and its hot-row queue, which stay on the
// device (no host round trip between the sort and the update).
enum { CK_RANGE = 0, CK_OFFSETS = 1, CK_WEIGHT = 2, CK_GRAD = 3, CK_COUNT = 4 };
struct dctl {
    unsigned int bits;
    int32_t u;                            // rows (segments) of the sorted entries
    unsigned long long firstc[CK_COUNT];  // ~(first bag or dL/dy element) of each finding
    unsigned long long nvhot, nhot, next; // very hot and hot rows listed; the next one a block takes
};

#define FULL 0xffffffffu

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
       B_BAGC, B_BAGOF, B_SRC, B_SC, B_GOFF, B_RSS, B_CHECK, B_HOT, B_GHOT, B_COUNT };

struct cuda_state {
    int device, sms;
    cudaStream_t stream, hstream; // the collection's stream; the hot rows' beside it
    cudaEvent_t sorted, hot_done; // the entries are sorted (stream); the hot rows are updated (hstream)
    unsigned char *slab;
    size_t slab_bytes;
    float *state;
    size_t state_floats;
    dtab *tabs;             // device [T]
    dtab *htabs, *sent;     // host [T]: this call's descriptors, the ones on the device
    int32_t *ftab, *fcol;   // device [F]
    ember__optim_step *steps; // device [T]
    ember__optim_step *hsteps; // host [T], pinned
    dctl *hctl;             // host, pinned: a call's control block, back from the device
    dbuf buf[B_COUNT];
    int warps_per_block;    // of the row-update kernels (shared memory: two rows per warp)
    int upd_blocks;         // their grid: as many blocks as the device holds at once
    int half_rows;          // rows of at most 128 columns: the sorted update takes two rows a warp
    size_t smem_per_warp;
    int cols_aligned;       // every table's width, feature column and the output width a multiple of 4
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

__device__ inline void note(dctl *ck, int what, unsigned long long where) {
    atomicOr(&ck->bits, 1u << what);
    atomicMax(&ck->firstc[what], ~where);
}

// The row an id reads (-1: none), by the batch's mode (IDS_*).
__device__ inline int64_t row_in(int64_t id, int64_t rows, int kb, int mode, dctl *ck, int64_t bag) {
    if (mode == IDS_ROWS || (id >= 0 && id < rows)) return id;
    if (mode == IDS_CHECK && kb == EMBER_BOUNDS_ERROR) {
        note(ck, CK_RANGE, (unsigned long long)bag);
        return -1;
    }
    return ember__resolve_id(id, rows, (ember_bounds_mode)kb);
}
__device__ inline int64_t row_of(int64_t id, const dtab &t, int kb, int mode, dctl *ck, int64_t bag) {
    return row_in(id, t.rows, kb, mode, ck, bag);
}

// The ids of a bag, [*j0, *j1); false (and noted) when a device call's offsets are not a prefix
// sum from 0 to nnz there.
__device__ inline bool bag_range(const dbatch &b, int64_t bag, int64_t nbags, int mode, dctl *ck, int64_t *j0,
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
__device__ inline float weight_at(const dbatch &b, int64_t j, int mode, dctl *ck, int64_t bag) {
    const float w = b.weights[j];
    if (mode == IDS_CHECK && !isfinite(w)) note(ck, CK_WEIGHT, (unsigned long long)bag);
    return w;
}

// ---- forward --------------------------------------------------------------------------------------

// A bag pooled by a group of `tpb` lanes (tpb-aligned in the warp), lane l taking columns
// [V l, V l + V), then V tpb further on: one 16-byte load of each row a lane reads (V = 4 fp32 or
// 8 16-bit columns; the table's rows are 16-byte multiples), U rows in flight, each output column
// summed in bag order by one lane. Each id is read (and resolved or checked) once, by one lane of
// the group, which hands its row to the others by a shuffle. DT: the table's dtype; W: weighted;
// PLAIN: the ids are rows (no bounds to resolve, nothing to check).
template <int DT, bool W, bool PLAIN>
__device__ void pool_vec(const dtab &t, const dbatch &b, int64_t bag, int64_t j0, int64_t j1, int lane, int tpb, int kb,
                         int mode, dctl *ck, float *o) {
    constexpr int V = DT == EMBER_DTYPE_F32 ? 4 : 8, ES = DT == EMBER_DTYPE_F32 ? 4 : 2, U = 32 / V;
    const unsigned char *w = t.w;
    const int64_t rb = t.row_bytes;
    const int D = t.dim;
    const bool mean = t.pooling == EMBER_POOL_MEAN, oal = ((uintptr_t)o & 15) == 0;
    const unsigned mask = tpb == 32 ? FULL : ((1u << tpb) - 1u) << ((threadIdx.x % 32) & ~(unsigned)(tpb - 1));
    const int npass = (D + tpb * V - 1) / (tpb * V);
    for (int pass = 0; pass < npass; pass++) {
        const int c = (pass * tpb + lane) * V;
        const bool on = c < D; // every lane of the group takes part in the shuffles
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] = 0.0f;
        int64_t kept = 0;
        for (int64_t j = j0; j < j1; j += tpb) {
            const int n = j1 - j < tpb ? (int)(j1 - j) : tpb;
            // Rows as 32 bits (a collection on this backend has fewer than 2^32 - 1 rows in all);
            // NONE: no row (past the bag's end, or dropped by the bounds mode).
            constexpr uint32_t NONE = 0xffffffffu;
            uint32_t mine = NONE;
            float wmine = 0.0f;
            if (lane < n) {
                const int64_t id = __ldg(&b.values[j + lane]);
                const int64_t r = PLAIN ? id : row_of(id, t, kb, mode, ck, bag);
                if (r >= 0) {
                    mine = (uint32_t)r;
                    if (W) wmine = PLAIN ? __ldg(&b.weights[j + lane]) : weight_at(b, j + lane, mode, ck, bag);
                }
            }
            for (int q0 = 0; q0 < n; q0 += U) {
                uint32_t r[U];
                uint4 raw[U];
                float wt[U];
#pragma unroll
                for (int q = 0; q < U; q++) {
                    const int from = (q0 + q) & (tpb - 1);
                    const uint32_t rq = __shfl_sync(mask, mine, from, tpb);
                    wt[q] = W ? __shfl_sync(mask, wmine, from, tpb) : 0.0f;
                    r[q] = q0 + q < n ? rq : NONE;
                    raw[q] = make_uint4(0u, 0u, 0u, 0u);
                    if (on && r[q] != NONE) raw[q] = __ldg((const uint4 *)(w + (int64_t)r[q] * rb + (int64_t)c * ES));
                }
#pragma unroll
                for (int q = 0; q < U; q++) {
                    if (r[q] == NONE) continue;
                    kept++;
                    float x[V];
                    const uint32_t u4[4] = {raw[q].x, raw[q].y, raw[q].z, raw[q].w};
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        if (DT == EMBER_DTYPE_F32) {
                            x[k] = __uint_as_float(u4[k]);
                        } else {
                            const uint16_t lo = (uint16_t)(u4[k] & 0xffffu), hi = (uint16_t)(u4[k] >> 16);
                            x[2 * k] = DT == EMBER_DTYPE_BF16 ? ember__bf16_to_f32(lo) : ember__f16_to_f32(lo);
                            x[2 * k + 1] = DT == EMBER_DTYPE_BF16 ? ember__bf16_to_f32(hi) : ember__f16_to_f32(hi);
                        }
                    }
#pragma unroll
                    for (int k = 0; k < V; k++) acc[k] = W ? acc[k] + wt[q] * x[k] : acc[k] + x[k];
                }
            }
        }
        if (!on) continue;
        // MEAN divides by the ids kept; an empty bag stays 0.
        if (mean && kept > 0) {
            const float inv = 1.0f / (float)kept;
#pragma unroll
            for (int k = 0; k < V; k++) acc[k] = acc[k] * inv;
        }
        if (oal) {
#pragma unroll
            for (int k = 0; k < V; k += 4) *(float4 *)(o + c + k) = make_float4(acc[k], acc[k + 1], acc[k + 2], acc[k + 3]);
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) o[c + k] = acc[k];
        }
    }
}

// A bag of a table whose rows are not 16-byte multiples: lanes of 4 columns, loads as the row
// allows, 4 rows in flight.
__device__ void pool_any(const dtab &t, const dbatch &b, int64_t bag, int64_t j0, int64_t j1, int lane, int tpb, int kb,
                         int mode, dctl *ck, float *o) {
    const int D = t.dim;
    for (int c = lane * 4; c < D; c += tpb * 4) {
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
        if (t.pooling == EMBER_POOL_MEAN && kept > 0) {
            const float inv = 1.0f / (float)kept;
#pragma unroll
            for (int k = 0; k < 4; k++) acc[k] = acc[k] * inv;
        }
        for (int k = 0; k < n; k++) o[c + k] = acc[k];
    }
}

// 2^lb lanes per bag (the widest table's row in 16-byte pieces, at most 32); each bag by its
// table's dtype and alignment.
template <bool W, bool PLAIN>
__global__ void __launch_bounds__(256, 3) k_pool(const dtab *tabs, const int32_t *ftab, const int32_t *fcol, dbatch b, int64_t nbags,
                       int32_t out_dim, int lb, int kb, int mode, dctl *ck, float *out) {
    const int64_t gt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t bag = gt >> lb;
    const int tpb = 1 << lb, lane = (int)(gt & (tpb - 1));
    if (bag >= nbags) return;
    const int32_t B = b.batch_size, f = (int32_t)(bag / B), bi = (int32_t)(bag % B);
    const dtab &t = tabs[ftab[f]];
    float *o = out + (int64_t)bi * out_dim + fcol[f];
    int64_t j0, j1;
    if (!bag_range(b, bag, nbags, mode, ck, &j0, &j1)) return;
    if (t.row_bytes & 15) {
        pool_any(t, b, bag, j0, j1, lane, tpb, kb, mode, ck, o);
        return;
    }
    switch (t.dtype) {
    case EMBER_DTYPE_F32: pool_vec<EMBER_DTYPE_F32, W, PLAIN>(t, b, bag, j0, j1, lane, tpb, kb, mode, ck, o); break;
    case EMBER_DTYPE_BF16: pool_vec<EMBER_DTYPE_BF16, W, PLAIN>(t, b, bag, j0, j1, lane, tpb, kb, mode, ck, o); break;
    default: pool_vec<EMBER_DTYPE_F16, W, PLAIN>(t, b, bag, j0, j1, lane, tpb, kb, mode, ck, o); break;
    }
}

// Sequence (NONE) tables: output row j is E[id_j] (times w_j), zeros for a dropped id.
__global__ void k_sequence(const dtab *tabs, const int32_t *ftab, dbatch b, int64_t nbags, int32_t D,
                           int kb, int mode, dctl *ck, float *out) {
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
// 32-bit sort keys (key_base + row; the collection has fewer than 2^32 - 1 rows in all) and items
// (a position or a bag; fewer than 2^31 of each): half the bytes of 64-bit ones through the sort.

// A warp per 32 consecutive bags, a lane per id of their ids (which are contiguous): the sort key
// (or `sentinel` for a dropped id) and the item of each id, each bag's MEAN scale, and (weighted)
// the bag of each id. Lane l reads bag b0 + l's offsets and table; an id finds its bag among the
// lanes' by a shuffled binary search. A device call's group with offsets that are not a prefix
// sum makes no entries (the update is gated on that finding).
__global__ void k_entries(const dtab *tabs, const int32_t *ftab, dbatch b, int64_t nbags, int kb, int mode,
                          dctl *ck, int item_is_bag, uint32_t sentinel, uint32_t *key, int32_t *item, float *bag_c,
                          int32_t *bag_of) {
    __shared__ int kept_s[8][32];
    const int wib = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t b0 = ((int64_t)blockIdx.x * (blockDim.x / 32) + wib) * 32;
    if (b0 >= nbags) return;
    const int nb = nbags - b0 < 32 ? (int)(nbags - b0) : 32;
    const int64_t bag = b0 + (lane < nb ? lane : nb - 1);
    int64_t j0 = 0, j1 = 0;
    const bool ok = bag_range(b, bag, nbags, mode, ck, &j0, &j1);
    if (__any_sync(FULL, !ok)) return;
    const dtab &t = tabs[ftab[bag / b.batch_size]];
    const int64_t rows = t.rows, base = t.key_base;
    kept_s[wib][lane] = 0;
    __syncwarp();
    const int64_t g0 = __shfl_sync(FULL, j0, 0), g1 = __shfl_sync(FULL, j1, nb - 1);
    for (int64_t jj = g0; jj < g1; jj += 32) {
        const int64_t j = jj + lane;
        int pos = 0; // the last bag of the group whose first id is at or before j: j's bag
#pragma unroll
        for (int step = 16; step >= 1; step >>= 1) {
            const int cand = pos + step;
            const int64_t cj0 = __shfl_sync(FULL, j0, cand < nb ? cand : nb - 1);
            if (cand < nb && cj0 <= j) pos = cand;
        }
        const int64_t rows_j = __shfl_sync(FULL, rows, pos), base_j = __shfl_sync(FULL, base, pos), bag_j = b0 + pos;
        if (j < g1) {
            if (b.weights) (void)weight_at(b, j, mode, ck, bag_j);
            const int64_t r = row_in(b.values[j], rows_j, kb, mode, ck, bag_j);
            key[j] = r < 0 ? sentinel : (uint32_t)(base_j + r);
            item[j] = (int32_t)(item_is_bag ? bag_j : j);
            if (bag_of) bag_of[j] = (int32_t)bag_j;
            if (r >= 0) atomicAdd(&kept_s[wib][pos], 1);
        }
    }
    __syncwarp();
    const int kept = kept_s[wib][lane];
    if (lane < nb) bag_c[bag] = t.pooling == EMBER_POOL_MEAN && kept > 0 ? 1.0f / (float)kept : 1.0f;
}

// The number of runs that are rows (the sentinel's run, last when present, is not).
__global__ void k_rows_runs(const uint32_t *ukey, const int32_t *nruns, uint32_t sentinel, dctl *ctl) {
    const int32_t n = *nruns;
    ctl->u = n > 0 && ukey[n - 1] == sentinel ? n - 1 : n;
}

// Where the segments are, for the row-update kernels.
struct segs {
    const uint32_t *key;  // [m] sorted keys
    const int32_t *item;  // [m] sorted items
    const int32_t *seg;   // [u+1] first entry of each segment
    const int64_t *src;   // [m] each sorted entry's dL/dy row: its float offset in grad_out
    const float *sc;      // [m] and its scale (the entry's c_bag, times its weight when weighted)
    const float *bag_c;   // [F*B]
    const int32_t *fcol;
    int32_t B, out_dim, kind; // kind: enum ember__item_kind
};

// Table of a key: the last table whose key_base <= key (from the descriptors, or from their key
// bases copied into shared memory: KBASE_SMEM tables at most).
__device__ inline int32_t table_of_key(const dtab *tabs, int32_t T, unsigned long long key) {
    int32_t lo = 0, hi = T - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if ((unsigned long long)tabs[mid].key_base <= key) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
#define KBASE_SMEM 512
__device__ inline int32_t table_of_base(const long long *kbase, int32_t T, unsigned long long key) {
    int32_t lo = 0, hi = T - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if ((unsigned long long)kbase[mid] <= key) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Each sorted entry's dL/dy row and scale (ember__entry_grad's rule), once, for every kernel
// that sums the entries: a bag's slice of dL/dy scaled by c_bag (times the id's weight), or a
// sequence position's row (times its weight).
__global__ void k_sources(segs s, const int32_t *bag_of, const float *weights, int64_t m, const dctl *ctl,
                          int64_t *src, float *sc) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= m || ctl->bits) return; // a device call's checks found something: the items may be unset
    const int64_t it = s.item[e];
    if (s.kind == EMBER__ITEM_BAG) {
        sc[e] = s.bag_c[it];
        src[e] = (it % s.B) * s.out_dim + s.fcol[it / s.B];
    } else if (s.kind == EMBER__ITEM_POS_POOLED) {
        const int64_t bag = bag_of[it];
        sc[e] = weights[it] * s.bag_c[bag];
        src[e] = (bag % s.B) * s.out_dim + s.fcol[bag / s.B];
    } else {
        sc[e] = weights ? weights[it] : 1.0f;
        src[e] = it * s.out_dim;
    }
}

// ---- the optimizers, a group of G lanes per row (cpu/optim_rows.h, operation for operation) --------
// G = 32 (a warp) or 16 (half a warp: two rows a warp, for rows of up to 128 columns); `lane` is
// the lane in the group, every lane of the group calls these.

template <int G> __device__ inline unsigned gmask() { return G == 32 ? FULL : 0xffffu << (threadIdx.x & 16); }

// sum_d a[d] * b[d] in ember__sum16's order, on every lane: lane k < 16 accumulates columns k,
// k + 16, ..., then the 8-4-2-1 tree.
template <int G> __device__ inline float dot16(const float *a, const float *b, int D, int lane) {
    const unsigned m = gmask<G>();
    __syncwarp(m);
    float acc = 0.0f;
    if (lane < 16)
        for (int d = lane; d < D; d += 16) acc = acc + a[d] * b[d];
    acc = acc + __shfl_down_sync(m, acc, 8, G);
    acc = acc + __shfl_down_sync(m, acc, 4, G);
    acc = acc + __shfl_down_sync(m, acc, 2, G);
    acc = acc + __shfl_down_sync(m, acc, 1, G);
    return __shfl_sync(m, acc, 0, G);
}

template <int G> __device__ inline float row_mean_sq(const dtab &t, const ember__optim_step &st, const float *g, int lane) {
    if (st.row_sumsq >= 0.0f) return st.row_sumsq / (float)t.global_dim;
    return dot16<G>(g, g, t.dim, lane) / (float)t.dim;
}

// w <- w - scale * r (apply_direction), r = g in place.
template <int G> __device__ inline void apply_direction(const dtab &t, float *w, float *r, int decoupled, int lamb, int lane) {
    const ember_optim_config &o = t.o;
    const int D = t.dim;
    if (decoupled)
        for (int d = lane; d < D; d += G) r[d] = r[d] + o.weight_decay * w[d];
    float scale = o.lr;
    if (lamb) {
        const float wn = dot16<G>(w, w, D, lane), rn = dot16<G>(r, r, D, lane);
        if (wn > 0.0f && rn > 0.0f) scale = o.lr * sqrtf(wn) / sqrtf(rn);
    }
    __syncwarp(gmask<G>());
    for (int d = lane; d < D; d += G) w[d] = w[d] - scale * r[d];
}

template <int G> __device__ inline void adam_moments(const dtab &t, const ember__optim_step &st, int64_t row, float *g, int lane) {
    const ember_optim_config &o = t.o;
    float *m1 = t.m1 + row * t.dim, *m2 = t.m2 + row * t.dim;
    for (int d = lane; d < t.dim; d += G) {
        m1[d] = o.beta1 * m1[d] + (1.0f - o.beta1) * g[d];
        m2[d] = o.beta2 * m2[d] + (1.0f - o.beta2) * g[d] * g[d];
        g[d] = (m1[d] / st.c1) / (sqrtf(m2[d] / st.c2) + o.eps);
    }
}

template <int G> __device__ inline void partial_rowwise_moments(const dtab &t, const ember__optim_step &st, int64_t row, float *g,
                                               int lane) {
    const ember_optim_config &o = t.o;
    float *m1 = t.m1 + row * t.dim, *m2 = t.m2 + row;
    const float ms = row_mean_sq<G>(t, st, g, lane);
    const float m2v = o.beta2 * *m2 + (1.0f - o.beta2) * ms;
    __syncwarp(gmask<G>());
    if (lane == 0) *m2 = m2v;
    const float den = sqrtf(m2v / st.c2) + o.eps;
    for (int d = lane; d < t.dim; d += G) {
        m1[d] = o.beta1 * m1[d] + (1.0f - o.beta1) * g[d];
        g[d] = (m1[d] / st.c1) / den;
    }
}

// optim_row: the generic L2 step unless the optimizer decays inside its formula, then the update.
// w and g are the group's shared rows.
template <int G> __device__ __forceinline__ void optim_row(const dtab &t, const ember__optim_step &st, int64_t row, float *w, float *g, int lane) {
    const ember_optim_config &o = t.o;
    const int D = t.dim;
    const float lr = o.lr, wd = o.weight_decay;
    if (o.weight_decay_mode == EMBER_WD_L2 && wd != 0.0f && !t.l2_in_update)
        for (int d = lane; d < D; d += G) g[d] = g[d] + wd * w[d];
    const int decoupled = o.weight_decay_mode == EMBER_WD_DECOUPLED && wd != 0.0f;
    switch (o.kind) {
    case EMBER_OPT_SGD:
        for (int d = lane; d < D; d += G) w[d] = decoupled ? w[d] - lr * (g[d] + wd * w[d]) : w[d] - lr * g[d];
        break;
    case EMBER_OPT_ADAGRAD: {
        float *m1 = t.m1 + row * D;
        for (int d = lane; d < D; d += G) {
            m1[d] = m1[d] + g[d] * g[d];
            w[d] = decoupled ? w[d] - lr * (g[d] / (sqrtf(m1[d]) + o.eps) + wd * w[d])
                             : w[d] - lr * (g[d] / (sqrtf(m1[d]) + o.eps));
        }
        break;
    }
    case EMBER_OPT_ROWWISE_ADAGRAD: {
        float *m1 = t.m1 + row;
        const float ms = row_mean_sq<G>(t, st, g, lane);
        const float m1v = *m1 + ms;
        __syncwarp(gmask<G>());
        if (lane == 0) *m1 = m1v;
        const float mult = lr / (sqrtf(m1v) + o.eps);
        for (int d = lane; d < D; d += G) w[d] = decoupled ? w[d] - (mult * g[d] + lr * wd * w[d]) : w[d] - mult * g[d];
        break;
    }
    case EMBER_OPT_ADAM:
    case EMBER_OPT_LAMB:
        adam_moments<G>(t, st, row, g, lane);
        apply_direction<G>(t, w, g, decoupled, o.kind == EMBER_OPT_LAMB, lane);
        break;
    case EMBER_OPT_PARTIAL_ROWWISE_ADAM:
    case EMBER_OPT_PARTIAL_ROWWISE_LAMB:
        partial_rowwise_moments<G>(t, st, row, g, lane);
        apply_direction<G>(t, w, g, decoupled, o.kind == EMBER_OPT_PARTIAL_ROWWISE_LAMB, lane);
        break;
    case EMBER_OPT_LARS_SGD: {
        const float l2 = o.weight_decay_mode == EMBER_WD_L2 ? wd : 0.0f;
        const float wn = sqrtf(dot16<G>(w, w, D, lane)), gn = sqrtf(dot16<G>(g, g, D, lane));
        const float local = wn > 0.0f && gn > 0.0f ? o.eta * wn / (gn + l2 * wn) : 1.0f;
        const float rate = lr * local, mom = o.momentum;
        float *m1 = t.m1 + row * D;
        for (int d = lane; d < D; d += G) {
            m1[d] = mom * m1[d] + rate * (g[d] + l2 * w[d]);
            w[d] = decoupled ? w[d] - (m1[d] + lr * wd * w[d]) : w[d] - m1[d];
        }
        break;
    }
    default: break;
    }
    __syncwarp(gmask<G>());
}

// The optimizer step of `row` of table t with gradient g (the group's shared rows g and w; w holds the row's stored values already when `loaded`), then the store: fp32 as
// is, 16-bit rounded to nearest or stochastically (the cpu's update_row).
template <int G> __device__ __forceinline__ void update_row(const dtab &t, const ember__optim_step &st, int64_t row, float *g, float *w,
                                           int lane, bool loaded) {
    const int D = t.dim;
    unsigned char *p = t.w + row * t.row_bytes;
    if (!loaded)
        for (int d = lane; d < D; d += G) w[d] = load_one(t, p, d);
    optim_row<G>(t, st, row, w, g, lane);
    if (t.dtype == EMBER_DTYPE_F32) {
        for (int d = lane; d < D; d += G) ((float *)p)[d] = w[d];
        return;
    }
    uint16_t *h = (uint16_t *)p;
    const uint32_t rk = t.sr ? ember__sr_row_key(st.sr_key, row) : 0u;
    for (int d = lane; d < D; d += G) {
        const float v = w[d];
        if (t.dtype == EMBER_DTYPE_BF16) h[d] = t.sr ? ember__f32_to_bf16_sr(v, ember__sr_hash(rk, (uint32_t)d)) : ember__f32_to_bf16(v);
        else h[d] = t.sr ? ember__f32_to_f16_sr(v, ember__sr_hash(rk, (uint32_t)d)) : ember__f32_to_f16(v);
    }
}

// Segments longer than this are hot rows (k_hot_sum, k_hot_apply); longer than VERY_HOT_ENTRIES,
// at the front of their queue.
#define HOT_ENTRIES 64
#define VERY_HOT_ENTRIES 4096

// g[d] = sum over entries [e0, e1) of sc_e * dL/dy_e[d] in entry order, for the group's columns:
// lane l takes columns [4 l, 4 l + 4) + 4 G i, four entries' rows in flight, each row read with
// one 16-byte load where its columns are 16-byte aligned. Every column's sum is the cpu's: from
// +0, one rounded product and one rounded add per entry, in position order. With a table `t`,
// the row's stored values (`row` of t) go into w with the same loads in flight.
// pf_src, pf_sc: lane q < 4 holds entry e0 + q's source and scale, prefetched (pf_src -1 on
// lane 0: none were).
template <int G>
__device__ inline void sum_entries(const segs &s, const float *grad, int64_t e0, int64_t e1, int D, int lane, float *g,
                                   const dtab *t = NULL, int64_t row = 0, float *w = NULL, int64_t pf_src = -1,
                                   float pf_sc = 0.0f) {
    const unsigned m = gmask<G>();
    const bool gal = ((uintptr_t)grad & 15) == 0;
    int64_t src0[4];
    float sc0[4];
#pragma unroll
    for (int q = 0; q < 4; q++) { // every lane, before any leaves the column loop
        src0[q] = __shfl_sync(m, pf_src, q, G);
        sc0[q] = __shfl_sync(m, pf_sc, q, G);
    }
    const bool pf = src0[0] >= 0;
    for (int c = lane * 4; c < D; c += 4 * G) {
        const int n = D - c < 4 ? D - c : 4;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, wv[4];
        if (t) load4(*t, t->w + row * t->row_bytes, c, n, wv);
        for (int64_t e = e0; e < e1; e += 4) {
            float v[4][4], sc[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                sc[q] = 0.0f;
                v[q][0] = v[q][1] = v[q][2] = v[q][3] = 0.0f;
                if (e + q >= e1) continue;
                const bool first = pf && e == e0;
                const int64_t o = (first ? src0[q] : s.src[e + q]) + c;
                sc[q] = first ? sc0[q] : s.sc[e + q];
                if (n == 4 && gal && (o & 3) == 0) {
                    const float4 x = *(const float4 *)(grad + o);
                    v[q][0] = x.x, v[q][1] = x.y, v[q][2] = x.z, v[q][3] = x.w;
                } else {
                    for (int k = 0; k < n; k++) v[q][k] = grad[o + k];
                }
            }
#pragma unroll
            for (int q = 0; q < 4; q++) {
                if (e + q >= e1) break;
#pragma unroll
                for (int k = 0; k < 4; k++) acc[k] = acc[k] + sc[q] * v[q][k];
            }
        }
        for (int k = 0; k < n; k++) g[c + k] = acc[k];
        if (t)
            for (int k = 0; k < n; k++) w[c + k] = wv[k];
    }
    __syncwarp(m); // the optimizer reads the columns other lanes wrote
}

// A group of G lanes per row (a grid-stride loop over the rows; G = 16: two rows a warp): the
// row's gradient (summed from its segment's entries, or given) and its stored values, then
// update_row. Segments of more than HOT_ENTRIES entries are left to the hot-row kernels. The next
// row's segment, key and first four gradient sources are loaded while this one is updated (a
// shorter chain of dependent loads per row). The sorted path reads its row count from the
// control block and does nothing when a device call's checks found something.
template <bool GIVEN, int G>
__global__ void __launch_bounds__(256, 4)
    k_update(const dtab *tabs, int32_t T, const ember__optim_step *steps, segs s, const float *grad,
             const unsigned long long *gkey, const int64_t *goff, const float *rss, int64_t n, const dctl *ctl,
             int32_t max_dim) {
    extern __shared__ float smem[];
    __shared__ long long kbase[KBASE_SMEM];
    if (!GIVEN && ctl->bits) return;
    // The tables' first keys in shared memory (the search for a row's table stays out of the L1
    // the rows stream through), where they fit.
    const bool kb_smem = T <= KBASE_SMEM;
    if (kb_smem)
        for (int i = threadIdx.x; i < T; i += blockDim.x) kbase[i] = tabs[i].key_base;
    __syncthreads();
    const int64_t u = GIVEN ? n : ctl->u;
    const int gib = threadIdx.x / G, lane = threadIdx.x % G;
    float *g = smem + (size_t)gib * 2 * (size_t)max_dim, *w = g + max_dim;
    const int64_t stride = (int64_t)gridDim.x * (blockDim.x / G);
    int64_t k = (int64_t)blockIdx.x * (blockDim.x / G) + gib, e0n = 0, e1n = 0, pf_src = -1;
    unsigned long long keyn = 0;
    float pf_sc = 0.0f;
    if (k < u) {
        if (!GIVEN) e0n = s.seg[k], e1n = s.seg[k + 1];
        keyn = GIVEN ? gkey[k] : s.key[e0n];
    }
    for (; k < u; k += stride) {
        const int64_t e0 = e0n, e1 = e1n, kn = k + stride, src = pf_src;
        const float sc = pf_sc;
        const unsigned long long key = keyn;
        if (!GIVEN && kn < u) e0n = s.seg[kn], e1n = s.seg[kn + 1];
        if (!GIVEN && e1 - e0 > HOT_ENTRIES) {
            if (kn < u) keyn = s.key[e0n];
            pf_src = -1;
            continue;
        }
        const int32_t ti = kb_smem ? table_of_base(kbase, T, key) : table_of_key(tabs, T, key);
        const dtab &t = tabs[ti];
        const int64_t row = (int64_t)(key - (unsigned long long)t.key_base);
        const int D = t.dim;
        if (GIVEN) {
            for (int d = lane; d < D; d += G) g[d] = grad[goff[k] + d];
        } else {
            sum_entries<G>(s, grad, e0, e1, D, lane, g, &t, row, w, src, sc);
        }
        // The next row's key and first four sources, in flight while this row is updated.
        pf_src = -1;
        if (kn < u) {
            keyn = GIVEN ? gkey[kn] : s.key[e0n];
            if (!GIVEN && lane < 4 && e0n + lane < e1n) pf_src = s.src[e0n + lane], pf_sc = s.sc[e0n + lane];
        }
        ember__optim_step st = steps[ti];
        if (GIVEN && rss && rss[k] >= 0.0f) st.row_sumsq = rss[k];
        update_row<G>(t, st, row, g, w, lane, !GIVEN);
        __syncwarp(gmask<G>()); // g and w are the next row's
    }
}

// The segments longer than HOT_ENTRIES (hot rows): the very hot ones from the front of `hot`,
// the others from its back (u slots), so that blocks take the longest rows first. Which block
// takes which row never changes a result.
__global__ void k_hot_list(const int32_t *seg, dctl *ctl, int32_t *hot) {
    if (ctl->bits) return;
    const int64_t u = ctl->u;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < u; k += (int64_t)gridDim.x * blockDim.x) {
        const int32_t n = seg[k + 1] - seg[k];
        if (n > VERY_HOT_ENTRIES) hot[atomicAdd(&ctl->nvhot, 1ull)] = (int32_t)k;
        else if (n > HOT_ENTRIES) hot[u - 1 - (int64_t)atomicAdd(&ctl->nhot, 1ull)] = (int32_t)k;
    }
}

// The hot rows' gradients are summed in tasks of HOT_COLS columns (a 128-byte slice of each
// entry's gradient row), so that the longest row's entries stream through several
// multiprocessors at once; each task stages HOT_CHUNK entries at a time.
#define HOT_COLS 32
#define HOT_CHUNK 128
#define HOT_THREADS 128

// Starts copying (cp.async, one commit group) the slice [col0, col0 + HOT_COLS) of the gradient
// rows of the `m` sorted entries from c0 on into xb (entry i at xb + i HOT_COLS), their scales into
// sb. Warp w takes entries [32 w, 32 w + 32): its lane l reads the source of entry 32 w + l and
// hands it to the lanes copying that row. vec: every source and column is 16-byte aligned.
__device__ inline void hot_stage(const segs &s, const float *grad, int64_t c0, int m, int col0, int D, bool vec,
                                 float *xb, float *sb) {
    const int tid = threadIdx.x, lane = tid % 32, ib = (tid / 32) * 32;
    if (tid < m) __pipeline_memcpy_async(sb + tid, s.sc + c0 + tid, sizeof(float));
    const int64_t mine = ib + lane < m ? s.src[c0 + ib + lane] : 0;
    if (vec) {
        for (int r = 0; r < 8; r++) { // four entries a round, eight lanes (16 bytes each) an entry
            const int ie = r * 4 + lane / 8, col = col0 + (lane % 8) * 4;
            const int64_t o = __shfl_sync(FULL, mine, ie);
            if (ib + ie < m && col < D)
                __pipeline_memcpy_async(xb + (ib + ie) * HOT_COLS + (lane % 8) * 4, grad + o + col, 16);
        }
    } else {
        for (int r = 0; r < 32; r++) { // an entry a round, a lane a column
            const int64_t o = __shfl_sync(FULL, mine, r);
            if (ib + r < m && col0 + lane < D)
                __pipeline_memcpy_async(xb + (ib + r) * HOT_COLS + lane, grad + o + col0 + lane, sizeof(float));
        }
    }
    __pipeline_commit();
}

// The hot rows' gradients (segments of more than HOT_ENTRIES entries, Zipf's head: tens of
// thousands of entries on one row), into ghot [hot row, max_dim]: a block per task (a hot row's
// slice of HOT_COLS columns), longest rows first, taken from a queue. Lane d of warp 0 adds the
// entries' scaled gradients of its column in position order (the cpu's sum: one rounded product
// and one rounded add per entry from +0; the chain of dependent adds is the floor), while the
// next HOT_CHUNK entries are already being copied into the other of two shared buffers.
__global__ void __launch_bounds__(HOT_THREADS)
    k_hot_sum(const dtab *tabs, int32_t T, segs s, const float *grad, const int32_t *hot, dctl *ctl, int32_t max_dim,
              int vec, float *ghot) {
    __shared__ __align__(16) float buf[2][HOT_CHUNK * HOT_COLS];
    __shared__ float scb[2][HOT_CHUNK];
    __shared__ long long cur;
    if (ctl->bits) return;
    const int tid = threadIdx.x, lane = tid % 32;
    const int64_t u = ctl->u, nvhot = (int64_t)ctl->nvhot, nhot = nvhot + (int64_t)ctl->nhot;
    const int nsl = (max_dim + HOT_COLS - 1) / HOT_COLS;
    for (;;) {
        if (tid == 0) cur = (long long)atomicAdd(&ctl->next, 1ull);
        __syncthreads();
        const int64_t task = cur;
        __syncthreads(); // cur is read before thread 0 takes the next
        if (task >= nhot * nsl) break;
        const int64_t h = task / nsl;
        const int col0 = (int)(task % nsl) * HOT_COLS;
        const int64_t k = h < nvhot ? hot[h] : hot[u - 1 - (h - nvhot)];
        const int64_t e0 = s.seg[k], e1 = s.seg[k + 1], nchunks = (e1 - e0 + HOT_CHUNK - 1) / HOT_CHUNK;
        const int D = tabs[table_of_key(tabs, T, s.key[e0])].dim;
        if (col0 >= D) continue; // a narrower table than the widest
        float acc = 0.0f;
        hot_stage(s, grad, e0, e1 - e0 < HOT_CHUNK ? (int)(e1 - e0) : HOT_CHUNK, col0, D, vec, buf[0], scb[0]);
        for (int64_t c = 0; c < nchunks; c++) {
            const int64_t c0 = e0 + c * HOT_CHUNK, c1 = c0 + HOT_CHUNK;
            const int m = e1 - c0 < HOT_CHUNK ? (int)(e1 - c0) : HOT_CHUNK, slot = (int)(c & 1);
            if (c + 1 < nchunks) {
                hot_stage(s, grad, c1, e1 - c1 < HOT_CHUNK ? (int)(e1 - c1) : HOT_CHUNK, col0, D, vec, buf[slot ^ 1],
                          scb[slot ^ 1]);
                __pipeline_wait_prior(1); // this thread's copies of chunk c are done
            } else {
                __pipeline_wait_prior(0);
            }
            __syncthreads(); // and every thread's
            if (tid < 32 && col0 + lane < D) {
                const float *xb = buf[slot] + lane, *sb = scb[slot];
#pragma unroll 8
                for (int i = 0; i < m; i++) acc = acc + sb[i] * xb[i * HOT_COLS];
            }
            __syncthreads(); // the buffer is free for chunk c + 2
        }
        if (tid < 32 && col0 + lane < D) ghot[h * (int64_t)max_dim + col0 + lane] = acc;
    }
}

// One warp per hot row: its gradient from ghot, then update_row.
__global__ void k_hot_apply(const dtab *tabs, int32_t T, const ember__optim_step *steps, segs s, const int32_t *hot,
                            const dctl *ctl, const float *ghot, int32_t max_dim) {
    extern __shared__ float smem[];
    if (ctl->bits) return;
    const int wib = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *g = smem + (size_t)wib * 2 * (size_t)max_dim, *w = g + max_dim;
    const int64_t u = ctl->u, nvhot = (int64_t)ctl->nvhot, nhot = nvhot + (int64_t)ctl->nhot;
    const int64_t stride = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t h = (int64_t)blockIdx.x * (blockDim.x / 32) + wib; h < nhot; h += stride) {
        const int64_t k = h < nvhot ? hot[h] : hot[u - 1 - (h - nvhot)];
        const uint32_t key = s.key[s.seg[k]];
        const int32_t ti = table_of_key(tabs, T, key);
        const dtab &t = tabs[ti];
        for (int d = lane; d < t.dim; d += 32) g[d] = ghot[h * (int64_t)max_dim + d];
        update_row<32>(t, steps[ti], (int64_t)(key - (uint32_t)t.key_base), g, w, lane, false);
        __syncwarp(); // g and w are the next row's
    }
}

// The coalesced gradient of each segment into out + goff[k] (ember__ebc_coalesce).
__global__ void k_reduce(const dtab *tabs, int32_t T, segs s, const float *grad, const int64_t *goff, int64_t u,
                         float *out) {
    const int lane = threadIdx.x % 32;
    const int64_t k = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (k >= u) return;
    const dtab &t = tabs[table_of_key(tabs, T, s.key[s.seg[k]])];
    sum_entries<32>(s, grad, s.seg[k], s.seg[k + 1], t.dim, lane, out + goff[k]);
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

// A device call's dL/dy: the first element that is not finite (16-byte loads where aligned).
__global__ void k_check_finite(const float *x, int64_t n, dctl *ck) {
    const int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t n4 = ((uintptr_t)x & 15) == 0 ? n / 4 : 0;
    for (int64_t i = i0; i < n4; i += stride) {
        const float4 v = ((const float4 *)x)[i];
        if (!isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w))
            for (int k = 0; k < 4; k++)
                if (!isfinite(x[4 * i + k])) note(ck, CK_GRAD, (unsigned long long)(4 * i + k));
    }
    for (int64_t i = 4 * n4 + i0; i < n; i += stride)
        if (!isfinite(x[i])) note(ck, CK_GRAD, (unsigned long long)i);
}

// The key of each segment's row.
__global__ void k_seg_keys(const uint32_t *key, const int32_t *seg, int64_t u, unsigned long long *out) {
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
    if (c->hstream) cudaStreamDestroy(c->hstream);
    if (c->sorted) cudaEventDestroy(c->sorted);
    if (c->hot_done) cudaEventDestroy(c->hot_done);
    cudaFreeHost(c->hsteps);
    cudaFreeHost(c->hctl);
    ember__free(ebc->ctx, c->htabs);
    ember__free(ebc->ctx, c->sent);
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
    // 32-bit sort keys: every row's key and the dropped ids' sentinel (total_keys) below 2^32.
    EMBER_CHECK(ctx, ebc->total_keys <= (int64_t)UINT32_MAX, EMBER_ERR_UNSUPPORTED,
                "ember_ebc_create: backend cuda: %lld rows in all (at most 2^32 - 1)", (long long)ebc->total_keys);
    cuda_state *c = (cuda_state *)ember__xalloc(ctx, sizeof *c, "collection");
    if (!c) return EMBER_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    ebc->bs = c;
    c->htabs = (dtab *)ember__xalloc(ctx, sizeof(dtab) * (size_t)ebc->T, "collection");
    c->sent = (dtab *)ember__calloc(ctx, sizeof(dtab) * (size_t)ebc->T); // all zero: never a table's
    if (!c->htabs || !c->sent) return EMBER_ERR_NOMEM;
    CU_TRY(ctx, cudaGetDevice(&c->device), "cudaGetDevice");
    // Pinned: the step constants go up and the control block comes back without staging copies.
    CU_TRY(ctx, cudaMallocHost((void **)&c->hsteps, sizeof(ember__optim_step) * (size_t)ebc->T), "collection");
    CU_TRY(ctx, cudaMallocHost((void **)&c->hctl, sizeof(dctl)), "collection");
    CU_TRY(ctx, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CU_TRY(ctx, cudaStreamCreateWithFlags(&c->hstream, cudaStreamNonBlocking), "cudaStreamCreate");
    CU_TRY(ctx, cudaEventCreateWithFlags(&c->sorted, cudaEventDisableTiming), "cudaEventCreate");
    CU_TRY(ctx, cudaEventCreateWithFlags(&c->hot_done, cudaEventDisableTiming), "cudaEventCreate");
    CU_TRY(ctx, cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, c->device), "cudaDeviceGetAttribute");
    c->smem_per_warp = per_warp;
    c->warps_per_block = (int)(48 * 1024 / per_warp);
    if (c->warps_per_block > 8) c->warps_per_block = 8;
    if (c->warps_per_block < 1) c->warps_per_block = 1;
    const size_t smem = per_warp * (size_t)c->warps_per_block;
    if (smem > 48 * 1024) {
        CU_TRY(ctx, cudaFuncSetAttribute(k_update<false, 32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "shared memory");
        CU_TRY(ctx, cudaFuncSetAttribute(k_update<true, 32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "shared memory");
        CU_TRY(ctx, cudaFuncSetAttribute(k_hot_apply, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "shared memory");
    }
    // Half-warp rows: twice the rows in flight a warp, twice the shared rows (16 KiB a block at most).
    c->half_rows = ebc->max_dim <= 128;
    int per_sm = 0;
    if (c->half_rows)
        CU_TRY(ctx,
               cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_update<false, 16>, 32 * c->warps_per_block, 2 * smem),
               "occupancy");
    else
        CU_TRY(ctx,
               cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_update<false, 32>, 32 * c->warps_per_block, smem),
               "occupancy");
    c->upd_blocks = c->sms * (per_sm > 0 ? per_sm : 1);
    c->cols_aligned = ebc->out_dim % 4 == 0;
    for (int32_t f = 0; f < ebc->F; f++) c->cols_aligned &= ebc->feature_col[f] % 4 == 0;
    for (int32_t t = 0; t < ebc->T; t++) c->cols_aligned &= ebc->tables[t].cfg.dim % 4 == 0;
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

// The control block of a call, cleared.
dctl *ctl_reset(ember_ebc *ebc) {
    dctl *ctl = (dctl *)dget(ebc, B_CHECK, sizeof(dctl));
    if (!ctl || cudaMemsetAsync(ctl, 0, sizeof(dctl), state_of(ebc)->stream) != cudaSuccess) return NULL;
    return ctl;
}

// The status of a device call's findings (h: the control block, back on the host).
ember_status check_status(ember_ebc *ebc, const char *fn, const dctl &h, int32_t B) {
    if (!h.bits) return EMBER_OK;
    ember_ctx *ctx = ebc->ctx;
    const int what = h.bits & (1u << CK_OFFSETS) ? CK_OFFSETS
                     : h.bits & (1u << CK_RANGE) ? CK_RANGE
                     : h.bits & (1u << CK_WEIGHT) ? CK_WEIGHT
                                                  : CK_GRAD;
    const unsigned long long at = ~h.firstc[what];
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
void launch_forward(ember_ebc *ebc, const dbatch *b, int mode, dctl *ck, float *out) {
    cuda_state *c = state_of(ebc);
    const int64_t nbags = (int64_t)ebc->F * b->batch_size;
    if (nbags == 0) return;
    const int kb = (int)ebc->kbounds;
    if (ebc->sequence) {
        k_sequence<<<blocks_for(nbags, 8), 256, 0, c->stream>>>(c->tabs, c->ftab, *b, nbags, ebc->out_dim, kb, mode, ck,
                                                                 out);
        return;
    }
    // Lanes per bag: the widest row in 16-byte pieces (4 columns a lane where rows are not
    // 16-byte multiples), rounded up to a power of two, at most 32.
    int need = 1;
    for (int32_t t = 0; t < ebc->T; t++) {
        const ember__table *tb = &ebc->tables[t];
        const int v = tb->row_bytes % 16 == 0 && tb->cfg.dtype != EMBER_DTYPE_F32 ? 8 : 4;
        const int n = (tb->cfg.dim + v - 1) / v;
        need = n > need ? n : need;
    }
    int lb = 0;
    while (lb < 5 && (1 << lb) < need) lb++;
    const unsigned grid = blocks_for(nbags << lb, 256);
#define POOL(W, P)                                                                                                     \
    k_pool<W, P><<<grid, 256, 0, c->stream>>>(c->tabs, c->ftab, c->fcol, *b, nbags, ebc->out_dim, lb, kb, mode, ck, out)
    if (b->weights) {
        if (mode == IDS_ROWS) POOL(true, true);
        else POOL(true, false);
    } else {
        if (mode == IDS_ROWS) POOL(false, true);
        else POOL(false, false);
    }
#undef POOL
}

uint32_t key_sentinel(const ember_ebc *ebc) { return (uint32_t)ebc->total_keys; }

int key_bits(const ember_ebc *ebc) {
    int b = 1;
    while (b < 32 && (1ull << b) <= key_sentinel(ebc)) b++;
    return b;
}

enum ember__item_kind item_kind(const ember_ebc *ebc, const void *weights) {
    return ebc->sequence ? EMBER__ITEM_POS_SEQ : weights ? EMBER__ITEM_POS_POOLED : EMBER__ITEM_BAG;
}

// The segments of the last sort (sort_entries), in the workspace.
segs segs_of(const ember_ebc *ebc, enum ember__item_kind kind, int32_t batch_size) {
    const cuda_state *c = state_of(ebc);
    return segs{(const uint32_t *)c->buf[B_KEY2].p, (const int32_t *)c->buf[B_ITEM2].p, (const int32_t *)c->buf[B_SEG].p,
                (const int64_t *)c->buf[B_SRC].p, (const float *)c->buf[B_SC].p, (const float *)c->buf[B_BAGC].p,
                c->fcol, batch_size, ebc->out_dim, (int32_t)kind};
}

// Queues the entries of a device batch, their sort, their segments and each entry's gradient
// source. Nothing waits: the row count stays on the device (ctl->u), and the update kernels
// read it there. NOMEM when a workspace cannot grow (nothing queued changes a table).
ember_status sort_entries(ember_ebc *ebc, const dbatch *b, int mode, dctl *ctl, segs *out) {
    ember_ctx *ctx = ebc->ctx;
    cuda_state *c = state_of(ebc);
    const int64_t nbags = (int64_t)ebc->F * b->batch_size, nnz = b->nnz;
    const enum ember__item_kind kind = item_kind(ebc, b->weights);
    EMBER_CHECK(ctx, nnz < (int64_t)1 << 31 && nbags < (int64_t)1 << 31, EMBER_ERR_UNSUPPORTED,
                "cuda backend: %lld ids in %lld bags in one call (at most 2^31 - 1 of each)", (long long)nnz,
                (long long)nbags);
    const size_t n = (size_t)(nnz > 0 ? nnz : 1);
    uint32_t *key = (uint32_t *)dget(ebc, B_KEY, sizeof(uint32_t) * n);
    uint32_t *key2 = (uint32_t *)dget(ebc, B_KEY2, sizeof(uint32_t) * n);
    int32_t *item = (int32_t *)dget(ebc, B_ITEM, sizeof(int32_t) * n);
    int32_t *item2 = (int32_t *)dget(ebc, B_ITEM2, sizeof(int32_t) * n);
    uint32_t *ukey = (uint32_t *)dget(ebc, B_UKEY, sizeof(uint32_t) * n);
    int32_t *cnt = (int32_t *)dget(ebc, B_CNT, sizeof(int32_t) * n);
    int32_t *seg = (int32_t *)dget(ebc, B_SEG, sizeof(int32_t) * (n + 1));
    int32_t *nrun = (int32_t *)dget(ebc, B_NRUN, sizeof(int32_t));
    int64_t *src = (int64_t *)dget(ebc, B_SRC, sizeof(int64_t) * n);
    float *sc = (float *)dget(ebc, B_SC, sizeof(float) * n);
    float *bag_c = (float *)dget(ebc, B_BAGC, sizeof(float) * (size_t)(nbags > 0 ? nbags : 1));
    int32_t *bag_of = kind == EMBER__ITEM_POS_POOLED ? (int32_t *)dget(ebc, B_BAGOF, sizeof(int32_t) * n) : NULL;
    // The update's hot-row list (at most one slot per row: u <= n) and the hot rows' gradients
    // (each has more than HOT_ENTRIES entries).
    int32_t *hot = (int32_t *)dget(ebc, B_HOT, sizeof(int32_t) * n);
    float *ghot = (float *)dget(ebc, B_GHOT, sizeof(float) * (n / (HOT_ENTRIES + 1) + 1) * (size_t)ebc->max_dim);
    if (!key || !key2 || !item || !item2 || !ukey || !cnt || !seg || !nrun || !src || !sc || !bag_c || !hot || !ghot ||
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
    *out = segs_of(ebc, kind, b->batch_size);
    CU_TRY(ctx, cudaMemsetAsync(seg, 0, sizeof(int32_t), c->stream), "segments");
    if (nbags > 0)
        k_entries<<<blocks_for(nbags, 256), 256, 0, c->stream>>>(c->tabs, c->ftab, *b, nbags, (int)ebc->kbounds, mode, ctl,
                                                                kind == EMBER__ITEM_BAG, key_sentinel(ebc), key, item, bag_c,
                                                                bag_of);
    if (nnz > 0) {
        CU_TRY(ctx, cub::DeviceRadixSort::SortPairs(tmp, t1, key, key2, item, item2, items, 0, bits, c->stream), "sort");
        CU_TRY(ctx, cub::DeviceRunLengthEncode::Encode(tmp, t2, key2, ukey, cnt, nrun, items, c->stream), "segments");
        CU_TRY(ctx, cub::DeviceScan::InclusiveSum(tmp, t3, cnt, seg + 1, items, c->stream), "segments");
        k_rows_runs<<<1, 1, 0, c->stream>>>(ukey, nrun, key_sentinel(ebc), ctl);
        k_sources<<<blocks_for(nnz, 256), 256, 0, c->stream>>>(*out, bag_of, b->weights, nnz, ctl, src, sc);
    }
    CU_TRY(ctx, cudaGetLastError(), "sort");
    return EMBER_OK;
}

// Counts the step and queues one update per segment: the hot rows' kernels on their own stream
// beside the other rows' (both wait for the sort; the collection's stream waits for both).
ember_status update_segments(ember_ebc *ebc, const segs *s, int64_t nnz, const float *grad, dctl *ctl) {
    ember_ctx *ctx = ebc->ctx;
    cuda_state *c = state_of(ebc);
    EMBER_TRY(begin_step(ebc));
    if (nnz == 0) return EMBER_OK;
    const int wpb = c->warps_per_block;
    const size_t smem = c->smem_per_warp * (size_t)wpb;
    const unsigned lists = blocks_for(nnz, 256) < (unsigned)(8 * c->sms) ? blocks_for(nnz, 256) : (unsigned)(8 * c->sms);
    const unsigned rows = blocks_for(nnz, wpb) < (unsigned)c->upd_blocks ? blocks_for(nnz, wpb) : (unsigned)c->upd_blocks;
    const unsigned hot_rows = blocks_for(nnz / (HOT_ENTRIES + 1) + 1, wpb) < (unsigned)c->upd_blocks
                                  ? blocks_for(nnz / (HOT_ENTRIES + 1) + 1, wpb)
                                  : (unsigned)c->upd_blocks;
    const int vec = c->cols_aligned && ((uintptr_t)grad & 15) == 0;
    int32_t *hot = (int32_t *)c->buf[B_HOT].p; // reserved by sort_entries
    float *ghot = (float *)c->buf[B_GHOT].p;
    k_hot_list<<<lists, 256, 0, c->stream>>>(s->seg, ctl, hot);
    CU_TRY(ctx, cudaEventRecord(c->sorted, c->stream), "hot rows");
    CU_TRY(ctx, cudaStreamWaitEvent(c->hstream, c->sorted, 0), "hot rows");
    k_hot_sum<<<3 * c->sms, HOT_THREADS, 0, c->hstream>>>(c->tabs, ebc->T, *s, grad, hot, ctl, ebc->max_dim, vec, ghot);
    k_hot_apply<<<hot_rows, 32 * wpb, smem, c->hstream>>>(c->tabs, ebc->T, c->steps, *s, hot, ctl, ghot, ebc->max_dim);
    CU_TRY(ctx, cudaEventRecord(c->hot_done, c->hstream), "hot rows");
    if (c->half_rows)
        k_update<false, 16><<<rows, 32 * wpb, 2 * smem, c->stream>>>(c->tabs, ebc->T, c->steps, *s, grad, NULL, NULL, NULL, 0,
                                                                    ctl, ebc->max_dim);
    else
        k_update<false, 32><<<rows, 32 * wpb, smem, c->stream>>>(c->tabs, ebc->T, c->steps, *s, grad, NULL, NULL, NULL, 0,
                                                                ctl, ebc->max_dim);
    CU_TRY(ctx, cudaStreamWaitEvent(c->stream, c->hot_done, 0), "hot rows");
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
    cuda_state *c = state_of(ebc);
    EMBER_TRY(sync_tables(ebc));
    dctl *ck = ctl_reset(ebc);
    if (!ck) return EMBER_ERR_NOMEM;
    const dbatch b = {kjt->batch_size, kjt->nnz, kjt->offsets, kjt->values, kjt->weights};
    launch_forward(ebc, &b, IDS_CHECK, ck, out);
    CU_TRY(ebc->ctx, cudaMemcpyAsync(c->hctl, ck, sizeof(dctl), cudaMemcpyDeviceToHost, c->stream), "checks");
    EMBER_TRY(finish(ebc, "ember_ebc_forward_device"));
    return check_status(ebc, "ember_ebc_forward_device", *c->hctl, kjt->batch_size);
}

// The checks of a device call gate the update on the device: a finding leaves every table as it
// was (the update kernels return at once) and the step counted on the host is taken back.
ember_status cuda_backward_device(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out) {
    EMBER_TRY(set_device(ebc));
    cuda_state *c = state_of(ebc);
    EMBER_TRY(sync_tables(ebc));
    dctl *ck = ctl_reset(ebc);
    if (!ck) return EMBER_ERR_NOMEM;
    const int64_t n = output_floats(ebc, kjt);
    if (n > 0) k_check_finite<<<blocks_for(n < (1 << 22) ? n : (1 << 22), 256), 256, 0, c->stream>>>(grad_out, n, ck);
    const dbatch b = {kjt->batch_size, kjt->nnz, kjt->offsets, kjt->values, kjt->weights};
    segs s;
    EMBER_TRY(sort_entries(ebc, &b, IDS_CHECK, ck, &s));
    EMBER_TRY(update_segments(ebc, &s, kjt->nnz, grad_out, ck));
    CU_TRY(ebc->ctx, cudaMemcpyAsync(c->hctl, ck, sizeof(dctl), cudaMemcpyDeviceToHost, c->stream), "checks");
    EMBER_TRY(finish(ebc, "ember_ebc_backward_device"));
    if (c->hctl->bits)
        for (int32_t t = 0; t < ebc->T; t++) ebc->tables[t].step--;
    return check_status(ebc, "ember_ebc_backward_device", *c->hctl, kjt->batch_size);
}

// prepare: the batch on the device, its sort queued, and every buffer apply needs reserved; the
// segments stay in the workspace (only this backend reads them), their count on the device.
ember_status cuda_backward_prepare(ember_ebc *ebc, const ember_kjt *kjt, const int64_t *off, ember__segments *s) {
    EMBER_TRY(set_device(ebc));
    dbatch b;
    EMBER_TRY(upload_batch(ebc, kjt, off, &b));
    EMBER_TRY(sync_tables(ebc));
    dctl *ctl = ctl_reset(ebc);
    if (!ctl) return EMBER_ERR_NOMEM;
    const int mode = ebc->kbounds != EMBER_BOUNDS_ERROR ? IDS_RESOLVE : IDS_ROWS;
    segs so;
    EMBER_TRY(sort_entries(ebc, &b, mode, ctl, &so));
    const int64_t n = output_floats(ebc, kjt);
    if (!dget(ebc, B_GRAD, sizeof(float) * (size_t)(n > 0 ? n : 1))) return EMBER_ERR_NOMEM;
    if (kjt->weights && !dget(ebc, B_GW, sizeof(float) * (size_t)(kjt->nnz > 0 ? kjt->nnz : 1))) return EMBER_ERR_NOMEM;
    *s = ember__segments{kjt, off, item_kind(ebc, kjt->weights), kjt->nnz, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL};
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
    const segs so = segs_of(ebc, s->kind, kjt->batch_size);
    if (grad_weights) {
        const int64_t nbags = (int64_t)ebc->F * kjt->batch_size;
        const dbatch b = {kjt->batch_size, kjt->nnz, (const int64_t *)c->buf[B_OFF].p, (const int64_t *)c->buf[B_VAL].p,
                          (const float *)c->buf[B_WGT].p};
        float *dgw = (float *)c->buf[B_GW].p;
        if (nbags > 0)
            k_weight_grads<<<blocks_for(nbags, 128), 128, 0, c->stream>>>(
                c->tabs, c->ftab, b, nbags, (int)ebc->kbounds,
                ebc->kbounds != EMBER_BOUNDS_ERROR ? IDS_RESOLVE : IDS_ROWS, so, dgrad, dgw);
        if (kjt->nnz > 0)
            CU_TRY(ebc->ctx,
                   cudaMemcpyAsync(grad_weights, dgw, sizeof(float) * (size_t)kjt->nnz, cudaMemcpyDeviceToHost, c->stream),
                   "copying the weight gradients");
    }
    EMBER_TRY(update_segments(ebc, &so, kjt->nnz, dgrad, (dctl *)c->buf[B_CHECK].p));
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
    dctl *ctl = ctl_reset(ebc);
    if (!ctl) return EMBER_ERR_NOMEM;
    segs so;
    EMBER_TRY(sort_entries(ebc, &b, ebc->kbounds != EMBER_BOUNDS_ERROR ? IDS_RESOLVE : IDS_ROWS, ctl, &so));
    CU_TRY(ctx, cudaMemcpyAsync(c->hctl, ctl, sizeof(dctl), cudaMemcpyDeviceToHost, c->stream), "segments");
    EMBER_TRY(finish(ebc, "coalesce"));
    const int64_t u = c->hctl->u, n = output_floats(ebc, kjt);
    int64_t *ukey = (int64_t *)ember__ws_get(ebc, WS_UKEY, sizeof(int64_t) * (size_t)(u > 0 ? u : 1));
    int64_t *goff = (int64_t *)ember__ws_get(ebc, WS_GOFF, sizeof(int64_t) * (size_t)(u + 1));
    if (!ukey || !goff) return EMBER_ERR_NOMEM;
    // The segments' keys, then the gradient offsets from their tables' dims.
    if (u > 0) {
        unsigned long long *dkeys = (unsigned long long *)dget(ebc, B_UKEY, sizeof(int64_t) * (size_t)u);
        if (!dkeys) return EMBER_ERR_NOMEM;
        k_seg_keys<<<blocks_for(u, 256), 256, 0, c->stream>>>(so.key, so.seg, u, dkeys);
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
        k_reduce<<<blocks_for(u, 8), 256, 0, c->stream>>>(c->tabs, ebc->T, so, dgrad, dgoff, u, dout);
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
        const unsigned rows = blocks_for(n, wpb) < (unsigned)c->upd_blocks ? blocks_for(n, wpb) : (unsigned)c->upd_blocks;
        k_update<true, 32><<<rows, 32 * wpb, c->smem_per_warp * (size_t)wpb, c->stream>>>(
            c->tabs, ebc->T, c->steps, none, dgrad, dkey, dgoff, drss, n, NULL, ebc->max_dim);
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
