// `ember serve --load DIR [--port P]`: a serving bundle (ember export) behind an HTTP server that
// batches requests from many connections (docs/serving.md).
//
// The server is a program of its own, ember-serve (serve_main.c, beside build/bin/ember): only it
// links the HTTP library (GNU libmicrohttpd, which brings GnuTLS and p11-kit, whose exit-time
// destructors are not every process's business). `ember serve` checks its options here, then
// replaces itself with ember-serve, which takes the same arguments.
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
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

// Options into *c, help or the error printed by rank 0: 0 to serve, -1 after the help, else the
// exit code.
static int check(int argc, char **argv, serve_cli *c) {
    const bool speak = cli_launcher_rank() == 0;
    char err[512] = "";
    const int p = parse(argc, argv, c, err, sizeof err);
    if (p == 1) {
        if (speak) fputs(help, stdout);
        return -1;
    }
    if (p != 0) {
        if (speak) fprintf(stderr, "ember serve: %s (try 'ember serve --help')\n", err);
        return 2;
    }
    return 0;
}

int cmd_serve_check(int argc, char **argv, serve_options *x, int32_t *threads) {
    serve_cli c;
    const int rc = check(argc, argv, &c);
    *x = c.x;
    *threads = c.threads;
    return rc;
}

int cmd_serve(int argc, char **argv) {
    serve_cli c;
    const int rc = check(argc, argv, &c);
    if (rc != 0) return rc < 0 ? 0 : rc;
    // ember-serve, in the directory of this program.
    char self[4096], path[4200];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "ember serve: cannot find this program's directory: %s\n", strerror(errno));
        return 1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(path, sizeof path, "%s/ember-serve", slash ? self : ".");
    argv[0] = path;
    execv(path, argv);
    fprintf(stderr, "ember serve: cannot start the server program '%s': %s (it is built beside ember)\n", path,
            strerror(errno));
    return 1;
}

// fuzz/fuzz_cli.c: the option parsing alone (no MPI, no output): 0 run, 1 --help, 2 bad usage.
int cmd_serve_parse_only(int argc, char **argv) {
    serve_cli c;
    char err[512];
    return parse(argc, argv, &c, err, sizeof err);
}
