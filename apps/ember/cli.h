// cli.h — helpers shared by the subcommands: launcher rank and strict option-value parsing.
#ifndef EMBER_APP_CLI_H
#define EMBER_APP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The MPI rank this process will have, read from the launcher's environment before MPI_Init
// (Open MPI, PMIx, MPICH), so that usage errors and help are printed once; 0 without a launcher.
int cli_launcher_rank(void);

// Strict parsers: the whole string must be the value (no trailing text, no overflow). On failure
// they write "--flag 'text': reason" into err and return false.
bool cli_parse_i64(const char *flag, const char *text, int64_t min, int64_t max, int64_t *out, char *err,
                   size_t cap);
bool cli_parse_double(const char *flag, const char *text, double *out, char *err, size_t cap);
// A comma-separated list of integers in [min, max]: at most `cap_items` items, *n receives the count.
bool cli_parse_i64_list(const char *flag, const char *text, int64_t min, int64_t max, int64_t *items, int cap_items,
                        int *n, char *err, size_t cap);

#endif
