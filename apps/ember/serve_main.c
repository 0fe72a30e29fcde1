// ember-serve: the program behind `ember serve` (cmd_serve.c execs it with the same arguments), the
// only one that links the HTTP library. serve.c is its server; the rest is the CLI's library.
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "run.h"
#include "threads.h"

static int serve_main(int argc, char **argv) {
    serve_options x;
    int32_t threads = 0;
    const int rc = cmd_serve_check(argc, argv, &x, &threads);
    if (rc != 0) return rc < 0 ? 0 : rc;
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
    ember_status st = threads_start_mpi(argc, argv, threads, 0.0, &ctx, &comm, &placement);
    if (st == EMBER_OK) {
        x.threads_note = placement.text;
        x.serve = run_serve;
        st = serve_saved(comm, &x, dlrm_backend_sebc_create, stdout);
    }
    return threads_finish_mpi("serve", st, ctx, comm);
}

int main(int argc, char **argv) { return cli_exit(serve_main(argc, argv)); }
