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
    int flags[2];         // ember_comm_create's agreement on its allocations
};

#endif
