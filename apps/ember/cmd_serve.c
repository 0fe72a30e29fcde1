// `ember serve --load DIR [--port P]`: a serving bundle (ember export) behind an HTTP server that
// batches requests from many connections (docs/serving.md).
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "threads.h"
#include "train.h"

static const char help[] =
    "usage: ember serve --load DIR [options]\n"
    "\n"
    "Serves a DLRM bundle of 'ember export' (or a checkpoint of 'ember train', its fp32 tables) over\n"
    "HTTP until SIGINT or SIGTERM, which finish the requests already received (docs/serving.md):\n"
    "  POST /predict   {\"samples\": [{\"dense\": [13 numbers], \"sparse\": [26 ids]}, ...]} answers\n"
    "                  {\"probabilities\": [...]}; Content-Type: application/octet-stream takes \"EMB1\",\n"
    "                  a uint32 count, then per sample 13 float32 and 26 int64, and answers float32s\n"
    "  GET /health     {\"status\": \"ok\", \"step\": N}\n"
    "  GET /metrics    requests, samples, batch sizes and latency quantiles (Prometheus text)\n"
    "Requests from every connection are batched: one forward of up to --max_batch samples, taken\n"
    "when that many wait or --max_wait_us after the first arrived.\n"
    "\n"
    "  --load DIR              a bundle of 'ember export' (or a checkpoint)\n"
    "  --host ADDR             IPv4 address to listen on (default 127.0.0.1; 0.0.0.0: every one)\n"
    "  --port P                TCP port (default 8080; 0: a free one, printed)\n"
    "  --max_batch N           samples per forward at most, and per request (default 256)\n"
    "  --max_wait_us U         how long a request waits for others to batch with (default 1000)\n"
    "  --max_body_bytes B      larger request bodies are refused with 413 (default 16777216)\n"
    "  --max_connections N     connections at once (default 256)\n"
    "  --threads N             the model's threads (as ember train)\n"
    "  -h, --help              this text\n";

typedef struct serve_cli {
    serve_options x;
    int32_t threads;
} serve_cli;

#define F(m) CLI_FIELD(serve_cli, m)
static const cli_flag flags[] = {
    {"load", CLI_TEXT, F(x.load), 0, 0, NULL, NULL, 0},
    {"host", CLI_TEXT, F(x.host), 0, 0, NULL, NULL, 0},
    {"port", CLI_INT, F(x.port), 0, 65535, NULL, NULL, 0},
    {"max_batch", CLI_INT, F(x.max_batch), 1, 1 << 20, NULL, NULL, 0},
    {"max_wait_us", CLI_INT, F(x.max_wait_us), 0, 60000000, NULL, NULL, 0},
    {"max_body_bytes", CLI_INT, F(x.max_body_bytes), 64, (int64_t)1 << 32, NULL, NULL, 0},
    {"max_connections", CLI_INT, F(x.max_connections), 1, 65536, NULL, NULL, 0},
    {"threads", CLI_INT, F(threads), 0, 4096, NULL, NULL, 0},
};

static int parse(int argc, char **argv, serve_cli *c, char *err, size_t cap) {
    *c = (serve_cli){.x = {.host = "127.0.0.1", .port = 8080, .max_batch = 256, .max_wait_us = 1000,
                           .max_body_bytes = 16 << 20, .max_connections = 256}};
    const int p = cli_parse_flags(argc, argv, flags, (int)(sizeof flags / sizeof flags[0]), c, NULL, err, cap);
    if (p == 0 && !c->x.load) {
        snprintf(err, cap, "--load DIR is required: the bundle to serve");
        return 2;
    }
    return p;
}

int cmd_serve(int argc, char **argv) {
    const bool speak = cli_launcher_rank() == 0;
    serve_cli c;
    char err[512] = "";
    const int p = parse(argc, argv, &c, err, sizeof err);
    if (p == 1) {
        if (speak) fputs(help, stdout);
        return 0;
    }
    if (p != 0) {
        if (speak) fprintf(stderr, "ember serve: %s (try 'ember serve --help')\n", err);
        return 2;
    }
    // SIGINT and SIGTERM stop the server gracefully (serve.c waits for them on a thread of its
    // own): blocked here, before MPI and OpenMP start threads that would inherit the default.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    ember_ctx *ctx = NULL;
    ember_comm *comm = NULL;
    threads_report placement;
    ember_status st = threads_start_mpi(argc, argv, c.threads, 0.0, &ctx, &comm, &placement);
    if (st == EMBER_OK) {
        c.x.threads_note = placement.text;
        st = serve_saved(comm, &c.x, dlrm_backend_sebc_create, stdout);
    }
    return threads_finish_mpi("serve", st, ctx, comm);
}

// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int cmd_serve_parse_only(int argc, char **argv) {
    serve_cli c;
    char err[512];
    return parse(argc, argv, &c, err, sizeof err);
}
