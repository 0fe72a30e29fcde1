// `ember bench quant`: the pooled forward of quantized inference tables (include/ember/quant.h)
// against the gather limit for their row bytes and against ember's fp32 training forward
// (ember_ebc_forward) on the same ids, timed side by side.
//
// For each storage type a collection of T tables x E rows x D columns (one feature per table) is
// filled with random rows quantized to it, and every timed iteration runs, in rotating order:
//   limit  the gather limit loop (bench/limit/, calibrated per case) reading the same rows of the
//          same slab in the same order, as floats: floor(row bytes / 4) per row
//   quant  ember_qebc_forward
//   fp32   ember_ebc_forward of an fp32 collection of the same shape (the training tables)
// One JSON line per case: ms (medians), gbps over the row bytes read (B*T*L*row bytes),
// "ratio" = limit / quant (>= 0.8 is the bar), "rows_per_s", "vs_fp32" = fp32 / quant,
// and "residual": the largest error of the first 8 bags of each table against a double sum of the
// dequantized rows, relative to max(1, |sum|) (checked: exit 1 above 1e-5).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limit/limit.h"
#include "quant_bench.h"
#include "report.h"
#include "tbe_bench.h"

typedef struct qopts {
    tbe_bench_shape s;
    unsigned qtypes; // bit (1 << ember_qtype)
    int zipf, threads[4], nthreads, iters, warmup, json;
    uint64_t seed;
} qopts;

static void usage(FILE *f) {
    fprintf(f, "usage: ember bench quant [options]\n"
               "Pooled forward of quantized tables vs the gather limit for their row bytes and vs the fp32\n"
               "training forward on the same ids (docs/performance.md, \"Quantized tables\").\n"
               "  --shape T,E,D,B,L  tables, rows, dim, bags per table, ids per bag (default 32,100000,128,512,20)\n"
               "  --qtypes LIST      fp32,fp16,int8,int4,int2 (default fp16,int8,int4,int2)\n"
               "  --dist uniform|zipf  ids (default uniform)\n"
               "  --threads LIST     (default 1)\n"
               "  --iters N          timed iterations (default 15); --warmup N (default 3)\n"
               "  --seed N           rows and ids (default 1)\n"
               "  --quick            shape 4,1000,32,16,5, 2 iterations, no warm-up: a smoke test\n"
               "  --json             one JSON object per line\n"
               "Exit status: 0 ok, 1 a residual above 1e-5, 2 failure.\n");
}

static int parse(int argc, char **argv, qopts *o) {
    *o = (qopts){.s = {32, 100000, 128, 512, 20}, .qtypes = 0x1e, .threads = {1}, .nthreads = 1, .iters = 15,
                 .warmup = 3, .seed = 1};
    static const char *const flags[] = {"--quick", "--json", "--help", "-h", NULL};
    for (int i = 1; i < argc; i++) {
        char name[32];
        const char *v;
        if (bench_option(argc, argv, &i, flags, name, sizeof name, &v, stderr, "ember bench quant") != 0) return -1;
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) return 1;
        if (!strcmp(name, "--quick")) {
            o->s = (tbe_bench_shape){4, 1000, 32, 16, 5};
            o->iters = 2, o->warmup = 0;
        } else if (!strcmp(name, "--json")) {
            o->json = 1;
        } else if (!strcmp(name, "--shape")) {
            long long t, e, d, b, l;
            if (sscanf(v, "%lld,%lld,%lld,%lld,%lld", &t, &e, &d, &b, &l) != 5 || t < 1 || t > 64 || e < 1 || d < 1 ||
                d > 4096 || b < 1 || l < 0) {
                fprintf(stderr, "ember bench quant: --shape '%s': expected T,E,D,B,L (T <= 64, D <= 4096)\n", v);
                return -1;
            }
            o->s = (tbe_bench_shape){(int32_t)t, e, (int32_t)d, (int32_t)b, (int32_t)l};
        } else if (!strcmp(name, "--qtypes")) {
            o->qtypes = 0;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                ember_qtype t;
                if (ember_qtype_parse(tok, &t) != EMBER_OK) {
                    fprintf(stderr, "ember bench quant: --qtypes: unknown type '%s' (fp32, fp16, int8, int4, int2)\n", tok);
                    return -1;
                }
                o->qtypes |= 1u << t;
            }
        } else if (!strcmp(name, "--dist")) {
            if (strcmp(v, "uniform") && strcmp(v, "zipf")) {
                fprintf(stderr, "ember bench quant: --dist '%s': uniform or zipf\n", v);
                return -1;
            }
            o->zipf = !strcmp(v, "zipf");
        } else if (!strcmp(name, "--threads")) {
            o->nthreads = sscanf(v, "%d,%d,%d,%d", &o->threads[0], &o->threads[1], &o->threads[2], &o->threads[3]);
            for (int k = 0; k < o->nthreads; k++)
                if (o->threads[k] < 1) o->nthreads = 0;
            if (o->nthreads < 1) {
                fprintf(stderr, "ember bench quant: --threads '%s': up to 4 counts >= 1\n", v);
                return -1;
            }
        } else if (!strcmp(name, "--iters") || !strcmp(name, "--warmup")) {
            const int n = atoi(v);
            if (n < (name[2] == 'i' ? 1 : 0)) {
                fprintf(stderr, "ember bench quant: %s '%s' is too small\n", name, v);
                return -1;
            }
            *(name[2] == 'i' ? &o->iters : &o->warmup) = n;
        } else if (!strcmp(name, "--seed")) {
            o->seed = strtoull(v, NULL, 10);
        } else {
            fprintf(stderr, "ember bench quant: unknown option '%s'\n", name);
            return -1;
        }
    }
    return 0;
}

// A collection of o->s's shape in type t, rows random normal-ish and quantized, table by table.
static ember_qebc *make_quant(ember_ctx *ctx, const qopts *o, ember_qtype t, ember_qtable_config *tc,
                              ember_feature_config *fc, char (*names)[16]) {
    const tbe_bench_shape *s = &o->s;
    for (int32_t k = 0; k < s->T; k++) {
        snprintf(names[k], 16, "t%d", (int)k);
        tc[k] = (ember_qtable_config)EMBER_QTABLE_CONFIG_DEFAULT;
        tc[k].name = names[k], tc[k].rows = s->E, tc[k].dim = s->D, tc[k].qtype = t;
        fc[k] = (ember_feature_config){.name = names[k], .table = k};
    }
    ember_qebc_config cfg = EMBER_QEBC_CONFIG_DEFAULT;
    cfg.tables = tc, cfg.num_tables = s->T, cfg.features = fc, cfg.num_features = s->T;
    ember_qebc *q = NULL;
    if (ember_qebc_create(ctx, &cfg, &q) != EMBER_OK) return NULL;
    enum { CHUNK = 4096 };
    float *x = malloc(sizeof(float) * CHUNK * (size_t)s->D);
    if (!x) {
        ember_qebc_destroy(q);
        return NULL;
    }
    uint64_t key = ember_splitmix64(o->seed ^ 0x9a7);
    for (int32_t k = 0; k < s->T; k++)
        for (int64_t r0 = 0; r0 < s->E; r0 += CHUNK) {
            const int64_t n = s->E - r0 < CHUNK ? s->E - r0 : CHUNK;
            for (int64_t i = 0; i < n * s->D; i++)
                x[i] = (float)((double)(ember_splitmix64(key++) >> 11) * 0x1p-53 - 0.5) * 0.1f;
            if (ember_qebc_quantize_rows(q, k, r0, r0 + n, x) != EMBER_OK) {
                free(x);
                ember_qebc_destroy(q);
                return NULL;
            }
        }
    free(x);
    return q;
}

// The first 8 bags of every table against a double sum of the dequantized rows.
static double residual(ember_ctx *ctx, ember_qebc *q, const tbe_bench_shape *s, const int64_t *values,
                       const float *out) {
    const ember_qtable_config *c = ember_qebc_table(q, 0);
    const size_t rb = ember_qtype_row_bytes(c->qtype, s->D);
    unsigned char *row = malloc(rb);
    float *v = malloc(sizeof(float) * (size_t)s->D);
    double *sum = malloc(sizeof(double) * (size_t)s->D), worst = 0;
    for (int32_t t = 0; t < s->T && row && v && sum; t++)
        for (int32_t b = 0; b < s->B && b < 8; b++) {
            memset(sum, 0, sizeof(double) * (size_t)s->D);
            for (int32_t j = 0; j < s->L; j++) {
                const int64_t id = values[((int64_t)t * s->B + b) * s->L + j];
                ember_qebc_read_rows(q, t, id, id + 1, row);
                ember_dequantize_rows(ctx, c->qtype, s->D, 1, row, v);
                for (int32_t d = 0; d < s->D; d++) sum[d] += v[d];
            }
            for (int32_t d = 0; d < s->D; d++) {
                const double got = out[(size_t)b * (size_t)s->T * (size_t)s->D + (size_t)t * (size_t)s->D + (size_t)d];
                worst = fmax(worst, fabs(got - sum[d]) / fmax(1.0, fabs(sum[d])));
            }
        }
    if (!row || !v || !sum) worst = INFINITY;
    free(row), free(v), free(sum);
    return worst;
}

static int run(const qopts *o) {
    const tbe_bench_shape *s = &o->s;
    ember_ctx *ctx = NULL;
    if (ember_ctx_create(NULL, &ctx) != EMBER_OK) {
        fprintf(stderr, "ember bench quant: cannot create a context\n");
        return 2;
    }
    const int64_t nnz = (int64_t)s->T * s->B * s->L, nbags = (int64_t)s->T * s->B;
    int64_t *values = malloc(sizeof(int64_t) * (size_t)nnz), *offsets = malloc(sizeof(int64_t) * (size_t)(nbags + 1));
    float *out = malloc(sizeof(float) * (size_t)s->B * (size_t)s->T * (size_t)s->D);
    float *lim_out = malloc(sizeof(float) * (size_t)s->B * (size_t)s->T * (size_t)s->D);
    double *cdf = o->zipf ? tbe_bench_zipf_cdf(s->E) : NULL;
    ember_table_config tcf[64];
    ember_feature_config fc[64];
    ember_qtable_config tq[64];
    char names[64][16];
    int rc = 0;
    if (!values || !offsets || !out || !lim_out || (o->zipf && !cdf)) {
        fprintf(stderr, "ember bench quant: out of memory\n");
        rc = 2;
        goto done;
    }
    tbe_bench_make_ids(s, o->zipf, cdf, o->seed, values);
    for (int64_t i = 0; i <= nbags; i++) offsets[i] = i * s->L;
    const ember_kjt kjt = {.num_features = s->T, .batch_size = s->B, .offsets = offsets, .values = values, .nnz = nnz};
    // The fp32 training collection of the same shape.
    for (int32_t k = 0; k < s->T; k++) {
        snprintf(names[k], 16, "t%d", (int)k);
        tcf[k] = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        tcf[k].name = names[k], tcf[k].rows = s->E, tcf[k].dim = s->D;
        fc[k] = (ember_feature_config){.name = names[k], .table = k};
    }
    ember_ebc_config ec = EMBER_EBC_CONFIG_DEFAULT;
    ec.tables = tcf, ec.num_tables = s->T, ec.features = fc, ec.num_features = s->T, ec.seed = o->seed;
    ember_ebc *ebc = NULL;
    if (ember_ebc_create(ctx, &ec, &ebc) != EMBER_OK) {
        fprintf(stderr, "ember bench quant: the fp32 collection: %s\n", ember_ctx_errmsg(ctx));
        rc = 2;
        goto done;
    }
    if (!o->json)
        printf("%-5s %3s %8s %8s %8s %8s %8s %7s %8s %9s\n", "type", "thr", "ms", "limit", "fp32", "GB/s", "limit",
               "ratio", "vs_fp32", "residual");
    const gather_limit_fn gather = bench_gather_limit(ember_ctx_isa(ctx));
    for (int qt = 0; qt < EMBER_QTYPE_COUNT; qt++) {
        if (!(o->qtypes & (1u << qt))) continue;
        ember_qebc *q = make_quant(ctx, o, (ember_qtype)qt, tq, fc, names);
        if (!q) {
            fprintf(stderr, "ember bench quant: the %s collection: %s\n", ember_qtype_name((ember_qtype)qt),
                    ember_ctx_errmsg(ctx));
            rc = 2;
            break;
        }
        const size_t rb = ember_qtype_row_bytes((ember_qtype)qt, s->D);
        // The limit reads the same rows as floats: floor(rb / 4) of them per row.
        tbe_bench_shape ls = *s;
        ls.D = (int32_t)(rb / 4);
        gather_in g = {&ls, EMBER_DTYPE_F32, {0}, rb, values, lim_out};
        int ok = 1;
        for (int32_t t = 0; t < s->T && ok; t++) {
            const void *base = NULL;
            ok = ember_qebc_rows_view(q, t, &base, NULL) == EMBER_OK;
            g.base[t] = base;
        }
        for (int ti = 0; ti < o->nthreads && ok; ti++) {
            const int th = o->threads[ti];
            ember_ctx_set_num_threads(ctx, th);
            if (ember_qebc_forward(q, &kjt, out) != EMBER_OK) {
                fprintf(stderr, "ember bench quant: forward: %s\n", ember_ctx_errmsg(ctx));
                rc = 2;
                break;
            }
            const double res = residual(ctx, q, s, values, out);
            if (res > 1e-5 && rc == 0) rc = 1;
            const limit_cfg lc = o->iters > 2 ? bench_limit_calibrate(gather, &g, th) : (limit_cfg){16, 1, 1};
            const int n = o->iters;
            double *ms = calloc(3 * (size_t)n, sizeof(double));
            if (!ms) {
                rc = 2;
                break;
            }
            for (int it = 0; it < o->warmup + n; it++)
                for (int k = 0; k < 3; k++) {
                    const int ph = (it + k) % 3;
                    const double t0 = bench_now_ms();
                    ember_status st = EMBER_OK;
                    if (ph == 0) gather(&g, lc, th);
                    else if (ph == 1) st = ember_qebc_forward(q, &kjt, out);
                    else st = ember_ebc_forward(ebc, &kjt, lim_out);
                    const double t = bench_now_ms() - t0;
                    if (st != EMBER_OK) rc = 2;
                    if (it >= o->warmup) ms[ph * n + it - o->warmup] = t;
                }
            const double lim = bench_median(ms, n), qm = bench_median(ms + n, n), fm = bench_median(ms + 2 * n, n);
            const double bytes = (double)nnz * (double)rb;
            if (o->json) {
                bench_json j;
                bench_json_begin(&j, stdout, "quant");
                bench_json_str(&j, "qtype", ember_qtype_name((ember_qtype)qt));
                bench_json_int(&j, "T", s->T);
                bench_json_int(&j, "E", s->E);
                bench_json_int(&j, "D", s->D);
                bench_json_int(&j, "B", s->B);
                bench_json_int(&j, "L", s->L);
                bench_json_str(&j, "dist", o->zipf ? "zipf" : "uniform");
                bench_json_int(&j, "threads", th);
                bench_json_host(&j, ctx);
                bench_json_int(&j, "row_bytes", (long long)rb);
                bench_json_fixed(&j, "ms_med", qm, 4);
                bench_json_fixed(&j, "limit_ms", lim, 4);
                bench_json_fixed(&j, "fp32_ms", fm, 4);
                bench_json_fixed(&j, "gbps", bytes / (qm * 1e-3) / 1e9, 3);
                bench_json_fixed(&j, "limit_gbps", bytes / (lim * 1e-3) / 1e9, 3);
                bench_json_fixed(&j, "ratio", lim / qm, 4);
                bench_json_sig(&j, "rows_per_s", (double)nnz / (qm * 1e-3));
                bench_json_fixed(&j, "vs_fp32", fm / qm, 3);
                bench_json_sig(&j, "residual", res);
                bench_json_int(&j, "iters", n);
                char loop[64];
                snprintf(loop, sizeof loop, "prefetch %d %s, sums in %s", lc.pd, lc.hint ? "L2" : "L1",
                         lc.regs ? "registers" : "memory");
                bench_json_str(&j, "limit_loop", loop);
                bench_json_end(&j);
            } else {
                printf("%-5s %3d %8.3f %8.3f %8.3f %8.2f %8.2f %7.3f %8.3f %9.2e\n", ember_qtype_name((ember_qtype)qt), th,
                       qm, lim, fm, bytes / (qm * 1e-3) / 1e9, bytes / (lim * 1e-3) / 1e9, lim / qm, fm / qm, res);
            }
            free(ms);
        }
        ember_qebc_destroy(q);
        if (!ok) {
            fprintf(stderr, "ember bench quant: rows view: %s\n", ember_ctx_errmsg(ctx));
            rc = 2;
        }
        if (rc == 2) break;
    }
    ember_ebc_destroy(ebc);
done:
    free(values), free(offsets), free(out), free(lim_out), free(cdf);
    ember_ctx_destroy(ctx);
    return rc;
}

int quant_bench_main(int argc, char **argv) {
    qopts o;
    const int p = parse(argc, argv, &o);
    if (p != 0) {
        usage(p > 0 ? stdout : stderr);
        return p > 0 ? 0 : 2;
    }
    return run(&o);
}
