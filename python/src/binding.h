// python/src/binding.h — what the extension's C files share (internal to the binding); every
// file of python/src includes it first.
//
// The extension `ember._ember` is written over the public headers alone (include/ember/*.h). Its
// files, one job each:
//   module.c      the registrar: the module's method table and its init, nothing else
//   errors.c      exceptions of the statuses, the binding's own refusals, the agreement of a
//                 Python-side refusal across ranks
//   buffer.c      arrays through the buffer protocol, and each dtype's buffer format
//   context.c     every object's context (the counting allocator hooks) and its lock
//   config.c      table configurations from the Python layer's tuples, and their tensors
//   names.c       the library's name tables (statuses, enums) and facts (version, CPU) for Python
//   kjt.c, ebc.c, comm.c, sebc.c, plan.c, checkpoint.c, lfq.c, quant.c, dense.c: one concept each, exporting one
//                 `ember_py_<concept>_add(PyObject *module)` that the module init calls to
//                 register its types and functions.
#ifndef EMBER_PY_BINDING_H
#define EMBER_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pythread.h>

#include "ember/comm.h"
#include "ember/core.h"
#include "ember/dtype.h"
#include "ember/ebc.h"
#include "ember/kjt.h"
#include "ember/plan.h"
#include "ember/shard.h"
#include "ember/state.h"

#if defined(__GNUC__)
#define EMBER_PY_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define EMBER_PY_PRINTF(f, a)
#endif

// ---- Errors (errors.c) -------------------------------------------------------------------------

// Reads the exception classes of ember.errors (one per status name); at module init, before any
// other call. 0, or -1 with ImportError set.
int ember_py_errors_init(void);
// Raises the Python exception of `st` (ember.errors: one class per status) carrying ctx's message
// (ember_ctx_errmsg, which names the rank), or ember_status_str(st) when ctx is NULL or has no
// message. Returns NULL, for `return ember_py_raise(ctx, st);`.
PyObject *ember_py_raise(ember_ctx *ctx, ember_status st);
// Raises the exception of `st` with a printf-style message in the library's style, followed by
// " (rank R)" (`rank` < 0: this process's rank in MPI_COMM_WORLD). Returns NULL.
PyObject *ember_py_error(ember_status st, int rank, const char *fmt, ...) EMBER_PY_PRINTF(3, 4);
// ember_py_error(EMBER_ERR_INVALID_ARG, -1, ...): for checks made by the binding.
PyObject *ember_py_invalid(const char *fmt, ...) EMBER_PY_PRINTF(1, 2);
// Raises StateError "<what> is closed (rank R)"; returns NULL.
PyObject *ember_py_closed(const char *what);
// Takes (and clears) the pending Python exception: its status and its message into msg[cap]
// without the " (rank R)" the library adds again. An ember error keeps its own status and message;
// anything else is INVALID_ARG "TypeName: text". EMBER_OK with msg "" when none is pending.
ember_status ember_py_take_error(char *msg, size_t cap);
// Sets `exc` (an exception instance, or None) as the pending exception, for ember_py_agree:
// 1 when set, 0 for None, -1 with TypeError for anything else.
int ember_py_set_pending(PyObject *exc);
// The Python-side agreement of a collective call: the status of the pending Python exception
// (ember_py_take_error), or OK when none is pending, is recorded on ctx (ember_ctx_set_error) and
// agreed over comm (ember_comm_agree). Returns 0 when every rank is fine; otherwise raises the
// agreed error on this rank (the failing rank's message on the others) and returns -1. Every rank
// must call it once per collective call.
int ember_py_agree(ember_comm *comm, ember_ctx *ctx);
// Rank in MPI_COMM_WORLD when MPI is initialised and not finalised, else 0.
int ember_py_world_rank(void);
// Set when a call raised CollectiveTimeoutError: a collective is still in flight in MPI (it cannot
// be cancelled), so no communicator is freed any more and the process cannot finalise MPI; at
// exit the module ends the job with MPI_Abort, as the library prescribes (ember/comm.h).
extern int ember_py_timed_out;

// ---- Buffers (buffer.c) ------------------------------------------------------------------------

// Gets a C-contiguous buffer of `obj` whose items are `format` ("q" int64, "i" int32, "f" float32,
// "d" float64, "e" float16, "B" uint8, "H" uint16: numpy's formats, '<', '=' and 'l'/'i' aliases
// of the same size accepted), writable when `writable`. On mismatch raises InvalidArgumentError
// naming `what` and what it got, and returns -1; 0 on success (release with PyBuffer_Release).
int ember_py_buffer(PyObject *obj, const char *what, const char *format, int writable, Py_buffer *view);
// The buffer format of an array of `dt` (fp32 "f", fp16 "e", bf16 "H": its raw bits, int64 "q",
// fp64 "d"), NULL outside the enum. Its item size is ember_dtype_size(dt).
const char *ember_py_dtype_format(ember_dtype dt);

// ---- Contexts and locks (context.c) ------------------------------------------------------------

// Creates a context with `num_threads` kernel threads and the binding's counting allocator
// hooks; on failure raises and returns -1. Every context the binding creates comes from here.
int ember_py_ctx_create(int32_t num_threads, ember_ctx **out);
// Bytes the binding's contexts hold through their allocator hooks, over the whole process.
long long ember_py_bytes_outstanding(void);
// Every object's methods take its lock around their use of the C object (waiting without the
// GIL), so that two Python threads never run one ember object at once (the library's objects
// are thread-compatible, and long calls release the GIL). Arguments are converted first: nothing
// under the lock calls back into Python. Release with PyThread_release_lock.
void ember_py_lock(PyThread_type_lock lock);

// ---- Communicators (comm.c) --------------------------------------------------------------------

// Objects holding MPI resources (an ember_comm of their own) must release them before MPI is
// finalised: they register a close function, which the module calls for each live object at
// interpreter exit before it finalises MPI (when it initialised it). The registry holds no
// reference; untrack in the object's close/dealloc. track: 0, or -1 with MemoryError set.
typedef void (*ember_py_closer)(PyObject *obj);
int ember_py_track(PyObject *obj, ember_py_closer close);
void ember_py_untrack(PyObject *obj);
// Creates an ember_comm on `ctx` over the MPI communicator of `comm_obj` (an ember._ember.Comm;
// a duplicate of it, with the Comm's collective deadline). Collective on that communicator. On
// failure raises (a TypeError for another object, the library's error otherwise) and returns -1.
int ember_py_comm_derive(PyObject *comm_obj, ember_ctx *ctx, ember_comm **out);
// ember_comm_destroy, unless MPI is already finalised (then the handle is left: MPI's resources
// went with MPI_Finalize, and freeing it now would be an MPI error).
void ember_py_comm_destroy(ember_comm *comm);
// The deadline of `comm_obj` (an ember._ember.Comm; < 0 when it is closed or not a Comm), for
// objects that follow their Comm's timeout_s changes.
double ember_py_comm_timeout(PyObject *comm_obj);
// ember_py_agree on the communicator of `comm_obj` (an ember._ember.Comm), under its lock.
int ember_py_comm_agree_obj(PyObject *comm_obj);

// ---- Configurations (config.c) -----------------------------------------------------------------

// A collection's configuration from the Python layer's tuples:
//   tables    sequence of (name, rows, dim, pooling, dtype, init_kind, a, b, std, optim, lr, eps,
//             beta1, beta2, weight_decay, weight_decay_mode, initial_accumulator, momentum, eta,
//             stochastic_rounding, cache_rows, cache_policy[, hash_bucket_rows, hash_min_count,
//             hash_policy, hash_ttl_steps]), enums as their C values; the four hash fields
//             (optional) make the table hashed (hash_bucket_rows: 0 for the default, >= 2)
//   features  sequence of (name, table index)
// Names point into the Python strings: keep `tables` and `features` alive while cfg is used.
typedef struct ember_py_config {
    ember_ebc_config cfg;
    ember_table_config *tables;
    ember_feature_config *features;
} ember_py_config;
int ember_py_config_parse(PyObject *tables, PyObject *features, ember_py_config *out);
void ember_py_config_free(ember_py_config *c);
// [(name, rows, cols, dtype name)] of n tensor descriptions.
PyObject *ember_py_tensor_list(const ember_tensor_info *ti, int32_t n);
// A tiered table's counters as a dict: hits, misses, evictions, rows_read, rows_written,
// bytes_read, bytes_written, prefetched (ember_tier_stats). NULL with an exception on failure.
PyObject *ember_py_tier_stats_dict(const ember_tier_stats *x);

// ---- KJTs (kjt.c) ------------------------------------------------------------------------------

// A KJT over the buffers of Python arrays, from the parts tuple (values int64, lengths int32 or
// None, offsets int64 or None, weights float32 or None, F, B, feature_batch_sizes int32 [F] or
// None, inverse_indices int32 [F*B] or None: ember/kjt.h). Checks what the C struct cannot carry
// (array lengths against the bags and nnz) so that the library never reads past a buffer. 0, or
// -1 with an exception raised (InvalidArgumentError for the checks); release with
// ember_py_kjt_release.
typedef struct ember_py_kjt {
    ember_kjt kjt;
    Py_buffer views[6];
    int held[6];
} ember_py_kjt;
int ember_py_kjt_get(PyObject *parts, ember_py_kjt *out);
void ember_py_kjt_release(ember_py_kjt *k);

// ---- Plans (plan.c) ----------------------------------------------------------------------------

// A sharding plan from the Python layer: a sequence of (scheme, num_shards, group_size, ranks)
// tuples, one per table (ranks: a sequence of ints). 0, or -1 with an exception raised;
// ember_py_plan_free releases what parse allocated (also after a failure).
int ember_py_plan_parse(PyObject *plans, int32_t num_tables, ember_table_plan **out);
void ember_py_plan_free(ember_table_plan *plan, int32_t num_tables);
// [(scheme, num_shards, group_size, (ranks...))] of a plan.
PyObject *ember_py_plan_list(const ember_table_plan *plan, int32_t num_tables);

// ---- The module (module.c registers these) -----------------------------------------------------

// Module-level functions, each documented in module.c's method table.
PyObject *ember_py_version(PyObject *self, PyObject *args);        // names.c
PyObject *ember_py_build_info(PyObject *self, PyObject *args);     // names.c
PyObject *ember_py_cpu(PyObject *self, PyObject *args);            // names.c
PyObject *ember_py_isa_best(PyObject *self, PyObject *args);       // names.c
PyObject *ember_py_statuses(PyObject *self, PyObject *args);       // names.c
PyObject *ember_py_enum_names(PyObject *self, PyObject *type);     // names.c
PyObject *ember_py_dtype_is_wire(PyObject *self, PyObject *code);  // names.c
PyObject *ember_py_enum_parse(PyObject *self, PyObject *args);     // names.c
PyObject *ember_py_world_rank_fn(PyObject *self, PyObject *args);  // errors.c
PyObject *ember_py_bytes_outstanding_fn(PyObject *self, PyObject *args); // context.c
PyObject *ember_py_table_tensors(PyObject *self, PyObject *table); // config.c

// Registration of each concept's types and functions into the module; 0 on success, -1 with an
// exception set.
int ember_py_ebc_add(PyObject *module);        // ebc.c: EBC, WeightsView
int ember_py_comm_add(PyObject *module);       // comm.c: Comm, MPI init/finalize
int ember_py_sebc_add(PyObject *module);       // sebc.c: SEBC
int ember_py_plan_add(PyObject *module);       // plan.c: plan, describe_plan, scheme names
int ember_py_checkpoint_add(PyObject *module); // checkpoint.c: Checkpoint
int ember_py_lfq_add(PyObject *module);        // lfq.c: LFQ
int ember_py_quant_add(PyObject *module);      // quant.c: QEBC, the quantized row functions
int ember_py_dense_add(PyObject *module);      // dense.c: the dot interaction

#endif
