// `ember eval --load DIR`: the eval loss and AUC of a model `ember train --save_dir` saved, under
// any world size (the tables are placed by the planner for this run).
#define _GNU_SOURCE // getopt_long
#include <getopt.h>
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
    "  -h, --help                 this text\n";

// Parses the options into e and *threads. Returns 0 (run), 1 (--help) or 2 (bad usage: err says why).
static int parse(int argc, char **argv, eval_options *e, int32_t *threads, char *err, size_t cap) {
    static const struct option lo[] = {{"load", required_argument, NULL, 'l'},
                                       {"data_path", required_argument, NULL, 'd'},
                                       {"limit_val_batches", required_argument, NULL, 'v'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"timeout_s", required_argument, NULL, 'T'},
                                       {"digest", no_argument, NULL, 'g'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int64_t v = 0;
    bool ok = true;
    int c;
    optind = 1;
    opterr = 0;
    while (ok && (c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'l': e->load = optarg; break;
        case 'd': e->data_path = optarg; break;
        case 'v':
            ok = cli_parse_i64("--limit_val_batches", optarg, 0, (int64_t)1 << 40, &e->limit_val_batches, err, cap);
            break;
        case 't':
            ok = cli_parse_i64("--threads", optarg, 0, 4096, &v, err, cap);
            *threads = (int32_t)v;
            break;
        case 'T':
            ok = cli_parse_timeout(optarg, &e->timeout_s, err, cap);
            break;
        case 'g': e->digest = true; break;
        case 'h': return 1;
        case ':':
            snprintf(err, cap, "%s needs a value", argv[optind - 1]);
            ok = false;
            break;
        default:
            snprintf(err, cap, "unknown option '%s'", argv[optind - 1]);
            ok = false;
            break;
        }
    }
    if (ok && optind < argc) {
        snprintf(err, cap, "unexpected argument '%s'", argv[optind]);
        ok = false;
    }
    if (ok && !e->load) {
        snprintf(err, cap, "--load DIR is required: the checkpoint to evaluate");
        ok = false;
    }
    return ok ? 0 : 2;
}

int cmd_eval(int argc, char **argv) {
    const bool speak = cli_launcher_rank() == 0;
    eval_options e = {.limit_val_batches = -1, .timeout_s = EMBER_COMM_DEFAULT_TIMEOUT_S};
    int32_t threads = 0;
    char err[512] = "";
    const int p = parse(argc, argv, &e, &threads, err, sizeof err);
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
    ember_status st = threads_start_mpi(argc, argv, threads, e.timeout_s, &ctx, &comm, &placement);
    if (st == EMBER_OK) {
        e.threads_note = placement.text;
        train_result res = {0};
        st = eval_saved(comm, &e, dlrm_backend_sebc_create, stdout, &res);
    }
    return threads_finish_mpi("eval", st, ctx, comm);
}

// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int cmd_eval_parse_only(int argc, char **argv) {
    eval_options e = {.limit_val_batches = -1, .timeout_s = EMBER_COMM_DEFAULT_TIMEOUT_S};
    int32_t threads = 0;
    char err[512];
    return parse(argc, argv, &e, &threads, err, sizeof err);
}
