// Internals of checkpoint directories (include/ember/state.h), shared by the files of src/state/:
//   manifest.c  the format: manifest.json's text (save), its parse and structural checks
//   inspect.c   the ember_checkpoint object: open, descriptions, reads of records and blobs, verify
//   save.c      ember_checkpoint_save: every rank's records streamed into its file, the commit
//   load.c      ember_checkpoint_load: tables matched, the records overlapping each piece read
//   durable.c   durable files (durable.h): temporary name, fsync, rename
// The layer is written over the public API (ember/shard.h's pieces, steps and dtypes, ember/comm.h)
// plus core/internal.h (allocation) and durable.h; no other layer's internals. Not installed.
#ifndef EMBER_STATE_INTERNAL_H
#define EMBER_STATE_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "ember/shard.h"
#include "ember/state.h"
#include "state/durable.h"

// From the sharded collection (src/shard): the communicator its tables are sharded over (under
// 2D, ember_sebc_create_2d, this rank's sharding group: a checkpoint is a group's), and the
// conversion of every table's dtype on it (ember_sebc_convert_dtypes without the argument
// agreement; st: the caller's status so far; returns the status agreed on).
ember_comm *ember__sebc_shard_comm(const ember_sebc *s);
ember_status ember__sebc_convert_dtypes(ember_sebc *s, const ember_dtype *dtypes, ember_status st);

#define EMBER__CKPT_FORMAT "ember-checkpoint"
#define EMBER__CKPT_VERSION 3 // 2 (no deltas) is read too
#define EMBER__CKPT_MANIFEST "manifest.json"
#define EMBER__CKPT_MAX_NAME 256      // table names, with the terminating NUL
#define EMBER__CKPT_MAX_BLOB_NAME 128 // blob names, with the terminating NUL

// ---- The manifest in memory (parsed by manifest.c; read by inspect.c and load.c) --------------

typedef struct ember__ckpt_record {
    int32_t file;         // the writing rank: file g<gen>-r<file>.bin
    int64_t gen;          // the generation that wrote it (older than the manifest's in a delta)
    int64_t offset;
    int64_t r0, r1;       // global rows
    int32_t c0, c1;       // global columns ([0, 1) for per-row tensors)
    uint64_t bytes;
    uint32_t crc;
    int64_t count;        // 0: rows [r0, r1) back to back; else a delta's row list: count int64 row
                          // numbers (ascending, in [r0, r1)), then those rows back to back
} ember__ckpt_record;

typedef struct ember__ckpt_tensor {
    char name[32];
    int32_t cols;
    ember_dtype dtype;
    int32_t first, count; // its records: records[first .. first + count)
} ember__ckpt_tensor;

typedef struct ember__ckpt_table {
    char name[EMBER__CKPT_MAX_NAME];
    int64_t rows, step;
    int32_t dim, ntensors;
    ember_optim_kind optim;
    ember_dtype dtype;
    ember__ckpt_tensor tensors[EMBER_MAX_TENSORS];
    uint64_t bytes;
    int32_t nrecords;
} ember__ckpt_table;

typedef struct ember__ckpt_blob {
    char name[EMBER__CKPT_MAX_BLOB_NAME];
    int32_t file;
    int64_t gen;
    int64_t offset;
    uint64_t bytes;
    uint32_t crc;
} ember__ckpt_blob;

struct ember_checkpoint {
    ember_ctx *ctx;
    char dir[EMBER__PATH_MAX];
    int64_t generation;
    int64_t base_generation;     // the full save a chain of deltas starts from (= generation: none)
    uint64_t chain;              // the chain's name, made by its full save (0 in version 2)
    int32_t world, ntables, nblobs, nrecords;
    ember__ckpt_table *tables;   // [ntables]
    ember__ckpt_blob *blobs;     // [nblobs]
    ember__ckpt_record *records; // [nrecords], each tensor's a contiguous run
    FILE *f;                     // the data file last read, and which one it is
    int32_t f_rank;
    int64_t f_gen;
    int32_t size_rank;           // the data file last measured (held_bytes), and its size
    int64_t size_gen;
    uint64_t size;
};

// What a rank wrote, gathered onto every rank for the manifest (fixed layout: exchanged as bytes).
typedef struct ember__ckpt_wrote {
    int32_t table, tensor; // a blob: table -1, tensor = its index in the options
    int32_t file, c0, c1, pad;
    int64_t offset, r0, r1;
    uint64_t bytes;
    uint32_t crc, pad2;
    int64_t count; // as ember__ckpt_record's
} ember__ckpt_wrote;

// ---- manifest.c -------------------------------------------------------------------------------

// "g<generation>-r<rank>.bin" into dst.
void ember__ckpt_data_name(char *dst, size_t cap, int64_t generation, int32_t rank);
// "<dir>/<name>" into dst; 0, or ENAMETOOLONG.
int ember__ckpt_join(char *dst, size_t cap, const char *dir, const char *name);
// Reads dir/manifest.json whole into a context buffer (*text, NUL-terminated; *len bytes). Local.
// EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_IO, EMBER_ERR_FORMAT (not a directory, no manifest,
// larger than 1 GiB), EMBER_ERR_NOMEM.
ember_status ember__ckpt_read_manifest(ember_ctx *ctx, const char *dir, char **text, size_t *len);
// Parses manifest text into c (made by ember__ckpt_new): every field present and in range, table
// names unique, no tensor over 2^60 bytes, every record inside its tensor, of its size and dtype,
// in a data file of a generation of the chain (base_generation .. generation), each tensor's
// records in the order of their generations, the first generation's tiling it exactly once (the
// later ones, a delta's, overwrite parts of it in that order).
// EMBER_OK or EMBER_ERR_FORMAT (naming the field) / EMBER_ERR_NOMEM; on failure c holds a part
// of it (close it).
ember_status ember__ckpt_parse(ember_checkpoint *c, const char *text, size_t len);
// What a load relies on beyond what the parse checks, on the parsed manifest alone (no
// collection, no data file): at least one table; every table's tensors exactly those
// ember_table_tensors lists for the table it describes (its rows, dim, dtype and optimizer;
// hashed when it holds "ids" or "candidates"), in that order, of those columns and dtypes; every
// blob name valid (ember__ckpt_blob_name_ok) and unique. ember_checkpoint_verify and
// ember_checkpoint_load both call it (open does not: a damaged checkpoint still describes
// itself). Local; the same manifest gives the same answer on every rank. EMBER_OK or
// EMBER_ERR_FORMAT (naming the table and tensor, or the blob, and the value).
ember_status ember__ckpt_check(ember_checkpoint *c);
// Whether a blob name is 1 to 127 letters, digits, '.', '_' or '-' (what a save accepts).
int ember__ckpt_blob_name_ok(const char *name);
// The tag a save or load marks the collection with (ember_sebc_mark): the checkpoint's chain and
// generation, never 0. A delta is saved only onto the checkpoint whose tag the collection holds.
static inline uint64_t ember__ckpt_tag(uint64_t chain, int64_t generation) {
    const uint64_t x[2] = {chain, (uint64_t)generation};
    const uint64_t d = ember_digest(x, sizeof x);
    return d ? d : 1;
}
// What a save writes on top of (a delta's base: the checkpoint in the directory, and per table
// whether it is written whole, its base records dropped); NULL for a full save.
typedef struct ember__ckpt_base {
    ember_checkpoint *c;
    const unsigned char *whole; // [T] of the collection
} ember__ckpt_base;
// Rank 0 of a save: the manifest of generation `generation` of chain `chain` naming the n records
// and blobs in `all` (after the base's records of each table not written whole) (cJSON_Print'ed;
// free with cJSON_free), or NULL when out of memory.
char *ember__ckpt_manifest_text(ember_sebc *s, int64_t generation, uint64_t chain, const ember__ckpt_base *base,
                                const int64_t *steps, const ember__ckpt_wrote *all, int64_t n,
                                const ember_checkpoint_options *o);
// Index of the table named `name` in c, or -1.
int32_t ember__ckpt_find_table(const ember_checkpoint *c, const char *name);

// Columns of tensor `ti` that piece p holds: its slice for [rows, dim] tensors, [0, cols) for
// per-row ones (and a hashed table's "ids", never sliced).
static inline void ember__ckpt_piece_cols(const ember_table_config *tc, const ember_tensor_info *ti,
                                          const ember_piece *p, int32_t *c0, int32_t *c1) {
    if (ember_tensor_is_sliced(tc, ti)) {
        *c0 = p->col_begin;
        *c1 = p->col_end;
    } else {
        *c0 = 0;
        *c1 = ti->cols;
    }
}

// ---- inspect.c --------------------------------------------------------------------------------

// An empty checkpoint object for directory dir (no I/O). EMBER_OK, EMBER_ERR_INVALID_ARG (dir
// NULL or too long), EMBER_ERR_NOMEM; *out NULL on failure.
ember_status ember__ckpt_new(ember_ctx *ctx, const char *dir, ember_checkpoint **out);
// Of the `bytes` bytes at `offset` of rank `file`'s data file of generation `gen`, how many the file holds (0 when it
// cannot be measured: reading it fails later, with the reason). Read buffers are sized by this,
// never by the manifest's claim alone: a damaged or foreign manifest ("bytes": 40000000000000)
// cannot make a reader allocate more than the files hold.
uint64_t ember__ckpt_held_bytes(ember_checkpoint *c, int64_t gen, int32_t file, int64_t offset, uint64_t bytes);
// Reads `bytes` bytes at `offset` of rank `file`'s data file of generation `gen` into dst (cap bytes) and checks
// their CRC; `what` names them in messages. A record reaching past the end of its file fails
// before anything is read. EMBER_OK, EMBER_ERR_IO, EMBER_ERR_FORMAT.
ember_status ember__ckpt_read_at(ember_checkpoint *c, int64_t gen, int32_t file, int64_t offset, uint64_t bytes,
                                 uint32_t crc, void *dst, size_t cap, const char *what);

#endif
