// python/src/names.c — what the library says of itself, for the Python layer: its version, build
// and CPU, and its name tables (statuses, every enum the package uses), from which the package
// builds its own (no integer of a library enum is kept by hand in Python).
#include "binding.h"

#include <string.h>

#include "ember/lfq.h"
#include "ember/quant.h"

PyObject *ember_py_version(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyUnicode_FromString(ember_version());
}

PyObject *ember_py_build_info(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyUnicode_FromString(ember_build_info());
}

PyObject *ember_py_cpu(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return Py_BuildValue("(ss)", ember_cpu_name(), ember_cpu_features());
}

PyObject *ember_py_isa_best(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyUnicode_FromString(ember_isa_name(ember_isa_best()));
}

// [(name, code, description)] of every status, from the library's one table.
PyObject *ember_py_statuses(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    static const ember_status all[] = {
#define EMBER_PY_STATUS_(name, value, text) name,
        EMBER_STATUS_MAP(EMBER_PY_STATUS_)
#undef EMBER_PY_STATUS_
    };
    const Py_ssize_t n = (Py_ssize_t)(sizeof all / sizeof all[0]);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("(sis)", ember_status_name(all[i]), (int)all[i], ember_status_str(all[i]));
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

// The library's enums by the name of their type, each through its own _name and _parse
// functions, indices 0..count-1.
typedef struct {
    const char *type;
    int count;
    const char *(*name)(int);
    int (*parse)(const char *, int *); // 0 and *out set, or -1
} enum_entry;

#define EMBER_PY_ENUM_FNS_(type, ctype, prefix)                                                    \
    static const char *type##_name_of_int(int v) { return prefix##_name((ctype)v); }            \
    static int type##_parse_to_int(const char *s, int *out) {                                    \
        ctype v;                                                                                  \
        if (prefix##_parse(s, &v) != 0) return -1;                                               \
        *out = (int)v;                                                                            \
        return 0;                                                                                 \
    }
EMBER_PY_ENUM_FNS_(dtype, ember_dtype, ember_dtype)
EMBER_PY_ENUM_FNS_(pooling, ember_pooling, ember_pooling)
EMBER_PY_ENUM_FNS_(init_kind, ember_init_kind, ember_init_kind)
EMBER_PY_ENUM_FNS_(weight_decay_mode, ember_weight_decay_mode, ember_weight_decay_mode)
EMBER_PY_ENUM_FNS_(evict_policy, ember_evict_policy, ember_evict_policy)
EMBER_PY_ENUM_FNS_(id_space, ember_id_space, ember_id_space)
EMBER_PY_ENUM_FNS_(bounds_mode, ember_bounds_mode, ember_bounds_mode)
EMBER_PY_ENUM_FNS_(grad_convention, ember_grad_convention, ember_grad_convention)
EMBER_PY_ENUM_FNS_(shard_scheme, ember_shard_scheme, ember_shard_scheme)
EMBER_PY_ENUM_FNS_(isa, ember_isa, ember_isa)
EMBER_PY_ENUM_FNS_(optim, ember_optim_kind, ember_optim)
EMBER_PY_ENUM_FNS_(lfq_projection, ember_lfq_projection, ember_lfq_projection)
EMBER_PY_ENUM_FNS_(lfq_dist_mean, ember_lfq_dist_mean, ember_lfq_dist_mean)
EMBER_PY_ENUM_FNS_(qtype, ember_qtype, ember_qtype)
EMBER_PY_ENUM_FNS_(qremap_kind, ember_qremap_kind, ember_qremap_kind)
#undef EMBER_PY_ENUM_FNS_

#define EMBER_PY_ENUM_(type, count) {#type, count, type##_name_of_int, type##_parse_to_int}
static const enum_entry ENUMS[] = {
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
    EMBER_PY_ENUM_(optim, EMBER_OPT_COUNT),
    EMBER_PY_ENUM_(lfq_projection, EMBER_LFQ_PROJ_COUNT),
    EMBER_PY_ENUM_(lfq_dist_mean, EMBER_LFQ_MEAN_COUNT),
    EMBER_PY_ENUM_(qtype, EMBER_QTYPE_COUNT),
    EMBER_PY_ENUM_(qremap_kind, EMBER_QREMAP_COUNT),
};
#undef EMBER_PY_ENUM_

// The entry of enum `type` (a str); NULL with KeyError set for a type ember does not have.
static const enum_entry *enum_of(PyObject *type) {
    const char *t = PyUnicode_AsUTF8(type);
    if (!t) return NULL;
    for (size_t i = 0; i < sizeof ENUMS / sizeof ENUMS[0]; i++)
        if (strcmp(t, ENUMS[i].type) == 0) return &ENUMS[i];
    PyErr_Format(PyExc_KeyError, "ember has no enum '%s'", t);
    return NULL;
}

// dtype_is_wire(code) -> ember_dtype_is_wire.
PyObject *ember_py_dtype_is_wire(PyObject *self, PyObject *code) {
    (void)self;
    const long v = PyLong_AsLong(code);
    if (v == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(v >= 0 && v < EMBER_DTYPE_COUNT && ember_dtype_is_wire((ember_dtype)v));
}

// enum_names(type) -> [name of value 0, 1, ...].
PyObject *ember_py_enum_names(PyObject *self, PyObject *type) {
    (void)self;
    const enum_entry *e = enum_of(type);
    if (!e) return NULL;
    PyObject *list = PyList_New(e->count);
    if (!list) return NULL;
    for (int i = 0; i < e->count; i++) {
        PyObject *s = PyUnicode_FromString(e->name(i));
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

// enum_parse(type, name) -> the value the library's _parse gives, or None when it refuses.
PyObject *ember_py_enum_parse(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *type;
    const char *name;
    if (!PyArg_ParseTuple(args, "Us:enum_parse", &type, &name)) return NULL;
    const enum_entry *e = enum_of(type);
    if (!e) return NULL;
    int v = 0;
    if (e->parse(name, &v) != 0) Py_RETURN_NONE;
    return PyLong_FromLong(v);
}
