// PLACEHOLDER dispatcher so that `ember bench` can be built and tested on the perf branch; the
// real `ember` main (getopt_long subcommands: train, plan, bench, ckpt) replaces this file and
// calls ember_cmd_bench from its dispatch table.
#include <stdio.h>
#include <string.h>

#include "cmd_bench.h"

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "bench")) return ember_cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "usage: ember bench tbe [options]\n");
    return 2;
}
