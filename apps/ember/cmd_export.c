// `ember export --load CKPT --quantize SPEC --output DIR`: a training checkpoint into a serving
// bundle (docs/serving.md): the tables quantized row-wise (and pruned), the dense model beside.
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "threads.h"
#include "train.h"

static const char help[] =
    "usage: ember export --load DIR --output DIR [options]   (distributed: mpiexec -n N ember export ...)\n"
    "\n"
    "Turns a DLRM checkpoint of 'ember train --save_dir' into a serving bundle: every table\n"
    "quantized row-wise (FBGEMM's fused row-wise layouts) and optionally pruned, with the dense\n"
    "model and the trainer's configuration, in one checksummed directory that 'ember eval --load'\n"
    "and 'ember serve --load' read (docs/serving.md).\n"
    "\n"
    "  --load DIR            a checkpoint directory (DIR/step-0000000100), or a save directory:\n"
    "                        its latest committed checkpoint\n"
    "  --output DIR          the bundle directory (created; a bundle there is replaced only when\n"
    "                        the new one is complete)\n"
    "  --quantize SPEC       TYPE[,TABLE=TYPE...]: every table's storage, then exceptions by table\n"
    "                        name; types fp32, fp16, int8, int4, int2 (default int8)\n"
    "  --prune_below X       drop the rows whose L2 norm is below X: a dropped id then adds nothing\n"
    "                        to its bag (default 0: keep every row)\n"
    "  --threads N           threads per rank (as ember train)\n"
    "  --timeout_s S         deadline of every collective (as ember train; default 600)\n"
    "  -h, --help            this text\n";

typedef struct export_cli {
    export_options x;
    int32_t threads;
} export_cli;

#define F(m) CLI_FIELD(export_cli, m)
static const cli_flag flags[] = {
    {"load", CLI_TEXT, F(x.load), 0, 0, NULL, NULL, 0},
    {"output", CLI_TEXT, F(x.output), 0, 0, NULL, NULL, 0},
    {"quantize", CLI_TEXT, F(x.quantize), 0, 0, NULL, NULL, 0},
    {"prune_below", CLI_REAL, F(x.prune_below), 0, 0, NULL, NULL, 0},
    {"threads", CLI_INT, F(threads), 0, 4096, NULL, NULL, 0},
    {"timeout_s", CLI_CALL, F(x.timeout_s), 0, 0, NULL, cli_call_timeout, 0},
};

static int parse(int argc, char **argv, export_cli *c, char *err, size_t cap) {
    *c = (export_cli){.x = {.quantize = "int8", .timeout_s = EMBER_COMM_DEFAULT_TIMEOUT_S}};
    const int p = cli_parse_flags(argc, argv, flags, (int)(sizeof flags / sizeof flags[0]), c, NULL, err, cap);
    if (p == 0 && (!c->x.load || !c->x.output)) {
        snprintf(err, cap, "%s is required", !c->x.load ? "--load DIR (the checkpoint to export)"
                                                          : "--output DIR (where the bundle goes)");
        return 2;
    }
    if (p == 0 && c->x.prune_below < 0) {
        snprintf(err, cap, "--prune_below %g: must be >= 0", c->x.prune_below);
        return 2;
    }
    return p;
}

int cmd_export(int argc, char **argv) {
    const bool speak = cli_launcher_rank() == 0;
    export_cli c;
    char err[512] = "";
    const int p = parse(argc, argv, &c, err, sizeof err);
    if (p == 1) {
        if (speak) fputs(help, stdout);
        return 0;
    }
    if (p != 0) {
        if (speak) fprintf(stderr, "ember export: %s (try 'ember export --help')\n", err);
        return 2;
    }
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    threads_report placement;
    ember_status st = threads_start_mpi(argc, argv, c.threads, c.x.timeout_s, &ctx, &comm, &placement);
    if (st == EMBER_OK) {
        c.x.threads_note = placement.text;
        st = export_saved(comm, &c.x, dlrm_backend_sebc_create, stdout);
    }
    return threads_finish_mpi("export", st, ctx, comm);
}

// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int cmd_export_parse_only(int argc, char **argv) {
    export_cli c;
    char err[512];
    return parse(argc, argv, &c, err, sizeof err);
}
