#include "fail_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Each block carries its size in a 64-byte prefix, so the hooks count what they hand out.
static void *hook_alloc(void *user, size_t size) {
    fail_alloc *a = user;
    a->count++;
    if (a->fail_at > 0 && a->count == a->fail_at) {
        a->hit = true;
        return NULL;
    }
    unsigned char *p = aligned_alloc(64, ((size + 64 + 63) / 64) * 64);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    a->outstanding += size;
    a->blocks++;
    return p + 64;
}

static void hook_free(void *user, void *ptr) {
    if (!ptr) return;
    fail_alloc *a = user;
    unsigned char *p = (unsigned char *)ptr - 64;
    size_t size;
    memcpy(&size, p, sizeof size);
    a->outstanding -= size;
    a->blocks--;
    free(p);
}

ember_allocator fail_alloc_hooks(fail_alloc *a) {
    return (ember_allocator){.alloc = hook_alloc, .free = hook_free, .user = a};
}

void fail_alloc_arm(fail_alloc *a, int64_t k) {
    a->fail_at = k;
    a->count = 0;
    a->hit = false;
}

void snap_add(snap_bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) abort();
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

void snap_clear(snap_bytes *b) { b->n = 0; }

void snap_free(snap_bytes *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

bool snap_same(const snap_bytes *a, const snap_bytes *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

// Every rank's verdict combined (logical AND), in one collective; a failing rank says what failed.
static bool all_ok(MPI_Comm comm, bool ok, const char *seq, int64_t k, const char *what) {
    int rank = 0;
    if (comm != MPI_COMM_NULL) MPI_Comm_rank(comm, &rank);
    if (!ok) fprintf(stderr, "rank %d: sequence '%s', failing allocation %lld: %s\n", rank, seq, (long long)k, what);
    if (comm == MPI_COMM_NULL) return ok;
    int in = ok ? 1 : 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, comm);
    return out != 0;
}

static bool no_leak(ember_ctx *ctx, const fail_alloc *a, size_t base, size_t hook_base, int64_t block_base,
                    char *what, size_t cap) {
    if (ember_ctx_bytes_outstanding(ctx) == base && a->outstanding == hook_base && a->blocks == block_base) return true;
    snprintf(what, cap, "leak: context %zu bytes (baseline %zu), hooks %zu bytes in %lld blocks (baseline %zu in %lld)",
             ember_ctx_bytes_outstanding(ctx), base, a->outstanding, (long long)a->blocks, hook_base,
             (long long)block_base);
    return false;
}

fail_sweep_result fail_alloc_sweep(const fail_sequence *q, void *fx, ember_ctx *ctx, fail_alloc *a, MPI_Comm comm,
                                   int victim) {
    int rank = 0;
    if (comm != MPI_COMM_NULL) MPI_Comm_rank(comm, &rank);
    const bool me = comm == MPI_COMM_NULL || victim < 0 || rank == victim;
    fail_sweep_result res = {0, true};
    const size_t base = ember_ctx_bytes_outstanding(ctx), hook_base = a->outstanding;
    const int64_t block_base = a->blocks;
    snap_bytes pre = {0}, post = {0}, now = {0};
    char what[256];

    // The state the sequence starts from (set up apart: a snapshot may size buffers the run
    // would otherwise allocate), then the clean run: the allocations it makes on the victim,
    // and its result.
    q->setup(fx);
    q->snap(fx, &pre);
    q->teardown(fx);
    q->setup(fx);
    fail_alloc_arm(a, 0);
    ember_status st = q->run(fx);
    int64_t n = a->count;
    snprintf(what, sizeof what, "the clean run returned %s: %s", ember_status_name(st), ember_ctx_errmsg(ctx));
    res.ok = all_ok(comm, st == EMBER_OK, q->name, 0, what);
    q->snap(fx, &post);
    q->teardown(fx);
    res.ok = all_ok(comm, no_leak(ctx, a, base, hook_base, block_base, what, sizeof what), q->name, 0, what) && res.ok;
    if (comm != MPI_COMM_NULL) {
        // The victim's count; with every rank failing, the fewest any rank makes.
        if (victim >= 0) MPI_Bcast(&n, 1, MPI_INT64_T, victim, comm);
        else MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT64_T, MPI_MIN, comm);
    }
    res.sites = n;

    // Each k: the checks' verdicts, one collective per k (the first failure on this rank is named).
    for (int64_t k = 1; k <= n && res.ok; k++) {
        q->setup(fx);
        fail_alloc_arm(a, me ? k : 0);
        st = q->run(fx);
        const bool hit = a->hit;
        fail_alloc_arm(a, 0);
        bool ok = true;
        if (me && !hit) {
            ok = false;
            snprintf(what, sizeof what, "the failure was not reached (the allocations are not deterministic)");
        } else if (st != EMBER_ERR_NOMEM) {
            ok = false;
            snprintf(what, sizeof what, "returned %s, expected NOMEM (%s): %s", ember_status_name(st),
                     me ? "this rank's allocation failed" : "another rank's allocation failed", ember_ctx_errmsg(ctx));
        } else if (ember_ctx_last_status(ctx) != EMBER_ERR_NOMEM || ember_ctx_errmsg(ctx)[0] == '\0') {
            ok = false;
            snprintf(what, sizeof what, "the context holds %s '%s', expected NOMEM and a message",
                     ember_status_name(ember_ctx_last_status(ctx)), ember_ctx_errmsg(ctx));
        }
        snap_clear(&now);
        q->snap(fx, &now);
        if (ok && !snap_same(&pre, &now)) {
            ok = false;
            snprintf(what, sizeof what, "the failed call changed the state");
        }
        // The object stays usable: an unarmed rerun gives the clean run's result.
        ember_ctx_clear_error(ctx);
        st = q->run(fx);
        if (ok && st != EMBER_OK) {
            ok = false;
            snprintf(what, sizeof what, "the rerun returned %s: %s", ember_status_name(st), ember_ctx_errmsg(ctx));
        }
        snap_clear(&now);
        q->snap(fx, &now);
        if (ok && !snap_same(&post, &now)) {
            ok = false;
            snprintf(what, sizeof what, "the rerun's state differs from the clean run's");
        }
        q->teardown(fx);
        if (ok) ok = no_leak(ctx, a, base, hook_base, block_base, what, sizeof what);
        res.ok = all_ok(comm, ok, q->name, k, what);
        ember_ctx_clear_error(ctx);
    }
    snap_free(&pre);
    snap_free(&post);
    snap_free(&now);
    return res;
}
