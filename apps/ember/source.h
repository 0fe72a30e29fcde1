// source.h — the data sources of `ember train`: the synthetic set or a Criteo file, read one
// global batch at a time (each rank its share), with the ranks agreeing on what was read.
#ifndef EMBER_APP_SOURCE_H
#define EMBER_APP_SOURCE_H

#include <stdint.h>

#include "batch.h"
#include "criteo.h"
#include "ember/comm.h"
#include "synth.h"

typedef struct source {
    const synth *syn;      // synthetic data (shared by the train and eval sources), or
    criteo_reader *reader; // a Criteo file
    int split;             // synthetic: 0 train, 1 eval
    int64_t limit;         // global batches per pass (0: until the data ends)
    int64_t next;          // next global batch of the pass
    int64_t global_batch;
    int32_t rank, world;
} source;

// Starts a pass from the first batch. Local.
ember_status source_rewind(source *s);
// Starts a pass from global batch `batch` (resuming: the batches before it are not read again;
// a Criteo reader skips their lines unparsed). Local.
ember_status source_seek(source *s, int64_t batch);

typedef enum fetched { FETCH_OK, FETCH_SKIP, FETCH_END } fetched;

// Reads every rank's share of the next global batch into b and agrees on what was read
// (sizes[W]: every rank's share, -1 at its end): FETCH_END when the data ended on every rank,
// FETCH_SKIP when the batch has no usable sample on any rank (only malformed lines), else
// FETCH_OK with *global >= 1 samples in all. Some ranks' shares may then be empty (b->size 0: a
// last batch smaller than the world, or a share of malformed lines): they still take part in
// the step, so that a batch is trained and evaluated the same whatever the world size.
// Collective: a read error on any rank fails every rank here, before the step's collectives.
ember_status source_fetch(ember_comm *comm, source *s, dlrm_batch *b, int64_t *sizes, fetched *what,
                          int64_t *global);

#endif
