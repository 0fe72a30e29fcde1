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
};

#endif
