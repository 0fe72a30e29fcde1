// python/src/module.c — the extension module ember._ember: its init, the exceptions of the
// statuses, buffers, and the module-level functions (version, CPU, names of the enums).
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

// ember.errors: the class of each status name, the base class, and InvalidArgumentError.
static PyObject *errors_by_status; // dict "INVALID_ARG" -> class
static PyObject *errors_base;      // ember.errors.EmberError
static PyObject *errors_invalid;   // ember.errors.InvalidArgumentError

int ember_py_timed_out;

int ember_py_world_rank(void) {
    int init = 0, fin = 0, rank = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

static PyObject *class_of(ember_status st) {
    PyObject *cls = errors_by_status ? PyDict_GetItemString(errors_by_status, ember_status_name(st)) : NULL;
    return cls ? cls : errors_base ? errors_base : PyExc_RuntimeError;
}

PyObject *ember_py_raise(ember_ctx *ctx, ember_status st) {
    if (st == EMBER_ERR_TIMEOUT) ember_py_timed_out = 1;
    const char *msg = ctx ? ember_ctx_errmsg(ctx) : NULL;
    char buf[160];
    if (!msg || !*msg) {
        snprintf(buf, sizeof buf, "%s (rank %d)", ember_status_str(st), ember_py_world_rank());
        msg = buf;
    }
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text) return NULL;
    PyErr_SetObject(class_of(st), text);
    Py_DECREF(text);
    return NULL;
}

PyObject *ember_py_invalid(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 24, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf - 24) n = (int)(sizeof buf - 25);
    snprintf(buf + n, sizeof buf - (size_t)n, " (rank %d)", ember_py_world_rank());
    PyObject *text = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
    if (!text) return NULL;
    PyErr_SetObject(errors_invalid ? errors_invalid : PyExc_ValueError, text);
    Py_DECREF(text);
    return NULL;
}

// The kind of a struct-module format character: 'i' signed integer, 'u' unsigned, 'f' floating,
// 0 for anything else (booleans, characters, structures).
static char format_kind(char c) {
    if (strchr("bhilqn", c)) return 'i';
    if (strchr("BHILQN", c)) return 'u';
    if (strchr("efd", c)) return 'f';
    return 0;
}

static const char *format_name(char kind, Py_ssize_t size) {
    switch (kind) {
    case 'i': return size == 8 ? "int64" : size == 4 ? "int32" : size == 2 ? "int16" : "int8";
    case 'u': return size == 8 ? "uint64" : size == 4 ? "uint32" : size == 2 ? "uint16" : "uint8";
    case 'f': return size == 8 ? "float64" : size == 4 ? "float32" : "float16";
    default: return "a non-numeric type";
    }
}

int ember_py_buffer(PyObject *obj, const char *what, const char *format, int writable, Py_buffer *view) {
    const char want_kind = format_kind(format[0]);
    Py_ssize_t want_size = 0;
    switch (format[0]) {
    case 'q': want_size = 8; break;
    case 'i': want_size = 4; break;
    case 'f': want_size = 4; break;
    case 'd': want_size = 8; break;
    case 'B': want_size = 1; break;
    case 'H': want_size = 2; break;
    case 'e': want_size = 2; break;
    default: want_size = 0;
    }
    const char *want = format_name(want_kind, want_size);
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        ember_py_invalid("%s: expected a C-contiguous%s array of %s, got %s", what, writable ? " writable" : "", want,
                         Py_TYPE(obj)->tp_name);
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    // Native or little-endian order only ('@', '=', '<' on the little-endian targets ember builds for).
    while (*f == '@' || *f == '=' || *f == '<') f++;
    const char kind = f[0] && !f[1] ? format_kind(f[0]) : 0;
    if (kind != want_kind || view->itemsize != want_size) {
        ember_py_invalid("%s: expected %s items, got %s (format '%s')", what, want, format_name(kind, view->itemsize),
                         view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

// The status and text of a Python exception for the agreement: an ember error keeps its own
// status and message (without its " (rank R)", which ember_ctx_set_error adds again), anything
// else is INVALID_ARG "TypeName: text".
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
    // Strip a trailing " (rank N)".
    char *tag = strrchr(msg, '(');
    size_t len = strlen(msg);
    if (tag && tag > msg + 1 && tag[-1] == ' ' && strncmp(tag, "(rank ", 6) == 0 && msg[len - 1] == ')') {
        const char *d = tag + 6;
        while (*d >= '0' && *d <= '9') d++;
        if (d > tag + 6 && d == msg + len - 1) tag[-1] = '\0';
    }
    return st;
}

int ember_py_agree(ember_comm *comm, ember_ctx *ctx) {
    ember_status st = EMBER_OK;
    if (PyErr_Occurred()) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        char msg[1024];
        st = value ? exception_status(value, msg, sizeof msg) : EMBER_ERR_INVALID_ARG;
        if (!value) snprintf(msg, sizeof msg, "an error in the Python layer");
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        ember_ctx_set_error(ctx, st, "%s", msg);
    }
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

void ember_py_lock(PyThread_type_lock lock) {
    if (PyThread_acquire_lock(lock, NOWAIT_LOCK)) return;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
}

PyObject *ember_py_closed(const char *what) {
    PyErr_Format(class_of(EMBER_ERR_STATE), "%s is closed (rank %d)", what, ember_py_world_rank());
    return NULL;
}

// The allocator hooks of every context the binding creates: one process-wide count of the bytes
// they hold (ember.bytes_outstanding()). Each block carries its size in a 64-byte header, so that
// the returned pointer keeps the 64-byte alignment the library's hooks must give. Atomic: the
// library allocates and frees from kernel threads and several contexts run at once.
#define EMBER_PY_HEADER 64
static atomic_llong live_bytes;

static void *counted_alloc(void *user, size_t size) {
    (void)user;
    if (size > SIZE_MAX - 2 * EMBER_PY_HEADER) return NULL;
    const size_t total = (size + EMBER_PY_HEADER + (EMBER_PY_HEADER - 1)) & ~(size_t)(EMBER_PY_HEADER - 1);
    unsigned char *block = aligned_alloc(EMBER_PY_HEADER, total);
    if (!block) return NULL;
    memcpy(block, &size, sizeof size);
    atomic_fetch_add(&live_bytes, (long long)size);
    return block + EMBER_PY_HEADER;
}

static void counted_free(void *user, void *ptr) {
    (void)user;
    if (!ptr) return;
    unsigned char *block = (unsigned char *)ptr - EMBER_PY_HEADER;
    size_t size;
    memcpy(&size, block, sizeof size);
    atomic_fetch_sub(&live_bytes, (long long)size);
    free(block);
}

long long ember_py_bytes_outstanding(void) { return atomic_load(&live_bytes); }

int ember_py_ctx_create(int32_t num_threads, ember_ctx **out) {
    *out = NULL;
    if (num_threads < 0) {
        ember_py_invalid("num_threads: %d is negative (0: every OpenMP thread)", (int)num_threads);
        return -1;
    }
    ember_ctx_config cfg = EMBER_CTX_CONFIG_DEFAULT;
    cfg.allocator.alloc = counted_alloc;
    cfg.allocator.free = counted_free;
    cfg.num_threads = num_threads;
    ember_status st = ember_ctx_create(&cfg, out);
    if (st != EMBER_OK) {
        // No context to hold the message: say what the library's contract says.
        char why[160] = "";
        if (st == EMBER_ERR_UNSUPPORTED) {
            ember_isa isa;
            const char *env = getenv("EMBER_ISA");
            if (env && ember_isa_parse(env, &isa) == EMBER_OK) ember_isa_supported(isa, why, sizeof why);
        }
        PyErr_Format(class_of(st), "ember_ctx_create: %s%s%s (rank %d)", ember_status_str(st), *why ? ": " : "",
                     why, ember_py_world_rank());
        return -1;
    }
    return 0;
}

// ---- Module functions ----------------------------------------------------------------------

static PyObject *py_version(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyUnicode_FromString(ember_version());
}

static PyObject *py_build_info(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyUnicode_FromString(ember_build_info());
}

static PyObject *py_cpu(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return Py_BuildValue("(ss)", ember_cpu_name(), ember_cpu_features());
}

static PyObject *py_isa_best(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyUnicode_FromString(ember_isa_name(ember_isa_best()));
}

static PyObject *py_bytes_outstanding(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLongLong(ember_py_bytes_outstanding());
}

static PyObject *py_world_rank(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLong(ember_py_world_rank());
}

// [(name, code, description)] of every status, from the library's one table.
static PyObject *py_statuses(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
#define EMBER_PY_STATUS_(name, value, text)                                                                    \
    do {                                                                                                       \
        PyObject *item = Py_BuildValue("(sis)", ember_status_name(name), (int)(value), ember_status_str(name)); \
        if (!item || PyList_Append(list, item) != 0) {                                                         \
            Py_XDECREF(item);                                                                                  \
            Py_DECREF(list);                                                                                   \
            return NULL;                                                                                       \
        }                                                                                                      \
        Py_DECREF(item);                                                                                       \
    } while (0);
    EMBER_STATUS_MAP(EMBER_PY_STATUS_)
#undef EMBER_PY_STATUS_
    return list;
}

// Names of an enum through its name function, indices 0..n-1.
static PyObject *name_list(const char *(*name)(int), int n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *s = PyUnicode_FromString(name(i));
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}
// The library's enums by the name of their type, each through its own _name function: the
// package builds every name table from these (no integer kept by hand in Python).
#define EMBER_PY_ENUM_(type, count) {#type, count, type##_name_of_int}
#define EMBER_PY_NAME_OF_INT_(type) static const char *type##_name_of_int(int v) { return ember_##type##_name((ember_##type)v); }
EMBER_PY_NAME_OF_INT_(dtype)
EMBER_PY_NAME_OF_INT_(pooling)
EMBER_PY_NAME_OF_INT_(init_kind)
EMBER_PY_NAME_OF_INT_(weight_decay_mode)
EMBER_PY_NAME_OF_INT_(evict_policy)
EMBER_PY_NAME_OF_INT_(id_space)
EMBER_PY_NAME_OF_INT_(bounds_mode)
EMBER_PY_NAME_OF_INT_(grad_convention)
EMBER_PY_NAME_OF_INT_(shard_scheme)
EMBER_PY_NAME_OF_INT_(isa)
static const char *optim_name_of_int(int v) { return ember_optim_name((ember_optim_kind)v); }
static const struct {
    const char *type;
    int count;
    const char *(*name)(int);
} ENUMS[] = {
    EMBER_PY_ENUM_(dtype, EMBER_DTYPE_COUNT),
    EMBER_PY_ENUM_(pooling, EMBER_POOL_COUNT),
    EMBER_PY_ENUM_(init_kind, EMBER_INIT_COUNT),
    EMBER_PY_ENUM_(weight_decay_mode, EMBER_WD_COUNT),
    EMBER_PY_ENUM_(evict_policy, EMBER_EVICT_COUNT),
    EMBER_PY_ENUM_(id_space, EMBER_IDS_COUNT),
    EMBER_PY_ENUM_(bounds_mode, EMBER_BOUNDS_COUNT),
    EMBER_PY_ENUM_(grad_convention, EMBER_GRAD_COUNT),
    EMBER_PY_ENUM_(shard_scheme, EMBER_SHARD_COUNT),
    EMBER_PY_ENUM_(isa, EMBER_ISA_COUNT),
    {"optim", EMBER_OPT_COUNT, optim_name_of_int},
};
#undef EMBER_PY_ENUM_
#undef EMBER_PY_NAME_OF_INT_

// enum_names(type) -> [name of value 0, 1, ...].
static PyObject *py_enum_names(PyObject *self, PyObject *arg) {
    (void)self;
    const char *type = PyUnicode_AsUTF8(arg);
    if (!type) return NULL;
    for (size_t i = 0; i < sizeof ENUMS / sizeof ENUMS[0]; i++)
        if (strcmp(type, ENUMS[i].type) == 0) return name_list(ENUMS[i].name, ENUMS[i].count);
    PyErr_Format(PyExc_KeyError, "ember has no enum '%s'", type);
    return NULL;
}

// The tensors of a table of this configuration: [(name, rows, cols, dtype)], without a collection.
static PyObject *py_table_tensors(PyObject *self, PyObject *arg) {
    (void)self;
    ember_py_config c;
    PyObject *tables = PyTuple_Pack(1, arg);
    if (!tables) return NULL;
    PyObject *features = PyList_New(0);
    int rc = features ? ember_py_config_parse(tables, features, &c) : -1;
    Py_XDECREF(features);
    if (rc != 0) {
        Py_DECREF(tables);
        return NULL;
    }
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int32_t n = ember_table_tensors(&c.tables[0], ti);
    PyObject *out = ember_py_tensor_list(ti, n);
    ember_py_config_free(&c);
    Py_DECREF(tables);
    return out;
}

PyObject *ember_py_tensor_list(const ember_tensor_info *ti, int32_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("(sLis)", ti[i].name, (long long)ti[i].rows, (int)ti[i].cols,
                                       ember_dtype_name(ti[i].dtype));
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyMethodDef module_methods[] = {
    {"version", py_version, METH_NOARGS, "ember_version(): the library's version \"MAJOR.MINOR.PATCH\"."},
    {"build_info", py_build_info, METH_NOARGS, "ember_build_info(): compiler and flags of the library."},
    {"cpu", py_cpu, METH_NOARGS, "(ember_cpu_name(), ember_cpu_features())."},
    {"isa_best", py_isa_best, METH_NOARGS, "The best kernel variant this build and CPU run (ember_isa_best)."},
    {"world_rank", py_world_rank, METH_NOARGS, "Rank in MPI_COMM_WORLD when MPI is initialised, else 0."},
    {"bytes_outstanding", py_bytes_outstanding, METH_NOARGS,
     "Bytes the contexts of every ember object of this process hold through the library (0: all closed)."},
    {"statuses", py_statuses, METH_NOARGS, "[(name, code, description)] of every ember_status."},
    {"enum_names", py_enum_names, METH_O, "enum_names(type) -> the library's names of ember_<type>, by value."},
    {"table_tensors", py_table_tensors, METH_O, "table_tensors(table_tuple) -> [(name, rows, cols, dtype)]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ember._ember",
    "The C extension under the ember package: thin objects over the library (use `ember`).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ember(void);
PyMODINIT_FUNC PyInit__ember(void) {
    PyObject *errors = PyImport_ImportModule("ember.errors");
    if (!errors) return NULL;
    errors_by_status = PyObject_GetAttrString(errors, "_BY_STATUS");
    errors_base = PyObject_GetAttrString(errors, "EmberError");
    errors_invalid = PyObject_GetAttrString(errors, "InvalidArgumentError");
    Py_DECREF(errors);
    if (!errors_by_status || !errors_base || !errors_invalid || !PyDict_Check(errors_by_status)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "ember.errors lacks _BY_STATUS");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (ember_py_ebc_add(m) != 0 || ember_py_comm_add(m) != 0 || ember_py_sebc_add(m) != 0 ||
        ember_py_plan_add(m) != 0 || ember_py_checkpoint_add(m) != 0 || ember_py_lfq_add(m) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
