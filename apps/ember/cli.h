// cli.h — helpers shared by the subcommands: launcher rank, strict option-value parsing and the
// library's names for option values.
#ifndef EMBER_APP_CLI_H
#define EMBER_APP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The MPI rank this process will have, read from the launcher's environment before MPI_Init
// (Open MPI 4 and 5, PMIx, MPICH's Hydra), so that usage errors and help are printed once; 0
// without a launcher.
int cli_launcher_rank(void);

// The one exit path of the program: flushes stdout and stderr, then, under a launcher with more
// than one rank, meets every other rank in a barrier (initialising MPI first if the subcommand did
// not) and finalises MPI; returns `status`. So no rank exits before every rank's message is
// written: Open MPI 5 kills the whole job at the first non-zero exit, and a rank still about to
// print its error would print nothing.
// Collective over the launch: every rank must get here. Paths that never initialised MPI parse
// only the command line, the same everywhere; paths under MPI agree on their status before they
// return (train_run), and a rank that dies makes the launcher end the others.
int cli_exit(int status);

// Strict parsers: the whole string must be the value (no trailing text, no overflow). On failure
// they write "--flag 'text': reason" into err and return false.
bool cli_parse_i64(const char *flag, const char *text, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t cap);
bool cli_parse_double(const char *flag, const char *text, double *out, char *err, size_t cap);
// --timeout_s: seconds in [0, 1e9] (0: no deadline), the collective deadline of train and eval.
bool cli_parse_timeout(const char *text, double *out, char *err, size_t cap);
// A comma-separated list of integers in [min, max]: at most `cap_items` items, *n receives the count.
bool cli_parse_i64_list(const char *flag, const char *text, int64_t min, int64_t max, int64_t *items, int cap_items,
                        int *n, char *err, size_t cap);

// The library's embedding optimizers by name (ember_optim_name), joined by `sep`:
// "sgd, adagrad, rowwise_adagrad, ..." for messages and help. Truncated to cap.
void cli_optim_names(const char *sep, char *buf, size_t cap);

#endif
