// python/src/internal.h — what the collection, communicator, plan and checkpoint files of the
// extension share beyond binding.h: per-object locks, configurations and KJTs from Python
// arguments, and the agreement of a Python-side refusal across ranks.
#ifndef EMBER_PY_INTERNAL_H
#define EMBER_PY_INTERNAL_H

#include "binding.h"

#include <pythread.h>

#include "ember/ebc.h"
#include "ember/kjt.h"
#include "ember/plan.h"
#include "ember/shard.h"
#include "ember/state.h"

// Every object's methods take its lock around their use of the C object (waiting without the
// GIL), so that two Python threads never run one ember object at once (the library's objects
// are thread-compatible, and long calls release the GIL). Arguments are converted first: nothing
// under the lock calls back into Python.
void ember_py_lock(PyThread_type_lock lock);
// Raises StateError "<what> is closed (rank R)"; returns NULL.
PyObject *ember_py_closed(const char *what);
// Rank in MPI_COMM_WORLD when MPI is initialised and not finalised, else 0.
int ember_py_world_rank(void);
// Set when a call raised CollectiveTimeoutError: a collective is still in flight in MPI (it cannot
// be cancelled), so no communicator is freed any more and the process cannot finalise MPI; at
// exit the module ends the job with MPI_Abort, as the library prescribes (ember/comm.h).
extern int ember_py_timed_out;

// A collection's configuration from the Python layer's tuples:
//   tables    sequence of (name, rows, dim, pooling, dtype, init_kind, a, b, std, optim, lr, eps,
//             beta1, beta2, weight_decay, weight_decay_mode, initial_accumulator, momentum, eta,
//             stochastic_rounding), enums as their C values
//   features  sequence of (name, table index)
// Names point into the Python strings: keep `tables` and `features` alive while cfg is used.
typedef struct ember_py_config {
    ember_ebc_config cfg;
    ember_table_config *tables;
    ember_feature_config *features;
} ember_py_config;
int ember_py_config_parse(PyObject *tables, PyObject *features, ember_py_config *out);
void ember_py_config_free(ember_py_config *c);
// A tiered table's counters as a dict: hits, misses, evictions, rows_read, rows_written,
// bytes_read, bytes_written, prefetched (ember_tier_stats). NULL with an exception on failure.
PyObject *ember_py_tier_stats_dict(const ember_tier_stats *x);
// [(name, rows, cols, dtype name)] of n tensor descriptions.
PyObject *ember_py_tensor_list(const ember_tensor_info *ti, int32_t n);

// A KJT over the buffers of Python arrays (values int64, lengths int32 or None, offsets int64
// or None, weights float32 or None) with F features and batch size B. Checks what the C struct
// cannot carry (array lengths against F*B and nnz) so that the library never reads past a
// buffer. 0, or -1 with InvalidArgumentError raised; release with ember_py_kjt_release.
typedef struct ember_py_kjt {
    ember_kjt kjt;
    Py_buffer views[4];
    int held[4];
} ember_py_kjt;
int ember_py_kjt_get(PyObject *values, PyObject *lengths, PyObject *offsets, PyObject *weights, long long F,
                     long long B, ember_py_kjt *out);
void ember_py_kjt_release(ember_py_kjt *k);

// The Python-side agreement of a collective call: the status of the pending Python exception
// (an ember error's own status and message; anything else INVALID_ARG), or OK when none is
// pending, is recorded on ctx (ember_ctx_set_error) and agreed over comm (ember_comm_agree).
// Returns 0 when every rank is fine; otherwise raises the agreed error on this rank (the failing
// rank's message on the others) and returns -1. Every rank must call it once per collective call.
int ember_py_agree(ember_comm *comm, ember_ctx *ctx);

// ember_py_agree on the communicator of `comm_obj` (an ember._ember.Comm), under its lock.
int ember_py_comm_agree_obj(PyObject *comm_obj);

// A sharding plan from the Python layer: a sequence of (scheme, num_shards, group_size, ranks)
// tuples, one per table (ranks: a sequence of ints). 0, or -1 with an exception raised;
// ember_py_plan_free releases what parse allocated (also after a failure).
int ember_py_plan_parse(PyObject *plans, int32_t num_tables, ember_table_plan **out);
void ember_py_plan_free(ember_table_plan *plan, int32_t num_tables);
// [(scheme, num_shards, group_size, (ranks...))] of a plan.
PyObject *ember_py_plan_list(const ember_table_plan *plan, int32_t num_tables);

#endif
