// `ember bench tbe --backend cuda` (tbe_bench.h, tbe_bench_cuda_run): the cuda backend's forward
// and fused backward + optimizer against two figures timed in the same run on the same GPU:
//   limit  a plain pooled-gather kernel: a warp per bag, each lane 16 bytes of the row, ids
//          summed in order, the same ids over tables of the same shape and dtype: what a forward
//          costs with nothing else to do;
//   hbm    a streaming read of 4 GiB, vectorised: the memory's read rate.
// Each case first checks the collection against the cpu backend on its first batch: the forward's
// output and, after one training step, every tensor of every table, bit for bit ("bitwise").
// Then iterations alternate the case's operation and the limit, each timed by CUDA events; a
// training case also times the forward in the same iterations (its "fwd_ms"). One JSON line per
// case (bench/README.md): ms (median), gbps (the forward's row bytes / time), limit_ms,
// ratio (ms / limit_ms), hbm_gbps, residual (the forward against a double sum of its rows on
// the first bags), bitwise, gpu.
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"
extern "C" {
#include "report.h"
#include "tbe_bench.h"
}

namespace {

struct ev_timer {
    cudaEvent_t a, b;
};

double elapsed_ms(ev_timer &t) {
    float ms = 0;
    cudaEventSynchronize(t.b);
    cudaEventElapsedTime(&ms, t.a, t.b);
    return ms;
}

__global__ void k_hbm_read(const float4 *p, size_t n, float *sink) {
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = p[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *sink = acc; // never true in practice; keeps the loads
}

// A warp per bag; lane l reads 16 bytes at column group l (and l + 32, ...); fp32 or 16-bit rows
// (bf16 widened by a shift, the cheapest conversion), D a multiple of 4 (fp32) or 8 (16-bit).
template <int ES>
__global__ void k_gather(const unsigned char *w, int64_t E, int32_t D, const int64_t *values, int64_t nbags, int32_t L,
                         int32_t B, int32_t T, float *out) {
    const int64_t bag = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (bag >= nbags) return;
    const int64_t t = bag / B, b = bag % B;
    const int per = 16 / ES; // columns per 16 bytes
    const unsigned char *base = w + (size_t)t * (size_t)E * (size_t)D * ES;
    float *o = out + (size_t)b * (size_t)T * D + (size_t)t * D;
    for (int c = lane * per; c < D; c += 32 * per) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int32_t l = 0; l < L; l++) {
            const int64_t id = values[bag * L + l];
            const uint4 v = *(const uint4 *)(base + ((size_t)id * D + c) * ES);
            if (ES == 4) {
                acc[0] += __uint_as_float(v.x), acc[1] += __uint_as_float(v.y);
                acc[2] += __uint_as_float(v.z), acc[3] += __uint_as_float(v.w);
            } else {
                const unsigned u[4] = {v.x, v.y, v.z, v.w};
                for (int k = 0; k < 4; k++) {
                    acc[2 * k] += __uint_as_float(u[k] << 16);
                    acc[2 * k + 1] += __uint_as_float(u[k] & 0xffff0000u);
                }
            }
        }
        for (int k = 0; k < per; k++) o[c + k] = acc[k];
    }
}

struct gpu_in {
    int64_t *values[2]; // uniform, zipf (device)
    int64_t *offsets;
    float *grad, *out, *lim_out;
    unsigned char *lim_w;
    float4 *hbm;
    size_t hbm_n;
    float *sink;
};

const char *op_name(int op) {
    static const char *const names[] = {"fwd", "train_sgd", "train_rowwise_adagrad", "train_adam"};
    return names[op];
}

ember_optim_kind op_optim(int op) {
    return op == 2 ? EMBER_OPT_ROWWISE_ADAGRAD : op == 3 ? EMBER_OPT_ADAM : EMBER_OPT_SGD;
}

ember_ebc *make_ebc(ember_ctx *ctx, const tbe_bench_shape *s, ember_dtype dt, int mean, ember_optim_kind opt,
                    ember_backend be, uint64_t seed, ember_table_config *tabs, ember_feature_config *feats,
                    char (*names)[16]) {
    for (int32_t t = 0; t < s->T; t++) {
        snprintf(names[t], 16, "t%d", (int)t);
        ember_table_config tc = EMBER_TABLE_CONFIG_DEFAULT;
        tc.name = names[t];
        tc.rows = s->E;
        tc.dim = s->D;
        tc.dtype = dt;
        tc.pooling = mean ? EMBER_POOL_MEAN : EMBER_POOL_SUM;
        tc.optim.kind = opt;
        tc.optim.lr = 0.01f;
        tabs[t] = tc;
        feats[t] = ember_feature_config{names[t], t};
    }
    ember_ebc_config cfg = EMBER_EBC_CONFIG_DEFAULT;
    cfg.tables = tabs;
    cfg.num_tables = s->T;
    cfg.features = feats;
    cfg.num_features = s->T;
    cfg.seed = seed;
    cfg.backend = be;
    ember_ebc *ebc = NULL;
    return ember_ebc_create(ctx, &cfg, &ebc) == EMBER_OK ? ebc : NULL;
}

// Every tensor of every table of a and b equal, bit for bit.
int same_tables(ember_ebc *a, ember_ebc *b) {
    int same = 1;
    for (int32_t t = 0; t < ember_ebc_num_tables(a) && same; t++) {
        for (int k = 0; k < ember_ebc_num_tensors(a, t) && same; k++) {
            ember_tensor_info info;
            if (ember_ebc_tensor_info(a, t, k, &info) != EMBER_OK) return 0;
            const size_t bytes = (size_t)info.rows * (size_t)info.cols * ember_dtype_size(info.dtype);
            void *x = malloc(bytes), *y = malloc(bytes);
            same = x && y && ember_ebc_read(a, t, info.name, 0, info.rows, info.dtype, x) == EMBER_OK &&
                   ember_ebc_read(b, t, info.name, 0, info.rows, info.dtype, y) == EMBER_OK && !memcmp(x, y, bytes);
            free(x);
            free(y);
        }
    }
    return same;
}

// The forward's output and one training step of the cuda collection against a cpu twin.
int bitwise_vs_cpu(ember_ctx *ctx, ember_ebc *gpu, const tbe_bench_shape *s, ember_dtype dt, int mean,
                   ember_optim_kind opt, uint64_t seed, const ember_kjt *kjt, const float *grad) {
    ember_table_config tabs[64];
    ember_feature_config feats[64];
    char names[64][16];
    ember_ebc *cpu = make_ebc(ctx, s, dt, mean, opt, EMBER_BACKEND_CPU, seed, tabs, feats, names);
    const size_t n = (size_t)s->B * (size_t)s->T * (size_t)s->D;
    float *a = (float *)malloc(sizeof(float) * n), *b = (float *)malloc(sizeof(float) * n);
    int same = cpu && a && b && ember_ebc_forward(gpu, kjt, a) == EMBER_OK && ember_ebc_forward(cpu, kjt, b) == EMBER_OK &&
               !memcmp(a, b, sizeof(float) * n);
    same = same && ember_ebc_backward(gpu, kjt, grad, NULL) == EMBER_OK &&
           ember_ebc_backward(cpu, kjt, grad, NULL) == EMBER_OK && same_tables(gpu, cpu);
    free(a);
    free(b);
    ember_ebc_destroy(cpu);
    return same;
}

} // namespace

extern "C" int tbe_bench_cuda_run(const tbe_bench_opts *o) {
    char why[256];
    if (!ember_backend_supported(EMBER_BACKEND_CUDA, why, sizeof why)) {
        fprintf(o->log, "ember bench tbe: --backend cuda: %s\n", why);
        return 2;
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(&cc, &ctx) != EMBER_OK) return 2;
    int worst = 0;
    ev_timer tm;
    cudaEventCreate(&tm.a);
    cudaEventCreate(&tm.b);
    // The HBM read figure once per run: the median of 9 reads of 4 GiB.
    gpu_in g;
    memset(&g, 0, sizeof g);
    g.hbm_n = ((size_t)4 << 30) / sizeof(float4);
    double hbm_gbps = NAN;
    if (cudaMalloc(&g.hbm, g.hbm_n * sizeof(float4)) == cudaSuccess && cudaMalloc(&g.sink, 4) == cudaSuccess) {
        cudaMemset(g.hbm, 0, g.hbm_n * sizeof(float4));
        double v[9];
        for (int i = -1; i < 9; i++) {
            cudaEventRecord(tm.a);
            k_hbm_read<<<prop.multiProcessorCount * 8, 512>>>(g.hbm, g.hbm_n, g.sink);
            cudaEventRecord(tm.b);
            const double ms = elapsed_ms(tm);
            if (i >= 0) v[i] = ms;
        }
        hbm_gbps = (double)(g.hbm_n * sizeof(float4)) / (bench_median(v, 9) * 1e6);
        cudaFree(g.hbm);
    }
    fprintf(o->log, "ember bench tbe --backend cuda: %s, HBM read %.0f GB/s\n", prop.name, hbm_gbps);
    for (int si = 0; si < o->nshapes; si++) {
        const tbe_bench_shape *s = &o->shapes[si];
        if (s->T > 64) continue;
        const int64_t nbags = (int64_t)s->T * s->B, nnz = nbags * s->L;
        const size_t nout = (size_t)s->B * (size_t)s->T * (size_t)s->D;
        int64_t *hv[2] = {(int64_t *)malloc(sizeof(int64_t) * (size_t)nnz), (int64_t *)malloc(sizeof(int64_t) * (size_t)nnz)};
        int64_t *hoff = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nbags + 1));
        float *hgrad = (float *)malloc(sizeof(float) * nout), *hout = (float *)malloc(sizeof(float) * nout);
        if (!hv[0] || !hv[1] || !hoff || !hgrad || !hout) return 2;
        for (int64_t i = 0; i <= nbags; i++) hoff[i] = i * s->L;
        tbe_bench_make_grad(nout, o->seed, hgrad);
        for (int d = 0; d < 2; d++) {
            if (!(o->dists & (1u << d))) continue;
            double *cdf = d ? tbe_bench_zipf_cdf(s->E) : NULL;
            tbe_bench_make_ids(s, d, cdf, o->seed, hv[d]);
            free(cdf);
            cudaMalloc(&g.values[d], sizeof(int64_t) * (size_t)nnz);
            cudaMemcpy(g.values[d], hv[d], sizeof(int64_t) * (size_t)nnz, cudaMemcpyHostToDevice);
        }
        cudaMalloc(&g.offsets, sizeof(int64_t) * (size_t)(nbags + 1));
        cudaMemcpy(g.offsets, hoff, sizeof(int64_t) * (size_t)(nbags + 1), cudaMemcpyHostToDevice);
        cudaMalloc(&g.grad, sizeof(float) * nout);
        cudaMemcpy(g.grad, hgrad, sizeof(float) * nout, cudaMemcpyHostToDevice);
        cudaMalloc(&g.out, sizeof(float) * nout);
        cudaMalloc(&g.lim_out, sizeof(float) * nout);
        const size_t lim_bytes = (size_t)s->T * (size_t)s->E * (size_t)s->D * 4;
        if (cudaMalloc(&g.lim_w, lim_bytes) != cudaSuccess) return 2;
        cudaMemset(g.lim_w, 0, lim_bytes);
        for (int dt = 0; dt < 3; dt++) {
            if (!(o->dtypes & (1u << dt))) continue;
            const ember_dtype dtype = (ember_dtype)dt;
            const size_t es = ember_dtype_size(dtype);
            for (int op = 0; op < 4; op++) {
                const unsigned bit = op == 0 ? TBE_OP_FWD : op == 1 ? TBE_OP_TRAIN_SGD : op == 2 ? TBE_OP_TRAIN_ROWWISE_ADAGRAD
                                                                                       : TBE_OP_TRAIN_ADAM;
                if (!(o->ops & bit)) continue;
                for (int pool = 0; pool < 2; pool++) {
                    if (!(o->pools & (1u << pool))) continue;
                    ember_table_config tabs[64];
                    ember_feature_config feats[64];
                    char names[64][16];
                    for (int d = 0; d < 2; d++) {
                        if (!(o->dists & (1u << d))) continue;
                        // A fresh collection per case: the cpu twin starts from the same tables.
                        ember_ebc *ebc = make_ebc(ctx, s, dtype, pool, op_optim(op), EMBER_BACKEND_CUDA, o->seed, tabs,
                                                  feats, names);
                        if (!ebc) {
                            fprintf(o->log, "ember bench tbe: cuda collection: %s\n", ember_ctx_errmsg(ctx));
                            return 2;
                        }
                        const ember_kjt kjt = {s->T, s->B, NULL, hoff, hv[d], NULL, nnz};
                        const int bitwise = bitwise_vs_cpu(ctx, ebc, s, dtype, pool, op_optim(op), o->seed, &kjt, hgrad);
                        const ember_kjt b = {s->T, s->B, NULL, g.offsets, g.values[d], NULL, nnz};
                        if (ember_ebc_forward_device(ebc, &b, g.out) != EMBER_OK) {
                            fprintf(o->log, "ember bench tbe: cuda forward: %s\n", ember_ctx_errmsg(ctx));
                            return 2;
                        }
                        cudaDeviceSynchronize();
                        cudaMemcpy(hout, g.out, sizeof(float) * nout, cudaMemcpyDeviceToHost);
                        const double residual = tbe_bench_fwd_residual(ebc, s, hv[d], pool, hout);
                        const int lim_ok = s->D % (16 / (int)es) == 0;
                        double *t_op = (double *)malloc(sizeof(double) * (size_t)o->iters * 3);
                        double *t_fwd = t_op + o->iters, *t_lim = t_fwd + o->iters;
                        for (int it = -o->warmup; it < o->iters; it++) {
                            double x = 0, f = 0, l = NAN;
                            if (op > 0) {
                                cudaEventRecord(tm.a);
                                ember_ebc_forward_device(ebc, &b, g.out);
                                cudaEventRecord(tm.b);
                                f = elapsed_ms(tm);
                            }
                            cudaEventRecord(tm.a);
                            const ember_status st = op == 0 ? ember_ebc_forward_device(ebc, &b, g.out)
                                                            : ember_ebc_backward_device(ebc, &b, g.grad);
                            cudaEventRecord(tm.b);
                            x = elapsed_ms(tm);
                            if (st != EMBER_OK) {
                                fprintf(o->log, "ember bench tbe: cuda %s: %s\n", op_name(op), ember_ctx_errmsg(ctx));
                                return 2;
                            }
                            if (lim_ok) {
                                cudaEventRecord(tm.a);
                                if (es == 4)
                                    k_gather<4><<<(unsigned)((nbags + 7) / 8), 256>>>(g.lim_w, s->E, s->D, g.values[d],
                                                                                     nbags, s->L, s->B, s->T, g.lim_out);
                                else
                                    k_gather<2><<<(unsigned)((nbags + 7) / 8), 256>>>(g.lim_w, s->E, s->D, g.values[d],
                                                                                     nbags, s->L, s->B, s->T, g.lim_out);
                                cudaEventRecord(tm.b);
                                l = elapsed_ms(tm);
                            }
                            if (it >= 0) t_op[it] = x, t_fwd[it] = f, t_lim[it] = l;
                        }
                        const double ms = bench_median(t_op, o->iters), fwd_ms = op > 0 ? bench_median(t_fwd, o->iters) : ms;
                        const double lim_ms = lim_ok ? bench_median(t_lim, o->iters) : NAN;
                        free(t_op);
                        const double row_bytes = (double)nnz * (double)s->D * (double)es;
                        bench_json j;
                        bench_json_begin(&j, o->out, "tbe");
                        bench_json_str(&j, "backend", "cuda");
                        bench_json_str(&j, "gpu", prop.name);
                        bench_json_str(&j, "op", op_name(op));
                        bench_json_str(&j, "pool", pool ? "mean" : "sum");
                        bench_json_str(&j, "dtype", ember_dtype_name(dtype));
                        bench_json_int(&j, "T", s->T);
                        bench_json_int(&j, "E", s->E);
                        bench_json_int(&j, "D", s->D);
                        bench_json_int(&j, "B", s->B);
                        bench_json_int(&j, "L", s->L);
                        bench_json_str(&j, "dist", d ? "zipf" : "uniform");
                        bench_json_fixed(&j, "ms", ms, 4);
                        bench_json_fixed(&j, "fwd_ms", fwd_ms, 4);
                        bench_json_fixed(&j, "gbps", row_bytes / (fwd_ms * 1e6), 1);
                        bench_json_fixed(&j, "limit_ms", lim_ms, 4);
                        bench_json_fixed(&j, "ratio", ms / lim_ms, 3);
                        bench_json_fixed(&j, "fwd_of_hbm", row_bytes / (fwd_ms * 1e6) / hbm_gbps, 3);
                        bench_json_fixed(&j, "hbm_gbps", hbm_gbps, 0);
                        bench_json_sig(&j, "residual", residual);
                        bench_json_bool(&j, "bitwise", bitwise);
                        bench_json_end(&j);
                        const double tol = dtype == EMBER_DTYPE_F32 ? 1e-5 : 1e-2;
                        if (residual > tol || !bitwise) worst = worst > 1 ? worst : 1;
                        ember_ebc_destroy(ebc);
                    }
                }
            }
        }
        for (int d = 0; d < 2; d++) cudaFree(g.values[d]), g.values[d] = NULL;
        cudaFree(g.offsets);
        cudaFree(g.grad);
        cudaFree(g.out);
        cudaFree(g.lim_out);
        cudaFree(g.lim_w);
        free(hv[0]);
        free(hv[1]);
        free(hoff);
        free(hgrad);
        free(hout);
    }
    cudaFree(g.sink);
    cudaEventDestroy(tm.a);
    cudaEventDestroy(tm.b);
    ember_ctx_destroy(ctx);
    return worst;
}
