// `ember bench dense`: the dense products of DLRM and DCN-v2 through ember_gemm against OpenBLAS
// and the in-run FMA peak (see dense_bench.h).
#define _POSIX_C_SOURCE 200809L

#include "dense_bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "ember.h"
#include "peak/peak.h"
#include "report.h"

#define BENCH_SEED 20240611u

// ---- the cases -----------------------------------------------------------------------------------

// The dense layers of the presets (in -> out features). DLRM default: bottom 13-64-16, top over
// the 367 interaction features 367-64-32-1 (27 vectors of 16: 27*26/2 dot products + 16).
// DCN-v2 (MLPerf): bottom 13-512-256-128, the cross layers' low-rank pair over the 3456-wide
// input (26 embeddings of 128 + the bottom output; U then V, rank 512), top 3456-1024-1024-512-256-1.
typedef struct layer {
    unsigned preset;
    const char *name;
    int64_t in, out;
} layer;

static const layer LAYERS[] = {
    {DENSE_PRESET_DLRM, "bot0", 13, 64},      {DENSE_PRESET_DLRM, "bot1", 64, 16},
    {DENSE_PRESET_DLRM, "top0", 367, 64},     {DENSE_PRESET_DLRM, "top1", 64, 32},
    {DENSE_PRESET_DLRM, "top2", 32, 1},       {DENSE_PRESET_DCN, "bot0", 13, 512},
    {DENSE_PRESET_DCN, "bot1", 512, 256},     {DENSE_PRESET_DCN, "bot2", 256, 128},
    {DENSE_PRESET_DCN, "cross_u", 3456, 512}, {DENSE_PRESET_DCN, "cross_v", 512, 3456},
    {DENSE_PRESET_DCN, "top0", 3456, 1024},   {DENSE_PRESET_DCN, "top1", 1024, 1024},
    {DENSE_PRESET_DCN, "top2", 1024, 512},    {DENSE_PRESET_DCN, "top3", 512, 256},
    {DENSE_PRESET_DCN, "top4", 256, 1},
};
#define NLAYERS ((int)(sizeof LAYERS / sizeof LAYERS[0]))

// The DLRM dot interaction: per sample T [27][16] (26 embeddings and the bottom output).
#define INTER_F 27
#define INTER_D 16

// One timed product (count > 1: a strided batch).
typedef struct dcase {
    const char *preset, *layer, *op;
    int ta, tb;
    int64_t M, N, K, count;
} dcase;

static const char *preset_name(unsigned p) { return p == DENSE_PRESET_DLRM ? "dlrm" : "dcn"; }

// The products of layer (in -> out) at batch B: forward y = x W^T (x [B][in], W [out][in]),
// input gradient dx = g W (g [B][out]), weight gradient dW = g^T x.
static int layer_cases(const layer *l, int64_t B, unsigned ops, dcase *out) {
    int n = 0;
    const char *p = preset_name(l->preset);
    if (ops & DENSE_OP_FWD) out[n++] = (dcase){p, l->name, "fwd", 0, 1, B, l->out, l->in, 1};
    if (ops & DENSE_OP_DX) out[n++] = (dcase){p, l->name, "dx", 0, 0, B, l->in, l->out, 1};
    if (ops & DENSE_OP_DW) out[n++] = (dcase){p, l->name, "dw", 1, 0, l->out, l->in, B, 1};
    return n;
}

// ---- operands, timing, residual --------------------------------------------------------------------

typedef struct operands {
    int64_t lda, ldb, ldc, sa, sb, sc, na, nb, nc;
    float *A, *B, *C, *Cb;
} operands;

static int make_operands(const dcase *c, uint64_t seed, operands *o) {
    memset(o, 0, sizeof *o);
    const int64_t arows = c->ta ? c->K : c->M, brows = c->tb ? c->N : c->K;
    o->lda = c->ta ? c->M : c->K;
    o->ldb = c->tb ? c->K : c->N;
    o->ldc = c->N;
    o->sa = arows * o->lda, o->sb = brows * o->ldb, o->sc = c->M * o->ldc;
    o->na = o->sa * c->count, o->nb = o->sb * c->count, o->nc = o->sc * c->count;
    o->A = malloc(sizeof(float) * (size_t)o->na);
    o->B = malloc(sizeof(float) * (size_t)o->nb);
    o->C = malloc(sizeof(float) * (size_t)o->nc);
    o->Cb = malloc(sizeof(float) * (size_t)o->nc);
    if (!o->A || !o->B || !o->C || !o->Cb) return -1;
    ember_rng r = ember_rng_at(seed, 1, 0);
    for (int64_t i = 0; i < o->na; i++) o->A[i] = (float)(2.0 * ember_rng_uniform(&r) - 1.0);
    for (int64_t i = 0; i < o->nb; i++) o->B[i] = (float)(2.0 * ember_rng_uniform(&r) - 1.0);
    return 0;
}

static void free_operands(operands *o) {
    free(o->A), free(o->B), free(o->C), free(o->Cb);
}

static ember_status call_ours(ember_ctx *ctx, const dcase *c, const operands *o) {
    if (c->count == 1)
        return ember_gemm(ctx, (ember_transpose)c->ta, (ember_transpose)c->tb, c->M, c->N, c->K, o->A, o->lda, o->B,
                          o->ldb, o->C, o->ldc, NULL);
    return ember_gemm_batched(ctx, (ember_transpose)c->ta, (ember_transpose)c->tb, c->M, c->N, c->K, o->A, o->lda,
                              o->sa, o->B, o->ldb, o->sb, o->C, o->ldc, o->sc, c->count, NULL);
}

// OpenBLAS on the same row-major layout (one call per product of a batch).
static void call_blas(const dcase *c, const operands *o) {
    for (int64_t i = 0; i < c->count; i++)
        cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, (int)c->M,
                    (int)c->N, (int)c->K, 1.0f, o->A + i * o->sa, (int)o->lda, o->B + i * o->sb, (int)o->ldb, 0.0f,
                    o->Cb + i * o->sc, (int)o->ldc);
}

static void pause_ms(double ms) {
    if (ms <= 0.0) return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1e3), .tv_nsec = (long)(fmod(ms, 1e3) * 1e6)};
    nanosleep(&ts, NULL);
}

// Milliseconds per call of `reps` calls.
static double sample(ember_ctx *ctx, const dcase *c, const operands *o, int blas, int reps) {
    const double t0 = bench_now_ms();
    for (int r = 0; r < reps; r++) {
        if (blas) call_blas(c, o);
        else (void)call_ours(ctx, c, o);
    }
    return (bench_now_ms() - t0) / reps;
}

// The largest error of the first product's sampled rows (up to 8, evenly spaced) against a
// double-precision product, each relative to its sum of |a b| (the scale of the fp32 chain's
// error bound, (K + 2) 2^-24).
static double residual(const dcase *c, const operands *o, const float *C) {
    double worst = 0.0;
    const int64_t rows = c->M < 8 ? c->M : 8;
    for (int64_t s = 0; s < rows; s++) {
        const int64_t m = rows > 1 ? s * (c->M - 1) / (rows - 1) : 0;
        for (int64_t n = 0; n < c->N; n++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t k = 0; k < c->K; k++) {
                const double a = c->ta ? o->A[k * o->lda + m] : o->A[m * o->lda + k];
                const double b = c->tb ? o->B[n * o->ldb + k] : o->B[k * o->ldb + n];
                ref += a * b;
                mag += fabs(a * b);
            }
            const double e = fabs((double)C[m * o->ldc + n] - ref) / (mag > 0.0 ? mag : 1.0);
            worst = e > worst || isnan(e) ? e : worst;
        }
    }
    return worst;
}

// ---- the run ----------------------------------------------------------------------------------------

typedef struct result {
    double ms_med, ms_min, blas_med, blas_min, res, blas_res;
    double paired; // median over rounds of OpenBLAS's time / ember's time in the same round
} result;

static int run_case(ember_ctx *ctx, const dense_bench_opts *o, const dcase *c, int threads, uint64_t seed,
                    result *r) {
    operands op;
    if (make_operands(c, seed, &op) != 0) {
        fprintf(o->log, "ember bench dense: out of memory for %s %s %s\n", c->preset, c->layer, c->op);
        free_operands(&op);
        return -1;
    }
    ember_ctx_set_num_threads(ctx, threads);
    openblas_set_num_threads(threads);
    // The first calls are untimed: correctness, and the repetitions a sample needs.
    double t1 = bench_now_ms();
    const ember_status st = call_ours(ctx, c, &op);
    t1 = bench_now_ms() - t1;
    if (st != EMBER_OK) {
        fprintf(o->log, "ember bench dense: %s %s %s: %s\n", c->preset, c->layer, c->op, ember_ctx_errmsg(ctx));
        free_operands(&op);
        return -1;
    }
    r->res = residual(c, &op, op.C);
    double tb = 0.0;
    r->blas_res = NAN;
    if (o->openblas) {
        tb = bench_now_ms();
        call_blas(c, &op);
        tb = bench_now_ms() - tb;
        r->blas_res = residual(c, &op, op.Cb);
    }
    const int reps = t1 >= o->sample_ms ? 1 : (int)fmin(1e5, ceil(o->sample_ms / fmax(t1, 1e-4)));
    const int reps_b = tb >= o->sample_ms ? 1 : (int)fmin(1e5, ceil(o->sample_ms / fmax(tb, 1e-4)));
    double *ours = malloc(sizeof(double) * (size_t)o->iters), *blas = malloc(sizeof(double) * (size_t)o->iters);
    if (!ours || !blas) {
        free(ours), free(blas), free_operands(&op);
        return -1;
    }
    // Alternating rounds: even rounds time ember first, odd rounds OpenBLAS first. With several
    // threads each implementation's idle workers keep spinning for a while after a call (libgomp
    // briefly, OpenBLAS's pool up to 2^28 cycles), taking cores from the other: a pause between
    // the two lets them go to sleep first.
    const double gap = threads > 1 && o->openblas ? o->gap_ms : 0.0;
    for (int it = -o->warmup; it < o->iters; it++) {
        double a = 0.0, b = 0.0;
        for (int phase = 0; phase < 2; phase++) {
            const int blas_now = (phase == 0) == ((it & 1) != 0);
            pause_ms(gap);
            if (blas_now && o->openblas) b = sample(ctx, c, &op, 1, reps_b);
            else if (!blas_now) a = sample(ctx, c, &op, 0, reps);
        }
        if (it >= 0) ours[it] = a, blas[it] = b;
    }
    pause_ms(gap);
    r->paired = NAN;
    if (o->openblas) {
        // The speed ratio round by round: both times of a round saw the same machine (this one is
        // shared; its load changes between rounds more than within one).
        double *q = malloc(sizeof(double) * (size_t)o->iters);
        if (q) {
            for (int it = 0; it < o->iters; it++) q[it] = blas[it] / ours[it];
            r->paired = bench_median(q, o->iters);
            free(q);
        }
    }
    // (bench_median sorts: the pairs above come first.)
    r->ms_min = bench_min(ours, o->iters);
    r->ms_med = bench_median(ours, o->iters);
    r->blas_min = o->openblas ? bench_min(blas, o->iters) : NAN;
    r->blas_med = o->openblas ? bench_median(blas, o->iters) : NAN;
    free(ours), free(blas), free_operands(&op);
    return 0;
}

static void print_line(const dense_bench_opts *o, ember_ctx *ctx, const dcase *c, int threads, double peak,
                       const result *r) {
    const double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K * (double)c->count;
    const double gf = flops / (r->ms_med * 1e6), gfb = flops / (r->blas_med * 1e6);
    char shape[96];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld%s", (long long)c->M, (long long)c->N, (long long)c->K,
             c->count > 1 ? "xbatch" : "");
    if (!o->json) {
        fprintf(o->out, "%-5s %-8s %-4s %-18s %6lld %3d %10.4f %8.2f %8.2f %6.3f %6.3f %9.2e\n", c->preset, c->layer,
                c->op, shape, (long long)c->count, threads, r->ms_med, gf, gfb, r->paired, gf / peak, r->res);
        return;
    }
    bench_json j;
    bench_json_begin(&j, o->out, "dense");
    bench_json_str(&j, "preset", c->preset);
    bench_json_str(&j, "layer", c->layer);
    bench_json_str(&j, "op", c->op);
    bench_json_str(&j, "shape", shape);
    bench_json_str(&j, "ta", c->ta ? "trans" : "no_trans");
    bench_json_str(&j, "tb", c->tb ? "trans" : "no_trans");
    bench_json_int(&j, "M", c->M);
    bench_json_int(&j, "N", c->N);
    bench_json_int(&j, "K", c->K);
    bench_json_int(&j, "count", c->count);
    bench_json_int(&j, "threads", threads);
    bench_json_str(&j, "variant", ember_isa_name(ember_ctx_isa(ctx)));
    bench_json_fixed(&j, "ms_med", r->ms_med, 4);
    bench_json_fixed(&j, "ms_min", r->ms_min, 4);
    bench_json_fixed(&j, "gflops", gf, 2);
    bench_json_sig(&j, "residual", r->res);
    bench_json_fixed(&j, "peak_gflops", peak, 1);
    bench_json_fixed(&j, "ratio_peak", gf / peak, 3);
    bench_json_str(&j, "openblas_core", o->openblas ? openblas_get_corename() : "none");
    bench_json_fixed(&j, "openblas_ms_med", r->blas_med, 4);
    bench_json_fixed(&j, "openblas_gflops", gfb, 2);
    bench_json_sig(&j, "openblas_residual", r->blas_res);
    bench_json_fixed(&j, "ratio_openblas", r->paired, 3);
    bench_json_fixed(&j, "ratio_openblas_of_medians", gf / gfb, 3);
    bench_json_host(&j, ctx);
    bench_json_end(&j);
}

int dense_bench_run(const dense_bench_opts *o) {
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.isa = (ember_isa)o->isa;
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(&cc, &ctx) != EMBER_OK) {
        fprintf(o->log, "ember bench dense: cannot create a context for kernel variant %s\n",
                ember_isa_name((ember_isa)o->isa));
        return 2;
    }
    double peak[DENSE_BENCH_MAX_LIST];
    for (int t = 0; t < o->nthreads; t++) peak[t] = bench_fma_peak_gflops(ember_ctx_isa(ctx), o->threads[t]);
    if (!o->json) {
        fprintf(o->out, "# %s\n# kernels %s on %s; OpenBLAS %s (%s)\n", ember_build_info(),
                ember_isa_name(ember_ctx_isa(ctx)), ember_cpu_name(), o->openblas ? openblas_get_corename() : "off",
                o->openblas ? openblas_get_config() : "");
        for (int t = 0; t < o->nthreads; t++)
            fprintf(o->out, "# FMA peak on %d thread(s): %.1f GFLOP/s\n", o->threads[t], peak[t]);
        fprintf(o->out, "%-5s %-8s %-4s %-18s %6s %3s %10s %8s %8s %6s %6s %9s\n", "set", "layer", "op", "MxNxK", "count",
                "thr", "ms_med", "GFLOP/s", "OpenBLAS", "ratio", "/peak", "residual");
    }
    int rc = 0;
    uint64_t seed = o->seed;
    for (int bi = 0; bi < o->nbatch; bi++) {
        const int64_t B = o->batch[bi];
        dcase cases[NLAYERS * 3 + 2];
        int n = 0;
        for (int l = 0; l < NLAYERS; l++)
            if (LAYERS[l].preset & o->presets) n += layer_cases(&LAYERS[l], B, o->ops, cases + n);
        if (o->presets & DENSE_PRESET_DLRM) {
            // Z = T T^T per sample, and one half of its gradient dT = dZ T (the other, dZ^T T, has
            // the same shape).
            if (o->ops & DENSE_OP_FWD) cases[n++] = (dcase){"dlrm", "inter", "fwd", 0, 1, INTER_F, INTER_F, INTER_D, B};
            if (o->ops & DENSE_OP_DX) cases[n++] = (dcase){"dlrm", "inter", "dx", 0, 0, INTER_F, INTER_D, INTER_F, B};
        }
        for (int i = 0; i < n; i++)
            for (int t = 0; t < o->nthreads; t++) {
                result r;
                if (run_case(ctx, o, &cases[i], o->threads[t], seed++, &r) != 0) {
                    rc = 2;
                    continue;
                }
                print_line(o, ctx, &cases[i], o->threads[t], peak[t], &r);
                const double tol = (double)(cases[i].K + 2) * 0x1p-24 * 1.0001;
                if (!(r.res <= tol)) {
                    fprintf(o->log, "ember bench dense: %s %s %s: residual %g above the fp32 bound %g\n",
                            cases[i].preset, cases[i].layer, cases[i].op, r.res, tol);
                    if (rc == 0) rc = 1;
                }
            }
    }
    if (ember_ctx_bytes_outstanding(ctx) != 0) {
        fprintf(o->log, "ember bench dense: %zu bytes leaked\n", ember_ctx_bytes_outstanding(ctx));
        rc = 2;
    }
    ember_ctx_destroy(ctx);
    return rc;
}

// ---- options ---------------------------------------------------------------------------------------

void dense_bench_usage(FILE *f) {
    fprintf(f,
            "usage: ember bench dense [options]\n"
            "Times every dense product of the DLRM default and DCN-v2 presets (forward, input and weight\n"
            "gradients; DLRM's dot interaction as a batch) through ember_gemm and OpenBLAS's cblas_sgemm in\n"
            "alternating rounds, against the in-run FMA peak of the kernel variant (docs/performance.md).\n"
            "  --preset LIST      dlrm,dcn (default both)\n"
            "  --ops LIST         fwd,dx,dw (default all)\n"
            "  --batch LIST       per-rank batch sizes (default 1024,2048)\n"
            "  --threads LIST     thread counts (default 1,2)\n"
            "  --iters N          timed rounds per case (default 7)\n"
            "  --warmup N         untimed rounds first (default 1)\n"
            "  --sample_ms X      a sample repeats a short call until about X ms (default 20)\n"
            "  --gap_ms X         pause before each sample of a multi-thread case, so that the other\n"
            "                     implementation's spinning workers sleep first (default 300)\n"
            "  --isa auto|generic|avx2|avx512  kernel variant (default auto: $EMBER_ISA or the CPU's best)\n"
            "  --no-openblas      time ember alone\n"
            "  --seed N           operands (default 20240611)\n"
            "  --quick            batch 64, one round, one call a sample: a smoke test\n"
            "  --json             one JSON object per line\n"
            "OpenBLAS picks its kernel from the CPU; OPENBLAS_CORETYPE=Haswell|SkylakeX forces one.\n"
            "Exit status: 0 ok, 1 a residual above the fp32 bound, 2 failure.\n");
}

static int parse_names(const char *s, const char *const *names, int n, unsigned *mask) {
    *mask = 0;
    while (*s) {
        const size_t len = strcspn(s, ",");
        int found = -1;
        for (int i = 0; i < n; i++)
            if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0) found = i;
        if (found < 0) return -1;
        *mask |= 1u << found;
        s += len + (s[len] == ',');
    }
    return *mask ? 0 : -1;
}

static int parse_ints(const char *s, int64_t lo, int64_t hi, int64_t *out, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        const long long v = strtoll(s, &end, 10);
        if (end == s || v < lo || v > hi || *n == DENSE_BENCH_MAX_LIST || (*end && *end != ',')) return -1;
        out[(*n)++] = v;
        s = *end ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

int dense_bench_parse(int argc, char **argv, dense_bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->out = stdout;
    o->log = stderr;
    o->presets = DENSE_PRESET_DLRM | DENSE_PRESET_DCN;
    o->ops = DENSE_OP_ALL;
    o->batch[0] = 1024, o->batch[1] = 2048, o->nbatch = 2;
    o->threads[0] = 1, o->threads[1] = 2, o->nthreads = 2;
    o->iters = 7;
    o->warmup = 1;
    o->sample_ms = 20.0;
    o->gap_ms = 300.0;
    o->openblas = 1;
    o->seed = BENCH_SEED;
    static const char *const presets[] = {"dlrm", "dcn"}, *const ops[] = {"fwd", "dx", "dw"};
    for (int i = 1; i < argc; i++) {
        static const char *const flags[] = {"--quick", "--json", "--no-openblas", "--help", "-h", NULL};
        char name[32];
        const char *v;
        if (bench_option(argc, argv, &i, flags, name, sizeof name, &v, o->log, "ember bench dense")) return -1;
        int bad = 0;
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
            dense_bench_usage(o->out);
            return 1;
        } else if (!strcmp(name, "--quick")) {
            o->batch[0] = 64, o->nbatch = 1;
            o->iters = 1, o->warmup = 0, o->sample_ms = 0.0, o->gap_ms = 0.0;
        } else if (!strcmp(name, "--json")) {
            o->json = 1;
        } else if (!strcmp(name, "--no-openblas")) {
            o->openblas = 0;
        } else if (!strcmp(name, "--preset") || !strcmp(name, "--presets")) {
            bad = parse_names(v, presets, 2, &o->presets);
        } else if (!strcmp(name, "--ops")) {
            bad = parse_names(v, ops, 3, &o->ops);
        } else if (!strcmp(name, "--batch")) {
            bad = parse_ints(v, 1, 1 << 20, o->batch, &o->nbatch);
        } else if (!strcmp(name, "--threads")) {
            int64_t t[DENSE_BENCH_MAX_LIST];
            bad = parse_ints(v, 1, 256, t, &o->nthreads);
            for (int k = 0; !bad && k < o->nthreads; k++) o->threads[k] = (int)t[k];
        } else if (!strcmp(name, "--iters") || !strcmp(name, "--warmup") || !strcmp(name, "--seed")) {
            char *end;
            const long long n = strtoll(v, &end, 10);
            bad = *end != '\0' || n < (name[2] == 'i' ? 1 : 0) || (name[2] != 's' && n > 100000);
            if (!bad) {
                if (name[2] == 'i') o->iters = (int)n;
                else if (name[2] == 'w') o->warmup = (int)n;
                else o->seed = (uint64_t)n;
            }
        } else if (!strcmp(name, "--sample_ms") || !strcmp(name, "--gap_ms")) {
            char *end;
            const double x = strtod(v, &end);
            bad = *end != '\0' || !(x >= 0.0 && x <= 10000.0);
            if (!bad) *(name[2] == 's' ? &o->sample_ms : &o->gap_ms) = x;
        } else if (!strcmp(name, "--isa")) {
            ember_isa isa;
            bad = ember_isa_parse(v, &isa) != EMBER_OK;
            if (!bad) o->isa = (int)isa;
        } else {
            fprintf(o->log, "ember bench dense: unknown option %s\n", name);
            dense_bench_usage(o->log);
            return -1;
        }
        if (bad) {
            fprintf(o->log, "ember bench dense: bad value for %s: '%s'\n", name, v ? v : "");
            return -1;
        }
    }
    return 0;
}

int dense_bench_main(int argc, char **argv) {
    dense_bench_opts o;
    const int p = dense_bench_parse(argc, argv, &o);
    if (p != 0) return p > 0 ? 0 : 2;
    return dense_bench_run(&o);
}
