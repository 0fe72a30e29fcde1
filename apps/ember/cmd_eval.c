// `ember eval --load DIR`: the eval loss and AUC of a model `ember train --save_dir` saved, under
// any world size (the tables are placed by the planner for this run).
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "threads.h"
#include "train.h"

static const char help[] =
    "usage: ember eval --load DIR [options]     (distributed: mpiexec -n N ember eval ...)\n"
    "\n"
    "Evaluates a DLRM checkpoint of 'ember train --save_dir': rebuilds its model (configuration\n"
    "from the checkpoint), loads its tables and dense parameters and prints the eval loss and the\n"
    "exact AUC (synthetic data: beside the planted model's).\n"
    "\n"
    "  --load DIR                 a checkpoint directory (DIR/step-0000000100), or a save directory:\n"
    "                             its latest committed checkpoint\n"
    "  --data_path FILE           evaluate on this Criteo TSV (default: the checkpoint's eval set:\n"
    "                             the synthetic eval split of its seed, or its Criteo eval data)\n"
    "  --limit_val_batches N      eval global batches (default: the checkpoint's; with --data_path\n"
    "                             0, the whole file)\n"
    "  --threads N                threads per rank (as ember train)\n"
    "  --timeout_s S              deadline of every collective (as ember train; default 600)\n"
    "  --digest                   end with the hashes of the outputs and of the loaded state, as\n"
    "                             ember train --digest prints them\n"
    "  --predictions PREFIX       one process: write every eval sample's inputs to PREFIX.inputs (a\n"
    "                             binary POST /predict body of ember serve) and its click probability\n"
    "                             to PREFIX.probs (float32 each): what ember serve must answer; its\n"
    "                             label to PREFIX.labels (float32)\n"
    "  -h, --help                 this text\n";

// What the command line fills: the evaluation's options and --threads.
typedef struct eval_cli {
    eval_options e;
    int32_t threads;
} eval_cli;

#define F(m) CLI_FIELD(eval_cli, m)
static const cli_flag flags[] = {
    {"load", CLI_TEXT, F(e.load), 0, 0, NULL, NULL, 0},
    {"data_path", CLI_TEXT, F(e.data_path), 0, 0, NULL, NULL, 0},
    {"limit_val_batches", CLI_INT, F(e.limit_val_batches), 0, (int64_t)1 << 40, NULL, NULL, 0},
    {"threads", CLI_INT, F(threads), 0, 4096, NULL, NULL, 0},
    {"timeout_s", CLI_CALL, F(e.timeout_s), 0, 0, NULL, cli_call_timeout, 0},
    {"digest", CLI_SET, F(e.digest), 0, 0, NULL, NULL, 0},
    {"predictions", CLI_TEXT, F(e.predictions), 0, 0, NULL, NULL, 0},
};

// Parses the command line into c (defaults first). Returns 0 (run), 1 (--help) or 2 (bad usage:
// err says why).
static int parse(int argc, char **argv, eval_cli *c, char *err, size_t cap) {
    *c = (eval_cli){.e = {.limit_val_batches = -1, .timeout_s = EMBER_COMM_DEFAULT_TIMEOUT_S}};
    const int p = cli_parse_flags(argc, argv, flags, (int)(sizeof flags / sizeof flags[0]), c, NULL, err, cap);
    if (p == 0 && !c->e.load) {
        snprintf(err, cap, "--load DIR is required: the checkpoint to evaluate");
        return 2;
    }
    return p;
}

int cmd_eval(int argc, char **argv) {
    const bool speak = cli_launcher_rank() == 0;
    eval_cli c;
    char err[512] = "";
    const int p = parse(argc, argv, &c, err, sizeof err);
    if (p == 1) {
        if (speak) fputs(help, stdout);
        return 0;
    }
    if (p != 0) {
        if (speak) fprintf(stderr, "ember eval: %s (try 'ember eval --help')\n", err);
        return 2;
    }

    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    threads_report placement;
    ember_status st = threads_start_mpi(argc, argv, c.threads, c.e.timeout_s, &ctx, &comm, &placement);
    if (st == EMBER_OK) {
        c.e.threads_note = placement.text;
        c.e.loader_cpus = placement.loader_cpus[0] ? placement.loader_cpus : NULL;
        c.e.loader_shares_cpu = placement.loader_shares_cpu;
        train_result res = {0};
        st = eval_saved(comm, &c.e, dlrm_backend_sebc_create, stdout, &res);
    }
    return threads_finish_mpi("eval", st, ctx, comm);
}

// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int cmd_eval_parse_only(int argc, char **argv) {
    eval_cli c;
    char err[512];
    return parse(argc, argv, &c, err, sizeof err);
}
