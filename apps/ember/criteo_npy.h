// criteo_npy.h — the Criteo click logs as TorchRec's preprocessed day files, read in place.
//
// A directory holds, per day d (0, 1, ...), three .npy files (npy.h), as TorchRec's
// scripts/preprocess writes them:
//   day_{d}_dense.npy    float32 [N, 13]   the integer features, already transformed (TorchRec's
//                        tsv_to_npys: log(x + 3));
//   day_{d}_sparse.npy   int32 or int64 [N, 26]   the categorical features (TorchRec's int32 files
//                        hold hashes of 2^31 and above as negative numbers);
//   day_{d}_labels.npy   an integer type [N] or [N, 1]   0 or 1.
// The three of a day must agree on N. A split is a run of whole days (training: days
// [first_day, first_day + num_days)) or a half of one day (TorchRec's validation and test sets:
// the first ceil(N/2) rows of the last day, and the rest). The split's rows, day after day, are
// the data: global batch k is its rows [kG, (k+1)G) and rank r reads its contiguous share of each
// (dlrm_share), as the Criteo TSV reader does, so every world size reads the same global batches.
// (TorchRec's InMemoryBinaryCriteoIterDataPipe gives each rank a contiguous range of the whole
// split instead: its global batch mixes ranges; ember keeps its rule, one process on the global
// batch.)
// MLPerf's multi-hot days (cfg.hot given, and day_{first}_sparse_multi_hot.npz present): each day's
// categorical features come from day_{d}_sparse_multi_hot.npz instead of day_{d}_sparse.npy, an
// np.savez archive of 26 integer arrays named "0" .. "25", array f of shape [N, k_f] (or [N] where
// k_f is 1), read in place (npy_open_npz); every row's bags go to the batch's bags (batch.h), the
// first id of each to its ids. The widths must be cfg.hot's (--multi_hot_sizes): a difference is
// EMBER_ERR_FORMAT naming the file, the feature and both widths.
// Categorical value v becomes id v mod rows_f, the floored modulo (numpy's, TorchRec's `hashes`:
// never negative), or v itself with raw_ids. A label other than 0/1 is EMBER_ERR_FORMAT naming the
// file and the row; dense values are checked by the source (source_check_dense). Nothing is copied but this rank's rows
// of the current batch.
#ifndef EMBER_APP_CRITEO_NPY_H
#define EMBER_APP_CRITEO_NPY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "batch.h"
#include "ember/core.h"

// The three files of a day, DIR/day_{d}_{name}.npy, and the layout ember preprocess writes them
// in: float32 [N, 13], int32 [N, 26], int32 [N, 1].
enum { CRITEO_NPY_DENSE = 0, CRITEO_NPY_SPARSE = 1, CRITEO_NPY_LABELS = 2, CRITEO_NPY_FILES = 3 };
extern const char *const criteo_npy_file[CRITEO_NPY_FILES];  // "dense", "sparse", "labels"
extern const char *const criteo_npy_descr[CRITEO_NPY_FILES]; // "<f4", "<i4", "<i4"
extern const int criteo_npy_cols[CRITEO_NPY_FILES];          // 13, 26, 1

typedef enum criteo_npy_part { NPY_DAYS = 0, NPY_FIRST_HALF = 1, NPY_SECOND_HALF = 2 } criteo_npy_part;

typedef struct criteo_npy_config {
    const char *dir;
    const int64_t *rows;   // [26] table sizes
    int32_t rank, world;
    int64_t global_batch;  // G
    int32_t first_day, num_days;
    criteo_npy_part part;  // a half of the one day (num_days 1), or the whole days
    int64_t max_rows;      // rows used from the split's start; 0: all
    bool raw_ids;
    const int32_t *hot;    // [26] ids per sample of each feature (--multi_hot_sizes), or NULL
} criteo_npy_config;

typedef struct criteo_npy criteo_npy;

// Whether the split reads MLPerf's multi-hot archives (see above).
bool criteo_npy_multi_hot(const criteo_npy *r);

// Opens and checks every day file of the split. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG,
// EMBER_ERR_IO (a missing file: its path and the system's reason), EMBER_ERR_FORMAT (a header, a
// dtype, a shape, or days that disagree: the file and what differs), EMBER_ERR_NOMEM.
ember_status criteo_npy_open(ember_ctx *ctx, const criteo_npy_config *cfg, criteo_npy **out);
void criteo_npy_close(ember_ctx *ctx, criteo_npy *r);

// The next read gives global batch `batch` (0: the start of a pass).
void criteo_npy_seek(criteo_npy *r, int64_t batch);

// Reads this rank's share of the next global batch into b, each sample's b->origin its row in the
// split (0-based); *eof (b->size 0) when the batch has no row: the end of the data. Records
// errors on ctx. Returns EMBER_OK or EMBER_ERR_FORMAT.
ember_status criteo_npy_next(ember_ctx *ctx, criteo_npy *r, dlrm_batch *b, bool *eof);

// Rows in the split (after max_rows), and where a row of it lies: its day file's path prefix
// ("DIR/day_3") and row in that day, for messages.
int64_t criteo_npy_rows(const criteo_npy *r);
void criteo_npy_where(const criteo_npy *r, int64_t row, char *buf, size_t cap);

// Writing a day in that layout (ember preprocess): each file as FILE.partial, given its true
// header by criteo_npy_writer_close and renamed over FILE by criteo_npy_writer_commit, so that a
// stopped writer leaves no half-written day file where a good one stood. Each call returns 0, or
// -1 with `error` naming the file and the system's reason; after a failure (and to give up)
// criteo_npy_writer_abort closes the files and removes the .partial ones.
typedef struct criteo_npy_writer {
    FILE *f[CRITEO_NPY_FILES];
    char path[CRITEO_NPY_FILES][1024]; // the final names
    int64_t rows;                      // rows written
    char error[1200];
} criteo_npy_writer;

// Day `day` of dir, the sparse file named DIR/day_{day}_{sparse_name}.npy ("sparse", or a stage's
// intermediate name).
int criteo_npy_writer_open(criteo_npy_writer *w, const char *dir, int day, const char *sparse_name);
int criteo_npy_writer_row(criteo_npy_writer *w, const float *dense, const int32_t *sparse, int32_t label);
// The headers with the row count over the placeholders, flushed, synced and closed.
int criteo_npy_writer_close(criteo_npy_writer *w);
// The closed files renamed into place.
int criteo_npy_writer_commit(criteo_npy_writer *w);
void criteo_npy_writer_abort(criteo_npy_writer *w);

// The last day in dir (day_{d}_dense.npy for d = 0, 1, ... up to the first missing one), or -1.
int32_t criteo_npy_last_day(const char *dir);

#endif
