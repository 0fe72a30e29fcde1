// The benchmarks' shared timer, statistics and JSON line writer (report.h).
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int bench_option(int argc, char **argv, int *i, const char *const *flags, char *name, size_t cap,
                 const char **value, FILE *log, const char *who) {
    const char *a = argv[*i], *eq = strchr(a, '=');
    size_t nl = eq ? (size_t)(eq - a) : strlen(a);
    if (nl >= cap) nl = cap - 1;
    memcpy(name, a, nl);
    name[nl] = '\0';
    *value = NULL;
    for (const char *const *f = flags; *f; f++)
        if (!strcmp(name, *f)) return 0;
    *value = eq ? eq + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
    if (*value) return 0;
    fprintf(log, "%s: %s needs a value\n", who, name);
    return -1;
}

double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *v, int n) {
    if (n > 1) qsort(v, (size_t)n, sizeof(double), cmp_double);
}

double bench_median(double *v, int n) {
    if (n < 1) return NAN;
    bench_sort(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_min(const double *v, int n) {
    double m = n > 0 ? v[0] : NAN;
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static void put_key(bench_json *j, const char *key) { fprintf(j->out, ",\"%s\":", key); }

static void put_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; s && *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

void bench_json_begin(bench_json *j, FILE *out, const char *bench) {
    j->out = out;
    fputs("{\"bench\":", out);
    put_string(out, bench);
    fputs(",\"impl\":\"ember\"", out);
}

void bench_json_str(bench_json *j, const char *key, const char *value) {
    put_key(j, key);
    put_string(j->out, value);
}

void bench_json_int(bench_json *j, const char *key, long long value) {
    put_key(j, key);
    fprintf(j->out, "%lld", value);
}

void bench_json_bool(bench_json *j, const char *key, int value) {
    put_key(j, key);
    fputs(value ? "true" : "false", j->out);
}

void bench_json_fixed(bench_json *j, const char *key, double value, int decimals) {
    put_key(j, key);
    if (isfinite(value)) fprintf(j->out, "%.*f", decimals, value);
    else fputs("null", j->out);
}

void bench_json_sig(bench_json *j, const char *key, double value) {
    put_key(j, key);
    if (isfinite(value)) fprintf(j->out, "%.3g", value);
    else fputs("null", j->out);
}

void bench_json_host(bench_json *j, const ember_ctx *ctx) {
    bench_json_str(j, "isa", ember_isa_name(ember_ctx_isa(ctx)));
    bench_json_str(j, "cpu", ember_cpu_name());
    bench_json_str(j, "build", ember_build_info());
}

void bench_json_end(bench_json *j) {
    fputs("}\n", j->out);
    fflush(j->out);
}

int bench_mpi_main(int parse_rc, void (*usage)(FILE *), int (*run)(ember_comm *comm, const void *opts),
                   const void *opts) {
    MPI_Init(NULL, NULL);
    int R = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    if (parse_rc) {
        if (R == 0) usage(parse_rc == 1 ? stdout : stderr);
        MPI_Finalize();
        return parse_rc == 1 ? 0 : 2;
    }
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    int rc = 1;
    if (ember_ctx_create(NULL, &ctx) == EMBER_OK && ember_comm_create(ctx, MPI_COMM_WORLD, &comm) == EMBER_OK)
        rc = run(comm, opts);
    ember_comm_destroy(comm);
    ember_ctx_destroy(ctx);
    MPI_Finalize();
    return rc;
}
