// source.h — the data sources of `ember train`: the synthetic set, a Criteo file or TorchRec's
// Criteo day files, read one global batch at a time (each rank its share), with the ranks agreeing
// on what was read.
#ifndef EMBER_APP_SOURCE_H
#define EMBER_APP_SOURCE_H

#include <stdint.h>

#include "batch.h"
#include "criteo.h"
#include "criteo_npy.h"
#include "ember/comm.h"
#include "loader.h"
#include "synth.h"

typedef struct source {
    const synth *syn;      // synthetic data (shared by the train and eval sources), or
    criteo_reader *reader; // a Criteo file, or
    criteo_npy *npy;       // a split of Criteo day files
    int split;             // synthetic: 0 train, 1 eval
    int64_t limit;         // global batches per pass (0: until the data ends)
    int64_t next;          // next global batch of the pass source_fetch gives
    int64_t global_batch;
    int32_t rank, world;
    // The local part of reading (this rank's share, its check) runs here, on the main thread,
    // or ahead of it on a loader thread (loader.h; source_start_loader).
    loader *loader;        // NULL: inline
    ember_ctx *owner;      // the main thread's context, while there is a loader
    int64_t cursor;        // next global batch to produce: next, or ahead of it on the loader
    double waited_s;       // seconds source_fetch waited for this rank's shares: producing them
                           // inline, or for the loader to have them ready
    // Synthetic (--num_generated_batches N, TorchRec's RandomRecDataset num_generated_batches):
    // this rank's shares of the split's batches 0..N-1, made by source_generate; global batch g
    // is then a copy of batch g mod N. NULL: every batch generated when it is read.
    dlrm_batch *pool;
    int64_t pool_size;
} source;

// Generates this rank's shares of s's synthetic batches 0..n-1 now (s->syn set, n >= 1), in
// buffers of `capacity` samples, so that reading the data later costs a copy. Local. Returns
// EMBER_OK or EMBER_ERR_NOMEM (nothing kept). source_free_pool releases them (nothing when none).
ember_status source_generate(ember_ctx *ctx, source *s, int64_t n, int32_t capacity);
void source_free_pool(ember_ctx *ctx, source *s);

// Starts a pass from the first batch. Local.
ember_status source_rewind(source *s);
// Starts a pass from global batch `batch` (resuming: the batches before it are not read again;
// a Criteo reader skips their lines unparsed). Local.
ember_status source_seek(source *s, int64_t batch);

// Produces s's shares from now on `depth` batches ahead on a loader thread of its own (CPUs: a
// CPU list, or NULL: where the caller runs), or inline on the caller's thread for depth 0. The
// batches and everything source_fetch returns are the same either way; only source_fetch,
// source_rewind and source_seek may touch s until source_stop_loader. The loader starts paused:
// call source_rewind or source_seek before fetching. Buffers of ctx's, shaped as b (the
// caller's batch: source_fetch trades its buffers with the ring's, so every batch the caller
// holds must have that shape). Local. Returns EMBER_OK or loader_create's errors; on failure s
// is as before.
ember_status source_start_loader(ember_ctx *ctx, source *s, int32_t depth, const char *cpus, const dlrm_batch *b);
// Joins s's loader thread and frees it, s back to inline. Nothing when there is none. Local.
void source_stop_loader(ember_ctx *ctx, source *s);

typedef enum fetched { FETCH_OK, FETCH_SKIP, FETCH_END } fetched;

// Checks that every dense feature of b, as s produced it, is finite (a NaN or an infinity would
// poison every parameter it meets in one step). Records EMBER_ERR_NUMERIC naming the first bad
// value's feature, its sample (the Criteo line and file, or the synthetic split and index) and
// this rank. The Criteo reader accepts only decimal integers, whose transform is finite, so
// this guards the transforms and the generator. source_fetch runs it on every batch. Local.
ember_status source_check_dense(ember_ctx *ctx, const source *s, const dlrm_batch *b);

// Reads every rank's share of the next global batch into b (from the loader's ring, whose buffers
// trade places with b's, when s has one) and agrees on what was read
// (sizes[W]: every rank's share, -1 at its end): FETCH_END when the data ended on every rank,
// FETCH_SKIP when the batch has no usable sample on any rank (only malformed lines), else
// FETCH_OK with *global >= 1 samples in all. Some ranks' shares may then be empty (b->size 0: a
// last batch smaller than the world, or a share of malformed lines): they still take part in
// the step, so that a batch is trained and evaluated the same whatever the world size.
// Collective: a read error or a non-finite dense feature (source_check_dense) on any rank fails
// every rank here, before the step's collectives.
ember_status source_fetch(ember_comm *comm, source *s, dlrm_batch *b, int64_t *sizes, fetched *what,
                          int64_t *global);

// Every rank's malformed-line statistics of s's Criteo reader, in rank order, into all[W].
// Collective; every rank calls it with s of the same kind (a reader, or none: then nothing is
// exchanged and EMBER_OK is returned).
ember_status source_gather_stats(ember_comm *comm, const source *s, criteo_stats *all);

// What a Criteo source held, when a pass found no usable sample in it (source_scan_data).
typedef struct source_scan {
    bool usable;          // some global batch holds a usable sample (then nothing else is set)
    int64_t lines_read;   // the file's lines (the pass read to the end of its window)
    int64_t malformed;    // malformed lines met, all ranks
    int64_t first_bad;    // the first of them (1-based line), 0 if none
    char reason[160];     // why it was malformed
} source_scan;

// Reads s from its first batch until a global batch holds a usable sample (usable), else to its
// end, then gathers what every rank's reader met: the same *scan on every rank. Synthetic
// sources are always usable. The caller rewinds or seeks s afterwards.
// Collective. Returns EMBER_OK or a read error (source_fetch: EMBER_ERR_IO, EMBER_ERR_FORMAT
// under CRITEO_FATAL).
ember_status source_scan_data(ember_comm *comm, source *s, dlrm_batch *b, int64_t *sizes, source_scan *scan);

// A Criteo source as the user named it, for source_unusable's message.
typedef struct source_desc {
    const char *flag;         // the option that gave the file: "--data_path", "--eval_data_path"
    const char *path;
    const char *use;          // what the data is for ("training", "eval"), or NULL: any use
    int64_t first_line;       // the lines of the file before the source's window
    const char *window;       // the window in words, in the parenthesis after "0 usable lines of
                              // N" (e.g. "after the first 64, held out for evaluation"), or NULL:
                              // the whole file
    const char *empty_window; // what follows "its N lines" when the file has lines but none in
                              // the window (all held out, say), or NULL when that cannot be
} source_desc;

// Records on ctx, and returns, EMBER_ERR_FORMAT with one message naming the file and what it
// held, for a scan that found no usable sample, e.g. "--data_path 'x.tsv': no usable training
// data: 0 usable lines of 1032 (1032 malformed: first at line 1: 1 tab-separated fields,
// expected 40)", or "... no training data: the file is empty". Local.
ember_status source_unusable(ember_ctx *ctx, const source_desc *d, const source_scan *scan);

#endif
