// The `ember` command-line program: dispatches to one subcommand from the table below.
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "cli.h"
#include "commands.h"
#include "ember/core.h"

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

// One row per subcommand (see commands.h to add one).
static const subcommand subcommands[] = {
    {"train", cmd_train, "train DLRM on synthetic or Criteo click data (data-parallel dense, sharded embeddings)"},
    {"eval", cmd_eval, "evaluate a saved DLRM checkpoint (ember train --save_dir) on its eval set or a Criteo file"},
    {"export", cmd_export, "a saved DLRM checkpoint into a serving bundle: quantized (and pruned) tables, dense model"},
    {"serve", cmd_serve, "serve a bundle of ember export over HTTP, batching requests (POST /predict)"},
    {"ckpt", cmd_ckpt, "inspect a checkpoint: ckpt info DIR [--verify] (tables, blobs, the trainer's position)"},
    {"plan", cmd_plan, "place tables on ranks with the planner (per-rank storage and bytes per step)"},
    {"preprocess", cmd_preprocess, "Criteo TSV days into TorchRec's day files (--dataset criteo_npy)"},
    {"bench", cmd_bench, "benchmark the embedding kernels against the machine's gather limit (bench tbe)"},
};
#define NUM_SUBCOMMANDS ((int)(sizeof subcommands / sizeof subcommands[0]))

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember <command> [options]        (distributed: mpiexec -n N ember <command> ...)\n"
            "\n"
            "ember trains recommendation models with big embedding tables sharded over MPI ranks.\n"
            "\n"
            "commands:\n");
    for (int i = 0; i < NUM_SUBCOMMANDS; i++) fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(f,
            "\n"
            "  ember <command> --help   options of a command\n"
            "  ember --version          version, build and the MPI library it runs on\n");
}

// The MPI library this process runs on (MPI_Get_library_version may precede MPI_Init): its first
// line, blanks squeezed ("MPICH Version:\t4.0.2" -> "MPICH Version: 4.0.2").
static void print_mpi_library(void) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING], line[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, n = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) len = 0;
    for (int i = 0; i < len && text[i] != '\0' && text[i] != '\n'; i++) {
        bool blank = isspace((unsigned char)text[i]);
        if (!blank) line[n++] = text[i];
        else if (n > 0 && line[n - 1] != ' ') line[n++] = ' ';
    }
    while (n > 0 && line[n - 1] == ' ') n--;
    printf("mpi: %.*s\n", n, line);
}

// Every return of the program goes through cli_exit (cli.h), so no rank exits before every rank's
// message is written.
static int run(int argc, char **argv) {
    const bool quiet = cli_launcher_rank() != 0; // usage text once, from rank 0
    if (argc < 2) {
        if (!quiet) usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        if (!quiet) usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        // The kernel variant a context gets here ($EMBER_ISA or the CPU's best): creating one
        // says so, or why not (the library prints the reason), with a non-zero exit.
        ember_ctx *ctx = NULL;
        const ember_status st = ember_ctx_create(NULL, &ctx);
        if (!quiet) {
            printf("%s\n", ember_build_info());
            print_mpi_library();
            if (st == EMBER_OK)
                printf("kernel variant %s on %s (%s; best here: %s)\n", ember_isa_name(ember_ctx_isa(ctx)),
                       ember_cpu_name(), ember_cpu_features(), ember_isa_name(ember_isa_best()));
        }
        ember_ctx_destroy(ctx);
        return st == EMBER_OK ? 0 : 1;
    }
    for (int i = 0; i < NUM_SUBCOMMANDS; i++) {
        if (strcmp(argv[1], subcommands[i].name) == 0) return subcommands[i].run(argc - 1, argv + 1);
    }
    if (!quiet) fprintf(stderr, "ember: unknown command '%s' (try 'ember --help')\n", argv[1]);
    return 2;
}

int main(int argc, char **argv) { return cli_exit(run(argc, argv)); }
