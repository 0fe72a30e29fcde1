// The table-batched embedding benchmark behind `ember bench tbe` (and its CTest smoke tests).
//
// Every case times one operation of a local ember_ebc (forward, or the fused backward +
// optimizer) on FBGEMM's benchmark shapes and reports it as a ratio to the *gather limit*: the
// fastest plain-C loop that reads the same rows in the same order and sums them (software
// prefetch, OpenMP over bags like the kernel, prefetch distance calibrated per case), timed in
// the same iterations, alternating with the operation, so that both see the same machine.
// Output: one JSON object per line (bench/README.md, "The line") or a readable table, then the
// derived target ratios of docs/performance.md.
#ifndef EMBER_BENCH_TBE_BENCH_H
#define EMBER_BENCH_TBE_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "ember/core.h"
#include "ember/ebc.h"

// Operations (bit masks). train_* time the fused backward + update alone; step_* time one
// training step: forward + fused backward + update.
enum {
    TBE_OP_FWD = 1 << 0,
    TBE_OP_TRAIN_SGD = 1 << 1,
    TBE_OP_TRAIN_ROWWISE_ADAGRAD = 1 << 2,
    TBE_OP_TRAIN_ADAM = 1 << 3,
    TBE_OP_STEP_SGD = 1 << 4,
    TBE_OP_STEP_ROWWISE_ADAGRAD = 1 << 5,
    TBE_OP_STEP_ADAM = 1 << 6,
    TBE_OP_ALL = (1 << 7) - 1,
};

enum { TBE_DIST_UNIFORM = 1 << 0, TBE_DIST_ZIPF = 1 << 1 };
enum { TBE_POOL_SUM = 1 << 0, TBE_POOL_MEAN = 1 << 1 };
// dtypes: bit (1 << ember_dtype), EMBER_DTYPE_F32 = 0, F16 = 1, BF16 = 2.

#define TBE_BENCH_MAX_SHAPES 4
#define TBE_BENCH_MAX_THREADS 8

// T tables of E rows x D columns, one feature per table; B bags per feature of exactly L ids.
typedef struct tbe_bench_shape {
    int32_t T;
    int64_t E;
    int32_t D, B, L;
} tbe_bench_shape;

typedef struct tbe_bench_opts {
    tbe_bench_shape shapes[TBE_BENCH_MAX_SHAPES];
    int nshapes;
    unsigned ops, pools, dtypes, dists;
    int threads[TBE_BENCH_MAX_THREADS];
    int nthreads;
    int iters;      // timed iterations per case (>= 1; the issue asks for >= 10)
    int warmup;     // untimed iterations first
    uint64_t seed;
    int json;       // JSON lines instead of the readable table
    int targets;    // print the derived target ratios at the end
    int calibrate;  // calibrate the limit loop per case (else a fixed variant: --quick)
    int isa;        // kernel variant (ember_isa); 0 = auto ($EMBER_ISA or the CPU's best)
    int backend;    // ember_backend: EMBER_BACKEND_CUDA runs tbe_bench_cuda_run instead
    int64_t cache_rows;     // > 0: the tiered mode (docs/tiered.md) instead of the kernel cases
    int cache_policy;       // ember_evict_policy
    const char *ssd_dir;    // tiered tables' files (NULL: $TMPDIR or /tmp)
    FILE *out;      // results (stdout)
    FILE *log;      // progress and errors (stderr)
} tbe_bench_opts;

// Fills `o` from command-line arguments (argv[0] is the command name and is skipped); see
// tbe_bench_usage. Results go to stdout and messages to stderr (change o->out/o->log after).
// Returns 0 to run, 1 when help was printed, -1 on a bad argument (message on o->log).
int tbe_bench_parse(int argc, char **argv, tbe_bench_opts *o);
void tbe_bench_usage(FILE *f);

// Runs every selected case. Returns 0 when every case ran and its residual is within the
// tolerance of its dtype, 1 when a residual is too large, 2 when something failed.
int tbe_bench_run(const tbe_bench_opts *o);

// The cuda cases (cuda/tbe_cuda.cu, builds with the cuda backend): every selected shape x dtype x
// pool x dist x op among fwd and train_{sgd,rowwise_adagrad,adam}, on the current CUDA device,
// timed with CUDA events against a plain pooled-gather kernel and an HBM read kernel in the same
// run; the forward and one training step also compared with the cpu backend, bit for bit.
// Returns as tbe_bench_run (2 also when no GPU is usable).
int tbe_bench_cuda_run(const tbe_bench_opts *o);

// The inputs every case draws (the same for the cpu and cuda runs): Zipf's cdf over E ranks
// (malloc'd; NULL on failure), values[T*B*L] feature-major (zipf: ranks from cdf, else uniform),
// dL/dy standard normal.
double *tbe_bench_zipf_cdf(int64_t E);
void tbe_bench_make_ids(const tbe_bench_shape *s, int zipf, const double *cdf, uint64_t seed, int64_t *values);
void tbe_bench_make_grad(size_t n, uint64_t seed, float *g);
// A forward's error: max |out - ref| / max(1, |ref|) over the first 8 bags of every table, ref the
// stored rows (read back through the state dict) summed in double, over L for MEAN.
double tbe_bench_fwd_residual(ember_ebc *ebc, const tbe_bench_shape *s, const int64_t *values, int mean,
                              const float *out);

// Parse + run: the body of `ember bench tbe`.
int tbe_bench_main(int argc, char **argv);

#endif
