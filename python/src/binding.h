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

#include "ember/core.h"

// Raises the Python exception of `st` (ember.errors: one class per status) carrying ctx's message
// (ember_ctx_errmsg, which names the rank), or ember_status_str(st) when ctx is NULL or has no
// message. Returns NULL, for `return ember_py_raise(ctx, st);`.
PyObject *ember_py_raise(ember_ctx *ctx, ember_status st);
// Raises ember.InvalidArgumentError with a printf-style message (for checks made by the binding).
PyObject *ember_py_invalid(const char *fmt, ...);

// Gets a C-contiguous buffer of `obj` whose items are `format` ("q" int64, "i" int32, "f" float32,
// "d" float64, "B" uint8, "H" uint16: numpy's formats, '<', '=' and 'l'/'i' aliases of the same
// size accepted), writable when `writable`. On mismatch raises InvalidArgumentError naming `what`
// and what it got, and returns -1; 0 on success (release with PyBuffer_Release).
int ember_py_buffer(PyObject *obj, const char *what, const char *format, int writable, Py_buffer *view);

// Registration of each concept's types and functions into the module; 0 on success, -1 with an
// exception set.
int ember_py_lfq_add(PyObject *module);

#endif
