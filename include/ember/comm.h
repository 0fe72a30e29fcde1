// ember/comm.h — the MPI communicator wrapper every distributed layer uses.
//
// An ember_comm holds a duplicate of the caller's MPI communicator (the library never calls
// MPI_Init/MPI_Finalize and never communicates on the caller's communicator), with errors
// returned rather than fatal. It provides the collectives the sharding schemes and LFQ need and
// the collective status agreement that keeps a bad input on one rank from hanging the others:
//
//     ember_status st = validate_locally(...);      // no communication yet
//     st = ember_comm_agree(comm, st);              // every rank learns the worst status
//     if (st != EMBER_OK) return st;                // every rank returns, nobody waits
//
// Every collective counts the bytes this rank sends (ember_comm_bytes_sent), which the sharding
// layer reports per step and scheme.
//
// Functions marked "Collective" must be called by every rank of the communicator in the same
// order. Errors from MPI itself are returned as EMBER_ERR_COMM with MPI's error string.
//
// The watchdog: every collective has a deadline (ember_comm_set_timeout; default
// EMBER_COMM_DEFAULT_TIMEOUT_S). A rank that waits in a collective longer than the deadline
// returns EMBER_ERR_TIMEOUT with a message naming the ranks that never arrived in it (stopped,
// dead, stuck in a long computation or in another call). MPI cannot cancel a collective it has
// started, so after a timeout the communicator refuses every further collective (EMBER_ERR_TIMEOUT
// again), the buffers of the call that timed out may still be written by MPI, and the only sound
// reaction is to report and end the job: MPI_Abort, or exit without finalising, after which the
// launcher ends the others once it has forwarded the exiting rank's output (ember's CLI does
// that: under MPICH, MPI_Abort's immediate kill lost messages still in the launcher's pipes). A
// rank that has waited a tenth of the deadline (at most 1 s) tells the others so on a private
// duplicate communicator; collectives that complete sooner cost nothing extra. Every collective below returns EMBER_ERR_TIMEOUT in this way
// besides the statuses it lists.
#ifndef EMBER_COMM_H
#define EMBER_COMM_H

#include <mpi.h>

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_comm ember_comm;

// Duplicates `comm` (twice: one for the library's collectives, one for the watchdog's
// announcements) and sets the context's rank (ember_ctx_set_rank) for messages.
// ctx is borrowed and must outlive the returned object. MPI must be initialised.
// Collective on comm (under the default deadline). Returns EMBER_OK, EMBER_ERR_INVALID_ARG,
// EMBER_ERR_STATE (MPI not initialised), EMBER_ERR_NOMEM (on every rank when one rank lacks
// memory), EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_comm_create(ember_ctx *ctx, MPI_Comm comm, ember_comm **out);
// Frees the duplicate. Collective on the communicator; NULL is accepted (and then local).
EMBER_API void ember_comm_destroy(ember_comm *comm);

// The deadline of every collective started on this communicator, in seconds: 600 by default (a
// training step takes milliseconds; a checkpoint of a large table, between whose ranks the skew
// is largest, takes seconds to minutes). 0 waits forever (plain blocking MPI semantics).
#define EMBER_COMM_DEFAULT_TIMEOUT_S 600.0
// Local (ranks may differ; a rank's own deadline decides when it gives up). Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (negative, NaN or above 1e9).
EMBER_API ember_status ember_comm_set_timeout(ember_comm *comm, double seconds);
EMBER_API double ember_comm_timeout(const ember_comm *comm);

EMBER_API int32_t ember_comm_rank(const ember_comm *comm);
EMBER_API int32_t ember_comm_size(const ember_comm *comm);
EMBER_API ember_ctx *ember_comm_ctx(const ember_comm *comm);
// The duplicated communicator, for callers that add their own MPI calls on it.
EMBER_API MPI_Comm ember_comm_mpi(const ember_comm *comm);

// Agrees on a status: returns the most negative status over all ranks (ties: lowest rank).
// On the failing rank the context message is kept; every other rank gets the same message (which
// names the failing rank once, "... (rank R)") and returns the same status.
// Collective. If the agreement itself fails, returns EMBER_ERR_COMM or EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_comm_agree(ember_comm *comm, ember_status local);

// An argument of a collective call that every rank must give alike: a number (text NULL), a
// string compared by its contents (text), or a digest of something larger (digest = 1: the value
// is compared but not printed; ember_digest makes one). name says what it is in messages.
typedef struct ember_arg {
    const char *name;
    int64_t value;
    const char *text;
    int32_t digest;
} ember_arg;
#define EMBER_ARGS_MAX 8

// Agrees, in one small all-reduce (1 + 2 x EMBER_ARGS_MAX int64 whatever n is, so that it meets
// ember_comm_agree, which is this call with n = 0: a rank refusing before a collective may call
// ember_comm_agree while the others agree on that collective's arguments), on this rank's status
// and on the n arguments every rank must
// give alike (n <= EMBER_ARGS_MAX): returns the worst status as ember_comm_agree does, or, when
// every status is EMBER_OK and an argument differs, EMBER_ERR_INVALID_ARG on every rank with one
// message naming fn, the first differing argument and its values on two ranks
// ("ember_sebc_read: ranks disagree on table: 1 on rank 1, 0 on rank 0"). Every collective of
// the library calls it before any collective work; a caller writing its own collectives can too.
// Collective. Returns also EMBER_ERR_INVALID_ARG (n outside [0, EMBER_ARGS_MAX], args NULL with
// n > 0: local, agreed), EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_comm_agree_args(ember_comm *comm, ember_status local, const char *fn,
                                             const ember_arg *args, int32_t n);

// In-place sums over all ranks. Collective. The collectives below first agree (one small
// all-reduce, ember_comm_agree_args) on every argument each rank must give alike: counts, element
// sizes, roots, byte counts, allgatherv's recv_counts; alltoallv also checks every pair's counts
// (what q sends r against what r expects) and gatherv each rank's count against the root's
// recv_counts. They return EMBER_OK, EMBER_ERR_INVALID_ARG (NULL buffer with n > 0, counts
// outside MPI's int range, bad root, or an argument that differs between ranks: every rank
// returns it, naming the argument, and nothing is exchanged), EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
// The library's own exchanges use unchecked forms where every rank computes the arguments alike.
EMBER_API ember_status ember_comm_allreduce_sum_f32(ember_comm *comm, float *buf, size_t n);
EMBER_API ember_status ember_comm_allreduce_sum_f64(ember_comm *comm, double *buf, size_t n);
EMBER_API ember_status ember_comm_allreduce_sum_i64(ember_comm *comm, int64_t *buf, size_t n);
// In-place max over all ranks of int64 values. Collective.
EMBER_API ember_status ember_comm_allreduce_max_i64(ember_comm *comm, int64_t *buf, size_t n);

// Personalised exchange of fixed-size elements of `elem_size` bytes.
// send_counts[W], recv_counts[W] are element counts; data for rank r is contiguous at the
// exclusive prefix sum of the counts. recv_counts must match what the peers send (use
// ember_comm_alltoall_i64 to exchange counts first; a mismatch is refused on every rank, naming
// the pair). Collective.
EMBER_API ember_status ember_comm_alltoallv(ember_comm *comm, const void *send, const int64_t *send_counts,
                                            void *recv, const int64_t *recv_counts, size_t elem_size);
// Each rank sends one int64 to every rank: recv[s] = rank s's send[me]. Collective.
EMBER_API ember_status ember_comm_alltoall_i64(ember_comm *comm, const int64_t *send, int64_t *recv);
// Concatenates every rank's `count` elements of `elem_size` bytes in rank order into recv
// (recv_counts[W] given by the caller, e.g. from ember_comm_allgather_i64). Collective.
EMBER_API ember_status ember_comm_allgatherv(ember_comm *comm, const void *send, int64_t count, void *recv,
                                             const int64_t *recv_counts, size_t elem_size);
// Concatenates every rank's `count` elements in rank order into recv on `root` only (recv and
// recv_counts[W] are read on root only). Collective.
EMBER_API ember_status ember_comm_gatherv(ember_comm *comm, const void *send, int64_t count, void *recv,
                                          const int64_t *recv_counts, size_t elem_size, int32_t root);
// recv[s] = rank s's value. Collective.
EMBER_API ember_status ember_comm_allgather_i64(ember_comm *comm, int64_t value, int64_t *recv);
// Broadcast of `bytes` bytes from `root`. Collective.
EMBER_API ember_status ember_comm_bcast(ember_comm *comm, void *buf, size_t bytes, int32_t root);
EMBER_API ember_status ember_comm_barrier(ember_comm *comm);

// The gradient convention: which objective W ranks train together, chosen once per model and
// applied identically to every parameter (sharded tables of every scheme, data-parallel tables,
// dense parameters through ember_comm_allreduce_grads, LFQ): nothing else rescales a gradient.
// With GRAD_MEAN and local losses that are means over equal local batches, W ranks train
// exactly what one process trains on the concatenated global batch.
typedef enum ember_grad_convention {
    EMBER_GRAD_MEAN = 0, // J = (1/W) sum_r L_r (the default)
    EMBER_GRAD_SUM = 1,  // J = sum_r L_r
} ember_grad_convention;
#define EMBER_GRAD_COUNT 2
// "mean", "sum" ("unknown" outside the enum); parse: EMBER_OK and *out set, or
// EMBER_ERR_INVALID_ARG (*out unchanged). Local.
EMBER_API const char *ember_grad_convention_name(ember_grad_convention c);
EMBER_API ember_status ember_grad_convention_parse(const char *name, ember_grad_convention *out);

// All-reduces data-parallel (dense) parameter gradients under the convention, in place:
// GRAD_SUM sums them over ranks, GRAD_MEAN sums and multiplies by 1/W (rounded to the dtype, the
// factor the sharded tables apply to their gradients).
// Collective. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (unknown convention, grad NULL with n > 0;
// every rank returns it), EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
EMBER_API ember_status ember_comm_allreduce_grads(ember_comm *comm, ember_grad_convention conv, float *grad,
                                                  size_t n);
EMBER_API ember_status ember_comm_allreduce_grads_f64(ember_comm *comm, ember_grad_convention conv, double *grad,
                                                      size_t n);

// Bytes this rank has handed to MPI for other ranks since creation or the last reset (its own
// slice of an exchange is not counted). Local.
EMBER_API uint64_t ember_comm_bytes_sent(const ember_comm *comm);
EMBER_API void ember_comm_reset_bytes_sent(ember_comm *comm);

// Overlap. The sharded collection starts some exchanges nonblocking and waits for them later
// (ember_sebc_prefetch, ember_sebc_backward_start/finish). MPI transports without a progress
// thread (Open MPI over TCP or shared memory) advance a nonblocking collective only inside MPI
// calls: a caller that computes between the start and the wait (dense layers) calls
// ember_comm_progress now and then (e.g. between layers) so that the data moves meanwhile.
// Local (each call only tests this rank's requests; it never blocks). Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (NULL), EMBER_ERR_COMM. Cheap when nothing is in flight.
EMBER_API ember_status ember_comm_progress(ember_comm *comm);

// Seconds this rank has spent blocked waiting for collectives to complete on this communicator
// (every collective above and the split-phase waits) since creation or the last reset: the
// communication time the caller's computation did not hide. Local.
EMBER_API double ember_comm_wait_seconds(const ember_comm *comm);
EMBER_API void ember_comm_reset_wait_seconds(ember_comm *comm);

#ifdef __cplusplus
}
#endif
#endif
