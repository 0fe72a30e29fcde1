// Overlap state of the sharded collection (overlap.c): the prefetched input dist of the next
// batch and the exchanges a split backward leaves in flight between its start and its finish.
#ifndef EMBER_SHARD_OVERLAP_H
#define EMBER_SHARD_OVERLAP_H

#include "shard/internal.h"

typedef struct ember__overlap {
    // The prefetch: `spare` holds its batch while it is in flight (pending), identified by the
    // KJT's digest, nnz and batch size; the forward that takes it swaps it with s->in.
    ember__batch *spare;
    int pending;
    uint64_t digest;
    int64_t nnz;
    ember__req in[3];      // lengths, ids, weights (the last only when weighted)
    int64_t taken, dropped; // prefetches a forward took, and those it had to drop (tests)
    // The tiered tables' prefetch of the pending batch's rows on this rank's shards: started
    // (at most once per prefetch), the local KJT it read.
    int rows_started;
    ember__buf pf_off, pf_val;
    int64_t *ctl;           // [6W] the prefetch's control exchange: sent, received
    // The split backward: started (between ember_sebc_backward_start and _finish), its
    // gradient exchange (the home schemes keep theirs).
    int bwd_started;
    ember__req grad;
} ember__overlap;

// Allocates s->ov (its spare batch and requests' counts). NULL-safe free that first waits
// for anything in flight.
ember_status ember__overlap_create(ember_sebc *s);
void ember__overlap_destroy(ember_sebc *s);

// Forward's side of the prefetch. Collective when a prefetch is pending on every rank (it is
// pending on all ranks or none): agrees on `st` (this rank's validation of kjt) and on whether
// every rank's kjt is the one it prefetched. Returns the agreed failure (the prefetch drained),
// or EMBER_OK with *taken = 1 (the prefetched batch is now s's current input; its exchanges are
// still in flight: ember__prefetch_finish) or *taken = 0 (some rank's kjt differed: the prefetch
// was drained; do the plain input dist).
ember_status ember__prefetch_take(ember_sebc *s, const ember_kjt *kjt, ember_status st, int *taken);
// Waits for the taken prefetch's input dist. Collective (completes started collectives).
ember_status ember__prefetch_finish(ember_sebc *s);
// Waits for and forgets a pending prefetch (its batch is never forwarded). Collective.
ember_status ember__prefetch_drain(ember_sebc *s);
// Once a pending prefetch's lengths and ids have arrived (tested, never waited for), starts the
// prefetch of the rows they read of this rank's tiered tables (ember_ebc_prefetch on the owner's
// local KJT), at most once per prefetch: the kernel reads their file pages while the step goes
// on, and the forward that takes the batch finds them in memory. Called where the step passes
// (the prefetch itself, the backward's start and finish). Local; never fails: a prefetch that
// cannot start changes nothing but time.
void ember__prefetch_rows(ember_sebc *s);

// The owner's local KJT of s's current input (route-major, then source) into the given buffers,
// with offsets: weights only when wbuf is given and the batch is weighted; cur: [2W] scratch.
// Returns EMBER_OK, EMBER_ERR_NOMEM (a buffer could not grow). Local.
ember_status ember__build_local(ember_sebc *s, ember__buf *obuf, ember__buf *vbuf, ember__buf *wbuf, int64_t *cur,
                                ember_kjt *out);

#endif
