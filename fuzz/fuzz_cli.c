// libFuzzer target: the option parsers of the `ember` subcommands (apps/ember/commands.h
// cmd_*_parse_only, bench/*_bench.h), without MPI, output or files.
//
// Input: the first byte picks the parser (train, eval, plan, ckpt, bench tbe, bench shard, bench
// ckpt); the rest is split at every NUL or newline into the arguments after the command's name
// (at most 64), each in a buffer of its own exact size so that any read past an argument's end
// is reported. fuzz/cli.dict holds every option name, value keyword and number shape.
//
// glibc's getopt keeps state between calls (the position inside a cluster of short options such
// as "-hx"): the parsers reset optind to 1 for their one call per process, which does not clear
// that position. Before every parse the harness does the full reset glibc documents (optind = 0,
// then one call), so no state from the previous input (freed by then) is read.
// Oracle: a parser returns 0, 1 or 2, and the same again on the same arguments (no state kept).
#define _GNU_SOURCE // getopt_long's GNU behaviour, mkdtemp (fuzz_input.h)
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_bench.h"
#include "commands.h"
#include "fuzz_input.h"
#include "shard_bench.h"
#include "tbe_bench.h"

#define MAX_ARGS 64

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (!(devnull = fopen("/dev/null", "w"))) abort();
    return 0;
}

static void getopt_reset(void) {
    static char arg0[] = "ember";
    char *argv[] = {arg0, NULL};
    optind = 0; // glibc: re-initialise everything at the next call
    while (getopt(1, argv, "") != -1) {
    }
}

// tbe_bench_parse writes its usage errors and --help to stderr and stdout (the FILE pointers: a
// sanitizer report still goes to file descriptor 2).
static int tbe_parse(int argc, char **argv) {
    tbe_bench_opts o;
    FILE *out = stdout, *err = stderr;
    stdout = devnull;
    stderr = devnull;
    const int p = tbe_bench_parse(argc, argv, &o);
    stdout = out;
    stderr = err;
    return p < 0 ? 2 : p;
}

typedef struct parser {
    const char *name;
    int (*parse)(int argc, char **argv);
} parser;

static const parser parsers[] = {
    {"train", cmd_train_parse_only}, {"eval", cmd_eval_parse_only}, {"plan", cmd_plan_parse_only},
    {"ckpt", cmd_ckpt_parse_only},   {"tbe", tbe_parse},            {"shard", shard_bench_parse_only},
    {"ckpt", ckpt_bench_parse_only}, {"preprocess", cmd_preprocess_parse_only}, {"export", cmd_export_parse_only},
    {"serve", cmd_serve_parse_only},
};
#define NUM_PARSERS ((int)(sizeof parsers / sizeof parsers[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const parser *p = &parsers[data[0] % NUM_PARSERS];
    char *args[MAX_ARGS + 2], *copy[MAX_ARGS + 2];
    int argc = 0;
    args[argc++] = strdup(p->name);
    for (size_t i = 1; i < size && argc <= MAX_ARGS;) {
        size_t j = i;
        while (j < size && data[j] != '\0' && data[j] != '\n') j++;
        char *a = malloc(j - i + 1);
        if (!a) abort();
        memcpy(a, data + i, j - i);
        a[j - i] = '\0';
        args[argc++] = a;
        i = j + 1;
    }
    args[argc] = NULL;
    // getopt_long permutes argv: the second parse gets the arguments in their first order again.
    memcpy(copy, args, sizeof(char *) * (size_t)(argc + 1));
    getopt_reset();
    const int first = p->parse(argc, args);
    FUZZ_REQUIRE(first >= 0 && first <= 2, "%s: returned %d", p->name, first);
    memcpy(args, copy, sizeof(char *) * (size_t)(argc + 1));
    getopt_reset();
    const int second = p->parse(argc, args);
    FUZZ_REQUIRE(second == first, "%s: %d, then %d on the same arguments", p->name, first, second);
    for (int i = 0; i < argc; i++) free(copy[i]);
    return 0;
}
