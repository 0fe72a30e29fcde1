// python/src/checkpoint.c — ember._ember.Checkpoint: inspection of a saved checkpoint without a
// collection (ember_checkpoint_open ...: Local, any process), on a context of its own.
#include "binding.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    ember_ctx *ctx;
    ember_checkpoint *c;
} CheckpointObject;

static PyTypeObject CheckpointType;

static void ckpt_close_c(CheckpointObject *self) {
    ember_checkpoint_close(self->c);
    self->c = NULL;
    ember_ctx_destroy(self->ctx);
    self->ctx = NULL;
}

static void ckpt_dealloc(CheckpointObject *self) {
    ckpt_close_c(self);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

// Checkpoint(dir: bytes)
static PyObject *ckpt_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    const char *dir;
    if (kwds && PyDict_Size(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "Checkpoint takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y", &dir)) return NULL;
    CheckpointObject *self = (CheckpointObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (!(self->lock = PyThread_allocate_lock())) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (ember_py_ctx_create(1, &self->ctx) != 0) {
        Py_DECREF(self);
        return NULL;
    }
    ember_ctx_set_rank(self->ctx, ember_py_world_rank());
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_checkpoint_open(self->ctx, dir, &self->c);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) {
        ember_py_raise(self->ctx, st);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int ckpt_enter(CheckpointObject *self) {
    ember_py_lock(self->lock);
    if (!self->c) {
        PyThread_release_lock(self->lock);
        ember_py_closed("Checkpoint");
        return -1;
    }
    ember_ctx_clear_error(self->ctx);
    return 0;
}

static void ckpt_leave(CheckpointObject *self) { PyThread_release_lock(self->lock); }

// info() -> (generation, world_size, [(name, rows, dim, optimizer, dtype, step, num_records, bytes)],
//            [(blob name, bytes)], base_generation)
static PyObject *ckpt_info(CheckpointObject *self, PyObject *args) {
    (void)args;
    if (ckpt_enter(self) != 0) return NULL;
    PyObject *tables = PyList_New(0), *blobs = PyList_New(0), *ret = NULL;
    ember_status st = EMBER_OK;
    const int32_t T = ember_checkpoint_num_tables(self->c), NB = ember_checkpoint_num_blobs(self->c);
    for (int32_t i = 0; tables && i < T && st == EMBER_OK; i++) {
        ember_checkpoint_table t;
        st = ember_checkpoint_table_info(self->c, i, &t);
        if (st != EMBER_OK) break;
        PyObject *item = Py_BuildValue("(sLissLiK)", t.name, (long long)t.rows, (int)t.dim, ember_optim_name(t.optim),
                                       ember_dtype_name(t.dtype), (long long)t.step, (int)t.num_records,
                                       (unsigned long long)t.bytes);
        if (!item || PyList_Append(tables, item) != 0) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    for (int32_t i = 0; blobs && i < NB && st == EMBER_OK; i++) {
        const char *name;
        size_t bytes;
        st = ember_checkpoint_blob_info(self->c, i, &name, &bytes);
        if (st != EMBER_OK) break;
        PyObject *item = Py_BuildValue("(sK)", name, (unsigned long long)bytes);
        if (!item || PyList_Append(blobs, item) != 0) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    if (st != EMBER_OK) ember_py_raise(self->ctx, st);
    else if (tables && blobs)
        ret = Py_BuildValue("(LiOOL)", (long long)ember_checkpoint_generation(self->c),
                            (int)ember_checkpoint_world_size(self->c), tables, blobs,
                            (long long)ember_checkpoint_base_generation(self->c));
done:
    ckpt_leave(self);
    Py_XDECREF(tables);
    Py_XDECREF(blobs);
    return ret;
}

// read_blob(name) -> bytes
static PyObject *ckpt_read_blob(CheckpointObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    if (ckpt_enter(self) != 0) return NULL;
    // The blob's size from the manifest (an unknown name: the library's message says so).
    size_t size = 0;
    const int32_t NB = ember_checkpoint_num_blobs(self->c);
    for (int32_t i = 0; i < NB; i++) {
        const char *n;
        size_t b;
        if (ember_checkpoint_blob_info(self->c, i, &n, &b) == EMBER_OK && strcmp(n, name) == 0) size = b;
    }
    PyObject *ret = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (ret) {
        ember_status st;
        char *dst = PyBytes_AS_STRING(ret);
        Py_BEGIN_ALLOW_THREADS
        st = ember_checkpoint_read_blob(self->c, name, dst, size, NULL);
        Py_END_ALLOW_THREADS
        if (st != EMBER_OK) {
            Py_CLEAR(ret);
            ember_py_raise(self->ctx, st);
        }
    }
    ckpt_leave(self);
    return ret;
}

static PyObject *ckpt_verify(CheckpointObject *self, PyObject *args) {
    (void)args;
    if (ckpt_enter(self) != 0) return NULL;
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_checkpoint_verify(self->c);
    Py_END_ALLOW_THREADS
    PyObject *ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    ckpt_leave(self);
    return ret;
}

static PyObject *ckpt_close(CheckpointObject *self, PyObject *args) {
    (void)args;
    ember_py_lock(self->lock);
    ckpt_close_c(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *ckpt_get_closed(CheckpointObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->c == NULL);
}

static PyMethodDef ckpt_methods[] = {
    {"info", (PyCFunction)(void (*)(void))ckpt_info, METH_NOARGS, NULL},
    {"read_blob", (PyCFunction)(void (*)(void))ckpt_read_blob, METH_VARARGS, NULL},
    {"verify", (PyCFunction)(void (*)(void))ckpt_verify, METH_NOARGS, NULL},
    {"close", (PyCFunction)(void (*)(void))ckpt_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ckpt_getset[] = {
    {"closed", (getter)(void (*)(void))ckpt_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CheckpointType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.Checkpoint",
    .tp_basicsize = sizeof(CheckpointObject),
    .tp_dealloc = (destructor)(void (*)(void))ckpt_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An opened checkpoint (ember_checkpoint); use ember.Checkpoint.",
    .tp_methods = ckpt_methods,
    .tp_getset = ckpt_getset,
    .tp_new = ckpt_new,
};

int ember_py_checkpoint_add(PyObject *module) {
    if (PyType_Ready(&CheckpointType) != 0) return -1;
    return PyModule_AddObjectRef(module, "Checkpoint", (PyObject *)&CheckpointType);
}
