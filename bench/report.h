// report.h — what every benchmark of ember_bench shares, so that none keeps its own copy: the
// frame of an MPI benchmark's main, the timer, order statistics over repeated timings, and the writer of the one-JSON-line-per-case
// output (bench/README.md lists the fields; every line names its host: kernel variant, CPU model
// and library build).
//
// The random ids come from the library's generator (ember/rng.h), the same in every benchmark.
#ifndef EMBER_BENCH_REPORT_H
#define EMBER_BENCH_REPORT_H

#include <stdio.h>

#include "ember.h"

// The frame of an MPI benchmark's main (`ember bench shard|ckpt`): parse_rc is what its option
// parser returned (0: run; 1: --help; else a usage error). Initialises MPI; when not running, rank
// 0 prints usage (stdout for --help, stderr else); else creates a context and the world
// communicator and calls run(comm, opts). Finalises MPI and returns the exit code (0 help, 2 usage
// error, 1 set-up failure, else run's).
int bench_mpi_main(int parse_rc, void (*usage)(FILE *), int (*run)(ember_comm *comm, const void *opts),
                   const void *opts);

// The option at argv[*i] of a benchmark's parser: "--name=value", or "--name value" (the value
// the next argument, *i moved past it), or one of the value-less `flags` (NULL-terminated).
// Writes the name (cut to cap - 1 bytes) and *value (NULL for a flag). Returns 0, or -1 after
// printing "<who>: --name needs a value" to log.
int bench_option(int argc, char **argv, int *i, const char *const *flags, char *name, size_t cap,
                 const char **value, FILE *log, const char *who);

// Monotonic wall clock in milliseconds (CLOCK_MONOTONIC).
double bench_now_ms(void);

// Sorts v[n] ascending; median of v[n] (sorts it; mean of the middle two when n is even); minimum.
void bench_sort(double *v, int n);
double bench_median(double *v, int n);
double bench_min(const double *v, int n);

// One JSON line, written field by field to `out`:
//   bench_json j;
//   bench_json_begin(&j, stdout, "shard");          // {"bench":"shard","impl":"ember"
//   bench_json_str(&j, "scheme", "rw");              // ,"scheme":"rw"
//   bench_json_host(&j, ctx);                        // ,"isa":...,"cpu":...,"build":...
//   bench_json_end(&j);                              // }\n, flushed
// A number that is not finite is written as null (JSON has no NaN).
typedef struct bench_json {
    FILE *out;
} bench_json;

void bench_json_begin(bench_json *j, FILE *out, const char *bench);
void bench_json_str(bench_json *j, const char *key, const char *value); // escapes " \ and controls
void bench_json_int(bench_json *j, const char *key, long long value);
void bench_json_bool(bench_json *j, const char *key, int value);
// value with `decimals` digits after the point; bench_json_sig: 3 significant digits (%.3g).
void bench_json_fixed(bench_json *j, const char *key, double value, int decimals);
void bench_json_sig(bench_json *j, const char *key, double value);
// The host fields: "isa" (ctx's kernel variant), "cpu", "build".
void bench_json_host(bench_json *j, const ember_ctx *ctx);
void bench_json_end(bench_json *j);

#endif
