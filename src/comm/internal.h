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
    int64_t *pair;        // [2 * size] scratch of the public collectives' count checks
    MPI_Request *saying;  // [size] their requests
    ember_status broken;  // EMBER_OK, or the status after which the communicator is unusable
    char why[EMBER_ERRMSG_CAP]; // the timeout's message, repeated by every later collective
    int flags[4];         // ember_comm_create's agreement on its allocations: (ok, rank) in and out
    double wait_s;        // seconds spent blocked waiting for collectives (ember_comm_wait_seconds)
    struct ember__req *inflight; // split-phase collectives started and not yet waited for
};

// Split-phase collectives: a start returns at once with the collective in flight in *r; the
// caller computes and later waits for it (ember__comm_wait) under the watchdog's deadline, which
// counts from the wait. Any number may be in flight on one communicator, with blocking
// collectives between them, provided every rank starts them all in the same order (MPI's rule).
// The buffers (and the counts' arrays passed in) belong to MPI until the wait returns; the int
// counts MPI reads are kept in r. Nonblocking collectives advance only inside MPI calls on
// transports without a progress thread (Open MPI's TCP and shared memory): ember_comm_progress
// tests every request in flight.
typedef struct ember__req {
    MPI_Request mpi;         // MPI_REQUEST_NULL once complete
    int64_t seq;             // the collective's number on its communicator
    const char *what;        // the message's name of it
    int *counts;             // [4W] MPI counts and displacements, owned (ember__comm_req_free)
    int pending;             // started, not yet waited for (on the communicator's in-flight list)
    struct ember__req *next; // that list
} ember__req;

// Start an exchange: the arguments and statuses of ember_comm_alltoallv / ember_comm_allgatherv
// (argument errors are local; EMBER_ERR_NOMEM when r's counts cannot be allocated; a communicator
// broken by a timeout refuses it). On failure nothing is in flight. Collective (started).
ember_status ember__comm_ialltoallv(ember_comm *c, const void *send, const int64_t *send_counts, void *recv,
                                    const int64_t *recv_counts, size_t elem_size, ember__req *r);
ember_status ember__comm_iallgatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                     const int64_t *recv_counts, size_t elem_size, ember__req *r);
// Each rank sends n int64 to every rank: recv[s * n + i] = rank s's send[me * n + i]. The status
// and argument rules of ember_comm_alltoall_i64. Collective.
ember_status ember__comm_alltoall_i64n(ember_comm *c, const int64_t *send, int64_t *recv, int n);
// Waits for r under the deadline (the messages and announcements of every collective; the time
// is added to the wait seconds). EMBER_OK at once when r is not pending. Returns EMBER_OK,
// EMBER_ERR_COMM, EMBER_ERR_TIMEOUT; r is no longer pending afterwards in every case.
ember_status ember__comm_wait(ember_comm *c, ember__req *r);
// Frees r's counts. r must not be pending, unless the communicator timed out.
void ember__comm_req_free(ember_comm *c, ember__req *r);

// A communicator of the ranks of c that pass the same color, ordered by key (MPI_Comm_split),
// with c's deadline; the context keeps naming c's rank in messages (a group's rank 1 is still
// "rank 3" to the user). Collective on c. Returns the statuses of ember_comm_create; *out is NULL
// on failure.
ember_status ember__comm_split(ember_comm *c, int32_t color, int32_t key, ember_comm **out);

// Helpers for ember_arg (comm.h): a number, a string compared by its contents.
#define EMBER__ARG(nm, v) ((ember_arg){.name = (nm), .value = (int64_t)(v)})
#define EMBER__ARG_STR(nm, s) ((ember_arg){.name = (nm), .text = (s) ? (s) : "(null)"})

// The collectives of comm.h without the argument agreement: for callers whose every rank computes
// the arguments alike (the sharded collection's exchanges). Arguments and statuses as there.
ember_status ember__comm_allreduce_sum_f32(ember_comm *c, float *buf, size_t n);
ember_status ember__comm_allreduce_sum_f64(ember_comm *c, double *buf, size_t n);
ember_status ember__comm_allreduce_sum_i64(ember_comm *c, int64_t *buf, size_t n);
ember_status ember__comm_allreduce_max_i64(ember_comm *c, int64_t *buf, size_t n);
ember_status ember__comm_alltoallv(ember_comm *c, const void *send, const int64_t *send_counts, void *recv,
                                   const int64_t *recv_counts, size_t elem_size);
ember_status ember__comm_allgatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                    const int64_t *recv_counts, size_t elem_size);
ember_status ember__comm_gatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                 const int64_t *recv_counts, size_t elem_size, int32_t root);
ember_status ember__comm_bcast(ember_comm *c, void *buf, size_t bytes, int32_t root);

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
