// MPI communicator wrapper: duplication, status agreement, byte-counted collectives.
#include <limits.h>
#include <string.h>

#include "comm/internal.h"

static ember_status mpi_fail(ember_comm *c, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return ember__error(c->ctx, EMBER_ERR_COMM, "%s: MPI error: %s", what, s);
}

#define MPI_TRY(c, call, what)                               \
    do {                                                     \
        int rc_ = (call);                                    \
        if (rc_ != MPI_SUCCESS) return mpi_fail((c), rc_, (what)); \
    } while (0)

ember_status ember_comm_create(ember_ctx *ctx, MPI_Comm comm, ember_comm **out) {
    if (!ctx) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(ctx, out != NULL, EMBER_ERR_INVALID_ARG, "ember_comm_create: out is NULL");
    *out = NULL;
    int init = 0;
    MPI_Initialized(&init);
    EMBER_CHECK(ctx, init, EMBER_ERR_STATE, "ember_comm_create: MPI is not initialised");
    EMBER_CHECK(ctx, comm != MPI_COMM_NULL, EMBER_ERR_INVALID_ARG, "ember_comm_create: MPI_COMM_NULL");
    ember_comm *c = ember__xalloc(ctx, sizeof *c, "communicator");
    if (!c) return EMBER_ERR_NOMEM;
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    int rc = MPI_Comm_dup(comm, &c->comm);
    if (rc != MPI_SUCCESS) {
        ember_status st = mpi_fail(c, rc, "ember_comm_create");
        ember__free(ctx, c);
        return st;
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    int r, w;
    MPI_Comm_rank(c->comm, &r);
    MPI_Comm_size(c->comm, &w);
    c->rank = r;
    c->size = w;
    c->counts = ember__xalloc(ctx, sizeof(int) * 4 * (size_t)w, "communicator counts");
    if (!c->counts) {
        MPI_Comm_free(&c->comm);
        ember__free(ctx, c);
        return EMBER_ERR_NOMEM;
    }
    ember_ctx_set_rank(ctx, r);
    *out = c;
    return EMBER_OK;
}

void ember_comm_destroy(ember_comm *c) {
    if (!c) return;
    MPI_Comm_free(&c->comm);
    ember__free(c->ctx, c->counts);
    ember__free(c->ctx, c);
}

int32_t ember_comm_rank(const ember_comm *c) { return c ? c->rank : 0; }
int32_t ember_comm_size(const ember_comm *c) { return c ? c->size : 1; }
ember_ctx *ember_comm_ctx(const ember_comm *c) { return c ? c->ctx : NULL; }
MPI_Comm ember_comm_mpi(const ember_comm *c) { return c ? c->comm : MPI_COMM_NULL; }
uint64_t ember_comm_bytes_sent(const ember_comm *c) { return c ? c->bytes_sent : 0; }
void ember_comm_reset_bytes_sent(ember_comm *c) { if (c) c->bytes_sent = 0; }

ember_status ember_comm_agree(ember_comm *c, ember_status local) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    struct { int st; int rank; } in = {(int)local, c->rank}, outv;
    int rc = MPI_Allreduce(&in, &outv, 1, MPI_2INT, MPI_MINLOC, c->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "ember_comm_agree");
    if (outv.st == EMBER_OK) return EMBER_OK;
    // Everyone learns the failing rank's message, so every rank reports the same cause.
    char msg[EMBER_ERRMSG_CAP];
    memcpy(msg, c->ctx->errmsg, sizeof msg);
    rc = MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, outv.rank, c->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "ember_comm_agree");
    msg[sizeof msg - 1] = '\0';
    if (outv.rank != c->rank) {
        ember__error(c->ctx, (ember_status)outv.st, "rank %d failed: %s", outv.rank, msg);
    }
    return (ember_status)outv.st;
}

static ember_status allreduce(ember_comm *c, void *buf, size_t n, MPI_Datatype t, MPI_Op op, size_t esz,
                              const char *what) {
    EMBER_CHECK(c->ctx, n == 0 || buf != NULL, EMBER_ERR_INVALID_ARG, "%s: buffer is NULL", what);
    char *p = buf;
    // MPI counts are int: reduce in chunks.
    while (n > 0) {
        int k = n > (size_t)(INT_MAX / 2) ? INT_MAX / 2 : (int)n;
        MPI_TRY(c, MPI_Allreduce(MPI_IN_PLACE, p, k, t, op, c->comm), what);
        if (c->size > 1) c->bytes_sent += (uint64_t)k * esz;
        p += (size_t)k * esz;
        n -= (size_t)k;
    }
    return EMBER_OK;
}

ember_status ember_comm_allreduce_sum_f32(ember_comm *c, float *buf, size_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    return allreduce(c, buf, n, MPI_FLOAT, MPI_SUM, sizeof(float), "allreduce_sum_f32");
}
ember_status ember_comm_allreduce_sum_f64(ember_comm *c, double *buf, size_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    return allreduce(c, buf, n, MPI_DOUBLE, MPI_SUM, sizeof(double), "allreduce_sum_f64");
}
ember_status ember_comm_allreduce_sum_i64(ember_comm *c, int64_t *buf, size_t n) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    return allreduce(c, buf, n, MPI_INT64_T, MPI_SUM, sizeof(int64_t), "allreduce_sum_i64");
}
ember_status ember_comm_allreduce_max_i64(ember_comm *c, int64_t *buf, size_t n) {
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

ember_status ember_comm_alltoallv(ember_comm *c, const void *send, const int64_t *send_counts, void *recv,
                                  const int64_t *recv_counts, size_t elem_size) {
    if (!c) return EMBER_ERR_INVALID_ARG;
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
        int r = MPI_Alltoallv(send, sc, sd, t, recv, rc, rd, t, c->comm);
        MPI_Type_free(&t);
        if (r != MPI_SUCCESS) st = mpi_fail(c, r, "alltoallv");
        for (int s = 0; s < c->size; s++)
            if (s != c->rank) c->bytes_sent += (uint64_t)send_counts[s] * elem_size;
    }
    return st;
}

ember_status ember_comm_alltoall_i64(ember_comm *c, const int64_t *send, int64_t *recv) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    MPI_TRY(c, MPI_Alltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, c->comm), "alltoall_i64");
    c->bytes_sent += (uint64_t)(c->size - 1) * sizeof(int64_t);
    return EMBER_OK;
}

ember_status ember_comm_allgatherv(ember_comm *c, const void *send, int64_t count, void *recv,
                                   const int64_t *recv_counts, size_t elem_size) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(c->ctx, recv_counts && count >= 0 && count <= INT_MAX && elem_size > 0 && elem_size <= INT_MAX,
                EMBER_ERR_INVALID_ARG, "allgatherv: bad arguments");
    int *buf = c->counts;
    ember_status st = to_int_counts(c, recv_counts, buf, buf + c->size, "allgatherv");
    if (st == EMBER_OK) {
        MPI_Datatype t;
        MPI_Type_contiguous((int)elem_size, MPI_BYTE, &t);
        MPI_Type_commit(&t);
        int r = MPI_Allgatherv(send, (int)count, t, recv, buf, buf + c->size, t, c->comm);
        MPI_Type_free(&t);
        if (r != MPI_SUCCESS) st = mpi_fail(c, r, "allgatherv");
        c->bytes_sent += (uint64_t)count * elem_size * (uint64_t)(c->size - 1);
    }
    return st;
}

ember_status ember_comm_allgather_i64(ember_comm *c, int64_t value, int64_t *recv) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    MPI_TRY(c, MPI_Allgather(&value, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, c->comm), "allgather_i64");
    c->bytes_sent += (uint64_t)(c->size - 1) * sizeof(int64_t);
    return EMBER_OK;
}

ember_status ember_comm_bcast(ember_comm *c, void *buf, size_t bytes, int32_t root) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    EMBER_CHECK(c->ctx, root >= 0 && root < c->size, EMBER_ERR_INVALID_ARG, "bcast: root %d outside [0, %d)",
                (int)root, (int)c->size);
    char *p = buf;
    while (bytes > 0) {
        int k = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        MPI_TRY(c, MPI_Bcast(p, k, MPI_BYTE, root, c->comm), "bcast");
        if (c->rank == root) c->bytes_sent += (uint64_t)k * (uint64_t)(c->size - 1);
        p += k;
        bytes -= (size_t)k;
    }
    return EMBER_OK;
}

ember_status ember_comm_barrier(ember_comm *c) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    MPI_TRY(c, MPI_Barrier(c->comm), "barrier");
    return EMBER_OK;
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
    EMBER_TRY(ember_comm_agree(comm, st));                                                                  \
    EMBER_TRY(sum_fn(comm, grad, n));                                                                       \
    if (conv == EMBER_GRAD_MEAN) {                                                                          \
        const T inv = (T)1 / (T)comm->size;                                                                 \
        for (size_t i = 0; i < n; i++) grad[i] *= inv;                                                      \
    }                                                                                                       \
    return EMBER_OK;

ember_status ember_comm_allreduce_grads(ember_comm *comm, ember_grad_convention conv, float *grad, size_t n) {
    const char *fn = "ember_comm_allreduce_grads";
    ALLREDUCE_GRADS(float, ember_comm_allreduce_sum_f32)
}

ember_status ember_comm_allreduce_grads_f64(ember_comm *comm, ember_grad_convention conv, double *grad, size_t n) {
    const char *fn = "ember_comm_allreduce_grads_f64";
    ALLREDUCE_GRADS(double, ember_comm_allreduce_sum_f64)
}
#undef ALLREDUCE_GRADS
