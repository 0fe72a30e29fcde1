// ember/quant.h — quantized inference tables: a read-only collection of embedding tables stored
// row-wise as int8 / int4 / int2 with a scale and bias per row, or as fp16 / fp32, pooled for
// serving (TorchRec's QuantEmbeddingBagCollection over FBGEMM's IntNBitTableBatchedEmbeddingBags).
//
// Row layouts: FBGEMM's CPU fused row-wise formats, byte for byte (little endian, no padding), so
// rows go in and out of FBGEMM's FloatToFused8BitRowwiseQuantized /
// Fused8BitRowwiseQuantizedToFloat and FloatToFusedNBitRowwiseQuantizedSBHalf /
// FusedNBitRowwiseQuantizedSBHalfToFloat unchanged. For a row of D elements:
//   INT8  D uint8 values q_d, then the fp32 scale and the fp32 bias:        D + 8 bytes
//   INT4  ceil(D/2) bytes, element d in byte d/2 at bit 4*(d%2) (low nibble first), then the
//         fp16 scale and the fp16 bias:                                    ceil(D/2) + 4 bytes
//   INT2  ceil(D/4) bytes, element d in byte d/4 at bit 2*(d%4), then fp16 scale, fp16 bias:
//                                                                          ceil(D/4) + 4 bytes
//   FP16  D fp16 values (2D bytes); FP32 D fp32 values (4D bytes).
// Element d's value is fmaf(scale, q_d, bias) in fp32: one fused multiply-add, rounded once (C's
// fmaf; the vector variants' vfmadd); an fp16 scale or bias is widened to fp32 first (exactly).
//
// Quantization (ember_quantize_rows) is FBGEMM's reference rule, so a row quantized here has the
// bytes FBGEMM's reference functions give:
//   INT8        lo, hi = the row's min and max; scale = (hi - lo) / 255; bias = lo;
//               q_d = lrintf((x_d - lo) * (255 / (hi - lo + 1e-8))) (ties to even).
//   INT4, INT2  b bits: bias = fp16(lo) (nearest even) and lo' = bias in fp32; scale = (hi - lo')
//               / (2^b - 1), or 1 when hi == lo', rounded to fp16; a scale that is 0 in fp16, or
//               whose reciprocal overflows, becomes 1; q_d = clamp(lrintf((x_d - lo') * (1 /
//               scale)), 0, 2^b - 1).
//   FP16        nearest even.
// The error of a dequantized element is at most scale / 2 plus the rounding of the fused
// multiply-add (and, for INT4/INT2, of lo to fp16: |lo - lo'| moves every element by as much).
//
// Pooling, for bag I of feature f on sample b, per-id weights w_j (1 when absent), in id order:
//   SUM   y_d = sum_j w_j * v_jd  (v_jd = element d of id j's row; w_j * v_jd rounded, then added)
//   MEAN  y_d = (1/n) * (the SUM), n = the bag's ids that reached a row; an empty bag gives 0.
// Output: [B, sum_f D_f] row-major, features in configuration order (ember_ebc's layout), in fp32
// or fp16 (the fp32 sum rounded to nearest even at the end). Every kernel variant (ember_isa) and
// every thread count give the same bits.
//
// Pruning: a table may hold fewer rows than its id space. Its remap sends each kept id to a row;
// an id the remap lacks is pruned: it contributes nothing and does not count in MEAN.
//   ARRAY  ids in [0, num_embeddings), an int32 row per id (4 bytes per id of the space);
//   HASH   any int64 id, an open-addressing table of the kept ids (16 bytes per slot, at most half
//          full): for sparse id spaces and for hashed (collisionless) training tables.
// Without a remap an id is a row of [0, rows). Ids outside the id space (ARRAY: [0,
// num_embeddings); none: [0, rows)) follow the collection's bounds mode as in ember_ebc.
//
// Calls on one collection must not overlap (its context holds one error message); a forward
// threads over bags itself.
#ifndef EMBER_QUANT_H
#define EMBER_QUANT_H

#include "ember/core.h"
#include "ember/dtype.h"
#include "ember/ebc.h"
#include "ember/kjt.h"
#include "ember/state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_qtype {
    EMBER_QTYPE_FP32 = 0,
    EMBER_QTYPE_FP16 = 1,
    EMBER_QTYPE_INT8 = 2,
    EMBER_QTYPE_INT4 = 3,
    EMBER_QTYPE_INT2 = 4,
} ember_qtype;
#define EMBER_QTYPE_COUNT 5
// "fp32", "fp16", "int8", "int4", "int2" ("unknown" outside the enum); parse: EMBER_OK and *out
// set, or EMBER_ERR_INVALID_ARG (*out unchanged). Local.
EMBER_API const char *ember_qtype_name(ember_qtype t);
EMBER_API ember_status ember_qtype_parse(const char *name, ember_qtype *out);
// Bytes of one row of `dim` elements in the layout above; 0 for an unknown type or dim < 1. Local.
EMBER_API size_t ember_qtype_row_bytes(ember_qtype t, int32_t dim);

// Quantizes n fp32 rows of dim elements (src [n][dim]) into dst (n rows of
// ember_qtype_row_bytes(t, dim) bytes each). Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG
// (unknown type, dim < 1, n < 0, NULL pointers), EMBER_ERR_NUMERIC (a NaN or infinity: the
// message names the row and column; dst is then unspecified).
EMBER_API ember_status ember_quantize_rows(ember_ctx *ctx, ember_qtype t, int32_t dim, int64_t n, const float *src,
                                           void *dst);
// The fp32 values of n rows (the element values above) into dst [n][dim]. Local. Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG.
EMBER_API ember_status ember_dequantize_rows(ember_ctx *ctx, ember_qtype t, int32_t dim, int64_t n, const void *src,
                                             float *dst);

typedef enum ember_qremap_kind {
    EMBER_QREMAP_NONE = 0,  // an id is a row
    EMBER_QREMAP_ARRAY = 1, // an int32 row per id of [0, num_embeddings)
    EMBER_QREMAP_HASH = 2,  // an open-addressing table of the kept int64 ids
} ember_qremap_kind;
#define EMBER_QREMAP_COUNT 3
// "none", "array", "hash". Local.
EMBER_API const char *ember_qremap_kind_name(ember_qremap_kind k);
EMBER_API ember_status ember_qremap_kind_parse(const char *name, ember_qremap_kind *out);

typedef struct ember_qtable_config {
    const char *name;       // copied; unique within the collection
    int64_t rows;           // stored rows, >= 1
    int32_t dim;            // >= 1
    ember_qtype qtype;
    ember_pooling pooling;  // SUM or MEAN
    int64_t num_embeddings; // the id space of an ARRAY remap (>= 1); ignored otherwise
} ember_qtable_config;
#define EMBER_QTABLE_CONFIG_DEFAULT                                                                   \
    {.name = NULL, .rows = 0, .dim = 0, .qtype = EMBER_QTYPE_INT8, .pooling = EMBER_POOL_SUM,           \
     .num_embeddings = 0}

typedef struct ember_qebc_config {
    const ember_qtable_config *tables;
    int32_t num_tables;
    const ember_feature_config *features; // feature f reads tables[features[f].table]
    int32_t num_features;
    ember_bounds_mode bounds;             // default ERROR
    ember_dtype output_dtype;             // EMBER_DTYPE_F32 (default) or EMBER_DTYPE_F16
} ember_qebc_config;
#define EMBER_QEBC_CONFIG_DEFAULT                                                                     \
    {.tables = NULL, .num_tables = 0, .features = NULL, .num_features = 0, .bounds = EMBER_BOUNDS_ERROR, \
     .output_dtype = EMBER_DTYPE_F32}

typedef struct ember_qebc ember_qebc;

// Creates a collection with every row zero (all bytes 0: value 0 in every layout) and no remap.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (bad sizes or types, unknown table index,
// duplicate or missing names, NONE pooling, an output dtype other than fp32/fp16), EMBER_ERR_NOMEM.
// On failure *out is NULL and nothing is leaked.
EMBER_API ember_status ember_qebc_create(ember_ctx *ctx, const ember_qebc_config *cfg, ember_qebc **out);
EMBER_API void ember_qebc_destroy(ember_qebc *q);

EMBER_API int32_t ember_qebc_num_tables(const ember_qebc *q);
EMBER_API int32_t ember_qebc_num_features(const ember_qebc *q);
EMBER_API int32_t ember_qebc_output_dim(const ember_qebc *q); // sum_f D_f
EMBER_API const ember_qtable_config *ember_qebc_table(const ember_qebc *q, int32_t t); // NULL if unknown
EMBER_API int32_t ember_qebc_table_index(const ember_qebc *q, const char *name);      // -1 if absent
// Bytes of the stored rows of table t (rows * row bytes) and of its remap. Local; EMBER_ERR_INVALID_ARG.
EMBER_API ember_status ember_qebc_table_bytes(const ember_qebc *q, int32_t t, size_t *row_bytes_total,
                                              size_t *remap_bytes);

// Rows [row_begin, row_end) of table t, in its layout: write copies them in, read copies them out.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (unknown table, bad range, NULL with rows).
EMBER_API ember_status ember_qebc_write_rows(ember_qebc *q, int32_t t, int64_t row_begin, int64_t row_end,
                                             const void *src);
EMBER_API ember_status ember_qebc_read_rows(const ember_qebc *q, int32_t t, int64_t row_begin, int64_t row_end,
                                            void *dst);
// A read-only view of table t's rows without a copy: row r at (const char *)*data + r * row bytes
// (*row_bytes when not NULL). Valid until the collection is destroyed. For benchmarks and
// zero-copy bindings. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (unknown table, data NULL).
EMBER_API ember_status ember_qebc_rows_view(const ember_qebc *q, int32_t t, const void **data, size_t *row_bytes);
// Quantizes fp32 rows src [row_end - row_begin][dim] into rows [row_begin, row_end) of table t.
// Local. Returns as write, plus EMBER_ERR_NUMERIC (a NaN or infinity, named: nothing is written).
EMBER_API ember_status ember_qebc_quantize_rows(ember_qebc *q, int32_t t, int64_t row_begin, int64_t row_end,
                                                const float *src);

// Sets table t's remap: kept id ids[i] reads row rows[i] (i < n); every other id is pruned. kind
// NONE removes the remap (n must be 0). ARRAY ids lie in [0, num_embeddings), HASH ids anywhere;
// rows lie in [0, rows); an id may appear once (several ids may share a row).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (unknown table or kind, n < 0, NULL arrays with
// n > 0, an id out of its space or repeated, a row out of range: named, nothing changes),
// EMBER_ERR_NOMEM (nothing changes).
EMBER_API ember_status ember_qebc_set_remap(ember_qebc *q, int32_t t, ember_qremap_kind kind, int64_t n,
                                            const int64_t *ids, const int64_t *rows);
// The remap kind of table t (NONE for an unknown table). Local.
EMBER_API ember_qremap_kind ember_qebc_remap_kind(const ember_qebc *q, int32_t t);
// Table t's remap: its kind, the number of kept ids, and (ids and rows not NULL, room for cap)
// the kept (id, row) pairs: ARRAY in id order, HASH in the table's slot order. Local. Returns
// EMBER_OK, EMBER_ERR_INVALID_ARG (unknown table; cap below the count, or one of ids/rows NULL).
EMBER_API ember_status ember_qebc_get_remap(const ember_qebc *q, int32_t t, ember_qremap_kind *kind, int64_t *n,
                                            int64_t *ids, int64_t *rows, int64_t cap);

// Pools every bag of kjt into out ([B][output_dim] in the output dtype: float or uint16_t fp16
// bits). kjt is validated first (feature count, bags, ids against each feature's id space under
// the bounds mode). Threads over bags (the context's threads).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_OUT_OF_RANGE, EMBER_ERR_NOMEM (scratch
// for the resolved rows of remapped or clamped ids), EMBER_ERR_UNSUPPORTED (a VBE KJT). On error
// out is unchanged.
EMBER_API ember_status ember_qebc_forward(const ember_qebc *q, const ember_kjt *kjt, void *out);

// ---- Bundles ---------------------------------------------------------------------------------
// A collection saved with the caller's named blobs (a model's dense parameters and configuration:
// opaque bytes here) into one directory, as checkpoints are saved (include/ember/state.h):
//   bundle.json   the commit point: {"format": "ember-quant/1", "generation", "data": "q<G>.bin",
//                 "bounds", "output_dtype", "tables": [{"name", "qtype", "rows", "dim",
//                 "pooling", "num_embeddings", "remap", "kept", "rows_data": {"offset", "bytes",
//                 "crc32"}, "remap_data": {...} (with a remap)}], "features": [{"name", "table"}],
//                 "blobs": [{"name", "offset", "bytes", "crc32"}]}
//   q<G>.bin      generation G's data: every table's rows (its layout above, row after row), its
//                 remap's kept (id, row) pairs as int64 [kept][2], and the blobs, back to back
// A save writes q<G+1>.bin, then bundle.json, each under a temporary name, fsync'd and renamed
// (the manifest's rename is the commit), then removes the other generations' files: a save killed
// or failing at any instant leaves the bundle that was there loadable (a failed save removes what
// it wrote, and the directory when it made it). A load checks every part's CRC-32.

// Saves q and blobs (names: 1..127 letters, digits and "._-", unique) into directory dir (created
// when missing; its parent must exist). Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL or
// long dir, bad blob names), EMBER_ERR_IO (the path and the OS reason), EMBER_ERR_NOMEM.
EMBER_API ember_status ember_qebc_save(const ember_qebc *q, const char *dir, const ember_checkpoint_blob *blobs,
                                       int32_t num_blobs);
// Loads the collection of the bundle in dir into a new collection on ctx (its kernel variant and
// threads). Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_IO (missing or unreadable
// file: path and reason), EMBER_ERR_FORMAT (no bundle.json; a field missing or out of range, named
// with its table; a part failing its CRC-32 or past the end of the data file), EMBER_ERR_NOMEM.
// On failure *out is NULL.
EMBER_API ember_status ember_qebc_load(ember_ctx *ctx, const char *dir, ember_qebc **out);
// Reads blob `name` of the bundle in dir into dst (cap bytes; dst NULL: only its size), checking
// its CRC-32; *bytes (may be NULL) is its size. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (no
// such blob; cap below its size), EMBER_ERR_IO, EMBER_ERR_FORMAT.
EMBER_API ember_status ember_qebc_read_blob(ember_ctx *ctx, const char *dir, const char *name, void *dst, size_t cap,
                                            size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
