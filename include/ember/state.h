// ember/state.h — checkpoints of a sharded collection, in global coordinates.
//
// A checkpoint holds every table as plain global tensors ("weight" [rows, dim] and the
// optimizer state of its optimizer, fp32) plus its step counter and storage dtype, whatever the
// sharding that wrote it. Loading scatters them into the collection's own shards, so a
// checkpoint written by W ranks under one plan loads into W' ranks under another plan
// (resharding): tables are matched by name and must agree in rows, dim and optimizer.
//
// File format (little-endian): "EMBERCK1", u32 version (1), u32 table count, then per table:
// u32 name length, name bytes, i64 rows, i32 dim, i32 optimizer kind, i32 dtype, i64 step,
// u32 tensor count, then per tensor: u32 name length, name, i32 cols, rows*cols f32;
// finally u64 FNV-1a checksum of every byte before it.
//
// Saving is crash-safe: rank 0 writes "<path>.partial", fsyncs it and renames it over `path` only
// when complete, so a kill at any instant, a full disk or an I/O error leaves the previous
// checkpoint at `path` loadable (a failed save removes the partial file; a killed one leaves it
// for the next save to replace).
//
// Both calls are Collective on the collection's communicator; rank 0 does the file I/O and
// every rank returns the same status. Errors: EMBER_ERR_IO (cannot open/write/read, message
// names the path and the OS reason), EMBER_ERR_FORMAT (bad magic, truncated file, checksum mismatch, table
// missing or of another shape; the collection is unchanged), EMBER_ERR_NOMEM.
#ifndef EMBER_STATE_H
#define EMBER_STATE_H

#include "ember/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

EMBER_API ember_status ember_checkpoint_save(ember_sebc *s, const char *path);
EMBER_API ember_status ember_checkpoint_load(ember_sebc *s, const char *path);

#ifdef __cplusplus
}
#endif
#endif
