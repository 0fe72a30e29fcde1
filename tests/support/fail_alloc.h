// Allocation-failure injection: allocator hooks (ember_ctx_config.allocator) that count the
// allocations asked for since they were armed and fail the k-th one, once; the ones after it
// succeed again (a library's clean-up may allocate). They keep their own count of the bytes and
// blocks they handed out, independent of the context's ember_ctx_bytes_outstanding.
//
// The driver (fail_alloc_sweep) runs one call sequence against a fixture: a clean run counts the
// allocations it makes (n), then for k = 1 .. n the sequence runs with allocation k failing and
// must return EMBER_ERR_NOMEM, leave the fixture's state bitwise as it was, leave the object
// usable (an unarmed rerun gives the clean run's state) and leak nothing once the fixture is torn
// down. With a communicator the sweep is collective: one rank (`victim`) fails, the others
// allocate normally, and every rank must return EMBER_ERR_NOMEM.
#ifndef EMBER_TEST_FAIL_ALLOC_H
#define EMBER_TEST_FAIL_ALLOC_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember.h"

typedef struct fail_alloc {
    int64_t fail_at;    // the allocation (1-based, since arming) that fails; 0: none
    int64_t count;      // allocations asked for since arming
    bool hit;           // the armed failure happened
    size_t outstanding; // bytes handed out and not returned
    int64_t blocks;     // blocks handed out and not returned
} fail_alloc;

// Hooks with `a` as their state.
ember_allocator fail_alloc_hooks(fail_alloc *a);
// Counts from zero and fails allocation k (k >= 1), once; k = 0 counts without failing.
void fail_alloc_arm(fail_alloc *a, int64_t k);

// A growable byte string: the state a fixture exposes, compared bitwise.
typedef struct snap_bytes {
    unsigned char *p;
    size_t n, cap;
} snap_bytes;
void snap_add(snap_bytes *b, const void *p, size_t n);
void snap_clear(snap_bytes *b);
void snap_free(snap_bytes *b);
bool snap_same(const snap_bytes *a, const snap_bytes *b);

// One call sequence on a fixture `fx`. setup, snap and teardown run unarmed; run is armed.
//   setup     creates what the sequence works on (and fills outputs with a known pattern)
//   run       the public calls under test; returns the first status that is not EMBER_OK
//   snap      appends every piece of state the sequence may change (tables, optimizer state,
//             steps, output buffers, ...) to `out`; may be collective
//   teardown  destroys everything setup and run created
typedef struct fail_sequence {
    const char *name;
    void (*setup)(void *fx);
    ember_status (*run)(void *fx);
    void (*snap)(void *fx, snap_bytes *out);
    void (*teardown)(void *fx);
} fail_sequence;

// What a sweep found: allocation sites the sequence passes (n of the clean run) and whether
// every check held (the failures are printed, naming the sequence, k and the rank).
typedef struct fail_sweep_result {
    int64_t sites;
    bool ok;
} fail_sweep_result;

// Runs the sweep described above on `ctx` (whose allocator is `a`). comm: MPI_COMM_NULL for a
// single process; otherwise the sweep is collective on it and `victim` is the rank whose
// allocation k fails (every rank must pass the same victim), or -1: every rank's allocation k.
fail_sweep_result fail_alloc_sweep(const fail_sequence *q, void *fx, ember_ctx *ctx, fail_alloc *a, MPI_Comm comm,
                                   int victim);

#endif
