// The quantized tables' benchmark behind `ember bench quant` (bench/quant_bench.c): the pooled
// forward of include/ember/quant.h against the gather limit for the row bytes and the fp32
// training forward on the same ids. Parse + run; exit status 0 ok, 1 a residual too large, 2 failure.
#ifndef EMBER_BENCH_QUANT_BENCH_H
#define EMBER_BENCH_QUANT_BENCH_H

int quant_bench_main(int argc, char **argv);

#endif
