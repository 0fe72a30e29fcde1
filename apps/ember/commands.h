// commands.h — the subcommands of the `ember` CLI.
//
// Adding one: write apps/ember/cmd_<name>.c with `int cmd_<name>(int argc, char **argv)` (argv[0]
// is the subcommand's name; parse the rest with an option table and cli_parse_flags, or with
// getopt_long and the helpers of cli.h; return the process exit status: 0 success, 1 failure,
// 2 bad usage), declare it here and add a row to the table in main.c.
// main passes the status to cli_exit (cli.h), which finalises MPI if the subcommand initialised it:
// a subcommand under MPI returns the same status on every rank and leaves MPI_Finalize to it.
#ifndef EMBER_APP_COMMANDS_H
#define EMBER_APP_COMMANDS_H

#include <stdint.h>

// `ember train`: trains DLRM (synthetic or Criteo data), data-parallel dense part and sharded
// embeddings under mpiexec. See docs/dlrm.md.
int cmd_train(int argc, char **argv);

// `ember eval --load DIR`: the eval loss and AUC of a checkpoint of `ember train --save_dir`,
// under mpiexec. See docs/dlrm.md (Resume).
int cmd_eval(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_serve(int argc, char **argv); // execs ember-serve (serve_main.c)

// `ember ckpt info DIR [--verify]`: what a checkpoint holds. Local: no MPI. See docs/dlrm.md.
int cmd_ckpt(int argc, char **argv);

// `ember bench tbe`: the table-batched embedding kernels against the in-run gather limit, one
// JSON object per case with --json. See docs/performance.md.
int cmd_bench(int argc, char **argv);
// `ember bench reader` (reader_bench.c): the criteo_npy day-file reader's rows/s.
int reader_bench_main(int argc, char **argv);

// `ember plan`: the library planner's placement of a set of tables. See docs/planner.md.
int cmd_plan(int argc, char **argv);

// `ember preprocess`: Criteo TSV days into TorchRec's day files (--dataset criteo_npy). Local: no
// MPI. See docs/dlrm.md.
int cmd_preprocess(int argc, char **argv);
// Its error line, "ember preprocess: error: " and the message on stderr; returns 1. The passes it
// runs (contig.h, shuffle.h) report with it too.
int cmd_preprocess_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// The option parsing of each subcommand alone, for fuzz/fuzz_cli.c: no MPI, no output, nothing
// read or written; argv as the subcommand's. Returns 0 (the command would run), 1 (--help) or 2
// (bad usage). `ember bench` has bench/*_bench.h's (tbe_bench_parse, *_bench_parse_only).
int cmd_train_parse_only(int argc, char **argv);
int cmd_eval_parse_only(int argc, char **argv);
int cmd_export_parse_only(int argc, char **argv);
int cmd_serve_parse_only(int argc, char **argv);
// `ember serve`'s options into *x and *threads, the help or the error printed by rank 0: 0 to
// serve, -1 after the help, else the exit code (ember-serve's main runs the server).
struct serve_options;
int cmd_serve_check(int argc, char **argv, struct serve_options *x, int32_t *threads);
int cmd_ckpt_parse_only(int argc, char **argv);
int cmd_plan_parse_only(int argc, char **argv);
int cmd_preprocess_parse_only(int argc, char **argv);

// ember train's option table (cmd_train.c, in --help's order): its *n rows, for the tests that
// check every option against what a checkpoint records (trainstate.h). A row whose field lies
// within train_options (`at` + `size` at most sizeof(train_options)) fills the field of
// train_options at that offset; the rest fill the command's own settings (--threads, --progress).
struct cli_flag;
const struct cli_flag *cmd_train_flags(int *n);

#endif
