// The dense benchmark behind `ember bench dense` (and its CTest smoke test): every product of the
// DLRM default and DCN-v2 presets' dense layers (forward y = x W^T, input gradient dx = g W,
// weight gradient dW = g^T x, and the dot interaction's batched products), timed through
// ember_gemm / ember_gemm_batched and through OpenBLAS's cblas_sgemm on the same operands in
// alternating rounds, against the in-run FMA peak of the kernel variant (bench/peak/).
// Output: one JSON object per line (bench/README.md, "Dense lines") or a readable table.
#ifndef EMBER_BENCH_DENSE_BENCH_H
#define EMBER_BENCH_DENSE_BENCH_H

#include <stdint.h>
#include <stdio.h>

#define DENSE_BENCH_MAX_LIST 8

enum { DENSE_PRESET_DLRM = 1 << 0, DENSE_PRESET_DCN = 1 << 1 };
enum { DENSE_OP_FWD = 1 << 0, DENSE_OP_DX = 1 << 1, DENSE_OP_DW = 1 << 2, DENSE_OP_ALL = 7 };

typedef struct dense_bench_opts {
    unsigned presets, ops;
    int64_t batch[DENSE_BENCH_MAX_LIST];
    int nbatch;
    int threads[DENSE_BENCH_MAX_LIST];
    int nthreads;
    int iters;        // timed rounds per case (each round times both implementations)
    int warmup;       // untimed rounds first
    double sample_ms; // a timed sample repeats the call until about this long (small products)
    double gap_ms;    // pause before each sample of a multi-thread case (spinning workers)
    int openblas;     // time cblas_sgemm beside (0: --no-openblas)
    int isa;          // kernel variant (ember_isa); 0 = auto
    uint64_t seed;
    int json;
    FILE *out, *log;
} dense_bench_opts;

// Fills `o` from the arguments (argv[0] is the command name); see dense_bench_usage.
// Returns 0 to run, 1 when help was printed, -1 on a bad argument (message on o->log).
int dense_bench_parse(int argc, char **argv, dense_bench_opts *o);
void dense_bench_usage(FILE *f);

// Runs every selected case. Returns 0 when every residual is within the fp32 bound, 1 when one
// is not, 2 when something failed.
int dense_bench_run(const dense_bench_opts *o);

// Parse + run: the body of `ember bench dense`.
int dense_bench_main(int argc, char **argv);

#endif
