// The sharding benchmark behind `ember bench shard` (run under mpiexec): for each scheme, one
// training step (forward + backward with the fused update) of a collection whose every table is
// sharded that way, reporting per rank per step the bytes sent (ember_sebc_bytes_sent_last_step)
// and the time, one JSON object per scheme from rank 0 with the max and mean over ranks, and the
// forward's residual against an unsharded collection holding the same weights.
#ifndef EMBER_BENCH_SHARD_BENCH_H
#define EMBER_BENCH_SHARD_BENCH_H

// argv[0] is the command name. Initialises and finalises MPI itself. Returns the exit status:
// 0 ok, 1 a failure or a residual above 1e-5 (plus the wire precision's bound), 2 bad usage.
int shard_bench_main(int argc, char **argv);
// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int shard_bench_parse_only(int argc, char **argv);

#endif
