// MPI communicator wrapper: duplication, status agreement, byte-counted collectives.
#include <limits.h>
#include <stdarg.h>
#include <sched.h>
#include <string.h>

#include "comm/internal.h"

EMBER__ENUM_NAMES(ember_grad_convention, ember_grad_convention, "mean", "sum")

static ember_status mpi_fail(ember_comm *c, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return ember__error(c->ctx, EMBER_ERR_COMM, "%s: MPI error: %s", what, s);
}

// --- The watchdog -----------------------------------------------------------------------------
// Every collective is started nonblocking and tested against the communicator's deadline. A rank
// that has waited a tenth of the deadline (at most a second) tells every other rank, on the
// private `diag` communicator, which collective it is waiting in; when its deadline expires it
// names the ranks it never heard from in that collective: those did not arrive. The
// announcements cost nothing while collectives complete promptly.
enum { DIAG_TAG = 7 };

static void listen_diag(ember_comm *c) {
    for (;;) {
        int flag = 0;
        MPI_Status s;
        if (MPI_Iprobe(MPI_ANY_SOURCE, DIAG_TAG, c->diag, &flag, &s) != MPI_SUCCESS || !flag) return;
        int64_t v = 0;
        if (MPI_Recv(&v, 1, MPI_INT64_T, s.MPI_SOURCE, DIAG_TAG, c->diag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
        if (v > c->heard[s.MPI_SOURCE]) c->heard[s.MPI_SOURCE] = v;
    }
}

static void announce(ember_comm *c) {
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        if (c->saying[r] != MPI_REQUEST_NULL) {
            int done = 0;
            MPI_Test(&c->saying[r], &done, MPI_STATUS_IGNORE);
            if (!done) continue; // the previous announcement is still on its way
        }
        c->said[r] = c->seq;
        MPI_Isend(&c->said[r], 1, MPI_INT64_T, r, DIAG_TAG, c->diag, &c->saying[r]);
    }
}

// `seq`: the collective waited for (announcements carry the latest collective a rank started, so
// a rank that announced seq or later has started this one).
static ember_status timed_out(ember_comm *c, const char *what, double waited, int64_t seq) {
    char who[192] = "";
    size_t n = 0;
    int absent = 0;
    if (c->diag != MPI_COMM_NULL) {
        listen_diag(c);
        for (int r = 0; r < c->size; r++) {
            if (r == c->rank || c->heard[r] >= seq) continue;
            if (n + 16 < sizeof who) n += (size_t)snprintf(who + n, sizeof who - n, "%s%d", absent ? ", " : "", r);
            else if (n + 5 < sizeof who && who[n - 1] != '.') n += (size_t)snprintf(who + n, sizeof who - n, "...");
            absent++;
        }
    }
    c->broken = EMBER_ERR_TIMEOUT;
    if (absent > 0)
        ember__error(c->ctx, EMBER_ERR_TIMEOUT,
                     "%s: collective #%lld missed its %g s deadline (waited %.1f s): rank%s %s did not arrive "
                     "(stopped, dead, or in another call); this communicator cannot be used again",
                     what, (long long)seq, c->timeout_s, waited, absent > 1 ? "s" : "", who);
    else
        ember__error(c->ctx, EMBER_ERR_TIMEOUT,
                     "%s: collective #%lld missed its %g s deadline (waited %.1f s)%s; this communicator cannot be "
                     "used again",
                     what, (long long)seq, c->timeout_s, waited,
                     c->diag != MPI_COMM_NULL ? ": every rank arrived but MPI did not complete it" : "");
    memcpy(c->why, c->ctx->errmsg, sizeof c->why);
    return EMBER_ERR_TIMEOUT;
}

// Waits for started collective number `seq` against the deadline (the deadline counts from the
// wait, not from the start: a split-phase collective's caller computes in between). The time
// spent here is added to c->wait_s.
static ember_status wait_seq(ember_comm *c, MPI_Request *req, const char *what, int64_t seq) {
    int rc;
    const double start = MPI_Wtime();
    if (c->timeout_s <= 0) {
        rc = MPI_Wait(req, MPI_STATUS_IGNORE);
        c->wait_s += MPI_Wtime() - start;
        return rc == MPI_SUCCESS ? EMBER_OK : mpi_fail(c, rc, what);
    }
    const double announce_at = c->timeout_s < 10 ? c->timeout_s / 10 : 1.0;
    bool announced = false;
    ember_status st = EMBER_OK;
    for (unsigned spins = 0;; spins++) {
        int done = 0;
        rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(c, rc, what);
            break;
        }
        if (done) break;
        // The common case ends here within microseconds. Then the clock is read on every test: on
        // an oversubscribed host each MPI_Test may yield the core for milliseconds, and counting
        // many of them first would overrun the deadline by seconds.
        if (spins < 16) continue;
        const double waited = MPI_Wtime() - start;
        if (c->diag != MPI_COMM_NULL) {
            if (!announced && waited >= announce_at) {
                announce(c);
                announced = true;
            }
            if (announced) listen_diag(c);
        }
        if (waited >= c->timeout_s) {
            st = timed_out(c, what, waited, seq);
            break;
        }
        sched_yield(); // let other ranks on this core run (oversubscribed hosts)
    }
    c->wait_s += MPI_Wtime() - start;
    return st;
}

static ember_status wait_for(ember_comm *c, MPI_Request *req, const char *what) {
    return wait_seq(c, req, what, c->seq);
}

// Every collective starts here: refuses a communicator a timeout has left unusable and numbers
// the collective.
static ember_status begin(ember_comm *c, const char *what) {
    if (c->broken != EMBER_OK) { // the timeout's own message: it names the ranks that did not arrive
        (void)what;
        memcpy(c->ctx->errmsg, c->why, sizeof c->why);
        return c->ctx->last_status = c->broken;
    }
    c->seq++;
    return EMBER_OK;
}

// Starts `call` (an MPI_I... collective writing its request to req_) and waits for it, setting
// `st`; COLL returns the status when it is not EMBER_OK.
#define COLL_ST(st, c, what, call)                                  \
    do {                                                            \
        (st) = begin((c), (what));                                  \
        MPI_Request req_ = MPI_REQUEST_NULL;                        \
        int rc_ = (st) == EMBER_OK ? (call) : MPI_SUCCESS;          \
        if (rc_ != MPI_SUCCESS) (st) = mpi_fail((c), rc_, (what));  \
        if ((st) == EMBER_OK) (st) = wait_for((c), &req_, (what));  \
    } while (0)
#define COLL(c, what, call)                                         \
    do {                                                            \
        ember_status coll_st_;                                      \
        COLL_ST(coll_st_, c, what, call);                           \
        if (coll_st_ != EMBER_OK) return coll_st_;                  \
    } while (0)

// The creation's agreement on its allocations, when this rank could not allocate the communicator
// itself: MPI may still write these after a timeout, so they cannot live on the stack.
static int orphan_flags[4];

ember_status ember_comm_create(ember_ctx *ctx, MPI_Comm comm, ember_comm **out) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, out != NULL, EMBER_ERR_INVALID_ARG, "ember_comm_create: out is NULL");
    *out = NULL;
    int init = 0;
    MPI_Initialized(&init);
    EMBER_CHECK(ctx, init, EMBER_ERR_STATE, "ember_comm_create: MPI is not initialised");
    EMBER_CHECK(ctx, comm != MPI_COMM_NULL, EMBER_ERR_INVALID_ARG, "ember_comm_create: MPI_COMM_NULL");
    int r = 0, w = 1;
    if (MPI_Comm_rank(comm, &r) != MPI_SUCCESS || MPI_Comm_size(comm, &w) != MPI_SUCCESS)
        return ember__error(ctx, EMBER_ERR_INVALID_ARG, "ember_comm_create: not a valid communicator");
    ember_ctx_set_rank(ctx, r); // messages of the collectives below name this rank
    ember_comm *c = ember__calloc(ctx, sizeof *c);
    // The collectives below run on `probe` until c is whole (same ctx, rank, size and deadline).
    ember_comm probe;
    memset(&probe, 0, sizeof probe);
    probe.ctx = ctx;
    probe.rank = r;
    probe.size = w;
    probe.comm = probe.diag = MPI_COMM_NULL;
    probe.timeout_s = EMBER_COMM_DEFAULT_TIMEOUT_S;
    int *flags = orphan_flags;
    if (c) {
        *c = probe;
        c->counts = ember__alloc(ctx, sizeof(int) * 4 * (size_t)w);
        c->heard = ember__alloc(ctx, sizeof(int64_t) * 4 * (size_t)w); // heard, said, pair
        c->saying = ember__alloc(ctx, sizeof(MPI_Request) * (size_t)w);
        flags = c->flags;
    }
    // Agree on the allocations before the collective duplications, so that a failure on one rank
    // leaves nobody waiting in them: (ok, rank) reduced to the lowest rank that failed.
    flags[0] = c && c->counts && c->heard && c->saying;
    flags[1] = r;
    ember_status st = EMBER_OK;
    {
        ember_comm *k = &probe;
        COLL_ST(st, k, "ember_comm_create", MPI_Iallreduce(flags, flags + 2, 1, MPI_2INT, MPI_MINLOC, comm, &req_));
    }
    if (st == EMBER_OK && !flags[2]) {
        ember_ctx_set_rank(ctx, flags[3]); // every rank reports the failing rank's message
        st = ember__error(ctx, EMBER_ERR_NOMEM, "ember_comm_create: out of memory");
        ember_ctx_set_rank(ctx, r);
    }
    if (st == EMBER_OK) COLL_ST(st, c, "ember_comm_create", MPI_Comm_idup(comm, &c->comm, &req_));
    if (st == EMBER_OK) COLL_ST(st, c, "ember_comm_create", MPI_Comm_idup(comm, &c->diag, &req_));
    if (st == EMBER_ERR_TIMEOUT) return st; // MPI may still write into c: it is not freed
    if (st != EMBER_OK) {
        ember_comm_destroy(c);
        return st;
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->diag, MPI_ERRORS_RETURN);
    c->said = c->heard + w;
    c->pair = c->heard + 2 * w;
    for (int i = 0; i < w; i++) {
        c->heard[i] = 0;
        c->saying[i] = MPI_REQUEST_NULL;
    }
    c->seq = 0;
    *out = c;
    return EMBER_OK;
}

ember_status ember__comm_split(ember_comm *c, int32_t color, int32_t key, ember_comm **out) {
    *out = NULL;
    MPI_Comm sub = MPI_COMM_NULL;
    const int rc = MPI_Comm_split(c->comm, color, key, &sub);
    ember_status st = rc == MPI_SUCCESS ? EMBER_OK : mpi_fail(c, rc, "MPI_Comm_split");
    st = ember_comm_agree(c, st);
    if (st == EMBER_OK) st = ember_comm_create(c->ctx, sub, out);
    ember_ctx_set_rank(c->ctx, c->rank);
    if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
    if (st == EMBER_OK) (*out)->timeout_s = c->timeout_s;
    return st;
}

void ember_comm_destroy(ember_comm *c) {
    if (!c) return;
    if (c->diag != MPI_COMM_NULL) {
        listen_diag(c);
        for (int r = 0; r < c->size; r++)
            if (c->saying[r] != MPI_REQUEST_NULL) MPI_Request_free(&c->saying[r]);
        MPI_Comm_free(&c->diag);
    }
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    ember__free(c->ctx, c->counts);
    ember__free(c->ctx, c->heard);
    ember__free(c->ctx, c->saying);
    ember__free(c->ctx, c);
}

ember_status ember_comm_set_timeout(ember_comm *c, double seconds) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(c->ctx, seconds >= 0 && seconds <= 1e9, EMBER_ERR_INVALID_ARG,
                "ember_comm_set_timeout: %g s is not in [0, 1e9] (0: no deadline)", seconds);
    c->timeout_s = seconds;
    return EMBER_OK;
}
double ember_comm_timeout(const ember_comm *c) { return c ? c->timeout_s : 0; }

int32_t ember_comm_rank(const ember_comm *c) { return c ? c->rank : 0; }
int32_t ember_comm_size(const ember_comm *c) { return c ? c->size : 1; }
ember_ctx *ember_comm_ctx(const ember_comm *c) { return c ? c->ctx : NULL; }
MPI_Comm ember_comm_mpi(const ember_comm *c) { return c ? c->comm : MPI_COMM_NULL; }
uint64_t ember_comm_bytes_sent(const ember_comm *c) { return c ? c->bytes_sent : 0; }
void ember_comm_reset_bytes_sent(ember_comm *c) { if (c) c->bytes_sent = 0; }

// The status agreement is ember_comm_agree_args with no argument: every agreement of the library
// is then the same all-reduce (its size fixed at EMBER_ARGS_MAX arguments), so a rank that refuses
// before a collective (ember_comm_agree) meets the others' argument agreement, not another call.
ember_status ember_comm_agree(ember_comm *c, ember_status local) {
    return ember_comm_agree_args(c, local, "ember_comm_agree", NULL, 0);
}

static ember_status allreduce(ember_comm *c, void *buf, size_t n, MPI_Datatype t, MPI_Op op, size_t esz,
                              const char *what) {
    EMBER_CHECK(c->ctx, n == 0 || buf != NULL, EMBER_ERR_INVALID_ARG, "%s: buffer is NULL", what);
    char *p = buf;
    // MPI counts are int: reduce in chunks.
    while (n > 0) {
        int k = n > (size_t)(INT_MAX / 2) ? INT_MAX / 2 : (int)n;
        COLL(c, what, MPI_Iallreduce(MPI_IN_PLACE, p, k, t, op, c->comm, &req_));
        if (c->size > 1) c->bytes_sent += (uint64_t)k * esz;
        p += (size_t)k * esz;
        n -= (size_t)k;
    }
    return EMBER_OK;
}

ember_status ember__comm_allreduce_sum_f32(ember_comm *c, float *buf, size_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    return allreduce(c, buf, n, MPI_FLOAT, MPI_SUM, sizeof(float), "allreduce_sum_f32");
}
ember_status ember__comm_allreduce_sum_f64(ember_comm *c, double *buf, size_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    return allreduce(c, buf, n, MPI_DOUBLE, MPI_SUM, sizeof(double), "allreduce_sum_f64");
}
ember_status ember__comm_allreduce_sum_i64(ember_comm *c, int64_t *buf, size_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    return allreduce(c, buf, n, MPI_INT64_T, MPI_SUM, sizeof(int64_t), "allreduce_sum_i64");
}
ember_status ember__comm_allreduce_max_i64(ember_comm *c, int64_t *buf, size_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    return allreduce(c, buf, n, MPI_INT64_T, MPI_MAX, sizeof(int64_t), "allreduce_max_i64");
}

// Converts int64 element counts to MPI's int counts of a contiguous element type.
static ember_status to_int_counts(ember_comm *c, const int64_t *counts, int *ic, int *idispl, const char *what) {
    int64_t off = 0;
    for (int r = 0; r < c->size; r++) {
        EMBER_CHECK(c->ctx, counts[r] >= 0 && counts[r] <= INT_MAX && off <= INT_MAX, EMBER_ERR_INVALID_ARG,
                    "%s: count %lld for rank %d out of range", what, (long long)counts[r], r);
        ic[r] = (int)counts[r];
        idispl[r] = (int)off;
        off += counts[r];
    }
    EMBER_CHECK(c->ctx, off <= INT_MAX, EMBER_ERR_INVALID_ARG, "%s: %lld elements exceed MPI's int counts", what,
                (long long)off);
    return EMBER_OK;
}

ember_status ember__comm_alltoallv(ember_comm *c, const void *send, const int64_t *send_counts, void *recv,
                                   const int64_t *recv_counts, size_t elem_size) {
    EMBER_CHECK(c->ctx, send_counts && recv_counts && elem_size > 0 && elem_size <= INT_MAX, EMBER_ERR_INVALID_ARG,
                "alltoallv: bad arguments");
    ember_status st = EMBER_OK;
    int *buf = c->counts;
    int *sc = buf, *sd = buf + c->size, *rc = buf + 2 * c->size, *rd = buf + 3 * c->size;
    st = to_int_counts(c, send_counts, sc, sd, "alltoallv send");
    if (st == EMBER_OK) st = to_int_counts(c, recv_counts, rc, rd, "alltoallv recv");
    if (st == EMBER_OK) {
        MPI_Datatype t;
        MPI_Type_contiguous((int)elem_size, MPI_BYTE, &t);
        MPI_Type_commit(&t);
        st = begin(c, "alltoallv");
        MPI_Request req = MPI_REQUEST_NULL;
        int r = st == EMBER_OK ? MPI_Ialltoallv(send, sc, sd, t, recv, rc, rd, t, c->comm, &req) : MPI_SUCCESS;
        MPI_Type_free(&t); // MPI keeps it until the exchange completes
        if (r != MPI_SUCCESS) st = mpi_fail(c, r, "alltoallv");
        if (st == EMBER_OK) st = wait_for(c, &req, "alltoallv");
        for (int s = 0; s < c->size; s++)
            if (s != c->rank) c->bytes_sent += (uint64_t)send_counts[s] * elem_size;
    }
    return st;
}

// --- Split-phase collectives -----------------------------------------------------------------

static ember_status req_start(ember_comm *c, ember__req *r, const char *what) {
    EMBER_CHECK(c->ctx, r != NULL && !r->pending, EMBER_ERR_STATE, "%s: the request is still in flight", what);
    if (!r->counts) r->counts = ember__alloc(c->ctx, sizeof(int) * 4 * (size_t)c->size);
    if (!r->counts) return ember__error(c->ctx, EMBER_ERR_NOMEM, "%s: out of memory", what);
    r->mpi = MPI_REQUEST_NULL;
    r->what = what;
    return EMBER_OK;
}

static void req_push(ember_comm *c, ember__req *r) {
    r->seq = c->seq;
    r->pending = 1;
    r->next = c->inflight;
    c->inflight = r;
}

ember_status ember__comm_ialltoallv(ember_comm *c, const void *send, const int64_t *send_counts, void *recv,
                                    const int64_t *recv_counts, size_t elem_size, ember__req *r) {
    EMBER_CHECK(c->ctx, send_counts && recv_counts && elem_size > 0 && elem_size <= INT_MAX, EMBER_ERR_INVALID_ARG,
                "alltoallv: bad arguments");
    EMBER_TRY(req_start(c, r, "alltoallv"));
    int *sc = r->counts, *sd = sc + c->size, *rc = sc + 2 * c->size, *rd = sc + 3 * c->size;
    ember_status st = to_int_counts(c, send_counts, sc, sd, "alltoallv send");
    if (st == EMBER_OK) st = to_int_counts(c, recv_counts, rc, rd, "alltoallv recv");
    if (st == EMBER_OK) st = begin(c, "alltoallv");
    if (st != EMBER_OK) return st;
    MPI_Datatype t;
    MPI_Type_contiguous((int)elem_size, MPI_BYTE, &t);
    MPI_Type_commit(&t);
    int rc_ = MPI_Ialltoallv(send, sc, sd, t, recv, rc, rd, t, c->comm, &r->mpi);
    MPI_Type_free(&t); // MPI keeps it until the exchange completes
    if (rc_ != MPI_SUCCESS) return mpi_fail(c, rc_, "alltoallv");
    req_push(c, r);
    for (int q = 0; q < c->size; q++)
        if (q != c->rank) c->bytes_sent += (uint64_t)send_counts[q] * elem_size;
    return EMBER_OK;
}

ember_status ember__comm_iallgatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                     const int64_t *recv_counts, size_t elem_size, ember__req *r) {
    EMBER_CHECK(c->ctx, recv_counts && count >= 0 && count <= INT_MAX && elem_size > 0 && elem_size <= INT_MAX,
                EMBER_ERR_INVALID_ARG, "allgatherv: bad arguments");
    EMBER_TRY(req_start(c, r, "allgatherv"));
    int *rc = r->counts, *rd = rc + c->size;
    ember_status st = to_int_counts(c, recv_counts, rc, rd, "allgatherv");
    if (st == EMBER_OK) st = begin(c, "allgatherv");
    if (st != EMBER_OK) return st;
    MPI_Datatype t;
    MPI_Type_contiguous((int)elem_size, MPI_BYTE, &t);
    MPI_Type_commit(&t);
    int rc_ = MPI_Iallgatherv(send, (int)count, t, recv, rc, rd, t, c->comm, &r->mpi);
    MPI_Type_free(&t);
    if (rc_ != MPI_SUCCESS) return mpi_fail(c, rc_, "allgatherv");
    req_push(c, r);
    c->bytes_sent += (uint64_t)count * elem_size * (uint64_t)(c->size - 1);
    return EMBER_OK;
}

ember_status ember__comm_wait(ember_comm *c, ember__req *r) {
    if (!r || !r->pending) return EMBER_OK;
    for (ember__req **p = &c->inflight; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    r->pending = 0;
    r->next = NULL;
    if (c->broken != EMBER_OK) { // a timeout elsewhere: MPI cannot cancel it, report that
        memcpy(c->ctx->errmsg, c->why, sizeof c->why);
        return c->ctx->last_status = c->broken;
    }
    return wait_seq(c, &r->mpi, r->what, r->seq);
}

void ember__comm_req_free(ember_comm *c, ember__req *r) {
    if (!r) return;
    ember__free(c->ctx, r->counts);
    r->counts = NULL;
}

ember_status ember_comm_progress(ember_comm *c) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    for (ember__req *r = c->inflight; r; r = r->next) {
        if (r->mpi == MPI_REQUEST_NULL) continue;
        int done = 0;
        int rc = MPI_Test(&r->mpi, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "ember_comm_progress");
    }
    return EMBER_OK;
}

double ember_comm_wait_seconds(const ember_comm *c) { return c ? c->wait_s : 0; }
void ember_comm_reset_wait_seconds(ember_comm *c) { if (c) c->wait_s = 0; }

ember_status ember_comm_alltoall_i64(ember_comm *c, const int64_t *send, int64_t *recv) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    COLL(c, "alltoall_i64", MPI_Ialltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, c->comm, &req_));
    c->bytes_sent += (uint64_t)(c->size - 1) * sizeof(int64_t);
    return EMBER_OK;
}

ember_status ember__comm_alltoall_i64n(ember_comm *c, const int64_t *send, int64_t *recv, int n) {
    COLL(c, "alltoall_i64", MPI_Ialltoall(send, n, MPI_INT64_T, recv, n, MPI_INT64_T, c->comm, &req_));
    c->bytes_sent += (uint64_t)(c->size - 1) * (uint64_t)n * sizeof(int64_t);
    return EMBER_OK;
}

ember_status ember__comm_allgatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                    const int64_t *recv_counts, size_t elem_size) {
    EMBER_CHECK(c->ctx, recv_counts && count >= 0 && count <= INT_MAX && elem_size > 0 && elem_size <= INT_MAX,
                EMBER_ERR_INVALID_ARG, "allgatherv: bad arguments");
    int *buf = c->counts;
    ember_status st = to_int_counts(c, recv_counts, buf, buf + c->size, "allgatherv");
    if (st == EMBER_OK) {
        MPI_Datatype t;
        MPI_Type_contiguous((int)elem_size, MPI_BYTE, &t);
        MPI_Type_commit(&t);
        st = begin(c, "allgatherv");
        MPI_Request req = MPI_REQUEST_NULL;
        int r = st == EMBER_OK ? MPI_Iallgatherv(send, (int)count, t, recv, buf, buf + c->size, t, c->comm, &req)
                               : MPI_SUCCESS;
        MPI_Type_free(&t);
        if (r != MPI_SUCCESS) st = mpi_fail(c, r, "allgatherv");
        if (st == EMBER_OK) st = wait_for(c, &req, "allgatherv");
        c->bytes_sent += (uint64_t)count * elem_size * (uint64_t)(c->size - 1);
    }
    return st;
}

ember_status ember__comm_gatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                 const int64_t *recv_counts, size_t elem_size, int32_t root) {
    EMBER_CHECK(c->ctx, root >= 0 && root < c->size && count >= 0 && count <= INT_MAX && elem_size > 0 &&
                            elem_size <= INT_MAX && (c->rank != root || recv_counts),
                EMBER_ERR_INVALID_ARG, "gatherv: bad arguments (root %d, count %lld)", (int)root, (long long)count);
    int *buf = c->counts;
    ember_status st = c->rank == root ? to_int_counts(c, recv_counts, buf, buf + c->size, "gatherv") : EMBER_OK;
    if (st == EMBER_OK) {
        MPI_Datatype t;
        MPI_Type_contiguous((int)elem_size, MPI_BYTE, &t);
        MPI_Type_commit(&t);
        st = begin(c, "gatherv");
        MPI_Request req = MPI_REQUEST_NULL;
        int r = st == EMBER_OK ? MPI_Igatherv(send, (int)count, t, recv, buf, buf + c->size, t, root, c->comm, &req)
                               : MPI_SUCCESS;
        MPI_Type_free(&t);
        if (r != MPI_SUCCESS) st = mpi_fail(c, r, "gatherv");
        if (st == EMBER_OK) st = wait_for(c, &req, "gatherv");
        if (c->rank != root) c->bytes_sent += (uint64_t)count * elem_size;
    }
    return st;
}

ember_status ember_comm_allgather_i64(ember_comm *c, int64_t value, int64_t *recv) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    COLL(c, "allgather_i64", MPI_Iallgather(&value, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, c->comm, &req_));
    c->bytes_sent += (uint64_t)(c->size - 1) * sizeof(int64_t);
    return EMBER_OK;
}

ember_status ember__comm_bcast(ember_comm *c, void *buf, size_t bytes, int32_t root) {
    EMBER_CHECK(c->ctx, root >= 0 && root < c->size, EMBER_ERR_INVALID_ARG, "bcast: root %d outside [0, %d)",
                (int)root, (int)c->size);
    char *p = buf;
    while (bytes > 0) {
        int k = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        COLL(c, "bcast", MPI_Ibcast(p, k, MPI_BYTE, root, c->comm, &req_));
        if (c->rank == root) c->bytes_sent += (uint64_t)k * (uint64_t)(c->size - 1);
        p += k;
        bytes -= (size_t)k;
    }
    return EMBER_OK;
}

ember_status ember_comm_barrier(ember_comm *c) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    COLL(c, "barrier", MPI_Ibarrier(c->comm, &req_));
    return EMBER_OK;
}

// --- The public collectives: every argument every rank must give alike agreed first ----------

// The agreement's own exchanges, not counted in bytes_sent (which counts what the caller moves):
// every rank's value to every rank (gather) or value q of each rank to rank q (scatter).
static ember_status gather_i64(ember_comm *c, const char *fn, int64_t value, int64_t *all) {
    COLL(c, fn, MPI_Iallgather(&value, 1, MPI_INT64_T, all, 1, MPI_INT64_T, c->comm, &req_));
    return EMBER_OK;
}
static ember_status scatter_i64(ember_comm *c, const char *fn, const int64_t *mine, int64_t *got) {
    COLL(c, fn, MPI_Ialltoall(mine, 1, MPI_INT64_T, got, 1, MPI_INT64_T, c->comm, &req_));
    return EMBER_OK;
}

// Argument a (value: its compared value here) differs across ranks: the first rank whose value is
// not rank 0's names it beside rank 0's, and every rank returns EMBER_ERR_INVALID_ARG with that
// message. Collective.
static ember_status disagreement(ember_comm *c, const char *fn, const ember_arg *a, int64_t value) {
    int64_t *all = c->pair;
    EMBER_TRY(gather_i64(c, fn, value, all));
    int32_t odd = 1;
    while (odd < c->size - 1 && all[odd] == all[0]) odd++;
    char theirs[96], ours[96];
    if (a->text) snprintf(theirs, sizeof theirs, "'%s'", a->text);
    else snprintf(theirs, sizeof theirs, "%lld", (long long)a->value);
    memcpy(ours, theirs, sizeof ours);
    COLL(c, fn, MPI_Ibcast(theirs, (int)sizeof theirs, MPI_CHAR, odd, c->comm, &req_));
    COLL(c, fn, MPI_Ibcast(ours, (int)sizeof ours, MPI_CHAR, 0, c->comm, &req_));
    theirs[sizeof theirs - 1] = ours[sizeof ours - 1] = '\0';
    if (a->digest)
        snprintf(c->ctx->errmsg, sizeof c->ctx->errmsg, "%s: ranks disagree on %s (rank %d and rank 0 differ)", fn,
                 a->name, (int)odd);
    else
        snprintf(c->ctx->errmsg, sizeof c->ctx->errmsg, "%s: ranks disagree on %s: %s on rank %d, %s on rank 0", fn,
                 a->name, theirs, (int)odd, ours);
    return c->ctx->last_status = EMBER_ERR_INVALID_ARG;
}

ember_status ember_comm_agree_args(ember_comm *c, ember_status st, const char *fn, const ember_arg *args, int32_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    if (!fn) fn = "ember_comm_agree_args";
    if (st == EMBER_OK && (n < 0 || n > EMBER_ARGS_MAX || (n > 0 && !args)))
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: %d arguments to agree on (at most %d)", fn, (int)n,
                          EMBER_ARGS_MAX);
    if (n < 0 || n > EMBER_ARGS_MAX || !args) n = 0; // agree on the status alone
    // v[0]: the worst status (its rank the lowest of those with it) or -1; v[1 + 2i], v[2 + 2i]: the
    // maximum of argument i's value and of its complement (so ~v[2 + 2i] is its minimum).
    int64_t v[1 + 2 * EMBER_ARGS_MAX], value[EMBER_ARGS_MAX];
    v[0] = st != EMBER_OK ? ((int64_t)(-(int)st) << 32) | (int64_t)(c->size - 1 - c->rank) : -1;
    for (int32_t i = 0; i < EMBER_ARGS_MAX; i++) {
        value[i] = i >= n ? 0 : args[i].text ? (int64_t)ember__str_digest(args[i].text) : args[i].value;
        v[1 + 2 * i] = value[i];
        v[2 + 2 * i] = ~value[i];
    }
    COLL(c, fn, MPI_Iallreduce(MPI_IN_PLACE, v, 1 + 2 * EMBER_ARGS_MAX, MPI_INT64_T, MPI_MAX, c->comm, &req_));
    if (v[0] >= 0) { // a rank failed: everyone learns its message, as ember_comm_agree
        const int32_t failed = c->size - 1 - (int32_t)(v[0] & 0xffffffff);
        const ember_status worst = (ember_status)(-(int)(v[0] >> 32));
        char msg[EMBER_ERRMSG_CAP];
        memcpy(msg, c->ctx->errmsg, sizeof msg);
        COLL(c, fn, MPI_Ibcast(msg, (int)sizeof msg, MPI_CHAR, failed, c->comm, &req_));
        msg[sizeof msg - 1] = '\0';
        if (failed != c->rank) {
            memcpy(c->ctx->errmsg, msg, sizeof msg);
            c->ctx->last_status = worst;
        }
        return worst;
    }
    int32_t i = 0;
    while (i < n && v[1 + 2 * i] == ~v[2 + 2 * i]) i++;
    if (i == n) return EMBER_OK;
    return disagreement(c, fn, &args[i], value[i]);
}

#define CHECKED_ALLREDUCE(name, T)                                                                          \
    ember_status ember_comm_##name(ember_comm *c, T *buf, size_t n) {                                       \
        if (!c) return EMBER_ERR_INVALID_ARG;                                                               \
        const char *fn = "ember_comm_" #name;                                                               \
        const ember_status st =                                                                             \
            n > 0 && !buf ? ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: buffer is NULL", fn) : EMBER_OK; \
        const ember_arg args[] = {EMBER__ARG("count", n)};                                                 \
        EMBER_TRY(ember_comm_agree_args(c, st, fn, args, 1));                                              \
        return ember__comm_##name(c, buf, n);                                                               \
    }
CHECKED_ALLREDUCE(allreduce_sum_f32, float)
CHECKED_ALLREDUCE(allreduce_sum_f64, double)
CHECKED_ALLREDUCE(allreduce_sum_i64, int64_t)
CHECKED_ALLREDUCE(allreduce_max_i64, int64_t)
#undef CHECKED_ALLREDUCE

// A rank's counts: every entry in [0, INT_MAX] (MPI's counts are int).
static ember_status check_counts(ember_comm *c, const char *fn, const char *what, const int64_t *counts) {
    EMBER_CHECK(c->ctx, counts != NULL, EMBER_ERR_INVALID_ARG, "%s: %s is NULL", fn, what);
    for (int32_t q = 0; q < c->size; q++)
        EMBER_CHECK(c->ctx, counts[q] >= 0 && counts[q] <= INT_MAX, EMBER_ERR_INVALID_ARG,
                    "%s: %s[%d] = %lld outside [0, %d]", fn, what, (int)q, (long long)counts[q], INT_MAX);
    return EMBER_OK;
}

ember_status ember_comm_alltoallv(ember_comm *c, const void *send, const int64_t *send_counts, void *recv,
                                  const int64_t *recv_counts, size_t elem_size) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_comm_alltoallv";
    ember_status st = check_counts(c, fn, "send_counts", send_counts);
    if (st == EMBER_OK) st = check_counts(c, fn, "recv_counts", recv_counts);
    if (st == EMBER_OK && (elem_size == 0 || elem_size > INT_MAX))
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: element size %zu", fn, elem_size);
    // Every rank's count for rank q is what q expects from it: each learns what the others send it.
    int64_t *mine = c->pair, *got = c->pair + c->size;
    for (int32_t q = 0; q < c->size; q++) mine[q] = st == EMBER_OK ? send_counts[q] : 0;
    EMBER_TRY(scatter_i64(c, fn, mine, got));
    for (int32_t q = 0; st == EMBER_OK && q < c->size; q++)
        if (got[q] != recv_counts[q])
            st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: rank %d sends %lld elements to rank %d, which expects %lld",
                              fn, (int)q, (long long)got[q], (int)c->rank, (long long)recv_counts[q]);
    const ember_arg args[] = {EMBER__ARG("element size", elem_size)};
    EMBER_TRY(ember_comm_agree_args(c, st, fn, args, 1));
    return ember__comm_alltoallv(c, send, send_counts, recv, recv_counts, elem_size);
}

ember_status ember_comm_allgatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                   const int64_t *recv_counts, size_t elem_size) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_comm_allgatherv";
    ember_status st = check_counts(c, fn, "recv_counts", recv_counts);
    if (st == EMBER_OK && (elem_size == 0 || elem_size > INT_MAX))
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: element size %zu", fn, elem_size);
    // recv_counts are the same on every rank (agreed below), so a rank's count matching its entry
    // makes the whole exchange consistent.
    if (st == EMBER_OK && count != recv_counts[c->rank])
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: %lld elements sent, recv_counts[%d] = %lld", fn,
                          (long long)count, (int)c->rank, (long long)recv_counts[c->rank]);
    const ember_arg args[] = {EMBER__ARG("element size", elem_size),
                               (ember_arg){.name = "recv_counts",
                                          .value = recv_counts ? (int64_t)ember_digest(recv_counts, sizeof(int64_t) * (size_t)c->size) : 0,
                                          .digest = 1}};
    EMBER_TRY(ember_comm_agree_args(c, st, fn, args, 2));
    return ember__comm_allgatherv(c, send, count, recv, recv_counts, elem_size);
}

ember_status ember_comm_gatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                const int64_t *recv_counts, size_t elem_size, int32_t root) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_comm_gatherv";
    ember_status st = EMBER_OK;
    if (root < 0 || root >= c->size)
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: root %d outside [0, %d)", fn, (int)root, (int)c->size);
    else if (count < 0 || count > INT_MAX || elem_size == 0 || elem_size > INT_MAX)
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: count %lld, element size %zu", fn, (long long)count,
                          elem_size);
    else if (c->rank == root)
        st = check_counts(c, fn, "recv_counts", recv_counts);
    const ember_arg args[] = {EMBER__ARG("root", root), EMBER__ARG("element size", elem_size)};
    EMBER_TRY(ember_comm_agree_args(c, st, fn, args, 2));
    // The root checks every rank's count against what it expects.
    int64_t *all = c->pair;
    EMBER_TRY(gather_i64(c, fn, count, all));
    for (int32_t q = 0; c->rank == root && st == EMBER_OK && q < c->size; q++)
        if (all[q] != recv_counts[q])
            st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: rank %d sends %lld elements, the root expects %lld",
                              fn, (int)q, (long long)all[q], (long long)recv_counts[q]);
    EMBER_TRY(ember_comm_agree(c, st));
    return ember__comm_gatherv(c, send, count, recv, recv_counts, elem_size, root);
}

ember_status ember_comm_bcast(ember_comm *c, void *buf, size_t bytes, int32_t root) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    const char *fn = "ember_comm_bcast";
    ember_status st = EMBER_OK;
    if (root < 0 || root >= c->size)
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: root %d outside [0, %d)", fn, (int)root, (int)c->size);
    else if (bytes > 0 && !buf)
        st = ember__error(c->ctx, EMBER_ERR_INVALID_ARG, "%s: buffer is NULL", fn);
    const ember_arg args[] = {EMBER__ARG("root", root), EMBER__ARG("bytes", bytes)};
    EMBER_TRY(ember_comm_agree_args(c, st, fn, args, 2));
    return ember__comm_bcast(c, buf, bytes, root);
}

// The gradient all-reduce of both dtypes: agree on the arguments, sum, and for MEAN multiply by
// the dtype's 1/W: the factor the sharded embeddings apply (ember__grad_scale in
// shard/internal.h), so dense and sparse gradients round alike.
#define ALLREDUCE_GRADS(T, sum_fn)                                                                          \
    if (!comm) return EMBER_ERR_INVALID_ARG;                                                                \
    ember_status st = EMBER_OK;                                                                             \
    if (conv != EMBER_GRAD_MEAN && conv != EMBER_GRAD_SUM)                                                  \
        st = ember__error(comm->ctx, EMBER_ERR_INVALID_ARG, "%s: unknown gradient convention %d", fn, (int)conv); \
    else if (n > 0 && !grad)                                                                                \
        st = ember__error(comm->ctx, EMBER_ERR_INVALID_ARG, "%s: grad is NULL", fn);                        \
    const ember_arg args[] = {EMBER__ARG("convention", conv), EMBER__ARG("count", n)};                     \
    EMBER_TRY(ember_comm_agree_args(comm, st, fn, args, 2));                                               \
    EMBER_TRY(sum_fn(comm, grad, n));                                                                       \
    if (conv == EMBER_GRAD_MEAN) {                                                                          \
        const T inv = (T)1 / (T)comm->size;                                                                 \
        for (size_t i = 0; i < n; i++) grad[i] *= inv;                                                      \
    }                                                                                                       \
    return EMBER_OK;

ember_status ember_comm_allreduce_grads(ember_comm *comm, ember_grad_convention conv, float *grad, size_t n) {
    const char *fn = "ember_comm_allreduce_grads";
    ALLREDUCE_GRADS(float, ember__comm_allreduce_sum_f32)
}

ember_status ember_comm_allreduce_grads_f64(ember_comm *comm, ember_grad_convention conv, double *grad, size_t n) {
    const char *fn = "ember_comm_allreduce_grads_f64";
    ALLREDUCE_GRADS(double, ember__comm_allreduce_sum_f64)
}
#undef ALLREDUCE_GRADS

// --- Agreement on a configuration -------------------------------------------------------------

void ember__fields_add(ember__fields *f, const char *fmt, ...) {
    if (f->st != EMBER_OK) return;
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t room = f->buf.cap > f->len ? f->buf.cap - f->len : 0;
        va_list ap;
        va_start(ap, fmt);
        int n = room ? vsnprintf((char *)f->buf.p + f->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n + 1 < room) { // the line and its newline fit
            f->len += (size_t)n;
            ((char *)f->buf.p)[f->len++] = '\n';
            ((char *)f->buf.p)[f->len] = '\0';
            return;
        }
        size_t want = (f->buf.cap ? 2 * f->buf.cap : 4096) + (n > 0 ? (size_t)n + 2 : 256);
        ember__buf grown = {NULL, 0};
        if (!ember__buf_reserve(f->ctx, &grown, want)) {
            f->st = EMBER_ERR_NOMEM;
            return;
        }
        if (f->len) memcpy(grown.p, f->buf.p, f->len + 1);
        ember__buf_free(f->ctx, &f->buf);
        f->buf = grown;
    }
    f->st = ember__error(f->ctx, EMBER_ERR_INVALID_ARG, "configuration field longer than %zu bytes", f->buf.cap);
}

void ember__fields_free(ember__fields *f) { ember__buf_free(f->ctx, &f->buf); }

static uint64_t text_digest(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

// Line `k` (0-based) of text[0, n): its start and length (length -1 when there is no such line).
static const char *line_at(const char *text, size_t n, int64_t k, int64_t *len) {
    const char *p = text, *end = text + n;
    for (; k > 0 && p < end; k--) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    if (p >= end) {
        *len = -1;
        return p;
    }
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    *len = (nl ? nl : end) - p;
    return p;
}

ember_status ember__comm_agree_fields(ember_comm *c, const char *what, const ember__fields *f) {
    const char *mine = f->len ? (const char *)f->buf.p : "";
    int64_t *all = ember__alloc(c->ctx, sizeof(int64_t) * (size_t)c->size);
    ember_status st = f->st != EMBER_OK ? f->st
                      : all             ? EMBER_OK
                                        : ember__error(c->ctx, EMBER_ERR_NOMEM, "%s: out of memory", what);
    st = ember_comm_agree(c, st);
    if (st == EMBER_OK) st = ember_comm_allgather_i64(c, (int64_t)text_digest(mine, f->len), all);
    bool same = true;
    for (int32_t r = 1; st == EMBER_OK && r < c->size; r++) same = same && all[r] == all[0];
    if (st != EMBER_OK || same) {
        ember__free(c->ctx, all);
        return st;
    }
    // They differ: rank 0's text is the reference; every rank finds its first line that differs
    // from it; the lowest rank at the earliest such line sends that line to everyone.
    int64_t n0 = (int64_t)f->len;
    st = ember_comm_bcast(c, &n0, sizeof n0, 0);
    ember__buf ref = {NULL, 0};
    char *r0 = st == EMBER_OK ? ember__buf_reserve(c->ctx, &ref, (size_t)n0 + 1) : NULL;
    if (st == EMBER_OK) st = ember_comm_agree(c, r0 ? EMBER_OK : EMBER_ERR_NOMEM);
    if (st == EMBER_OK && c->rank == 0 && n0) memcpy(r0, mine, (size_t)n0);
    if (st == EMBER_OK) st = ember_comm_bcast(c, r0, (size_t)n0, 0);
    int64_t first = INT64_MAX;
    for (int64_t k = 0; st == EMBER_OK; k++) {
        int64_t la, lb;
        const char *a = line_at(mine, f->len, k, &la), *b = line_at(r0, (size_t)n0, k, &lb);
        if (la < 0 && lb < 0) break;
        if (la != lb || memcmp(a, b, (size_t)la) != 0) {
            first = k;
            break;
        }
    }
    if (st == EMBER_OK) st = ember_comm_allgather_i64(c, first, all);
    int32_t odd = 0;
    for (int32_t r = 1; st == EMBER_OK && r < c->size; r++)
        if (all[r] < all[odd]) odd = r;
    const int64_t line = st == EMBER_OK ? all[odd] : 0;
    char theirs[192] = "", ours[192] = "";
    int64_t la, lb;
    if (st == EMBER_OK && c->rank == odd) {
        const char *a = line_at(mine, f->len, line, &la);
        if (la >= 0) snprintf(theirs, sizeof theirs, "%.*s", (int)la, a);
    }
    if (st == EMBER_OK) st = ember_comm_bcast(c, theirs, sizeof theirs, odd);
    if (st == EMBER_OK) {
        theirs[sizeof theirs - 1] = '\0';
        const char *b = line_at(r0, (size_t)n0, line, &lb);
        if (lb >= 0) snprintf(ours, sizeof ours, "%.*s", (int)lb, b);
        // "<field>: <value>" on both sides: the field is named once when it is the same.
        const char *ca = strstr(theirs, ": "), *cb = strstr(ours, ": ");
        char *msg = c->ctx->errmsg;
        const size_t cap = sizeof c->ctx->errmsg;
        if (ca && cb && ca - theirs == cb - ours && memcmp(theirs, ours, (size_t)(ca - theirs)) == 0)
            snprintf(msg, cap, "%s: ranks disagree on the configuration: %.*s: %s on rank %d, %s on rank 0", what,
                     (int)(ca - theirs), theirs, ca + 2, (int)odd, cb + 2);
        else
            snprintf(msg, cap, "%s: ranks disagree on the configuration: \"%s\" on rank %d, \"%s\" on rank 0", what,
                     theirs[0] ? theirs : "(nothing more)", (int)odd, ours[0] ? ours : "(nothing more)");
        c->ctx->last_status = st = EMBER_ERR_INVALID_ARG;
    }
    ember__buf_free(c->ctx, &ref);
    ember__free(c->ctx, all);
    return st;
}
