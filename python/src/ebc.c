// python/src/ebc.c — ember._ember.EBC: a local collection (ember/ebc.h) owning its context, and
// WeightsView, the read-only buffer over one table's stored rows (ember_ebc_weights_view).
#include "binding.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    ember_ctx *ctx;
    ember_ebc *ebc;
    Py_ssize_t views; // WeightsView objects alive: the storage must not move or go
    int closed;       // close() called; the C objects go when the last view does
} EBCObject;

typedef struct {
    PyObject_HEAD
    EBCObject *owner; // strong reference
    const void *data;
    Py_ssize_t shape[2], strides[2], itemsize;
    char format[2];
} ViewObject;

static PyTypeObject EBCType;
static PyTypeObject ViewType;

static void ebc_free_c(EBCObject *self) {
    ember_ebc_destroy(self->ebc);
    self->ebc = NULL;
    ember_ctx_destroy(self->ctx);
    self->ctx = NULL;
}

static void ebc_dealloc(EBCObject *self) {
    ebc_free_c(self);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

// EBC(tables, features, bounds, seed, num_threads, max_batch_size, max_nnz, ssd_dir or None)
static PyObject *ebc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *tables, *features;
    int bounds = 0, num_threads = 0, max_batch = 0;
    unsigned long long seed = 0;
    long long max_nnz = 0;
    const char *ssd_dir = NULL;
    if (kwds && PyDict_Size(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "EBC takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OO|iKiiLz", &tables, &features, &bounds, &seed, &num_threads, &max_batch, &max_nnz,
                          &ssd_dir))
        return NULL;
    ember_py_config c;
    if (ember_py_config_parse(tables, features, &c) != 0) return NULL;
    c.cfg.bounds = (ember_bounds_mode)bounds;
    c.cfg.seed = seed;
    c.cfg.max_batch_size = max_batch;
    c.cfg.max_nnz = max_nnz;
    c.cfg.ssd_dir = ssd_dir;
    EBCObject *self = (EBCObject *)type->tp_alloc(type, 0);
    if (!self) goto fail;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        PyErr_NoMemory();
        goto fail;
    }
    if (ember_py_ctx_create(num_threads, &self->ctx) != 0) goto fail;
    ember_ctx_set_rank(self->ctx, ember_py_world_rank());
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_ebc_create(self->ctx, &c.cfg, &self->ebc);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) {
        ember_py_raise(self->ctx, st);
        goto fail;
    }
    ember_py_config_free(&c);
    return (PyObject *)self;
fail:
    ember_py_config_free(&c);
    Py_XDECREF(self);
    return NULL;
}

// Takes the lock and checks the object is open; on failure raises and returns -1 (unlocked).
static int ebc_enter(EBCObject *self) {
    ember_py_lock(self->lock);
    if (self->closed || !self->ebc) {
        PyThread_release_lock(self->lock);
        ember_py_closed("EmbeddingBagCollection");
        return -1;
    }
    ember_ctx_clear_error(self->ctx);
    return 0;
}

static void ebc_leave(EBCObject *self) { PyThread_release_lock(self->lock); }

// forward(kjt parts, out)
static PyObject *ebc_forward(EBCObject *self, PyObject *args) {
    PyObject *parts, *out;
    if (!PyArg_ParseTuple(args, "OO", &parts, &out)) return NULL;
    ember_py_kjt k;
    if (ember_py_kjt_get(parts, &k) != 0) return NULL;
    Py_buffer ov;
    if (ember_py_buffer(out, "out", "f", 1, &ov) != 0) {
        ember_py_kjt_release(&k);
        return NULL;
    }
    PyObject *ret = NULL;
    if (ebc_enter(self) == 0) {
        const int64_t need = ember_ebc_output_size(self->ebc, &k.kjt);
        if (ov.len / 4 != need) {
            ember_py_invalid("forward: out holds %lld floats, the output needs %lld", (long long)(ov.len / 4),
                             (long long)need);
        } else {
            ember_status st;
            Py_BEGIN_ALLOW_THREADS
            st = ember_ebc_forward(self->ebc, &k.kjt, ov.buf);
            Py_END_ALLOW_THREADS
            if (st != EMBER_OK) ember_py_raise(self->ctx, st);
            else ret = Py_NewRef(Py_None);
        }
        ebc_leave(self);
    }
    PyBuffer_Release(&ov);
    ember_py_kjt_release(&k);
    return ret;
}

// backward(kjt parts, grad_out, grad_weights or None)
static PyObject *ebc_backward(EBCObject *self, PyObject *args) {
    PyObject *parts, *grad, *gw;
    if (!PyArg_ParseTuple(args, "OOO", &parts, &grad, &gw)) return NULL;
    ember_py_kjt k;
    if (ember_py_kjt_get(parts, &k) != 0) return NULL;
    Py_buffer gv, wv;
    int have_w = 0;
    if (ember_py_buffer(grad, "grad_out", "f", 0, &gv) != 0) {
        ember_py_kjt_release(&k);
        return NULL;
    }
    if (gw != Py_None) {
        if (ember_py_buffer(gw, "grad_weights", "f", 1, &wv) != 0) {
            PyBuffer_Release(&gv);
            ember_py_kjt_release(&k);
            return NULL;
        }
        have_w = 1;
    }
    PyObject *ret = NULL;
    if (have_w && wv.len / 4 != k.kjt.nnz) {
        ember_py_invalid("backward: grad_weights holds %lld floats for %lld values", (long long)(wv.len / 4),
                         (long long)k.kjt.nnz);
    } else if (ebc_enter(self) == 0) {
        const int64_t need = ember_ebc_output_size(self->ebc, &k.kjt);
        if (gv.len / 4 != need) {
            ember_py_invalid("backward: grad_out holds %lld floats, the output has %lld", (long long)(gv.len / 4),
                             (long long)need);
        } else {
            ember_status st;
            Py_BEGIN_ALLOW_THREADS
            st = ember_ebc_backward(self->ebc, &k.kjt, gv.buf, have_w ? wv.buf : NULL);
            Py_END_ALLOW_THREADS
            if (st != EMBER_OK) ember_py_raise(self->ctx, st);
            else ret = Py_NewRef(Py_None);
        }
        ebc_leave(self);
    }
    if (have_w) PyBuffer_Release(&wv);
    PyBuffer_Release(&gv);
    ember_py_kjt_release(&k);
    return ret;
}

static PyObject *ebc_set_lr(EBCObject *self, PyObject *args) {
    int t;
    float lr;
    if (!PyArg_ParseTuple(args, "if", &t, &lr)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    ember_status st = ember_ebc_set_lr(self->ebc, t, lr);
    PyObject *ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    ebc_leave(self);
    return ret;
}

static PyObject *ebc_step(EBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    const int32_t T = ember_ebc_num_tables(self->ebc);
    const int64_t step = ember_ebc_step(self->ebc, t);
    ebc_leave(self);
    if (t < 0 || t >= T) return ember_py_invalid("step: table %d outside [0, %d)", t, (int)T);
    return PyLong_FromLongLong((long long)step);
}

static PyObject *ebc_set_step(EBCObject *self, PyObject *args) {
    int t;
    long long step;
    if (!PyArg_ParseTuple(args, "iL", &t, &step)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    ember_status st = ember_ebc_set_step(self->ebc, t, step);
    PyObject *ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    ebc_leave(self);
    return ret;
}

// tensors(t) -> [(name, rows, cols, dtype name)]
static PyObject *ebc_tensors(EBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    int32_t n = ember_ebc_num_tensors(self->ebc, t);
    ember_status st = n > 0 ? EMBER_OK : ember_ebc_tensor_info(self->ebc, t, 0, &ti[0]);
    for (int32_t i = 0; i < n && st == EMBER_OK; i++) st = ember_ebc_tensor_info(self->ebc, t, i, &ti[i]);
    PyObject *ret = st == EMBER_OK ? ember_py_tensor_list(ti, n) : ember_py_raise(self->ctx, st);
    ebc_leave(self);
    return ret;
}

// Columns of table t's tensor `name` (0 when there is no such tensor: the library says so).
static int32_t tensor_cols(const ember_ebc *ebc, int32_t t, const char *name, int64_t *rows) {
    const int32_t n = ember_ebc_num_tensors(ebc, t);
    for (int32_t i = 0; i < n; i++) {
        ember_tensor_info ti;
        if (ember_ebc_tensor_info(ebc, t, i, &ti) == EMBER_OK && strcmp(ti.name, name) == 0) {
            *rows = ti.rows;
            return ti.cols;
        }
    }
    return 0;
}

// read(t, tensor, row_begin, row_end, dtype, out) and write(t, tensor, row_begin, row_end, dtype, src)
static PyObject *ebc_read_write(EBCObject *self, PyObject *args, int write) {
    int t, dtype;
    const char *name;
    long long r0, r1;
    PyObject *arr;
    if (!PyArg_ParseTuple(args, "isLLiO", &t, &name, &r0, &r1, &dtype, &arr)) return NULL;
    // The array's items are those of `dtype` (int64 for a hashed table's "ids"); whether the
    // tensor takes that dtype is the library's to say.
    const char *format = ember_py_dtype_format((ember_dtype)dtype);
    const size_t es = ember_dtype_size((ember_dtype)dtype);
    if (!format) return ember_py_invalid("%s: unknown dtype %d", write ? "write" : "read", dtype);
    Py_buffer v;
    if (ember_py_buffer(arr, write ? "write: array" : "read: out", format, !write, &v) != 0) return NULL;
    PyObject *ret = NULL;
    if (ebc_enter(self) == 0) {
        int64_t rows = 0;
        const int32_t cols = tensor_cols(self->ebc, t, name, &rows);
        // A bad table, tensor or range is the library's to refuse (before it touches the buffer);
        // a good one must come with a buffer of exactly its size.
        const int valid = cols > 0 && r0 >= 0 && r0 <= r1 && r1 <= rows;
        if (valid && (size_t)v.len != (size_t)(r1 - r0) * (size_t)cols * es) {
            ember_py_invalid("%s: table %d tensor '%s' rows [%lld, %lld) x %d columns need %lld elements, the array "
                             "has %lld",
                             write ? "write" : "read", t, name, r0, r1, (int)cols, (long long)((r1 - r0) * cols),
                             (long long)(v.len / (Py_ssize_t)es));
        } else {
            ember_status st;
            Py_BEGIN_ALLOW_THREADS
            st = write ? ember_ebc_write(self->ebc, t, name, r0, r1, (ember_dtype)dtype, v.buf)
                       : ember_ebc_read(self->ebc, t, name, r0, r1, (ember_dtype)dtype, v.buf);
            Py_END_ALLOW_THREADS
            ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
        }
        ebc_leave(self);
    }
    PyBuffer_Release(&v);
    return ret;
}
static PyObject *ebc_read(EBCObject *self, PyObject *args) { return ebc_read_write(self, args, 0); }
static PyObject *ebc_write(EBCObject *self, PyObject *args) { return ebc_read_write(self, args, 1); }

static PyObject *ebc_convert_dtype(EBCObject *self, PyObject *args) {
    int t, dtype;
    if (!PyArg_ParseTuple(args, "ii", &t, &dtype)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    PyObject *ret;
    if (self->views > 0) {
        ember_ctx_set_error(self->ctx, EMBER_ERR_STATE,
                            "convert_dtype: %zd weights_view array(s) still share the tables' storage, which the "
                            "conversion re-lays out (delete them first)",
                            self->views);
        ret = ember_py_raise(self->ctx, EMBER_ERR_STATE);
    } else {
        ember_status st;
        Py_BEGIN_ALLOW_THREADS
        st = ember_ebc_convert_dtype(self->ebc, t, (ember_dtype)dtype);
        Py_END_ALLOW_THREADS
        ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    }
    ebc_leave(self);
    return ret;
}

// table_bytes(t) -> (weight_bytes, state_bytes)
static PyObject *ebc_table_bytes(EBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    size_t w = 0, s = 0;
    ember_status st = ember_ebc_table_bytes(self->ebc, t, &w, &s);
    PyObject *ret = st == EMBER_OK ? Py_BuildValue("(KK)", (unsigned long long)w, (unsigned long long)s)
                                   : ember_py_raise(self->ctx, st);
    ebc_leave(self);
    return ret;
}

// tier_stats(t) -> dict   Local.
static PyObject *ebc_tier_stats(EBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    ember_tier_stats x;
    ember_status st = ember_ebc_tier_stats(self->ebc, t, &x);
    PyObject *ret = st == EMBER_OK ? ember_py_tier_stats_dict(&x) : ember_py_raise(self->ctx, st);
    ebc_leave(self);
    return ret;
}

// prefetch(kjt parts)   Local.
static PyObject *ebc_prefetch(EBCObject *self, PyObject *args) {
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "O", &parts)) return NULL;
    ember_py_kjt k;
    if (ember_py_kjt_get(parts, &k) != 0) return NULL;
    PyObject *ret = NULL;
    if (ebc_enter(self) == 0) {
        ember_status st;
        Py_BEGIN_ALLOW_THREADS
        st = ember_ebc_prefetch(self->ebc, &k.kjt);
        Py_END_ALLOW_THREADS
        ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
        ebc_leave(self);
    }
    ember_py_kjt_release(&k);
    return ret;
}

// weights_view(t) -> WeightsView (a read-only [rows, dim] buffer)
static PyObject *ebc_weights_view(EBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (ebc_enter(self) != 0) return NULL;
    const void *data = NULL;
    size_t stride = 0;
    ember_status st = ember_ebc_weights_view(self->ebc, t, &data, &stride);
    PyObject *ret = NULL;
    if (st != EMBER_OK) {
        ember_py_raise(self->ctx, st);
    } else {
        const ember_table_config *tc = ember_ebc_table(self->ebc, t);
        ViewObject *v = PyObject_New(ViewObject, &ViewType);
        if (v) {
            v->owner = (EBCObject *)Py_NewRef((PyObject *)self);
            v->data = data;
            v->itemsize = ember_dtype_size(tc->dtype);
            v->format[0] = tc->dtype == EMBER_DTYPE_F32 ? 'f' : tc->dtype == EMBER_DTYPE_F16 ? 'e' : 'H';
            v->format[1] = '\0';
            v->shape[0] = (Py_ssize_t)tc->rows;
            v->shape[1] = tc->dim;
            v->strides[0] = (Py_ssize_t)stride;
            v->strides[1] = v->itemsize;
            self->views++;
            ret = (PyObject *)v;
        }
    }
    ebc_leave(self);
    return ret;
}

static PyObject *ebc_close(EBCObject *self, PyObject *args) {
    (void)args;
    ember_py_lock(self->lock);
    self->closed = 1;
    if (self->views == 0) ebc_free_c(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *ebc_get_closed(EBCObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->closed);
}

static PyObject *ebc_get_bytes(EBCObject *self, void *closure) {
    (void)closure;
    ember_py_lock(self->lock);
    const size_t b = self->ctx ? ember_ctx_bytes_outstanding(self->ctx) : 0;
    PyThread_release_lock(self->lock);
    return PyLong_FromSize_t(b);
}

static PyObject *ebc_get_output_dim(EBCObject *self, void *closure) {
    (void)closure;
    if (ebc_enter(self) != 0) return NULL;
    const int32_t d = ember_ebc_output_dim(self->ebc);
    ebc_leave(self);
    return PyLong_FromLong(d);
}

static PyObject *ebc_get_num_threads(EBCObject *self, void *closure) {
    (void)closure;
    if (ebc_enter(self) != 0) return NULL;
    const int32_t n = ember_ctx_num_threads(self->ctx);
    ebc_leave(self);
    return PyLong_FromLong(n);
}

static PyObject *ebc_get_isa(EBCObject *self, void *closure) {
    (void)closure;
    if (ebc_enter(self) != 0) return NULL;
    const char *name = ember_isa_name(ember_ctx_isa(self->ctx));
    ebc_leave(self);
    return PyUnicode_FromString(name);
}

static PyMethodDef ebc_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))ebc_forward, METH_VARARGS, NULL},
    {"backward", (PyCFunction)(void (*)(void))ebc_backward, METH_VARARGS, NULL},
    {"set_lr", (PyCFunction)(void (*)(void))ebc_set_lr, METH_VARARGS, NULL},
    {"step", (PyCFunction)(void (*)(void))ebc_step, METH_VARARGS, NULL},
    {"set_step", (PyCFunction)(void (*)(void))ebc_set_step, METH_VARARGS, NULL},
    {"tensors", (PyCFunction)(void (*)(void))ebc_tensors, METH_VARARGS, NULL},
    {"read", (PyCFunction)(void (*)(void))ebc_read, METH_VARARGS, NULL},
    {"write", (PyCFunction)(void (*)(void))ebc_write, METH_VARARGS, NULL},
    {"convert_dtype", (PyCFunction)(void (*)(void))ebc_convert_dtype, METH_VARARGS, NULL},
    {"table_bytes", (PyCFunction)(void (*)(void))ebc_table_bytes, METH_VARARGS, NULL},
    {"weights_view", (PyCFunction)(void (*)(void))ebc_weights_view, METH_VARARGS, NULL},
    {"tier_stats", (PyCFunction)(void (*)(void))ebc_tier_stats, METH_VARARGS, NULL},
    {"prefetch", (PyCFunction)(void (*)(void))ebc_prefetch, METH_VARARGS, NULL},
    {"close", (PyCFunction)(void (*)(void))ebc_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ebc_getset[] = {
    {"closed", (getter)(void (*)(void))ebc_get_closed, NULL, NULL, NULL},
    {"bytes_outstanding", (getter)(void (*)(void))ebc_get_bytes, NULL, NULL, NULL},
    {"output_dim", (getter)(void (*)(void))ebc_get_output_dim, NULL, NULL, NULL},
    {"num_threads", (getter)(void (*)(void))ebc_get_num_threads, NULL, NULL, NULL},
    {"isa", (getter)(void (*)(void))ebc_get_isa, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EBCType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.EBC",
    .tp_basicsize = sizeof(EBCObject),
    .tp_dealloc = (destructor)(void (*)(void))ebc_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A local collection (ember_ebc) on its own context; use ember.EmbeddingBagCollection.",
    .tp_methods = ebc_methods,
    .tp_getset = ebc_getset,
    .tp_new = ebc_new,
};

// ---- WeightsView ----------------------------------------------------------------------------

static void view_dealloc(ViewObject *self) {
    EBCObject *o = self->owner;
    ember_py_lock(o->lock);
    if (--o->views == 0 && o->closed) ebc_free_c(o);
    PyThread_release_lock(o->lock);
    Py_DECREF(o);
    PyObject_Free(self);
}

static int view_getbuffer(ViewObject *self, Py_buffer *view, int flags) {
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "weights_view is read-only (write through EmbeddingBagCollection.write)");
        view->obj = NULL;
        return -1;
    }
    const int contiguous = self->strides[0] == self->shape[1] * self->itemsize;
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !contiguous) {
        PyErr_SetString(PyExc_BufferError, "weights_view rows are padded: a strided buffer is needed");
        view->obj = NULL;
        return -1;
    }
    view->buf = (void *)(uintptr_t)self->data;
    view->obj = Py_NewRef((PyObject *)self);
    view->len = self->shape[0] * self->shape[1] * self->itemsize;
    view->readonly = 1;
    view->itemsize = self->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? self->format : NULL;
    view->ndim = 2;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs view_as_buffer = {(getbufferproc)(void (*)(void))view_getbuffer, NULL};

static PyTypeObject ViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.WeightsView",
    .tp_basicsize = sizeof(ViewObject),
    .tp_dealloc = (destructor)(void (*)(void))view_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only buffer [rows, dim] over a table's stored rows; keeps its collection alive.",
    .tp_as_buffer = &view_as_buffer,
};

int ember_py_ebc_add(PyObject *module) {
    if (PyType_Ready(&EBCType) != 0 || PyType_Ready(&ViewType) != 0) return -1;
    if (PyModule_AddObjectRef(module, "EBC", (PyObject *)&EBCType) != 0) return -1;
    if (PyModule_AddObjectRef(module, "WeightsView", (PyObject *)&ViewType) != 0) return -1;
    return 0;
}
