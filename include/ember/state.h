// ember/state.h — checkpoints of a sharded collection: a directory every rank writes its own
// pieces into, in parallel, committed by a manifest; loadable under any world size and plan.
//
// What a checkpoint holds: every table's weight and optimizer state in global coordinates
// (stored as the pieces that wrote them, in the weight's own dtype: fp32, fp16 or bf16 bits;
// optimizer state fp32), each table's step counter, and the caller's named blobs (a trainer's
// dense parameters, its position in the data, its configuration: opaque bytes to the library).
// Loading matches tables by name; they must agree in rows, dim and optimizer. Each rank reads
// only the stored records overlapping the pieces it holds (resharding: any W, any plan).
//
// Layout of DIR (documented for readers outside ember in docs/checkpoints.md):
//   manifest.json           the commit point: format, generation, base generation and chain (of
//                           deltas, below), world size, tables (name, rows, dim, optimizer,
//                           dtype, step, and per tensor its records: file, byte offset, global
//                           rows [r0, r1) and columns [c0, c1), dtype, CRC-32), blobs (name,
//                           file, offset, bytes, CRC-32)
//   g<G>-r<R>.bin           rank R's records of generation G: raw little-endian row-major
//                           blocks [r1 - r0, c1 - c0], back to back; a delta's row list
//                           ("count": n) is n int64 row numbers, then those n rows
// A record is at most the chunk size (one row when a row is larger; whole buckets of a hashed
// table).
//
// Incremental checkpoints (deltas): a save with options.delta = 1 writes only the rows changed
// since the collection's mark (ember_sebc_piece_dirty: those a backward updated, a hashed table's
// admissions, writes), with their optimizer state and id-map rows, as generation G + 1 on top of
// generation G in the same directory, which must be the checkpoint this collection last saved
// or loaded (full or delta: every save and load marks the collection with the checkpoint's chain
// and generation). Its manifest names the base's records (older generations' files, kept) and
// then the new ones, which overwrite theirs in that order: loading the chain is bitwise loading
// the full checkpoint of the same state, at any world size and under any plan. A table whose
// dtype changed since is written whole. The chain grows with every delta (a load reads every
// record of it); a full save starts a new one and its commit removes the old files. Steps and
// blobs are written whole each time.
//
// Commit protocol (crash safety): a save writes generation G = previous + 1. Every rank writes
// its file under "<name>.partial", flushes, fsyncs and renames it; when every rank's file is
// durable, rank 0 writes manifest.json the same way (temporary name, fsync, rename, directory
// fsync): that rename is the commit. Until it, manifest.json names the previous generations'
// files, which no save touches; after it, rank 0 removes every g*-r*.bin file (and leftover
// .partial) the new manifest does not name. A kill of any rank at any instant, a full disk or an
// I/O error leaves the previous checkpoint loadable; a failed save removes what it wrote (the
// directory too when it created it), a killed one leaves files the next save removes. Loading
// checks every record's CRC-32 and the manifest as ember_checkpoint_verify does: a torn or
// foreign checkpoint is refused, never half-loaded into tables.
// The directory must be one every rank sees (one host, or a shared file system).
//
// Memory: saving stages one record at a time, loading one record plus at most one chunk of the
// destination piece: peak extra memory per rank is bounded by about 2 x chunk_bytes (plus the
// parsed manifest), whatever the table sizes. All of it goes through the context's allocator.
#ifndef EMBER_STATE_H
#define EMBER_STATE_H

#include <stddef.h>

#include "ember/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

// A caller's named blob: `bytes` bytes at `data` (identical on every rank; rank 0 writes it).
// Names: 1..127 bytes of letters, digits and "._-".
typedef struct ember_checkpoint_blob {
    const char *name;
    const void *data;
    size_t bytes;
} ember_checkpoint_blob;

typedef struct ember_checkpoint_options {
    size_t chunk_bytes;                 // record / staging size; 0: EMBER_CHECKPOINT_CHUNK_DEFAULT
    const ember_checkpoint_blob *blobs; // saved with the tables (save only)
    int32_t num_blobs;
    int32_t delta;                      // save only: 1 writes an incremental checkpoint (below)
} ember_checkpoint_options;
#define EMBER_CHECKPOINT_CHUNK_DEFAULT ((size_t)8 << 20)
#define EMBER_CHECKPOINT_OPTIONS_DEFAULT {.chunk_bytes = 0, .blobs = NULL, .num_blobs = 0, .delta = 0}

// Saves every table (and opts' blobs) into directory `dir` (created if missing; its parent must
// exist), replacing the checkpoint there only at the commit. opts may be NULL (defaults).
// Collective on the collection's communicator; every rank returns the same status.
// Returns EMBER_OK (the collection is then marked with the checkpoint written), EMBER_ERR_INVALID_ARG
// (NULL dir, bad blob name or size; a delta where the collection has no mark, or dir holds
// another checkpoint than the one it marks, or lacks a table of it), EMBER_ERR_IO (the message
// names the path and the OS reason; the previous checkpoint is kept), EMBER_ERR_FORMAT (a delta
// whose base manifest is unreadable), EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT.
// What a failed save leaves: `dir` as it was before the call. The checkpoint there, if any, loads
// as before; every file the save wrote is removed; `dir` itself is removed when this call created
// it (and holds nothing else), never when it existed before. A save killed midway (or cut off by
// EMBER_ERR_TIMEOUT while another rank still writes) leaves its files, and a directory it created
// without manifest.json (no checkpoint: a load says so); the next save into `dir` removes the
// files.
EMBER_API ember_status ember_checkpoint_save(ember_sebc *s, const char *dir, const ember_checkpoint_options *opts);

// Loads every table of the collection from `dir` (converting a table's storage dtype to the
// stored one, and setting its step counter; a delta's chain as the full checkpoint it amounts
// to), then marks the collection with it (a delta may follow). opts may be NULL; only
// chunk_bytes is read.
// Collective. Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_IO (missing directory or file:
// path and OS reason), EMBER_ERR_FORMAT (no manifest, malformed manifest: the field is named; a
// manifest ember_checkpoint_verify refuses, with the same message; a table missing or of another
// shape or optimizer: "table 'x' rows: 1000 in the checkpoint, 999 here"; a record failing its
// CRC-32), EMBER_ERR_NOMEM, EMBER_ERR_COMM, EMBER_ERR_TIMEOUT. Shape
// and manifest errors and a rank out of memory are found before any table changes (every
// allocation, the dtype conversions' included, comes first); a record failing its check after
// some tables were written leaves the collection partly loaded (the status says so: load again
// or recreate it).
EMBER_API ember_status ember_checkpoint_load(ember_sebc *s, const char *dir, const ember_checkpoint_options *opts);

// ---- Inspecting a checkpoint (no collection needed) -------------------------------------------

typedef struct ember_checkpoint ember_checkpoint;

typedef struct ember_checkpoint_table {
    const char *name;
    int64_t rows;
    int32_t dim;
    ember_optim_kind optim;
    ember_dtype dtype;       // the weight's stored dtype
    int64_t step;
    int32_t num_records;     // over all of its tensors (a delta's base's included)
    uint64_t bytes;          // stored bytes over all of its tensors (a delta's base's included)
} ember_checkpoint_table;

// Reads dir/manifest.json and checks its structure: every field present and in range, table
// names unique, every tensor's records inside it, of its size and dtype, in a data file of this
// generation, tiling it exactly once. Not the data files, and not whether the tables' tensors are
// the ones their optimizers keep nor the blob names (ember_checkpoint_verify checks those: a
// damaged checkpoint still opens, to be described). Local: any process may inspect a checkpoint.
// Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_IO, EMBER_ERR_FORMAT (naming the field),
// EMBER_ERR_NOMEM. *out is NULL on failure; close with ember_checkpoint_close (NULL accepted).
EMBER_API ember_status ember_checkpoint_open(ember_ctx *ctx, const char *dir, ember_checkpoint **out);
EMBER_API void ember_checkpoint_close(ember_checkpoint *c);
// Generation (saves into this directory so far) and the world size that wrote it. Local.
EMBER_API int64_t ember_checkpoint_generation(const ember_checkpoint *c);
// The generation of the full save a chain of deltas starts from (the generation itself when the
// checkpoint is full). Local.
EMBER_API int64_t ember_checkpoint_base_generation(const ember_checkpoint *c);
EMBER_API int32_t ember_checkpoint_world_size(const ember_checkpoint *c);
EMBER_API int32_t ember_checkpoint_num_tables(const ember_checkpoint *c);
// Table i (0 <= i < num_tables): EMBER_OK or EMBER_ERR_INVALID_ARG. Strings live as long as c.
EMBER_API ember_status ember_checkpoint_table_info(const ember_checkpoint *c, int32_t i, ember_checkpoint_table *out);
EMBER_API int32_t ember_checkpoint_num_blobs(const ember_checkpoint *c);
// Blob i's name and size: EMBER_OK or EMBER_ERR_INVALID_ARG.
EMBER_API ember_status ember_checkpoint_blob_info(const ember_checkpoint *c, int32_t i, const char **name,
                                                  size_t *bytes);
// Reads blob `name` into dst (cap bytes), checking its CRC-32; *bytes (may be NULL) is its size.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (no such blob: the message says so; cap smaller
// than the blob), EMBER_ERR_IO, EMBER_ERR_FORMAT (CRC mismatch, file too short).
EMBER_API ember_status ember_checkpoint_read_blob(ember_checkpoint *c, const char *name, void *dst, size_t cap,
                                                  size_t *bytes);
// Checks the checkpoint as a load does, without a collection (`ember ckpt info --verify`): first
// the manifest, as every load checks it — at least one table; every table's tensors exactly the
// ones a table of its rows, dim, dtype and optimizer keeps (ember_table_tensors of that table,
// hashed when it holds "ids" or "candidates"), in that order, each of its columns and dtype;
// blob names valid (as a save takes them) and unique; and what open checked — then reads every
// record of every table and every blob and checks its CRC-32 (records reaching past the end of
// their file included).
// What it guarantees: a checkpoint verify accepts is one ember_checkpoint_load accepts into a
// collection of the same tables (names, rows, dim, optimizer; hashed or not, as the manifest
// shows), at any world size and under any plan, as long as its files do not change. The one
// content a load checks beyond that is a hashed table's id map (its ids must lie in their
// rows' buckets, whose size is the collection's, not the manifest's): an id map altered with a
// matching CRC-32 verifies and is refused by the load.
// Local. Returns EMBER_OK, EMBER_ERR_IO (a data file missing or unreadable: path and OS
// reason), EMBER_ERR_FORMAT (the manifest: naming the table and tensor, or the blob, and the
// value, e.g. "table 'w32' (dim 2147483647, fp32, rowwise_adagrad): tensor 'weight' has 6
// columns, not 2147483647"; else the first record failing its CRC-32), EMBER_ERR_NOMEM.
EMBER_API ember_status ember_checkpoint_verify(ember_checkpoint *c);

#ifdef __cplusplus
}
#endif
#endif
