// Internal layout of ember_comm, for the layers above comm.
#ifndef EMBER_COMM_INTERNAL_H
#define EMBER_COMM_INTERNAL_H

#include <stdio.h>

#include "core/internal.h"
#include "ember/comm.h"

struct ember_comm {
    ember_ctx *ctx;       // borrowed
    MPI_Comm comm;        // owned duplicate
    int32_t rank, size;
    uint64_t bytes_sent;
    int *counts;          // [4 * size] MPI int counts/displacements, allocated once
    // The watchdog (see ember_comm_set_timeout): every collective is started nonblocking and
    // waited for against the deadline; ranks that have waited a while announce it on `diag` so
    // that a rank whose deadline expires can name those that never arrived.
    double timeout_s;     // 0: wait forever
    MPI_Comm diag;        // owned duplicate for the announcements
    int64_t seq;          // collectives started on this communicator (equal on every rank)
    int64_t *heard;       // [size] the latest collective each rank announced waiting in (-1: none)
    int64_t *said;        // [size] send buffers of the announcements
    MPI_Request *saying;  // [size] their requests
    ember_status broken;  // EMBER_OK, or the status after which the communicator is unusable
    char why[EMBER_ERRMSG_CAP]; // the timeout's message, repeated by every later collective
    int flags[4];         // ember_comm_create's agreement on its allocations: (ok, rank) in and out
};

// A configuration as text, one "<field>: <value>\n" line per field, built by every rank in the
// same order (e.g. "table 'user' rows: 31"). ember__fields_add appends a line; on failure to
// grow, the builder remembers it (st = EMBER_ERR_NOMEM) and ignores further lines.
typedef struct ember__fields {
    ember_ctx *ctx;
    ember__buf buf;
    size_t len;
    ember_status st;
} ember__fields;
void ember__fields_add(ember__fields *f, const char *fmt, ...) EMBER__PRINTF(2, 3);
void ember__fields_free(ember__fields *f);

// Collective. Agrees that every rank built the same fields (a 64-bit digest of the text is
// compared first: one small all-gather when they agree). When they differ every rank returns
// EMBER_ERR_INVALID_ARG with the same message naming the first differing field, its values and
// the ranks: "<what>: ranks disagree on the configuration: table 'user' rows: 31 on rank 2, 30 on
// rank 0". A builder that ran out of memory on any rank makes every rank return EMBER_ERR_NOMEM.
ember_status ember__comm_agree_fields(ember_comm *c, const char *what, const ember__fields *f);

#endif
