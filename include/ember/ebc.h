// ember/ebc.h — a local EmbeddingBagCollection on table-batched storage, with the optimizer
// fused into backward (docs/semantics.md §2, §4, §5).
//
// A collection owns T tables, each `rows x dim` in its own dtype, laid out in one slab, plus
// each table's optimizer state beside it. F features read the tables (several features may
// share one). One forward pools every bag of a KJT; one backward takes the gradient of the
// output, coalesces duplicate ids (sum of their gradients), and applies exactly one optimizer
// update to every touched row; untouched rows are not changed ("exact" semantics of FBGEMM's
// EXACT_* optimizers and torch's sparse optimizers).
//
// Pooling, for bag I of feature f on sample b, per-id weights w_j (1 when absent):
//   SUM   y = sum_j w_j E[id_j]
//   MEAN  y = (1/|I|) sum_j w_j E[id_j], |I| = number of ids, weighted or not, under every sharding
//         scheme (FBGEMM's MEAN; never the sum of the weights, which TorchRec's row-wise sharding
//         divides weighted bags by); an empty bag gives 0. Ids dropped by EMBER_BOUNDS_SKIP do not count.
//   NONE  no pooling (EmbeddingCollection): one row per id. A collection is either all-NONE or
//         has no NONE table, and an all-NONE collection needs one common dim D.
// Output layout: pooled collections write [B, sum_f D_f] row-major, features in configuration
// order (KeyedTensor layout); all-NONE collections write [nnz, D] in the KJT's value order.
//
// Determinism: forward outputs and updated weights are bitwise identical run to run and for any
// thread count (sort-and-segment backward, fixed summation order, no float atomics).
// Workspace: sized at creation from max_batch_size/max_nnz; a larger batch grows it once.
// A failed call changes nothing: weights, state and step counters are as before the call.
#ifndef EMBER_EBC_H
#define EMBER_EBC_H

#include "ember/core.h"
#include "ember/dtype.h"
#include "ember/kjt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_pooling { EMBER_POOL_SUM = 0, EMBER_POOL_MEAN = 1, EMBER_POOL_NONE = 2 } ember_pooling;
#define EMBER_POOL_COUNT 3
// "sum", "mean", "none" ("unknown" outside the enum); parse: EMBER_OK and *out set, or
// EMBER_ERR_INVALID_ARG (*out unchanged). Local. Every enum of this header has such a pair.
EMBER_API const char *ember_pooling_name(ember_pooling p);
EMBER_API ember_status ember_pooling_parse(const char *name, ember_pooling *out);

typedef enum ember_init_kind {
    EMBER_INIT_ZEROS = 0,
    EMBER_INIT_UNIFORM = 1, // uniform(a, b)
    EMBER_INIT_NORMAL = 2,  // normal(0, std)
} ember_init_kind;
#define EMBER_INIT_COUNT 3
// "zeros", "uniform", "normal".
EMBER_API const char *ember_init_kind_name(ember_init_kind k);
EMBER_API ember_status ember_init_kind_parse(const char *name, ember_init_kind *out);

typedef struct ember_init {
    ember_init_kind kind;
    float a, b;  // UNIFORM bounds
    float std;   // NORMAL standard deviation
} ember_init;

// The fused optimizers. Their formulas are in src/tbe/optim.c (and docs/semantics.md); what each
// keeps per table comes from one descriptor table (ember_optim_info).
typedef enum ember_optim_kind {
    EMBER_OPT_SGD = 0,
    EMBER_OPT_ADAGRAD = 1,             // state momentum1 [rows, dim]: sum of squared gradients
    EMBER_OPT_ROWWISE_ADAGRAD = 2,     // state momentum1 [rows]: sum of mean-over-row squared grads
    EMBER_OPT_ADAM = 3,                // momentum1, momentum2 [rows, dim]
    EMBER_OPT_PARTIAL_ROWWISE_ADAM = 4,// momentum1 [rows, dim], momentum2 [rows] (row mean of g^2)
    EMBER_OPT_LAMB = 5,                // momentum1, momentum2 [rows, dim]; trust ratio per row
    EMBER_OPT_PARTIAL_ROWWISE_LAMB = 6,// momentum1 [rows, dim], momentum2 [rows]; trust ratio per row
    EMBER_OPT_LARS_SGD = 7,            // momentum1 [rows, dim] (velocity); layer-wise rate per row
} ember_optim_kind;
#define EMBER_OPT_COUNT 8

typedef enum ember_weight_decay_mode {
    EMBER_WD_NONE = 0,
    EMBER_WD_L2 = 1,        // g += weight_decay * w before the optimizer (coupled, torch's weight_decay)
    EMBER_WD_DECOUPLED = 2, // w -= lr * weight_decay * w beside the update (AdamW style)
} ember_weight_decay_mode;
#define EMBER_WD_COUNT 3
// "none", "l2", "decoupled".
EMBER_API const char *ember_weight_decay_mode_name(ember_weight_decay_mode m);
EMBER_API ember_status ember_weight_decay_mode_parse(const char *name, ember_weight_decay_mode *out);

typedef struct ember_optim_config {
    ember_optim_kind kind;
    float lr;
    float eps;               // Adagrad/Adam/LAMB denominator epsilon
    float beta1, beta2;      // Adam/LAMB moments
    float weight_decay;
    ember_weight_decay_mode weight_decay_mode;
    float initial_accumulator; // Adagrad and row-wise Adagrad initial momentum1 value
    float momentum;          // LARS-SGD velocity decay
    float eta;               // LARS-SGD trust coefficient
} ember_optim_config;
#define EMBER_OPTIM_CONFIG_DEFAULT                                                                    \
    {.kind = EMBER_OPT_SGD, .lr = 0.01f, .eps = 1e-8f, .beta1 = 0.9f, .beta2 = 0.999f, .weight_decay = 0.0f,   \
     .weight_decay_mode = EMBER_WD_NONE, .initial_accumulator = 0.0f, .momentum = 0.9f, .eta = 0.001f}

// What an optimizer keeps per table, from the library's one descriptor table: the planner,
// checkpoints, state dicts and the CLI's memory check all ask here.
#define EMBER_MAX_STATES 2
typedef struct ember_optim_info {
    const char *name;                        // "sgd", "rowwise_adagrad", ... (the CLI's names)
    int32_t num_states;                      // 0 .. EMBER_MAX_STATES
    const char *state_names[EMBER_MAX_STATES]; // "momentum1", "momentum2"
    int32_t state_per_row[EMBER_MAX_STATES]; // 1: [rows] (one value per row), 0: [rows, dim]
    int32_t column_wise;                     // 1: a table may be split by columns (COLUMN_WISE)
    int32_t uses_step;                       // bias correction by the table's step counter
} ember_optim_info;

// The descriptor of `kind`. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (unknown kind, NULL).
EMBER_API ember_status ember_optim_info_get(ember_optim_kind kind, ember_optim_info *info);
// "sgd", ... ("unknown" outside the enum), and the inverse (EMBER_ERR_INVALID_ARG if unknown).
EMBER_API const char *ember_optim_name(ember_optim_kind kind);
EMBER_API ember_status ember_optim_parse(const char *name, ember_optim_kind *out);

// Which rows leave first when a cache (tiered tables) or a hashed table is full.
typedef enum ember_evict_policy {
    EMBER_EVICT_LRU = 0, // least recently used (by step)
    EMBER_EVICT_LFU = 1, // least frequently used (occurrences since admission); ties: least recent
    EMBER_EVICT_TTL = 2, // hashed tables: rows unused for ttl_steps steps leave; when full, as LRU
} ember_evict_policy;
#define EMBER_EVICT_COUNT 3
// "lru", "lfu", "ttl" ("unknown" outside the enum); parse: EMBER_OK and *out set, or
// EMBER_ERR_INVALID_ARG. Local.
EMBER_API const char *ember_evict_policy_name(ember_evict_policy p);
EMBER_API ember_status ember_evict_policy_parse(const char *name, ember_evict_policy *out);

// Collisionless hashing (docs/hashed.md): ids are arbitrary 64-bit keys (any int64 value); the
// table maps each id to a row of its own. `rows` is then the capacity, split into rows /
// bucket_rows buckets: an id lives in bucket hash(id) mod buckets, and eviction is within a
// bucket, so a table sharded by bucket ranges evolves exactly as the whole table.
#define EMBER_HASH_BUCKET_ROWS 16 // bucket_rows when 0
typedef struct ember_hash_config {
    int32_t enabled;         // 1: this table is hashed
    int32_t bucket_rows;     // rows per bucket: 0 (16) or >= 2, dividing rows
    int64_t min_count;       // an id gets a row at its min_count-th occurrence (<= 1: at once)
    ember_evict_policy policy;
    int64_t ttl_steps;       // TTL: rows unused for this many training steps are dropped (>= 1)
} ember_hash_config;

typedef struct ember_table_config {
    const char *name;        // copied; unique within the collection
    int64_t rows;            // >= 1
    int32_t dim;             // >= 1
    ember_pooling pooling;
    ember_dtype dtype;       // a storage dtype (ember_dtype_is_storage)
    ember_init init;
    ember_optim_config optim;
    int32_t stochastic_rounding; // 16-bit storage: round updates stochastically (seeded)
    // Tiered storage (docs/tiered.md): cache_rows > 0 keeps the table's weights and optimizer
    // state in a file under the collection's ssd_dir with a DRAM cache of cache_rows rows,
    // evicted by cache_policy (LRU or LFU). 0: the table lives in RAM.
    int64_t cache_rows;
    ember_evict_policy cache_policy;
    ember_hash_config hash;  // collisionless hashed table (hash.enabled), see above
} ember_table_config;
// Start from this and set name, rows and dim: SUM pooling, fp32, uniform(-0.01, 0.01) init, SGD,
// in RAM, not hashed. Every _DEFAULT of the API is designated: fields are set by name, so a new
// field changes only the code that uses it.
#define EMBER_TABLE_CONFIG_DEFAULT                                                                    \
    {.name = NULL, .rows = 0, .dim = 0, .pooling = EMBER_POOL_SUM, .dtype = EMBER_DTYPE_F32,            \
     .init = {.kind = EMBER_INIT_UNIFORM, .a = -0.01f, .b = 0.01f, .std = 0.0f},                        \
     .optim = EMBER_OPTIM_CONFIG_DEFAULT, .stochastic_rounding = 0, .cache_rows = 0,                   \
     .cache_policy = EMBER_EVICT_LRU,                                                                  \
     .hash = {.enabled = 0, .bucket_rows = 0, .min_count = 0, .policy = EMBER_EVICT_LRU, .ttl_steps = 0}}

// What a table's ids are. Decided once, from the configuration, by the kind of the table's row
// map; validation, routing, state dicts and the planner all ask it:
//   EMBER_IDS_ROWS    an id is a row of [0, rows), out-of-range ids handled by the bounds mode
//                     (tables in RAM and tiered tables);
//   EMBER_IDS_HASHED  an id is any int64 key, given a row of its own by the table's collisionless
//                     hash (hash.enabled): the bounds mode does not apply.
typedef enum ember_id_space { EMBER_IDS_ROWS = 0, EMBER_IDS_HASHED = 1 } ember_id_space;
#define EMBER_IDS_COUNT 2
// "rows", "hashed".
EMBER_API const char *ember_id_space_name(ember_id_space s);
EMBER_API ember_status ember_id_space_parse(const char *name, ember_id_space *out);
// The id space of a table of this configuration (EMBER_IDS_ROWS for NULL). Local.
EMBER_API ember_id_space ember_table_id_space(const ember_table_config *t);

typedef struct ember_feature_config {
    const char *name; // copied
    int32_t table;    // index into tables
} ember_feature_config;

// Where a collection's tables live and what computes on them. Every backend computes the same
// bits (docs/cuda.md):
//   EMBER_BACKEND_CPU   host memory and the context's kernel variant (ember_isa);
//   EMBER_BACKEND_CUDA  the memory of the calling thread's current CUDA device and CUDA kernels
//                       (builds made where nvcc is present). The calls keep their host-memory
//                       arguments: KJTs, outputs and gradients are copied to and from the device
//                       per call. Tiered and hashed tables are cpu-only.
typedef enum ember_backend { EMBER_BACKEND_CPU = 0, EMBER_BACKEND_CUDA = 1 } ember_backend;
#define EMBER_BACKEND_COUNT 2
// "cpu", "cuda" ("unknown" outside the enum); parse: EMBER_OK and *out set, or
// EMBER_ERR_INVALID_ARG (*out unchanged). Local.
EMBER_API const char *ember_backend_name(ember_backend b);
EMBER_API ember_status ember_backend_parse(const char *name, ember_backend *out);
// 1 when a collection of backend b can be created here (built in, and for cuda a usable GPU);
// else 0, with the reason in why (when not NULL) as "the cuda backend is not in this build",
// "no CUDA device: <the runtime's message>". Local.
EMBER_API int ember_backend_supported(ember_backend b, char *why, size_t why_len);

typedef struct ember_ebc_config {
    const ember_table_config *tables;
    int32_t num_tables;
    const ember_feature_config *features;
    int32_t num_features;
    ember_bounds_mode bounds;   // default ERROR
    uint64_t seed;              // initialisation and stochastic rounding
    int32_t max_batch_size;     // workspace hints (0: sized on first use)
    int64_t max_nnz;
    const char *ssd_dir;        // tiered tables' files go here (NULL: $TMPDIR, else /tmp)
    ember_backend backend;      // default CPU; EMBER_BACKEND_CUDA: the current CUDA device
} ember_ebc_config;
// Start from this and set tables/features: bounds ERROR, seed 0, no workspace hints.
#define EMBER_EBC_CONFIG_DEFAULT                                                                      \
    {.tables = NULL, .num_tables = 0, .features = NULL, .num_features = 0, .bounds = EMBER_BOUNDS_ERROR, \
     .seed = 0, .max_batch_size = 0, .max_nnz = 0, .ssd_dir = NULL, .backend = EMBER_BACKEND_CPU}

typedef struct ember_ebc ember_ebc;

// Creates a collection, allocates its slab and initialises every table from `seed` (table t's
// values depend only on the seed, t's name, and the row: the same table sharded or not starts
// from the same values).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (bad sizes, unknown table index, duplicate
// names, mixed NONE/pooled, NONE with unequal dims, bad hyper-parameters, a cache or hash
// configuration out of range, bucket_rows not dividing rows, an unknown backend),
// EMBER_ERR_UNSUPPORTED (a table both tiered and hashed, either with stochastic rounding, a
// backend this build lacks, cuda without a usable GPU, a tiered or hashed table on cuda),
// EMBER_ERR_DEVICE (the CUDA runtime failed: its message), EMBER_ERR_IO (a tiered table's file cannot
// be created or reserved in ssd_dir: the message names the table and the directory),
// EMBER_ERR_NOMEM. On failure *out is NULL and nothing is leaked (no file is left).
EMBER_API ember_status ember_ebc_create(ember_ctx *ctx, const ember_ebc_config *cfg, ember_ebc **out);
EMBER_API void ember_ebc_destroy(ember_ebc *ebc);

EMBER_API int32_t ember_ebc_num_tables(const ember_ebc *ebc);
EMBER_API int32_t ember_ebc_num_features(const ember_ebc *ebc);
// sum_f D_f for pooled collections, D for all-NONE collections.
EMBER_API int32_t ember_ebc_output_dim(const ember_ebc *ebc);
// Floats forward writes for this KJT: B * sum_f D_f (pooled) or nnz * D (NONE); a VBE KJT's
// (kjt.h): B * sum_f D_f with inverse indices, else sum_f B_f D_f (NONE: nnz * D; its forward
// refuses a VBE KJT).
EMBER_API int64_t ember_ebc_output_size(const ember_ebc *ebc, const ember_kjt *kjt);
EMBER_API const ember_table_config *ember_ebc_table(const ember_ebc *ebc, int32_t t);
EMBER_API int32_t ember_ebc_table_index(const ember_ebc *ebc, const char *name); // -1 if absent

// Pools every bag of `kjt` into `out` (see the layout above; a VBE KJT's layout is in kjt.h: each
// bag is pooled once, then placed for every sample reading it). kjt is validated first against
// the feature count and table sizes with the collection's bounds mode.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_OUT_OF_RANGE, EMBER_ERR_NOMEM
// (workspace growth), EMBER_ERR_UNSUPPORTED (a tiered table's batch has more distinct rows than
// its cache; a VBE KJT for a sequence collection). On error `out` and the tables are unchanged
// (a tiered table's cache may hold other rows, never other values). A hashed table admits the batch's new ids (docs/hashed.md).
EMBER_API ember_status ember_ebc_forward(ember_ebc *ebc, const ember_kjt *kjt, float *out);

// Backward with the fused optimizer. grad_out has forward's output layout and is dL/d(out)
// exactly as given (no rescaling); a VBE bag's gradient is the sum of its samples' rows, in
// sample order. Every row touched by `kjt` receives one update with the
// coalesced gradient sum_j dL/dE[row]. grad_weights, when not NULL, receives [nnz] dL/dw_j
// computed with the weights before the update (KJT must carry weights). Increments each
// table's step counter (Adam/LAMB bias correction, see ember_ebc_step).
// Local. Returns as forward, plus EMBER_ERR_NUMERIC when grad_out holds a NaN/Inf (checked
// before anything changes).
EMBER_API ember_status ember_ebc_backward(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out,
                                          float *grad_weights);

// Forward and fused backward on device memory (a collection of the cuda backend): the KJT's
// offsets (required; lengths are ignored), values and weights, `out` and `grad_out` are CUDA
// device pointers of the collection's device; num_features, batch_size and nnz are the host's.
// The same results as ember_ebc_forward/backward on the same data in host memory, bit for bit
// (backward has no grad_weights here). The checks run on the device, before anything changes:
// offsets that are not a prefix sum ending at nnz, a non-finite weight, an id outside its table
// under EMBER_BOUNDS_ERROR (CLAMP and SKIP resolve ids as usual, without the once-per-call
// warning) and, for backward, a non-finite dL/dy. Both return when the work is done.
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL pointers, shapes, offsets),
// EMBER_ERR_OUT_OF_RANGE, EMBER_ERR_NUMERIC, EMBER_ERR_UNSUPPORTED (not the cuda backend; a
// VBE KJT), EMBER_ERR_NOMEM (device workspace), EMBER_ERR_DEVICE. On error the tables are unchanged (a
// forward's out may hold partial results).
EMBER_API ember_status ember_ebc_forward_device(ember_ebc *ebc, const ember_kjt *kjt, float *out);
EMBER_API ember_status ember_ebc_backward_device(ember_ebc *ebc, const ember_kjt *kjt, const float *grad_out);

// Training (1, the default) or evaluation (0). In evaluation a forward changes no table: a
// hashed table admits no id (unknown ids read as absent). Local. Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (NULL).
EMBER_API ember_status ember_ebc_set_training(ember_ebc *ebc, int training);

// Learning-rate schedules: changes table t's lr (t = -1: every table) for the next steps.
EMBER_API ember_status ember_ebc_set_lr(ember_ebc *ebc, int32_t table, float lr);
// Number of backward steps applied to table t (the global step used for bias correction:
// Adam/LAMB correct with 1 - beta^step, where step counts every backward call on the collection,
// as torch's SparseAdam counts optimizer steps; it equals the per-row count for rows touched
// every step).
EMBER_API int64_t ember_ebc_step(const ember_ebc *ebc, int32_t table);

// ---- Local state dict ---------------------------------------------------------------------
// Each table exposes named tensors: "weight" [rows, dim] and its optimizer's states, named and
// shaped by ember_optim_info ("momentum1", "momentum2"; [rows, dim] or [rows]); SGD has none.
// A hashed table adds "ids" [rows, 3] EMBER_DTYPE_I64: per row its id, the step it was last
// used and its uses since admission (0: the row is free); writing it replaces the id map
// (refused, changing nothing, when an id is not in its row's bucket or twice in a bucket).
// With min_count > 1 it also has "candidates" [rows, 3] EMBER_DTYPE_I64: the ids waiting for
// admission, bucket b's in its rows: id, occurrences so far (0: none), last step seen.
// The step counter is read/written with ember_ebc_step/_set_step.
// There is one storage: reads see exactly what the next forward uses, writes change it.

typedef struct ember_tensor_info {
    const char *name;  // "weight", "momentum1", "momentum2"
    int64_t rows;
    int32_t cols;      // dim, or 1 for per-row state
    ember_dtype dtype; // native storage dtype (state: F32)
} ember_tensor_info;
#define EMBER_MAX_TENSORS (3 + EMBER_MAX_STATES)

// The tensors a table of this configuration has, without a collection: out[0] is "weight",
// then its optimizer's states (ember_optim_info), then "ids" (and "candidates") for a hashed
// table. Returns their count (0 if t is NULL or its
// optimizer unknown). Local.
EMBER_API int32_t ember_table_tensors(const ember_table_config *t, ember_tensor_info out[EMBER_MAX_TENSORS]);
// Bytes of a table of this configuration: weights in its dtype and optimizer state (fp32), as a
// collection allocates them in memory (a tiered table: its cache_rows rows; a hashed table: its id
// map too) (either pointer may be NULL). Local; 0 for a NULL or unknown config.
EMBER_API void ember_table_config_bytes(const ember_table_config *t, size_t *weight_bytes, size_t *state_bytes);

// Number of tensors of table t (1 + optimizer states) and their descriptions, index 0 = weight.
EMBER_API int32_t ember_ebc_num_tensors(const ember_ebc *ebc, int32_t table);
EMBER_API ember_status ember_ebc_tensor_info(const ember_ebc *ebc, int32_t table, int32_t tensor,
                                             ember_tensor_info *info);
// Reads rows [row_begin, row_end) of a named tensor into dst ([n, cols] row-major) in `dtype`
// (F32 always works; a 16-bit dtype only for 16-bit weight storage, giving the native bits).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (unknown table/tensor, bad range, dtype).
EMBER_API ember_status ember_ebc_read(const ember_ebc *ebc, int32_t table, const char *tensor, int64_t row_begin,
                                      int64_t row_end, ember_dtype dtype, void *dst);
// Writes rows [row_begin, row_end) from src (rounded to nearest-even into 16-bit storage).
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (as read; for a hashed table's id map, a row
// that breaks it), EMBER_ERR_NUMERIC (a NaN or infinity in src, named by table, tensor, row and
// column: nothing is written).
EMBER_API ember_status ember_ebc_write(ember_ebc *ebc, int32_t table, const char *tensor, int64_t row_begin,
                                       int64_t row_end, ember_dtype dtype, const void *src);
EMBER_API ember_status ember_ebc_set_step(ember_ebc *ebc, int32_t table, int64_t step);
// Converts table t's weight storage to `dtype` in place (round to nearest even); its optimizer
// state stays fp32. The next update lands in the converted storage, which reads then show.
EMBER_API ember_status ember_ebc_convert_dtype(ember_ebc *ebc, int32_t table, ember_dtype dtype);

// A read-only view of table t's stored rows, without a copy: row r is the dim values of the
// table's dtype at (const char *)*data + r * *row_stride. Valid until the collection is
// destroyed or a dtype conversion re-lays it out (ember_ebc_convert_dtype). For benchmarks and
// zero-copy bindings; reads through it see what the next forward uses. Local. Returns EMBER_OK,
// EMBER_ERR_INVALID_ARG (unknown table, NULL pointers).
EMBER_API ember_status ember_ebc_weights_view(const ember_ebc *ebc, int32_t table, const void **data,
                                              size_t *row_stride);

// ---- Hashed tables (docs/hashed.md) ----------------------------------------------------------
// Cumulative counters of a hashed table: occupied rows now; ids admitted, rows evicted (by the
// policy or TTL); id occurrences that found no row in a forward (not admitted yet, or evaluation);
// admissions refused because every row of the id's bucket was in use by the same call.
typedef struct ember_hash_stats {
    int64_t occupied, admitted, evicted, absent, overflow;
} ember_hash_stats;
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL, unknown table, a table that is not hashed).
EMBER_API ember_status ember_ebc_hash_stats(const ember_ebc *ebc, int32_t table, ember_hash_stats *out);

// ---- Tiered tables (docs/tiered.md) ------------------------------------------------------------
// Asks the kernel to start reading the file pages of the rows `kjt` reads of the tiered tables
// that are neither in their caches nor only initial values (MADV_WILLNEED on the mapping: the
// reads are queued at once, as many at a time as the device takes, and go on while the caller's
// step runs; call it with the next batch after this batch's forward). The next forward then
// finds those pages in memory. A hint: no thread, no copy, nothing to wait for; the results are
// the same with or without it, and pages already in memory cost only the call. Without a tiered
// table it does nothing. Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG, EMBER_ERR_OUT_OF_RANGE
// (kjt checked as forward checks it), EMBER_ERR_NOMEM (workspace).
EMBER_API ember_status ember_ebc_prefetch(ember_ebc *ebc, const ember_kjt *kjt);

// Cumulative cache counters of a tiered table: per forward, each distinct row is a hit (resident)
// or a miss (loaded: from the file, or initial values for a row never written back); rows and
// bytes read from / written to its file; rows evicted; rows a prefetch asked the kernel to read
// ahead (ember_ebc_prefetch: not cached, held by the file).
typedef struct ember_tier_stats {
    int64_t hits, misses, evictions;
    int64_t rows_read, rows_written;
    int64_t bytes_read, bytes_written;
    int64_t prefetched;
} ember_tier_stats;
// Local. Returns EMBER_OK, EMBER_ERR_INVALID_ARG (NULL, unknown table, a table that is not tiered).
EMBER_API ember_status ember_ebc_tier_stats(const ember_ebc *ebc, int32_t table, ember_tier_stats *out);

// Bytes of table t: weights (rows * dim * sizeof(dtype)) and optimizer state.
EMBER_API ember_status ember_ebc_table_bytes(const ember_ebc *ebc, int32_t table, size_t *weight_bytes,
                                             size_t *state_bytes);

#ifdef __cplusplus
}
#endif
#endif
