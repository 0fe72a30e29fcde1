// `ember bench`: benchmarks that print one JSON object per line (STYLE.md, "Benchmarks").
#ifndef EMBER_APP_CMD_BENCH_H
#define EMBER_APP_CMD_BENCH_H

// argv[0] is the subcommand's name ("bench"), argv[1] the benchmark ("tbe"), then its options
// (`ember bench tbe --help`). Returns the process exit status: 0 ok, 1 a residual above its
// tolerance, 2 bad arguments or a failure.
int ember_cmd_bench(int argc, char **argv);

#endif
