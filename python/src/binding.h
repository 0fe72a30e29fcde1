// python/src/binding.h — what the extension's C files share (internal to the binding).
//
// The extension `ember._ember` is written over the public headers alone (include/ember/*.h). Its
// files: module.c (module init, errors, buffers), and one file per concept (kjt/ebc/comm/sebc/
// plan/checkpoint, lfq.c), each exporting one `ember_py_<concept>_add(PyObject *module)` that the
// module init calls to register its types and functions.
#ifndef EMBER_PY_BINDING_H
#define EMBER_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ember/comm.h"
#include "ember/core.h"

// Raises the Python exception of `st` (ember.errors: one class per status) carrying ctx's message
// (ember_ctx_errmsg, which names the rank), or ember_status_str(st) when ctx is NULL or has no
// message. Returns NULL, for `return ember_py_raise(ctx, st);`.
PyObject *ember_py_raise(ember_ctx *ctx, ember_status st);
// Raises ember.InvalidArgumentError with a printf-style message (for checks made by the binding).
PyObject *ember_py_invalid(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

// Gets a C-contiguous buffer of `obj` whose items are `format` ("q" int64, "i" int32, "f" float32,
// "d" float64, "B" uint8, "H" uint16: numpy's formats, '<', '=' and 'l'/'i' aliases of the same
// size accepted), writable when `writable`. On mismatch raises InvalidArgumentError naming `what`
// and what it got, and returns -1; 0 on success (release with PyBuffer_Release).
int ember_py_buffer(PyObject *obj, const char *what, const char *format, int writable, Py_buffer *view);

// Creates a context with `num_threads` kernel threads and the binding's counting allocator
// hooks; on failure raises and returns -1. Every context the binding creates comes from here.
int ember_py_ctx_create(int32_t num_threads, ember_ctx **out);
// Bytes the binding's contexts hold through their allocator hooks, over the whole process.
long long ember_py_bytes_outstanding(void);

// ---- Communicators (comm.c) ------------------------------------------------------------------
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

// Registration of each concept's types and functions into the module; 0 on success, -1 with an
// exception set.
int ember_py_ebc_add(PyObject *module);        // ebc.c: EBC, WeightsView
int ember_py_comm_add(PyObject *module);       // comm.c: Comm, MPI init/finalize
int ember_py_sebc_add(PyObject *module);       // sebc.c: SEBC
int ember_py_plan_add(PyObject *module);       // plan.c: plan, describe_plan, scheme names
int ember_py_checkpoint_add(PyObject *module); // checkpoint.c: Checkpoint
int ember_py_lfq_add(PyObject *module);        // lfq.c: LFQ

#endif
