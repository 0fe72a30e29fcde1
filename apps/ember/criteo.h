// criteo.h — a streaming reader of the Criteo Kaggle / Terabyte click logs (TSV).
//
// One sample per line, 40 tab-separated fields: the label (0 or 1), 13 integer features and 26
// categorical features as hexadecimal hashes (Kaggle's train.txt, Terabyte's day_N). Any feature
// field may be empty. Transforms, as TorchRec's Criteo pipeline:
//   integer x:     log(1 + max(x, 0)) (negative counts are clamped to 0; empty is 0);
//   categorical h: id = h mod rows_f (h read as a 64-bit hexadecimal number; empty is 0), or h
//   itself with raw_ids (collisionless hashed tables map it to a row of its own).
//
// The file is read line by line through one fixed buffer and never loaded as a whole: only this
// rank's lines of the current batch are kept, and parsed on the caller's OpenMP threads. Global
// batch k covers the data lines [first_line + kG, first_line + (k+1)G); rank r parses only its
// contiguous share of each (dlrm_share) and skips the other lines, so every rank reads the same
// global batches whatever the world size. Lines end at '\n' (a '\r' before it is dropped) and are
// numbered as they lie in the file, from 1, whatever bytes they hold. A malformed line (wrong
// field count, a value that is not a number, a label other than 0/1, a NUL byte, more than
// CRITEO_LINE_MAX bytes) is counted with its line number and skipped, or is fatal
// (EMBER_ERR_FORMAT) under CRITEO_FATAL; a skipped line still occupies its place in the batch,
// which is then one sample short on the rank that owns it (possibly empty).
#ifndef EMBER_APP_CRITEO_H
#define EMBER_APP_CRITEO_H

#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "ember/core.h"

#define CRITEO_NUM_FIELDS (1 + DLRM_NUM_DENSE + DLRM_NUM_SPARSE)
#define CRITEO_LINE_MAX 4095     // bytes of a line's text, its ending ("\n", "\r\n") not counted;
                                 // longer lines are malformed (docs/dlrm.md says the same)
#define CRITEO_READ_BYTES 65536  // the file is read in blocks of this size
#define CRITEO_MAX_REPORTED 8    // malformed line numbers remembered per reader

typedef enum criteo_malformed_mode { CRITEO_SKIP = 0, CRITEO_FATAL = 1 } criteo_malformed_mode;
#define CRITEO_MALFORMED_COUNT 2
// "skip", "fatal" ("unknown" outside the enum); parse is its inverse: EMBER_OK and *out set, or
// EMBER_ERR_INVALID_ARG (*out unchanged).
const char *criteo_malformed_name(criteo_malformed_mode m);
ember_status criteo_malformed_parse(const char *name, criteo_malformed_mode *out);

typedef struct criteo_config {
    const char *path;
    const int64_t *rows;  // [26] table sizes
    int32_t rank, world;
    int64_t global_batch; // G
    int64_t first_line;   // data lines before this (0-based) are not used
    int64_t max_lines;    // lines used from first_line on; 0: to the end of the file
    criteo_malformed_mode malformed;
    bool raw_ids;         // categorical h: id = h itself (for collisionless hashed tables), not h mod rows
} criteo_config;

// Malformed lines met in this reader's shares (each line counted once, however many epochs).
typedef struct criteo_stats {
    int64_t malformed;
    int64_t lines[CRITEO_MAX_REPORTED]; // 1-based line numbers of the first ones
    int32_t num_lines;
    char first_reason[160];             // why the first one was rejected
    int64_t lines_read;                 // the highest line number read so far: once a pass has
                                        // reached the end of the file, its number of lines
} criteo_stats;

// One line's fields as written: the label, the 13 integers (signed; empty is 0) and the 26
// categoricals as 64-bit numbers (empty is 0), before any transform.
typedef struct criteo_fields {
    int label;
    int64_t ints[DLRM_NUM_DENSE];
    uint64_t hashes[DLRM_NUM_SPARSE];
} criteo_fields;

// Parses one line's text (no line ending; cut up in place at its tabs) into *out. Returns false,
// with the reason in why ("field 3 (int_1): 'x' is not an integer"), for a malformed line (see
// above). Local; no state: callable from many threads.
bool criteo_parse_fields(char *line, criteo_fields *out, char *why, size_t cap);

typedef struct criteo_reader criteo_reader;

// Opens the file. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_IO (the message
// names the path and the system's reason), EMBER_ERR_NOMEM.
ember_status criteo_open(ember_ctx *ctx, const criteo_config *cfg, criteo_reader **out);
void criteo_close(ember_ctx *ctx, criteo_reader *r);

// Back to global batch 0 (the next epoch).
ember_status criteo_rewind(criteo_reader *r);
// Back to the start, then on to global batch `batch` (>= 0): the next criteo_next reads it,
// skipping the lines before it unparsed (their malformed lines are not counted).
ember_status criteo_seek(criteo_reader *r, int64_t batch);

// Reads this rank's share of the next global batch into b (b->size samples, fewer than the share
// when lines were malformed or the file ended inside the batch), each sample's b->origin its
// 1-based line number. *eof is true, and b->size 0, when the batch has no line at all: the end of
// the data.
// Returns EMBER_OK, EMBER_ERR_FORMAT (CRITEO_FATAL: "PATH line N: reason"), EMBER_ERR_IO.
ember_status criteo_next(criteo_reader *r, dlrm_batch *b, bool *eof);

// The context the reader allocates through and records its errors on from now on (a loader
// thread's own while the reader is read there: loader.h). Its batch buffers are freed through
// the context it had first (each context frees what it allocated; the next batch allocates them
// again). Local.
void criteo_set_ctx(criteo_reader *r, ember_ctx *ctx);

const criteo_stats *criteo_get_stats(const criteo_reader *r);
const char *criteo_path(const criteo_reader *r); // the file's path, as opened

#endif
