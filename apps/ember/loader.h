// loader.h — a thread that produces a source's batches ahead of the step that takes them.
//
// The local part of reading a batch (generating or parsing this rank's share, checking it) runs
// on the loader's own thread, one batch after the other, into a ring of `depth` buffers; the
// main thread takes them in the order they were produced (loader_take). What stays on the main
// thread, the ranks agreeing on every batch, is the caller's (source_fetch): the loader never
// communicates.
//
// The thread has its own context (ember.h: one per thread of control) with the owner's rank, so
// its messages read as the owner's: an error produced there reaches the owner's context when
// the batch that failed is taken, with the same text. It produces with one OpenMP thread (the
// rank's threads run the step meanwhile), blocks every signal (they go to the main thread), and
// runs on the CPUs it is given (threads.h: the host's CPUs no rank's thread is pinned to, else
// the rank's own).
//
// After an end of the data or an error the loader stops producing: every later take gives the
// same answer until the producer is repositioned (loader_pause, loader_resume).
#ifndef EMBER_APP_LOADER_H
#define EMBER_APP_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "ember/core.h"

// Produces the next batch into b on the loader thread: EMBER_OK with *eof at the end of the data,
// else an error recorded on ctx (the loader's context).
typedef ember_status (*loader_produce_fn)(void *arg, ember_ctx *ctx, dlrm_batch *b, bool *eof);

typedef struct loader_config {
    int32_t depth;                        // batches held ready, >= 1
    int32_t capacity, num_dense, num_sparse; // each buffer's shape (dlrm_batch_create)
    int32_t bag_width;                    // and its bags' (dlrm_batch_reserve_bags; 0: none)
    const char *cpus;                     // a CPU list ("0-3,8") the thread may run on; NULL or
                                          // "": the creating thread's CPUs
    loader_produce_fn produce;
    void *arg;                            // the producer's state: the loader thread's alone
                                          // while it runs (between loader_resume and
                                          // loader_pause)
} loader_config;

typedef struct loader loader;

// Allocates the ring through ctx (the owner's context, the main thread's), creates the loader's
// context and starts the thread, paused: nothing is produced before loader_resume. Local.
// Returns EMBER_OK, EMBER_ERR_INVALID_ARG (depth < 1), EMBER_ERR_NOMEM (memory, the context, or
// the thread: the message says which). On failure *out is NULL, no thread runs and nothing leaks.
ember_status loader_create(ember_ctx *ctx, const loader_config *cfg, loader **out);

// Stops the thread (after the batch it is producing, if any), joins it and frees everything
// through ctx, the context it was created with. NULL is accepted. Local.
void loader_destroy(ember_ctx *ctx, loader *l);

// The loader's context, for objects its producer uses (a Criteo reader's allocations and
// messages). The caller may use it only while the loader is paused.
ember_ctx *loader_ctx(const loader *l);

// Stops producing: waits for the batch being produced, if any, and drops the ready ones. The
// producer's state is the caller's until loader_resume. Local.
void loader_pause(loader *l);
// Produces again, from wherever the caller left the producer's state. Local.
void loader_resume(loader *l);

// Copies the loader context's last message to the owner's context `ctx` for status st (the same
// text: both name the same rank) and returns st. Only while the loader is paused, or for the
// error a take returned. Local.
ember_status loader_forward_error(ember_ctx *ctx, loader *l, ember_status st);

// The next batch in production order into b, whose buffers trade places with the ring's (b must
// have the ring's shape): its producer's status (an error's message copied onto ctx) and *eof.
// Waits while it is being produced; *waited_s gets the seconds waited. Not while paused. Local.
ember_status loader_take(ember_ctx *ctx, loader *l, dlrm_batch *b, bool *eof, double *waited_s);

#endif
