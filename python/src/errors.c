// python/src/errors.c — the exceptions of the statuses (ember.errors: one class per status name),
// the binding's own refusals in the library's style, and the agreement of a Python-side refusal
// across the ranks of a collective call.
#include "binding.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

// ember.errors: the class of each status name, the base class.
static PyObject *errors_by_status; // dict "INVALID_ARG" -> class
static PyObject *errors_base;      // ember.errors.EmberError

int ember_py_timed_out;

int ember_py_errors_init(void) {
    PyObject *errors = PyImport_ImportModule("ember.errors");
    if (!errors) return -1;
    errors_by_status = PyObject_GetAttrString(errors, "_BY_STATUS");
    errors_base = PyObject_GetAttrString(errors, "EmberError");
    Py_DECREF(errors);
    if (!errors_by_status || !errors_base || !PyDict_Check(errors_by_status)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "ember.errors lacks _BY_STATUS");
        return -1;
    }
    // ember.errors names each class's status; its code is the library's value of that status.
    static const ember_status all[] = {
#define EMBER_PY_STATUS_(name, value, text) name,
        EMBER_STATUS_MAP(EMBER_PY_STATUS_)
#undef EMBER_PY_STATUS_
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        PyObject *cls = PyDict_GetItemString(errors_by_status, ember_status_name(all[i])); // borrowed
        PyObject *code = cls ? PyLong_FromLong((long)all[i]) : NULL;
        const int rc = code ? PyObject_SetAttrString(cls, "code", code) : 0;
        Py_XDECREF(code);
        if (rc != 0 || PyErr_Occurred()) return -1;
    }
    return 0;
}

int ember_py_world_rank(void) {
    int init = 0, fin = 0, rank = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

PyObject *ember_py_world_rank_fn(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLong(ember_py_world_rank());
}

static PyObject *class_of(ember_status st) {
    PyObject *cls = errors_by_status ? PyDict_GetItemString(errors_by_status, ember_status_name(st)) : NULL;
    return cls ? cls : errors_base ? errors_base : PyExc_RuntimeError;
}

// Raises class_of(st) with the UTF-8 text `msg` (bytes that are not UTF-8 replaced).
static PyObject *raise_text(ember_status st, const char *msg) {
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text) return NULL;
    PyErr_SetObject(class_of(st), text);
    Py_DECREF(text);
    return NULL;
}

PyObject *ember_py_raise(ember_ctx *ctx, ember_status st) {
    if (st == EMBER_ERR_TIMEOUT) ember_py_timed_out = 1;
    const char *msg = ctx ? ember_ctx_errmsg(ctx) : NULL;
    char buf[160];
    if (!msg || !*msg) {
        snprintf(buf, sizeof buf, "%s (rank %d)", ember_status_str(st), ember_py_world_rank());
        msg = buf;
    }
    return raise_text(st, msg);
}

static PyObject *error_va(ember_status st, int rank, const char *fmt, va_list ap) EMBER_PY_PRINTF(3, 0);
static PyObject *error_va(ember_status st, int rank, const char *fmt, va_list ap) {
    char buf[1024];
    int n = vsnprintf(buf, sizeof buf - 24, fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf - 24) n = (int)(sizeof buf - 25);
    snprintf(buf + n, sizeof buf - (size_t)n, " (rank %d)", rank < 0 ? ember_py_world_rank() : rank);
    return raise_text(st, buf);
}

PyObject *ember_py_error(ember_status st, int rank, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_va(st, rank, fmt, ap);
    va_end(ap);
    return NULL;
}

PyObject *ember_py_invalid(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_va(EMBER_ERR_INVALID_ARG, -1, fmt, ap);
    va_end(ap);
    return NULL;
}

PyObject *ember_py_closed(const char *what) { return ember_py_error(EMBER_ERR_STATE, -1, "%s is closed", what); }

// Cuts a trailing " (rank N)" off msg.
static void strip_rank(char *msg) {
    char *tag = strrchr(msg, '(');
    const size_t len = strlen(msg);
    if (tag && tag > msg + 1 && tag[-1] == ' ' && strncmp(tag, "(rank ", 6) == 0 && msg[len - 1] == ')') {
        const char *d = tag + 6;
        while (*d >= '0' && *d <= '9') d++;
        if (d > tag + 6 && d == msg + len - 1) tag[-1] = '\0';
    }
}

// The status and text of the exception instance `exc` (see ember_py_take_error).
static ember_status exception_status(PyObject *exc, char *msg, size_t cap) {
    ember_status st = EMBER_ERR_INVALID_ARG;
    PyObject *text = NULL;
    if (errors_base && PyObject_IsInstance(exc, errors_base) == 1) {
        PyObject *code = PyObject_GetAttrString(exc, "code");
        if (code && PyLong_Check(code)) {
            long c = PyLong_AsLong(code);
            if (c < 0 && c > -1000) st = (ember_status)c;
        }
        Py_XDECREF(code);
        PyErr_Clear();
        text = PyObject_GetAttrString(exc, "message");
        if (text && !PyUnicode_Check(text)) Py_CLEAR(text);
        PyErr_Clear();
    }
    if (!text) {
        PyObject *s = PyObject_Str(exc);
        text = s ? PyUnicode_FromFormat("%s: %U", Py_TYPE(exc)->tp_name, s) : NULL;
        Py_XDECREF(s);
        PyErr_Clear();
    }
    const char *utf8 = text ? PyUnicode_AsUTF8(text) : NULL;
    PyErr_Clear();
    snprintf(msg, cap, "%s", utf8 ? utf8 : "an error in the Python layer");
    Py_XDECREF(text);
    strip_rank(msg);
    return st;
}

int ember_py_set_pending(PyObject *exc) {
    if (exc == Py_None) return 0;
    if (!PyExceptionInstance_Check(exc)) {
        PyErr_SetString(PyExc_TypeError, "agree: expected an exception or None");
        return -1;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    return 1;
}

ember_status ember_py_take_error(char *msg, size_t cap) {
    if (cap) msg[0] = '\0';
    if (!PyErr_Occurred()) return EMBER_OK;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    ember_status st = EMBER_ERR_INVALID_ARG;
    if (value) st = exception_status(value, msg, cap);
    else snprintf(msg, cap, "an error in the Python layer");
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return st;
}

int ember_py_agree(ember_comm *comm, ember_ctx *ctx) {
    char msg[1024];
    const ember_status st = ember_py_take_error(msg, sizeof msg);
    if (st != EMBER_OK) ember_ctx_set_error(ctx, st, "%s", msg);
    ember_status all;
    Py_BEGIN_ALLOW_THREADS
    all = ember_comm_agree(comm, st);
    Py_END_ALLOW_THREADS
    if (all != EMBER_OK) {
        ember_py_raise(ctx, all);
        return -1;
    }
    return 0;
}
