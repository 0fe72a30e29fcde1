// The checkpoint benchmark behind `ember bench ckpt` (run under mpiexec): the throughput of
// ember_checkpoint_save and ember_checkpoint_load (include/ember/state.h) on a collection of T
// tables (row-wise by default) totalling about 1 GiB of weights and optimizer state. For K rounds
// it saves, loads back (the files still in the page cache), loads again after evicting the files
// from the page cache (posix_fadvise DONTNEED: the disk), and loads into a second collection
// under another plan (resharding: records of other columns patched into pieces), each timed
// between barriers on the slowest rank. One JSON line per case from rank 0 (bench/README.md):
// seconds (median, min over rounds), MB/s per rank and in all, the bytes each rank read or wrote
// and the bytes the disk served (/proc/self/io: whether a load came from the page cache), and a
// residual: after every load, sampled rows of every tensor (and every step counter) against the
// values saved (0 when equal).
#ifndef EMBER_BENCH_CKPT_BENCH_H
#define EMBER_BENCH_CKPT_BENCH_H

// argv[0] is the command name. Initialises and finalises MPI itself. Returns the exit status:
// 0 ok, 1 a failure or a residual other than 0, 2 bad usage.
int ckpt_bench_main(int argc, char **argv);
// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int ckpt_bench_parse_only(int argc, char **argv);

#endif
