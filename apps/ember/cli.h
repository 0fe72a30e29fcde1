// cli.h — helpers shared by the subcommands: launcher rank, strict option-value parsing, the
// library's names for option values, and option tables (a command's options as one table of
// rows read by one loop).
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

// ---- Names of option values ---------------------------------------------------------------------
// The name of value v of an enum an option takes, or NULL past the last: the library's names for its
// enums, the app's for its own. For CLI_NAME rows and for trainer.json (trainstate.c), which stores
// these values by name.
const char *cli_name_grad_convention(int v);     // ember_grad_convention
const char *cli_name_dataset(int v);             // train_dataset
const char *cli_name_eval_split(int v);          // criteo_npy's eval half: "val", "test"
const char *cli_name_malformed(int v);           // criteo_malformed_mode
const char *cli_name_dense_optimizer(int v);     // dense_optim_kind
const char *cli_name_embedding_optimizer(int v); // ember_optim_kind
const char *cli_name_evict_policy(int v);        // ember_evict_policy: lru, lfu, ttl
const char *cli_name_interaction(int v);         // dlrm_interaction: dot (0), dcn (1)
const char *cli_name_hash(int v);                // train_options.collisionless: modulo (0), collisionless (1)
// The value whose name is `name` (names(0), names(1), ... up to the first NULL), or -1.
int cli_name_value(const char *(*names)(int v), const char *name);

// ---- Option tables -----------------------------------------------------------------------------
// A subcommand's options as one table: each row names a long option, how its value is read and
// the field of the command's own struct (`base`) it fills. cli_parse_flags reads the command line
// against the table with getopt_long (so unambiguous prefixes and --flag=value work), adds
// -h/--help, and words every message the same way.

typedef enum cli_arg {
    CLI_INT,  // an integer in [min, max] (cli_parse_i64) into an int32_t or int64_t field (or a
              // uint64_t one, for min >= 0)
    CLI_REAL, // a finite number (cli_parse_double) into a double or float field
    CLI_TEXT, // the text itself into a const char * field (pointing into argv)
    CLI_NAME, // one of names(0), names(1), ... up to the first NULL: its index into an int-sized
              // (enum) or bool field; else "--flag 'text': expected one of a, b, c"
    CLI_SET,  // no value: true into a bool field, or call (text NULL)
    CLI_CALL, // the text through call
} cli_arg;

typedef struct cli_flag {
    const char *name;            // the long option, without the dashes
    cli_arg arg;
    size_t at, size;             // the field it fills: CLI_FIELD(type, member)
    int64_t min, max;            // CLI_INT
    const char *(*names)(int v); // CLI_NAME
    // CLI_CALL, CLI_SET: parses `text` (NULL for CLI_SET) into base (the field at `at` is `field`);
    // false with the message in err. flag: "--name".
    bool (*call)(void *base, void *field, const char *flag, const char *text, char *err, size_t cap);
    int group;                   // the command's own tag for the row (cli_parse_flags ignores it)
} cli_flag;

#define CLI_FIELD(type, member) offsetof(type, member), sizeof(((type *)0)->member)
#define CLI_MAX_FLAGS 96

// Parses the options of argv[1..argc) (argv[0]: the subcommand) into base with the n (at most
// CLI_MAX_FLAGS) rows of flags, stopping at -h/--help. order (NULL, or [n]): order[i] gets 1, 2,
// ... in the order the rows were first given on the command line, 0 for a row not given.
// Returns 0 (parsed), 1 (--help) or 2 (bad usage, err says why: "unknown option '--x'",
// "--flag needs a value", "unexpected argument 'x'", or the value's message).
int cli_parse_flags(int argc, char **argv, const cli_flag *flags, int n, void *base, int *order, char *err,
                    size_t cap);

// A row's call for --timeout_s (cli_parse_timeout) into a double field.
bool cli_call_timeout(void *base, void *field, const char *flag, const char *text, char *err, size_t cap);

#endif
