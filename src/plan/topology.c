// ember_plan_detect_topology (include/ember/plan.h): hosts from the ranks that share memory, and
// an optional bandwidth probe through the communicator's own (watchdog-bounded) exchanges.
#include <string.h>

#include "comm/internal.h"
#include "ember/plan.h"

// Seconds of the best of `reps` exchanges of `bytes` each way between ranks a and b (every other
// rank takes part with nothing to send, so the watchdog bounds every round). Equal on every rank.
static ember_status probe_pair(ember_comm *c, int32_t a, int32_t b, int64_t bytes, int32_t reps, char *buf,
                               int64_t *counts, double *best) {
    const int32_t me = c->rank, W = c->size;
    for (int32_t q = 0; q < W; q++) counts[q] = 0;
    if (me == a) counts[b] = bytes;
    if (me == b) counts[a] = bytes;
    double t_best = -1;
    for (int32_t r = 0; r < reps; r++) {
        ember_status st = ember_comm_barrier(c);
        if (st != EMBER_OK) return st;
        const double t0 = MPI_Wtime();
        st = ember__comm_alltoallv(c, buf, counts, buf + bytes, counts, 1);
        const double t = MPI_Wtime() - t0;
        if (st != EMBER_OK) return st;
        if (t_best < 0 || t < t_best) t_best = t;
    }
    // Rank a's measurement, for everyone.
    ember_status st = ember__comm_bcast(c, &t_best, sizeof t_best, a);
    *best = t_best;
    return st;
}

ember_status ember_plan_detect_topology(ember_comm *c, int32_t *host_of, int32_t *num_hosts, int64_t probe_bytes,
                                        int32_t reps, double *intra_bw, double *inter_bw, double *round_s) {
    if (!c) return EMBER_ERR_INVALID_ARG;
    ember_ctx *ctx = c->ctx;
    const char *fn = "ember_plan_detect_topology";
    const int32_t W = c->size;
    // The arguments, checked and agreed on before any collective work (probe_bytes and reps
    // decide which exchanges follow: every rank gives the same).
    ember_status st = EMBER_OK;
    if (!host_of) st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: NULL host_of", fn);
    else if (probe_bytes < 0 || probe_bytes > ((int64_t)1 << 30))
        st = ember__error(ctx, EMBER_ERR_INVALID_ARG, "%s: probe_bytes %lld outside [0, 1 GiB]", fn,
                          (long long)probe_bytes);
    if (reps < 1) reps = 3;
    const ember_arg args[] = {{.name = "probe_bytes", .value = probe_bytes}, {.name = "reps", .value = reps}};
    EMBER_TRY(ember_comm_agree_args(c, st, fn, args, 2));
    // This rank's host: the ranks it shares memory with; named by the lowest of their ranks.
    MPI_Comm node = MPI_COMM_NULL;
    int lowest = c->rank;
    if (MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
        st = ember__error(ctx, EMBER_ERR_COMM, "%s: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed", fn);
    } else {
        MPI_Group ng, wg;
        const int zero = 0;
        if (MPI_Comm_group(node, &ng) != MPI_SUCCESS || MPI_Comm_group(c->comm, &wg) != MPI_SUCCESS ||
            MPI_Group_translate_ranks(ng, 1, &zero, wg, &lowest) != MPI_SUCCESS || lowest < 0 || lowest >= W)
            st = ember__error(ctx, EMBER_ERR_COMM, "%s: the ranks of this host could not be translated", fn);
        MPI_Group_free(&ng);
        MPI_Group_free(&wg);
        MPI_Comm_free(&node);
    }
    int64_t *low = ember_ctx_alloc(ctx, sizeof(int64_t) * (size_t)W * 2);
    char *buf = probe_bytes ? ember_ctx_alloc(ctx, (size_t)probe_bytes * 2) : NULL;
    if (st == EMBER_OK && (!low || (probe_bytes && !buf)))
        st = ember__error(ctx, EMBER_ERR_NOMEM, "%s: out of memory for %d ranks and a %lld-byte probe", fn, (int)W,
                          (long long)probe_bytes);
    st = ember_comm_agree(c, st);
    if (st == EMBER_OK) st = ember_comm_allgather_i64(c, lowest, low);
    int32_t H = 0;
    int32_t *hosts = st == EMBER_OK ? (int32_t *)(low + W) : NULL;
    if (hosts) {
        // Hosts numbered in the order of their lowest ranks (a rank's lowest is never above it).
        for (int32_t q = 0; q < W; q++) hosts[q] = low[q] == q ? H++ : hosts[low[q]];
    }
    double bw[2] = {0, 0}, round = 0;
    if (st == EMBER_OK && probe_bytes) {
        memset(buf, 0x5a, (size_t)probe_bytes * 2);
        int32_t pair[2][2] = {{-1, -1}, {-1, -1}}; // intra: two ranks of one host; inter: rank 0, host 1
        for (int32_t q = 1; q < W && pair[0][0] < 0; q++)
            if (low[q] != q) pair[0][0] = (int32_t)low[q], pair[0][1] = q;
        for (int32_t q = 1; q < W && pair[1][0] < 0; q++)
            if (hosts[q] == 1) pair[1][0] = 0, pair[1][1] = q;
        int64_t *cbuf = ember_ctx_alloc(ctx, sizeof(int64_t) * (size_t)W);
        st = ember_comm_agree(c, cbuf ? EMBER_OK
                                      : ember__error(ctx, EMBER_ERR_NOMEM, "%s: out of memory for %d counts", fn, (int)W));
        for (int i = 0; i < 2 && st == EMBER_OK; i++) {
            if (pair[i][0] < 0) continue;
            double t = 0;
            st = probe_pair(c, pair[i][0], pair[i][1], probe_bytes, reps, buf, cbuf, &t);
            if (st == EMBER_OK && t > 0) bw[i] = (double)probe_bytes / t;
        }
        ember_ctx_free(ctx, cbuf);
        // One collective round over every rank: the mean of 10 barriers, rank 0's clock.
        const double t0 = MPI_Wtime();
        for (int i = 0; i < 10 && st == EMBER_OK; i++) st = ember_comm_barrier(c);
        round = (MPI_Wtime() - t0) / 10;
        if (st == EMBER_OK) st = ember__comm_bcast(c, &round, sizeof round, 0);
    }
    if (st == EMBER_OK) {
        memcpy(host_of, hosts, sizeof(int32_t) * (size_t)W);
        if (num_hosts) *num_hosts = H;
        if (probe_bytes && intra_bw) *intra_bw = bw[0];
        if (probe_bytes && inter_bw) *inter_bw = bw[1];
        if (probe_bytes && round_s) *round_s = round;
    }
    ember_ctx_free(ctx, buf);
    ember_ctx_free(ctx, low);
    return st;
}
