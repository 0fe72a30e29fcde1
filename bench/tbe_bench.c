// `ember bench tbe`: forward and fused backward + optimizer of the local table-batched
// EmbeddingBagCollection against the in-run gather limit (see tbe_bench.h).
#define _POSIX_C_SOURCE 200809L

#include "tbe_bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember.h"
#include "ember/rng.h"
#include "limit/limit.h"
#include "report.h"

// ---- shapes and defaults ------------------------------------------------------------------------

// FBGEMM's benchmark configuration (fbgemm_gpu/bench: --num-tables 32 --num-embeddings 1e5
// --embedding-dim 128 --batch-size 512 --bag-size 20) and the same traffic on fewer, larger tables.
static const tbe_bench_shape SHAPE_SMALL = {32, 100000, 128, 512, 20};
static const tbe_bench_shape SHAPE_LARGE = {8, 1000000, 128, 512, 20};
// --quick: tiny tables, a smoke test of every code path (the CTest "bench" label runs it).
static const tbe_bench_shape SHAPE_QUICK = {4, 1000, 32, 16, 5};

// The same hyper-parameters as the Python peers (bench/peers/common.py).
#define BENCH_LR 0.01f
#define BENCH_EPS 1e-8f
#define BENCH_BETA1 0.9f
#define BENCH_BETA2 0.999f
#define BENCH_SEED 20240611u
#define ZIPF_ALPHA 1.05
#define ZIPF_SCATTER 2654435761u

static const char *const OP_NAMES[] = {"fwd", "train_sgd", "train_rowwise_adagrad", "train_adam",
                                       "step_sgd", "step_rowwise_adagrad", "step_adam"};
enum { NUM_OPS = 7 };

static ember_optim_kind op_optim(int op) {
    switch (op) {
    case 2: case 5: return EMBER_OPT_ROWWISE_ADAGRAD;
    case 3: case 6: return EMBER_OPT_ADAM;
    default: return EMBER_OPT_SGD;
    }
}
static int op_is_train(int op) { return op >= 1; }
static int op_has_fwd(int op) { return op == 0 || op >= 4; }

// ---- random numbers and ids ----------------------------------------------------------------------

// The library's counter-based generator (ember/rng.h): a stream per (seed, table, distribution),
// so every case of a run sees the same ids whatever the selection of cases.
static uint64_t mix64(uint64_t x) { return ember_splitmix64(x); }
static double u01(uint64_t x) { return (double)(mix64(x) >> 11) * 0x1p-53; }

// Zipf ids, the recipe of the Python peers (bench/peers/common.py), so that ember and the peers
// see the same distribution (not the same stream of numbers):
//   rank r in [0, E) has probability (r+1)^-alpha / H, alpha = 1.05, H = sum_{k=1..E} k^-alpha;
//   draw u uniform in [0, 1) and take the smallest r with cdf[r] > u (cdf in double, cdf[E-1] = 1);
//   scatter the rank over the table with the bijection id = r * 2654435761 mod E (the multiplier
//   is odd and ends in 1, coprime with E = 2^a 5^b such as 1e5 and 1e6), so hot rows are spread
//   over the table like hashed feature ids instead of packed at its start.
// With E = 1e5, 10.7% of the ids hit rank 0 and a batch of 10240 ids per table touches about
// 3700 distinct rows (E = 1e6: 9.5%, about 4500): the case where reading each distinct row once
// per batch pays.
double *tbe_bench_zipf_cdf(int64_t E) {
    double *cdf = malloc(sizeof(double) * (size_t)E);
    if (!cdf) return NULL;
    double s = 0;
    for (int64_t r = 0; r < E; r++) cdf[r] = (s += pow((double)(r + 1), -ZIPF_ALPHA));
    for (int64_t r = 0; r < E; r++) cdf[r] /= s;
    cdf[E - 1] = 1.0;
    return cdf;
}

static int64_t zipf_draw(const double *cdf, int64_t E, double u) {
    int64_t lo = 0, hi = E - 1; // smallest r with cdf[r] > u
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return (int64_t)((uint64_t)lo * ZIPF_SCATTER % (uint64_t)E);
}

// values[T*B*L], feature-major (feature t = table t); bag (t, b) is values[(t*B + b)*L ...+L).
void tbe_bench_make_ids(const tbe_bench_shape *s, int zipf, const double *cdf, uint64_t seed, int64_t *values) {
    const int64_t n = (int64_t)s->B * s->L;
    for (int32_t t = 0; t < s->T; t++) {
        uint64_t k = mix64(seed ^ mix64(((uint64_t)t << 8) | (uint64_t)zipf));
        int64_t *v = values + (int64_t)t * n;
        for (int64_t i = 0; i < n; i++) {
            double u = u01(k + (uint64_t)i);
            v[i] = zipf ? zipf_draw(cdf, s->E, u) : (int64_t)(u * (double)s->E);
        }
    }
}

// dL/dy [B, T*D] standard normal (Box-Muller), the same for every case of a shape.
void tbe_bench_make_grad(size_t n, uint64_t seed, float *g) {
    uint64_t k = mix64(seed ^ 1000003u);
    for (size_t i = 0; i < n; i++) {
        double a = 1.0 - u01(k + 2 * i), b = u01(k + 2 * i + 1);
        g[i] = (float)(sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b));
    }
}

// ---- the gather limit ------------------------------------------------------------------------------
// limit/limit.h: the loop, one copy per kernel variant, run in the context's variant.

// ---- one run's state ----------------------------------------------------------------------------------

// A result kept for the derived target ratios.
typedef struct result {
    int shape, op, pool, dist, threads;
    ember_dtype dtype;
    double ms_med, limit_med;
    double fwd_med; // train_*: the forward timed in the same iterations (0 otherwise)
    double one_med; // threads > 1: the same operation on 1 thread, timed in the same iterations
} result;

typedef struct run {
    const tbe_bench_opts *o;
    ember_ctx *ctx;
    gather_limit_fn gather; // the limit loop of the context's kernel variant
    result *res;
    int nres, capres;
    int worst; // 0 ok, 1 residual over tolerance, 2 failure
    // The limit loop's variant per (shape, dtype, dist, threads index).
    limit_cfg limit[TBE_BENCH_MAX_SHAPES][3][2][TBE_BENCH_MAX_THREADS];
} run;

// Shape-level inputs shared by the cases of one shape.
typedef struct shape_in {
    const tbe_bench_shape *s;
    int64_t *values[2];  // uniform, zipf: [T*B*L]
    int64_t *offsets;    // [T*B+1]
    float *grad;         // [B, T*D]
    float *out;          // [B, T*D] ember's output
    float *lim_out;      // [B, T*D] the limit's output
} shape_in;

static void record(run *r, result x) {
    if (r->nres == r->capres) {
        int cap = r->capres ? 2 * r->capres : 64;
        result *p = realloc(r->res, sizeof(result) * (size_t)cap);
        if (!p) return;
        r->res = p;
        r->capres = cap;
    }
    r->res[r->nres++] = x;
}

static void fail(run *r, const char *what) {
    fprintf(r->o->log, "ember bench tbe: %s: %s\n", what, r->ctx ? ember_ctx_errmsg(r->ctx) : "");
    r->worst = 2;
}

// ---- naive references (double accumulation on a sample) ------------------------------------------------

// Reads row `id` of table t as fp32 through the public state dict.
static void read_row(ember_ebc *ebc, int32_t t, const char *tensor, int64_t id, float *dst) {
    (void)ember_ebc_read(ebc, t, tensor, id, id + 1, EMBER_DTYPE_F32, dst);
}

// Error of one value against its reference: absolute below 1, relative above.
static double err(double got, double want) { return fabs(got - want) / fmax(1.0, fabs(want)); }

// max err(out, ref) over the first `nb` bags of every table, ref = sum of the stored rows in
// double, divided by L for MEAN (the id count, as FBGEMM and ember do).
double tbe_bench_fwd_residual(ember_ebc *ebc, const tbe_bench_shape *s, const int64_t *values, int mean,
                           const float *out) {
    const int32_t D = s->D, nb = s->B < 8 ? s->B : 8;
    float *row = malloc(sizeof(float) * (size_t)D);
    double *ref = malloc(sizeof(double) * (size_t)D);
    double worst = 0;
    for (int32_t t = 0; t < s->T && row && ref; t++) {
        for (int32_t b = 0; b < nb; b++) {
            for (int32_t d = 0; d < D; d++) ref[d] = 0;
            const int64_t *ids = values + ((int64_t)t * s->B + b) * s->L;
            for (int32_t l = 0; l < s->L; l++) {
                read_row(ebc, t, "weight", ids[l], row);
                for (int32_t d = 0; d < D; d++) ref[d] += row[d];
            }
            for (int32_t d = 0; d < D; d++) {
                double want = mean ? ref[d] / s->L : ref[d];
                double got = out[(size_t)b * (size_t)s->T * (size_t)D + (size_t)t * (size_t)D + (size_t)d];
                worst = fmax(worst, err(got, want));
            }
        }
    }
    free(row);
    free(ref);
    return worst;
}

// A sample of rows to check one training step on: the distinct ids of table t's first bags.
#define SAMPLE_ROWS 8
typedef struct train_check {
    int32_t T, D, n[64];
    int64_t row[64][SAMPLE_ROWS];
    double *w, *m1, *m2; // [T][SAMPLE_ROWS][D] (m1 row-wise: [..][0])
    int64_t step;        // the step number of the update being checked (1-based)
} train_check;

static size_t tc_idx(const train_check *c, int32_t t, int k) {
    return ((size_t)t * SAMPLE_ROWS + (size_t)k) * (size_t)c->D;
}

// Snapshots the sample rows' weights and state before a backward.
static int train_check_begin(train_check *c, ember_ebc *ebc, const tbe_bench_shape *s, const int64_t *values) {
    memset(c, 0, sizeof *c);
    c->T = s->T;
    c->D = s->D;
    size_t n = (size_t)s->T * SAMPLE_ROWS * (size_t)s->D;
    c->w = calloc(n, sizeof(double));
    c->m1 = calloc(n, sizeof(double));
    c->m2 = calloc(n, sizeof(double));
    float *row = malloc(sizeof(float) * (size_t)s->D);
    if (!c->w || !c->m1 || !c->m2 || !row) {
        free(row);
        return -1;
    }
    const ember_optim_kind k = ember_ebc_table(ebc, 0)->optim.kind;
    c->step = ember_ebc_step(ebc, 0) + 1;
    for (int32_t t = 0; t < s->T; t++) {
        const int64_t *ids = values + (int64_t)t * s->B * s->L;
        for (int64_t j = 0; j < (int64_t)s->B * s->L && c->n[t] < SAMPLE_ROWS; j++) {
            int dup = 0;
            for (int q = 0; q < c->n[t]; q++) dup |= c->row[t][q] == ids[j];
            if (!dup) c->row[t][c->n[t]++] = ids[j];
        }
        for (int q = 0; q < c->n[t]; q++) {
            const size_t o = tc_idx(c, t, q);
            read_row(ebc, t, "weight", c->row[t][q], row);
            for (int32_t d = 0; d < s->D; d++) c->w[o + (size_t)d] = row[d];
            if (k == EMBER_OPT_ROWWISE_ADAGRAD) {
                read_row(ebc, t, "momentum1", c->row[t][q], row);
                c->m1[o] = row[0];
            } else if (k == EMBER_OPT_ADAM) {
                read_row(ebc, t, "momentum1", c->row[t][q], row);
                for (int32_t d = 0; d < s->D; d++) c->m1[o + (size_t)d] = row[d];
                read_row(ebc, t, "momentum2", c->row[t][q], row);
                for (int32_t d = 0; d < s->D; d++) c->m2[o + (size_t)d] = row[d];
            }
        }
    }
    free(row);
    return 0;
}

// After the backward: the exact step in double (coalesced gradient of each sample row = sum over
// every position holding it of c_bag * dL/dy, then ember's documented update) against the stored
// rows. Returns the largest err(stored, ref) over the sample's weights and state.
static double train_check_end(train_check *c, ember_ebc *ebc, const tbe_bench_shape *s, const int64_t *values,
                              const float *grad, int mean) {
    const int32_t D = s->D;
    const ember_optim_kind k = ember_ebc_table(ebc, 0)->optim.kind;
    const double lr = BENCH_LR, eps = BENCH_EPS, b1 = BENCH_BETA1, b2 = BENCH_BETA2;
    const double c1 = 1 - pow(b1, (double)c->step), c2 = 1 - pow(b2, (double)c->step);
    double *g = malloc(sizeof(double) * (size_t)D);
    float *row = malloc(sizeof(float) * (size_t)D);
    double worst = 0;
    for (int32_t t = 0; t < s->T && g && row; t++) {
        const int64_t *ids = values + (int64_t)t * s->B * s->L;
        for (int q = 0; q < c->n[t]; q++) {
            for (int32_t d = 0; d < D; d++) g[d] = 0;
            for (int64_t j = 0; j < (int64_t)s->B * s->L; j++) {
                if (ids[j] != c->row[t][q]) continue;
                const float *go = grad + (size_t)(j / s->L) * (size_t)s->T * (size_t)D + (size_t)t * (size_t)D;
                for (int32_t d = 0; d < D; d++) g[d] += (mean ? 1.0 / s->L : 1.0) * go[d];
            }
            const size_t o = tc_idx(c, t, q);
            double *w = c->w + o, *m1 = c->m1 + o, *m2 = c->m2 + o;
            if (k == EMBER_OPT_SGD) {
                for (int32_t d = 0; d < D; d++) w[d] -= lr * g[d];
            } else if (k == EMBER_OPT_ROWWISE_ADAGRAD) {
                double ss = 0;
                for (int32_t d = 0; d < D; d++) ss += g[d] * g[d];
                m1[0] += ss / D;
                for (int32_t d = 0; d < D; d++) w[d] -= lr * g[d] / (sqrt(m1[0]) + eps);
            } else {
                for (int32_t d = 0; d < D; d++) {
                    m1[d] = b1 * m1[d] + (1 - b1) * g[d];
                    m2[d] = b2 * m2[d] + (1 - b2) * g[d] * g[d];
                    w[d] -= lr * (m1[d] / c1) / (sqrt(m2[d] / c2) + eps);
                }
            }
            read_row(ebc, t, "weight", c->row[t][q], row);
            for (int32_t d = 0; d < D; d++) worst = fmax(worst, err(row[d], w[d]));
            if (k == EMBER_OPT_ROWWISE_ADAGRAD) {
                read_row(ebc, t, "momentum1", c->row[t][q], row);
                worst = fmax(worst, err(row[0], m1[0]));
            } else if (k == EMBER_OPT_ADAM) {
                read_row(ebc, t, "momentum1", c->row[t][q], row);
                for (int32_t d = 0; d < D; d++) worst = fmax(worst, err(row[d], m1[d]));
                read_row(ebc, t, "momentum2", c->row[t][q], row);
                for (int32_t d = 0; d < D; d++) worst = fmax(worst, err(row[d], m2[d]));
            }
        }
    }
    free(g);
    free(row);
    free(c->w);
    free(c->m1);
    free(c->m2);
    return worst;
}

// Tolerance of a residual (see err()): fp32 accumulation against double (a forward sums L
// values; a hot Zipf row's gradient sums hundreds), plus, for an update stored in 16 bits, half a
// unit in the last place (2^-9 relative for bf16, 2^-12 for fp16).
static double tolerance(ember_dtype dt, int train) {
    if (!train) return 1e-5;
    return dt == EMBER_DTYPE_F32 ? 1e-4 : dt == EMBER_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

// ---- one case ------------------------------------------------------------------------------------------

// The fields that name a case: the start of a JSON line (bench/README.md's fields, up to
// "threads", then the host: kernel variant, CPU model, library build; j is left open) or of a
// table row.
static void case_key(const run *r, bench_json *j, const char *op, const tbe_bench_shape *s, int pool, ember_dtype dt,
                     int dist, int threads) {
    const tbe_bench_opts *o = r->o;
    const char *pn = pool ? "mean" : "sum", *dn = dist ? "zipf" : "uniform";
    if (o->json) {
        bench_json_begin(j, o->out, "tbe");
        bench_json_str(j, "op", op);
        bench_json_str(j, "pool", pn);
        bench_json_str(j, "dtype", ember_dtype_name((ember_dtype)dt));
        bench_json_int(j, "T", s->T);
        bench_json_int(j, "E", s->E);
        bench_json_int(j, "D", s->D);
        bench_json_int(j, "B", s->B);
        bench_json_int(j, "L", s->L);
        bench_json_str(j, "dist", dn);
        bench_json_int(j, "threads", threads);
        bench_json_host(j, r->ctx);
    } else {
        fprintf(o->out, "%-26s %-4s %-4s %-7s T=%-2d E=%-7lld %2dt", op, pn, ember_dtype_name((ember_dtype)dt), dn, (int)s->T,
                (long long)s->E, threads);
    }
}

static void emit(run *r, const tbe_bench_shape *s, const result *x, double ms_min, double residual, int iters,
                 limit_cfg lc) {
    const tbe_bench_opts *o = r->o;
    const double bytes = (double)s->B * s->T * s->L * s->D * (double)ember_dtype_size(x->dtype);
    const double gbps = bytes / (x->ms_med * 1e-3) / 1e9, lgbps = bytes / (x->limit_med * 1e-3) / 1e9;
    bench_json j;
    case_key(r, &j, OP_NAMES[x->op], s, x->pool, x->dtype, x->dist, x->threads);
    if (o->json) {
        char loop[64];
        snprintf(loop, sizeof loop, "prefetch %d %s, sums in %s", lc.pd, lc.hint ? "L2" : "L1",
                 lc.regs ? "registers" : "memory");
        bench_json_fixed(&j, "ms_med", x->ms_med, 4);
        bench_json_fixed(&j, "ms_min", ms_min, 4);
        bench_json_fixed(&j, "gbps", gbps, 3);
        bench_json_fixed(&j, "limit_gbps", lgbps, 3);
        bench_json_fixed(&j, "ratio", x->limit_med / x->ms_med, 4);
        bench_json_sig(&j, "residual", residual);
        bench_json_int(&j, "iters", iters);
        bench_json_fixed(&j, "limit_ms", x->limit_med, 4);
        bench_json_str(&j, "limit_loop", loop);
        if (x->fwd_med > 0) bench_json_fixed(&j, "fwd_ms", x->fwd_med, 4);
        if (x->one_med > 0) bench_json_fixed(&j, "ms_1t", x->one_med, 4);
        bench_json_end(&j);
    } else {
        fprintf(o->out, " %9.3f %9.3f %7.2f %7.2f %6.3f %9.2e", x->ms_med, ms_min, gbps, lgbps,
                x->limit_med / x->ms_med, residual);
        if (x->fwd_med > 0) fprintf(o->out, "  fwd %.3f", x->fwd_med);
        if (x->one_med > 0) fprintf(o->out, "  1t %.3f", x->one_med);
        fprintf(o->out, "\n");
    }
    fflush(o->out);
}

// Runs op `op` on a collection built for it: warm-up (the first iteration checks the residual),
// then timed iterations that each run, in rotating order, the limit loop, the operation, for
// train_* ops a forward on the same batch, and for a multi-thread case the operation on 1
// thread: every ratio this line reports (to the limit; train/fwd and n-thread/1-thread in the
// targets) compares phases timed side by side under the same machine load.
static void run_case(run *r, int si, const shape_in *in, ember_ebc *ebc, int op, int pool, ember_dtype dt, int dist,
                     int ti) {
    const tbe_bench_opts *o = r->o;
    const tbe_bench_shape *s = in->s;
    const int threads = o->threads[ti];
    ember_ctx_set_num_threads(r->ctx, threads);
    const int64_t nnz = (int64_t)s->T * s->B * s->L;
    ember_kjt kjt = {.num_features = s->T, .batch_size = s->B, .offsets = in->offsets, .values = in->values[dist],
                     .nnz = nnz};
    // The limit reads the collection's own rows (the same slab and pages as the kernel).
    gather_in g = {s, dt, {0}, 0, in->values[dist], in->lim_out};
    for (int32_t t = 0; t < s->T; t++) {
        const void *base = NULL;
        if (ember_ebc_weights_view(ebc, t, &base, &g.row_bytes) != EMBER_OK) return fail(r, "weights view");
        g.base[t] = base;
    }
    limit_cfg *lc = &r->limit[si][dt][dist][ti];
    if (lc->pd == 0) *lc = o->calibrate ? bench_limit_calibrate(r->gather, &g, threads) : (limit_cfg){16, 1, 1};

    // First iteration: the residual against the naive reference.
    double residual = 0;
    if (op_has_fwd(op)) {
        if (ember_ebc_forward(ebc, &kjt, in->out) != EMBER_OK) return fail(r, "forward");
        residual = tbe_bench_fwd_residual(ebc, s, in->values[dist], pool, in->out);
        if (residual > tolerance(dt, 0)) r->worst = r->worst > 1 ? r->worst : 1;
    }
    if (op_is_train(op)) {
        train_check c;
        if (train_check_begin(&c, ebc, s, in->values[dist]) != 0) {
            r->worst = 2;
            return;
        }
        if (ember_ebc_backward(ebc, &kjt, in->grad, NULL) != EMBER_OK) {
            free(c.w);
            free(c.m1);
            free(c.m2);
            return fail(r, "backward");
        }
        const double rs = train_check_end(&c, ebc, s, in->values[dist], in->grad, pool);
        if (rs > tolerance(dt, 1)) r->worst = r->worst > 1 ? r->worst : 1;
        residual = fmax(residual, rs);
    }

    // Phases timed in every iteration, in rotating order: the limit, the operation, a forward
    // beside a train_* op, and the operation on 1 thread beside a multi-thread case.
    enum { PH_LIMIT, PH_OP, PH_FWD, PH_OP1, NPH };
    int active[NPH], na = 0;
    active[na++] = PH_LIMIT;
    active[na++] = PH_OP;
    if (op >= 1 && op <= 3) active[na++] = PH_FWD;
    if (threads > 1) active[na++] = PH_OP1;
    const int n = o->iters;
    double *ms = calloc((size_t)n * NPH, sizeof(double));
    if (!ms) return fail(r, "out of memory");
    for (int it = 0; it < o->warmup + n; it++) {
        for (int q = 0; q < na; q++) {
            const int ph = active[(it + q) % na];
            ember_status st = EMBER_OK;
            if (ph == PH_OP1) ember_ctx_set_num_threads(r->ctx, 1);
            const double t0 = bench_now_ms();
            if (ph == PH_LIMIT) {
                r->gather(&g, *lc, threads);
            } else if (ph == PH_FWD) {
                st = ember_ebc_forward(ebc, &kjt, in->out);
            } else {
                if (op_has_fwd(op)) st = ember_ebc_forward(ebc, &kjt, in->out);
                if (st == EMBER_OK && op_is_train(op)) st = ember_ebc_backward(ebc, &kjt, in->grad, NULL);
            }
            const double t = bench_now_ms() - t0;
            if (ph == PH_OP1) ember_ctx_set_num_threads(r->ctx, threads);
            if (st != EMBER_OK) {
                free(ms);
                return fail(r, OP_NAMES[op]);
            }
            if (it >= o->warmup) ms[ph * n + it - o->warmup] = t;
        }
    }
    result x = {si, op, pool, dist, threads, dt, bench_median(ms + PH_OP * n, n), bench_median(ms + PH_LIMIT * n, n),
                op >= 1 && op <= 3 ? bench_median(ms + PH_FWD * n, n) : 0, threads > 1 ? bench_median(ms + PH_OP1 * n, n) : 0};
    emit(r, s, &x, bench_min(ms + PH_OP * n, n), residual, n, *lc);
    record(r, x);
    free(ms);
}

// ---- the run -------------------------------------------------------------------------------------------

// Bytes a collection of this shape needs (weights + optimizer state), and what the machine can
// give (MemAvailable; SIZE_MAX when unknown). The E=1e6 Adam collection needs 12 GB: on a
// shared machine it is skipped with a reason rather than left to the OOM killer, which might
// pick someone else's process.
static size_t collection_bytes(const tbe_bench_shape *s, ember_optim_kind opt, ember_dtype dt) {
    const size_t rows = (size_t)s->T * (size_t)s->E;
    const size_t state = opt == EMBER_OPT_ADAM ? 2 * (size_t)s->D : opt == EMBER_OPT_ROWWISE_ADAGRAD ? 1 : 0;
    return rows * ((size_t)s->D * ember_dtype_size(dt) + state * 4);
}

static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[128];
    size_t kb = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %zu kB", &kb) == 1;
    fclose(f);
    return found ? kb * 1024 : SIZE_MAX;
}

static void emit_skipped(run *r, const tbe_bench_shape *s, unsigned ops, int pool, ember_dtype dt, const char *why) {
    const tbe_bench_opts *o = r->o;
    for (int dist = 0; dist < 2; dist++) {
        if (!(o->dists & (1u << dist))) continue;
        for (int op = 0; op < NUM_OPS; op++) {
            if (!(ops & (1u << op))) continue;
            for (int ti = 0; ti < o->nthreads; ti++) {
                bench_json j;
                case_key(r, &j, OP_NAMES[op], s, pool, dt, dist, o->threads[ti]);
                if (o->json) {
                    bench_json_str(&j, "skipped", why);
                    bench_json_end(&j);
                } else {
                    fprintf(o->out, " skipped: %s\n", why);
                }
            }
        }
    }
    fflush(o->out);
}

static ember_ebc *make_collection(run *r, const tbe_bench_shape *s, ember_optim_kind opt, int pool, ember_dtype dt,
                                  int64_t cache_rows) {
    ember_table_config *tables = calloc((size_t)s->T, sizeof *tables);
    ember_feature_config *features = calloc((size_t)s->T, sizeof *features);
    char(*names)[16] = calloc((size_t)s->T * 2, sizeof *names);
    ember_ebc *ebc = NULL;
    if (tables && features && names) {
        for (int32_t t = 0; t < s->T; t++) {
            snprintf(names[2 * t], 16, "t%d", (int)t);
            snprintf(names[2 * t + 1], 16, "f%d", (int)t);
            ember_optim_config oc = EMBER_OPTIM_CONFIG_DEFAULT;
            oc.kind = opt;
            oc.lr = BENCH_LR;
            oc.eps = BENCH_EPS;
            oc.beta1 = BENCH_BETA1;
            oc.beta2 = BENCH_BETA2;
            ember_table_config *tc = &tables[t];
            *tc = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
            tc->name = names[2 * t], tc->rows = s->E, tc->dim = s->D, tc->dtype = dt, tc->optim = oc;
            tc->pooling = pool ? EMBER_POOL_MEAN : EMBER_POOL_SUM;
            tc->init = (ember_init){.kind = EMBER_INIT_UNIFORM, .a = -0.05f, .b = 0.05f};
            tc->cache_rows = cache_rows, tc->cache_policy = (ember_evict_policy)r->o->cache_policy;
            features[t] = (ember_feature_config){.name = names[2 * t + 1], .table = t};
        }
        ember_ebc_config cfg = {.tables = tables, .num_tables = s->T, .features = features, .num_features = s->T,
                                .bounds = EMBER_BOUNDS_ERROR, .seed = r->o->seed, .max_batch_size = s->B,
                                .max_nnz = (int64_t)s->T * s->B * s->L, .ssd_dir = r->o->ssd_dir};
        if (ember_ebc_create(r->ctx, &cfg, &ebc) != EMBER_OK) fail(r, "ember_ebc_create");
    }
    free(tables);
    free(features);
    free(names);
    return ebc;
}

static void free_shape(shape_in *in) {
    free(in->values[0]);
    free(in->values[1]);
    free(in->offsets);
    free(in->grad);
    free(in->out);
    free(in->lim_out);
}

static int make_shape(run *r, const tbe_bench_shape *s, shape_in *in) {
    memset(in, 0, sizeof *in);
    in->s = s;
    const size_t nnz = (size_t)s->T * (size_t)s->B * (size_t)s->L, nout = (size_t)s->B * (size_t)s->T * (size_t)s->D;
    in->offsets = malloc(sizeof(int64_t) * ((size_t)s->T * (size_t)s->B + 1));
    in->grad = malloc(sizeof(float) * nout);
    in->out = malloc(sizeof(float) * nout);
    in->lim_out = malloc(sizeof(float) * nout);
    if (!in->offsets || !in->grad || !in->out || !in->lim_out) return -1;
    for (int64_t i = 0; i <= (int64_t)s->T * s->B; i++) in->offsets[i] = i * s->L;
    tbe_bench_make_grad(nout, r->o->seed, in->grad);
    for (int dist = 0; dist < 2; dist++) {
        if (!(r->o->dists & (1u << dist))) continue;
        in->values[dist] = malloc(sizeof(int64_t) * nnz);
        double *cdf = dist ? tbe_bench_zipf_cdf(s->E) : NULL;
        if (!in->values[dist] || (dist && !cdf)) {
            free(cdf);
            return -1;
        }
        tbe_bench_make_ids(s, dist, cdf, r->o->seed, in->values[dist]);
        free(cdf);
    }
    return 0;
}

static void header(const tbe_bench_opts *o, const ember_ctx *ctx) {
    if (o->json) return;
    fprintf(o->out, "# %s\n# kernels %s on %s (%s)\n", ember_build_info(), ember_isa_name(ember_ctx_isa(ctx)),
            ember_cpu_name(), ember_cpu_features());
    fprintf(o->out, "# ratio = limit_ms / ms (same bytes): the gather limit is the fastest plain-C loop reading "
                    "the same "
                    "rows in the same order, timed alternately in the same iterations\n");
    fprintf(o->out, "%-26s %-4s %-4s %-7s %-14s %3s %9s %9s %7s %7s %6s %9s\n", "op", "pool", "type", "dist", "shape",
            "thr", "ms_med", "ms_min", "GB/s", "limGB/s", "ratio", "residual");
}

// ---- derived targets (docs/performance.md) ---------------------------------------------------------------

static const result *find(const run *r, int shape, int op, int pool, ember_dtype dt, int dist, int threads) {
    for (int i = 0; i < r->nres; i++) {
        const result *x = &r->res[i];
        if (x->shape == shape && x->op == op && x->pool == pool && x->dtype == dt && x->dist == dist &&
            x->threads == threads)
            return x;
    }
    return NULL;
}

// One derived target. `limit` (when > 0) is the same ratio for the gather-limit loops of the
// cases involved: what the machine itself gives (e.g. for halving the bytes of a row).
static void target_line(const run *r, const result *x, const char *name, double value, const char *cmp,
                        double goal, double limit) {
    const tbe_bench_opts *o = r->o;
    const int met = strcmp(cmp, ">=") == 0 ? value >= goal : value <= goal;
    if (o->json) {
        char want[32];
        snprintf(want, sizeof want, "%s %.2f", cmp, goal);
        bench_json j;
        bench_json_begin(&j, o->out, "tbe_target");
        bench_json_host(&j, r->ctx);
        bench_json_str(&j, "target", name);
        bench_json_str(&j, "pool", x->pool ? "mean" : "sum");
        bench_json_str(&j, "dtype", ember_dtype_name((ember_dtype)x->dtype));
        bench_json_int(&j, "T", o->shapes[x->shape].T);
        bench_json_int(&j, "E", o->shapes[x->shape].E);
        bench_json_str(&j, "dist", x->dist ? "zipf" : "uniform");
        bench_json_int(&j, "threads", x->threads);
        bench_json_fixed(&j, "value", value, 3);
        bench_json_str(&j, "goal", want);
        bench_json_bool(&j, "met", met);
        if (limit > 0) bench_json_fixed(&j, "limit_value", limit, 3);
        bench_json_end(&j);
    } else {
        bench_json unused;
        case_key(r, &unused, name, &o->shapes[x->shape], x->pool, x->dtype, x->dist, x->threads);
        fprintf(o->out, " %7.3f  %s %.2f  %s", value, cmp, goal, met ? "met" : "NOT MET");
        if (limit > 0) fprintf(o->out, "  (limit loops: %.3f)", limit);
        fprintf(o->out, "\n");
    }
}

static void targets(const run *r) {
    const tbe_bench_opts *o = r->o;
    if (!o->json)
        fprintf(o->out, "\n%-26s %-4s %-4s %-7s %-14s %3s %7s  goal\n", "# target", "pool", "type", "dist", "shape",
                "thr", "value");
    for (int i = 0; i < r->nres; i++) {
        const result *x = &r->res[i];
        if (x->op == 0) target_line(r, x, "fwd/limit", x->limit_med / x->ms_med, ">=", 0.9, 0);
        if ((x->op == 1 || x->op == 2) && x->fwd_med > 0)
            target_line(r, x, x->op == 1 ? "train_sgd/fwd" : "train_rowwise_adagrad/fwd", x->ms_med / x->fwd_med,
                        "<=", x->op == 1 ? 2.5 : 3.0, 0);
        if (x->threads == 2 && x->op <= 3 && x->one_med > 0) {
            char nm[48];
            snprintf(nm, sizeof nm, "%s 2t/1t", OP_NAMES[x->op]);
            target_line(r, x, nm, x->one_med / x->ms_med, ">=", 1.8, 0);
        }
        if (x->op == 0 && x->dtype == EMBER_DTYPE_BF16) {
            const result *f = find(r, x->shape, 0, x->pool, EMBER_DTYPE_F32, x->dist, x->threads);
            if (f)
                target_line(r, x, "fwd bf16/fp32 rows/s", f->ms_med / x->ms_med, ">=", 1.7,
                            f->limit_med / x->limit_med);
        }
    }
}

// ---- tiered tables (docs/tiered.md) ---------------------------------------------------------------------
// Per shape, dtype, pooling and id distribution: one training step (forward + fused backward +
// row-wise Adagrad) of the same tables in RAM and on disk with a DRAM cache of cache_rows rows,
// alternating, on a new batch each step, timed once every cache is full, evicting and has loaded
// its table's worth of rows (the steady state: each step brings rows the cache does not hold and
// writes others back). A third copy of the tiered tables prefetches the next batch
// (ember_ebc_prefetch) after each forward. The residual is the largest difference between the two outputs (0 expected:
// tiered tables are bitwise the same). Reports the cache's hit rate, the file's bytes read and
// written per step and the two step times.
static void run_tiered(run *r, const tbe_bench_shape *s, int pool, ember_dtype dt, int dist) {
    const tbe_bench_opts *o = r->o;
    ember_ctx_set_num_threads(r->ctx, o->threads[0]);
    ember_ebc *ram = make_collection(r, s, EMBER_OPT_ROWWISE_ADAGRAD, pool, dt, 0);
    ember_ebc *tier = make_collection(r, s, EMBER_OPT_ROWWISE_ADAGRAD, pool, dt, o->cache_rows);
    ember_ebc *tpf = make_collection(r, s, EMBER_OPT_ROWWISE_ADAGRAD, pool, dt, o->cache_rows); // with prefetch
    const size_t nnz = (size_t)s->T * (size_t)s->B * (size_t)s->L, nout = (size_t)s->B * (size_t)s->T * (size_t)s->D;
    int64_t *ids = malloc(sizeof(int64_t) * nnz), *ids_next = malloc(sizeof(int64_t) * nnz), *offsets = malloc(sizeof(int64_t) * ((size_t)s->T * (size_t)s->B + 1));
    float *out1 = malloc(sizeof(float) * nout), *out2 = malloc(sizeof(float) * nout),
          *out3 = malloc(sizeof(float) * nout), *grad = malloc(sizeof(float) * nout);
    double *cdf = dist ? tbe_bench_zipf_cdf(s->E) : NULL;
    const int n = o->iters;
    double *ms = calloc(3 * (size_t)n, sizeof(double));
    if (!ram || !tier || !tpf || !ids || !ids_next || !offsets || !out1 || !out2 || !out3 || !grad || (dist && !cdf) || !ms) {
        fail(r, "tiered: setup");
    } else {
        for (int64_t i = 0; i <= (int64_t)s->T * s->B; i++) offsets[i] = i * s->L;
        tbe_bench_make_grad(nout, o->seed, grad);
        ember_kjt kjt = {.num_features = s->T, .batch_size = s->B, .offsets = offsets, .values = ids,
                         .nnz = (int64_t)nnz};
        ember_kjt kjt_next = {.num_features = s->T, .batch_size = s->B, .offsets = offsets, .values = ids_next,
                              .nnz = (int64_t)nnz};
        ember_tier_stats st0 = {0}, st1 = {0};
        double residual = 0;
        // Warm-up: until every cache is evicting and has loaded as many rows as its table holds
        // (most rows then come from the file, not from the initialiser; at most 2000 steps), then
        // --warmup more.
        int warm = 0;
        for (int full = 0; !full && warm < 2000; warm++) {
            full = 1;
            for (int32_t t = 0; t < s->T; t++) {
                ember_tier_stats x;
                ember_ebc_tier_stats(tier, t, &x);
                full &= x.evictions > 0 && x.misses >= s->E;
            }
            if (full) break;
            tbe_bench_make_ids(s, dist, cdf, o->seed + 7919 * (uint64_t)(warm + 1), ids);
            if (ember_ebc_forward(ram, &kjt, out1) != EMBER_OK || ember_ebc_backward(ram, &kjt, grad, NULL) != EMBER_OK ||
                ember_ebc_forward(tier, &kjt, out2) != EMBER_OK || ember_ebc_backward(tier, &kjt, grad, NULL) != EMBER_OK ||
                ember_ebc_forward(tpf, &kjt, out2) != EMBER_OK || ember_ebc_backward(tpf, &kjt, grad, NULL) != EMBER_OK) {
                fail(r, "tiered warm-up");
                break;
            }
        }
        for (int it = warm; it < warm + o->warmup + n && r->worst < 2; it++) {
            if (it == warm + o->warmup)
                for (int32_t t = 0; t < s->T; t++) { // counters from the first timed step
                    ember_tier_stats x;
                    ember_ebc_tier_stats(tier, t, &x);
                    st0.hits += x.hits, st0.misses += x.misses, st0.bytes_read += x.bytes_read,
                        st0.bytes_written += x.bytes_written;
                }
            tbe_bench_make_ids(s, dist, cdf, o->seed + 7919 * (uint64_t)(it + 1), ids);
            tbe_bench_make_ids(s, dist, cdf, o->seed + 7919 * (uint64_t)(it + 2), ids_next);
            for (int q = 0; q < 3; q++) { // rotating which goes first
                const int which = (it + q) % 3;
                ember_ebc *e = which == 0 ? ram : which == 1 ? tier : tpf;
                const double t0 = bench_now_ms();
                ember_status st = ember_ebc_forward(e, &kjt, which == 0 ? out1 : which == 1 ? out2 : out3);
                // The next batch's rows come in while this step's backward runs.
                if (st == EMBER_OK && which == 2) st = ember_ebc_prefetch(e, &kjt_next);
                if (st == EMBER_OK) st = ember_ebc_backward(e, &kjt, grad, NULL);
                const double t = bench_now_ms() - t0;
                if (st != EMBER_OK) {
                    fail(r, which ? "tiered step" : "in-RAM step");
                    break;
                }
                if (it >= warm + o->warmup) ms[which * n + it - warm - o->warmup] = t;
            }
            for (size_t i = 0; i < nout; i++)
                residual = fmax(residual, fmax(fabs((double)out1[i] - (double)out2[i]), fabs((double)out1[i] - (double)out3[i])));
        }
        for (int32_t t = 0; t < s->T; t++) {
            ember_tier_stats x;
            ember_ebc_tier_stats(tier, t, &x);
            st1.hits += x.hits, st1.misses += x.misses, st1.bytes_read += x.bytes_read,
                st1.bytes_written += x.bytes_written;
        }
        if (residual > 0) r->worst = r->worst > 1 ? r->worst : 1;
        if (r->worst < 2) {
            const double hits = (double)(st1.hits - st0.hits), misses = (double)(st1.misses - st0.misses);
            const double ram_ms = bench_median(ms, n), tier_ms = bench_median(ms + n, n),
                         pf_ms = bench_median(ms + 2 * n, n);
            bench_json j;
            case_key(r, &j, "step_tiered_rowwise_adagrad", s, pool, dt, dist, o->threads[0]);
            if (o->json) {
                bench_json_int(&j, "cache_rows", o->cache_rows);
                bench_json_str(&j, "cache_policy", ember_evict_policy_name((ember_evict_policy)o->cache_policy));
                bench_json_fixed(&j, "hit_rate", hits + misses > 0 ? hits / (hits + misses) : 0, 4);
                bench_json_fixed(&j, "read_mb_per_step", (double)(st1.bytes_read - st0.bytes_read) / n / 1e6, 3);
                bench_json_fixed(&j, "written_mb_per_step", (double)(st1.bytes_written - st0.bytes_written) / n / 1e6, 3);
                bench_json_fixed(&j, "ms_med", tier_ms, 4);
                bench_json_fixed(&j, "ms_med_prefetch", pf_ms, 4);
                bench_json_fixed(&j, "ram_ms_med", ram_ms, 4);
                bench_json_fixed(&j, "ratio", tier_ms / ram_ms, 4);
                bench_json_fixed(&j, "ratio_prefetch", pf_ms / ram_ms, 4);
                bench_json_sig(&j, "residual", residual);
                bench_json_int(&j, "iters", n);
                bench_json_end(&j);
            } else {
                fprintf(o->out,
                        " hit %.3f read %.2f MB/step written %.2f MB/step  tiered %.3f ms (prefetch %.3f)  RAM %.3f ms"
                        "  x%.2f (x%.2f)  res %.1e\n",
                        hits + misses > 0 ? hits / (hits + misses) : 0, (double)(st1.bytes_read - st0.bytes_read) / n / 1e6,
                        (double)(st1.bytes_written - st0.bytes_written) / n / 1e6, tier_ms, pf_ms, ram_ms, tier_ms / ram_ms,
                        pf_ms / ram_ms, residual);
            }
        }
    }
    free(ms), free(cdf), free(ids), free(ids_next), free(offsets), free(out1), free(out2), free(out3), free(grad);
    ember_ebc_destroy(ram);
    ember_ebc_destroy(tier);
    ember_ebc_destroy(tpf);
}

int tbe_bench_run(const tbe_bench_opts *o) {
    if (o->backend == EMBER_BACKEND_CUDA) {
#ifdef EMBER_WITH_CUDA
        return tbe_bench_cuda_run(o);
#else
        fprintf(o->log, "ember bench tbe: --backend cuda: the cuda backend is not in this build\n");
        return 2;
#endif
    }
    run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    ember_ctx_config cc = EMBER_CTX_CONFIG_DEFAULT;
    cc.isa = (ember_isa)o->isa;
    if (ember_ctx_create(&cc, &r.ctx) != EMBER_OK) {
        fprintf(o->log, "ember bench tbe: cannot create a context (kernel variant %s)\n",
                ember_isa_name((ember_isa)o->isa));
        return 2;
    }
    r.gather = bench_gather_limit(ember_ctx_isa(r.ctx));
    header(o, r.ctx);
    // Collections are built per (shape, dtype, pooling, optimizer) and reused by every case
    // that fits them: the forward and SGD cases share one, as do train_X and step_X.
    static const int groups[3] = {TBE_OP_FWD | TBE_OP_TRAIN_SGD | TBE_OP_STEP_SGD,
                                  TBE_OP_TRAIN_ROWWISE_ADAGRAD | TBE_OP_STEP_ROWWISE_ADAGRAD,
                                  TBE_OP_TRAIN_ADAM | TBE_OP_STEP_ADAM};
    for (int si = 0; si < o->nshapes && r.worst < 2 && o->cache_rows > 0; si++)
        for (int dt = 0; dt < 3 && r.worst < 2; dt++)
            for (int pool = 0; pool < 2 && r.worst < 2; pool++)
                for (int dist = 0; dist < 2 && r.worst < 2; dist++)
                    if ((o->dtypes & (1u << dt)) && (o->pools & (1u << pool)) && (o->dists & (1u << dist)))
                        run_tiered(&r, &o->shapes[si], pool, (ember_dtype)dt, dist);
    for (int si = 0; si < o->nshapes && r.worst < 2 && o->cache_rows == 0; si++) {
        shape_in in;
        if (make_shape(&r, &o->shapes[si], &in) != 0) {
            fprintf(o->log, "ember bench tbe: out of memory for the inputs\n");
            free_shape(&in);
            r.worst = 2;
            break;
        }
        for (int dt = 0; dt < 3 && r.worst < 2; dt++) {
            if (!(o->dtypes & (1u << dt))) continue;
            for (int gi = 0; gi < 3 && r.worst < 2; gi++) {
                const unsigned ops = (unsigned)groups[gi] & o->ops;
                if (!ops) continue;
                for (int pool = 0; pool < 2 && r.worst < 2; pool++) {
                    if (!(o->pools & (1u << pool))) continue;
                    const ember_optim_kind opt = op_optim(gi == 0 ? 1 : gi == 1 ? 2 : 3);
                    const size_t need = collection_bytes(&o->shapes[si], opt, (ember_dtype)dt), avail = mem_available();
                    // Room for the collection plus 2 GiB (inputs, workspace, the rest of the machine).
                    if (avail != SIZE_MAX && need + ((size_t)2 << 30) > avail) {
                        char why[128];
                        snprintf(why, sizeof why, "needs %.1f GiB, MemAvailable %.1f GiB", (double)need / (1 << 30),
                                 (double)avail / (1 << 30));
                        emit_skipped(&r, &o->shapes[si], ops, pool, (ember_dtype)dt, why);
                        continue;
                    }
                    ember_ebc *ebc = make_collection(&r, &o->shapes[si], opt, pool, (ember_dtype)dt, 0);
                    if (!ebc) {
                        r.worst = 2;
                        break;
                    }
                    for (int dist = 0; dist < 2; dist++) {
                        if (!(o->dists & (1u << dist))) continue;
                        for (int op = 0; op < NUM_OPS; op++) {
                            if (!(ops & (1u << op))) continue;
                            for (int ti = 0; ti < o->nthreads && r.worst < 2; ti++)
                                run_case(&r, si, &in, ebc, op, pool, (ember_dtype)dt, dist, ti);
                        }
                    }
                    ember_ebc_destroy(ebc);
                }
            }
        }
        free_shape(&in);
    }
    if (o->targets && r.worst < 2 && o->cache_rows == 0) targets(&r);
    free(r.res);
    ember_ctx_destroy(r.ctx);
    if (r.worst == 1) fprintf(o->log, "ember bench tbe: a residual is above its tolerance\n");
    return r.worst;
}

// ---- arguments -------------------------------------------------------------------------------------------

void tbe_bench_usage(FILE *f) {
    fprintf(f,
            "usage: ember bench tbe [options]\n"
            "  --config small|large|full  small: T=32 E=1e5; large: T=8 E=1e6; full: both (default)\n"
            "                             (D=128 B=512 L=20: FBGEMM's benchmark configuration)\n"
            "  --quick                    tiny shape (T=4 E=1000 D=32 B=16 L=5), 2 iterations: a smoke test\n"
            "  --shape T,E,D,B,L          a custom shape instead of --config\n"
            "  --ops LIST                 fwd,train_sgd,train_rowwise_adagrad,train_adam,step_sgd,\n"
            "                             step_rowwise_adagrad,step_adam, or all (default)\n"
            "  --pool LIST                sum,mean (default both)\n"
            "  --dtype LIST               fp32,bf16,fp16 (default all three)\n"
            "  --dist LIST                uniform,zipf (default both; zipf alpha 1.05)\n"
            "  --threads LIST             thread counts (default 1,2)\n"
            "  --iters N                  timed iterations per case (default 15)\n"
            "  --warmup N                 untimed iterations first (default 3)\n"
            "  --seed N                   ids, gradients and weights (default 20240611)\n"
            "  --isa auto|generic|avx2|avx512  kernel variant (default auto: $EMBER_ISA or the CPU's best)\n"
            "  --backend cpu|cuda         cuda: the GPU cases instead (fwd, train_sgd, train_rowwise_adagrad,\n"
            "                             train_adam; against a plain gather kernel and the HBM read rate\n"
            "                             timed in the same run; docs/cuda.md)\n"
            "  --json                     one JSON object per line\n"
            "  --cache_rows N             tiered mode (docs/tiered.md): each table on disk with a cache of N rows;\n"
            "                             times a step (forward + backward, row-wise Adagrad) against the same\n"
            "                             tables in RAM, alternating, and reports the hit rate and bytes moved\n"
            "  --cache_policy lru|lfu     the cache's eviction policy (default lru)\n"
            "  --ssd_dir DIR              where tiered tables' files go (default $TMPDIR or /tmp)\n"
            "  --no-targets               do not print the derived target ratios\n"
            "Exit status: 0 ok, 1 a residual above tolerance, 2 failure.\n");
}

// Parses a comma list of names into a bit mask; -1 on an unknown name.
static int parse_list(const char *s, const char *const *names, int n, unsigned *mask) {
    *mask = 0;
    while (*s) {
        size_t len = strcspn(s, ",");
        int found = -1;
        for (int i = 0; i < n; i++)
            if (names[i] && strlen(names[i]) == len && strncmp(s, names[i], len) == 0) found = i;
        if (len == 3 && strncmp(s, "all", 3) == 0) {
            *mask = (1u << n) - 1;
            found = 0;
        } else if (found >= 0) {
            *mask |= 1u << found;
        }
        if (found < 0) return -1;
        s += len + (s[len] == ',');
    }
    return *mask ? 0 : -1;
}

int tbe_bench_parse(int argc, char **argv, tbe_bench_opts *o) {
    FILE *log = stderr, *out = stdout;
    memset(o, 0, sizeof *o);
    o->log = log;
    o->out = out;
    o->shapes[0] = SHAPE_SMALL;
    o->shapes[1] = SHAPE_LARGE;
    o->nshapes = 2;
    o->ops = TBE_OP_ALL;
    o->pools = TBE_POOL_SUM | TBE_POOL_MEAN;
    o->dtypes = (1u << EMBER_DTYPE_F32) | (1u << EMBER_DTYPE_F16) | (1u << EMBER_DTYPE_BF16);
    o->dists = TBE_DIST_UNIFORM | TBE_DIST_ZIPF;
    o->threads[0] = 1;
    o->threads[1] = 2;
    o->nthreads = 2;
    o->iters = 15;
    o->warmup = 3;
    o->seed = BENCH_SEED;
    o->targets = 1;
    o->calibrate = 1;
    static const char *const pools[] = {"sum", "mean"}, *const dists[] = {"uniform", "zipf"};
    for (int i = 1; i < argc; i++) {
        static const char *const flags[] = {"--quick", "--json", "--no-targets", "--help", "-h", NULL};
        char name[32];
        const char *v;
        if (bench_option(argc, argv, &i, flags, name, sizeof name, &v, log, "ember bench tbe")) return -1;
        int bad = 0;
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
            tbe_bench_usage(out);
            return 1;
        } else if (!strcmp(name, "--quick")) {
            o->shapes[0] = SHAPE_QUICK;
            o->nshapes = 1;
            o->iters = 2;
            o->warmup = 1;
            o->targets = 0;   // meaningless at this size
            o->calibrate = 0; // a smoke test: 48 more parallel regions per case buy nothing
        } else if (!strcmp(name, "--json")) {
            o->json = 1;
        } else if (!strcmp(name, "--no-targets")) {
            o->targets = 0;
        } else if (!strcmp(name, "--config")) {
            if (!strcmp(v, "small")) { o->shapes[0] = SHAPE_SMALL; o->nshapes = 1; }
            else if (!strcmp(v, "large")) { o->shapes[0] = SHAPE_LARGE; o->nshapes = 1; }
            else if (!strcmp(v, "full")) { o->shapes[0] = SHAPE_SMALL; o->shapes[1] = SHAPE_LARGE; o->nshapes = 2; }
            else bad = 1;
        } else if (!strcmp(name, "--shape")) {
            long long E;
            int T, D, B, L;
            bad = sscanf(v, "%d,%lld,%d,%d,%d", &T, &E, &D, &B, &L) != 5 || T < 1 || T > 64 || E < 1 || D < 1 ||
                  B < 1 || L < 1;
            if (!bad) {
                o->shapes[0] = (tbe_bench_shape){T, E, D, B, L};
                o->nshapes = 1;
            }
        } else if (!strcmp(name, "--ops")) {
            bad = parse_list(v, OP_NAMES, NUM_OPS, &o->ops);
        } else if (!strcmp(name, "--pool") || !strcmp(name, "--pools")) {
            bad = parse_list(v, pools, 2, &o->pools);
        } else if (!strcmp(name, "--dtype") || !strcmp(name, "--dtypes")) {
            const char *dtypes[3];
            for (int d = 0; d < 3; d++) dtypes[d] = ember_dtype_name((ember_dtype)d);
            bad = parse_list(v, dtypes, 3, &o->dtypes);
        } else if (!strcmp(name, "--dist") || !strcmp(name, "--dists")) {
            bad = parse_list(v, dists, 2, &o->dists);
        } else if (!strcmp(name, "--threads")) {
            o->nthreads = 0;
            for (const char *p = v; *p && !bad;) {
                char *end;
                long t = strtol(p, &end, 10);
                bad = end == p || t < 1 || t > 256 || o->nthreads == TBE_BENCH_MAX_THREADS || (*end && *end != ',');
                if (!bad) o->threads[o->nthreads++] = (int)t;
                p = *end ? end + 1 : end;
            }
            bad |= o->nthreads == 0;
        } else if (!strcmp(name, "--cache_rows")) {
            char *end;
            long long n = strtoll(v, &end, 10);
            bad = *end != '\0' || n < 1;
            if (!bad) o->cache_rows = n;
        } else if (!strcmp(name, "--cache_policy")) {
            ember_evict_policy p;
            bad = ember_evict_policy_parse(v, &p) != EMBER_OK || p == EMBER_EVICT_TTL;
            if (!bad) o->cache_policy = (int)p;
        } else if (!strcmp(name, "--ssd_dir")) {
            o->ssd_dir = v;
        } else if (!strcmp(name, "--backend")) {
            ember_backend be;
            bad = ember_backend_parse(v, &be) != EMBER_OK;
            if (!bad) o->backend = (int)be;
        } else if (!strcmp(name, "--isa")) {
            ember_isa isa;
            bad = ember_isa_parse(v, &isa) != EMBER_OK;
            if (!bad) o->isa = (int)isa;
        } else if (!strcmp(name, "--iters") || !strcmp(name, "--warmup") || !strcmp(name, "--seed")) {
            char *end;
            long long n = strtoll(v, &end, 10);
            bad = *end != '\0' || n < (name[2] == 'i' ? 1 : 0) || (name[2] != 's' && n > 100000);
            if (!bad) {
                if (name[2] == 'i') o->iters = (int)n;
                else if (name[2] == 'w') o->warmup = (int)n;
                else o->seed = (uint64_t)n;
            }
        } else {
            fprintf(log, "ember bench tbe: unknown option %s\n", name);
            tbe_bench_usage(log);
            return -1;
        }
        if (bad) {
            fprintf(log, "ember bench tbe: bad value for %s: '%s'\n", name, v ? v : "");
            return -1;
        }
    }
    return 0;
}

int tbe_bench_main(int argc, char **argv) {
    tbe_bench_opts o;
    int p = tbe_bench_parse(argc, argv, &o);
    if (p != 0) return p > 0 ? 0 : 2;
    return tbe_bench_run(&o);
}
