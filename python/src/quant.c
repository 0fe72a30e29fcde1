// python/src/quant.c — ember._ember.QEBC: a serving bundle's quantized collection (ember/quant.h)
// owning its context, and the row functions (quantize_rows, dequantize_rows, qtype_row_bytes,
// bundle_blob).
#include "binding.h"

#include <string.h>

#include "ember/quant.h"

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    ember_ctx *ctx;
    ember_qebc *q;
} QEBCObject;

static PyTypeObject QEBCType;

static void qebc_free_c(QEBCObject *self) {
    ember_qebc_destroy(self->q);
    self->q = NULL;
    ember_ctx_destroy(self->ctx);
    self->ctx = NULL;
}

static void qebc_dealloc(QEBCObject *self) {
    qebc_free_c(self);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

// QEBC(bundle_dir, num_threads)
static PyObject *qebc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    const char *dir;
    int num_threads = 0;
    if (kwds && PyDict_Size(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "QEBC takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "s|i", &dir, &num_threads)) return NULL;
    QEBCObject *self = (QEBCObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (!(self->lock = PyThread_allocate_lock())) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (ember_py_ctx_create(num_threads, &self->ctx) != 0) {
        Py_DECREF(self);
        return NULL;
    }
    ember_ctx_set_rank(self->ctx, ember_py_world_rank());
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_qebc_load(self->ctx, dir, &self->q);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) {
        ember_py_raise(self->ctx, st);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int qebc_enter(QEBCObject *self) {
    ember_py_lock(self->lock);
    if (!self->q) {
        PyThread_release_lock(self->lock);
        ember_py_closed("QuantEmbeddingBagCollection");
        return -1;
    }
    ember_ctx_clear_error(self->ctx);
    return 0;
}

// forward(kjt parts, out)
static PyObject *qebc_forward(QEBCObject *self, PyObject *args) {
    PyObject *parts, *out;
    if (!PyArg_ParseTuple(args, "OO", &parts, &out)) return NULL;
    ember_py_kjt k;
    if (ember_py_kjt_get(parts, &k) != 0) return NULL;
    const long long B = k.kjt.batch_size;
    Py_buffer ov;
    if (ember_py_buffer(out, "out", "f", 1, &ov) != 0) {
        ember_py_kjt_release(&k);
        return NULL;
    }
    PyObject *ret = NULL;
    if (qebc_enter(self) == 0) {
        const long long need = B * (long long)ember_qebc_output_dim(self->q);
        if (ov.len / 4 != need) {
            ember_py_invalid("forward: out holds %lld floats, the output needs %lld", (long long)(ov.len / 4), need);
        } else {
            ember_status st;
            Py_BEGIN_ALLOW_THREADS
            st = ember_qebc_forward(self->q, &k.kjt, ov.buf);
            Py_END_ALLOW_THREADS
            ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
        }
        PyThread_release_lock(self->lock);
    }
    PyBuffer_Release(&ov);
    ember_py_kjt_release(&k);
    return ret;
}

// tables() -> [(name, qtype, rows, dim, pooling, num_embeddings, remap, kept)]
static PyObject *qebc_tables(QEBCObject *self, PyObject *noargs) {
    (void)noargs;
    if (qebc_enter(self) != 0) return NULL;
    const int32_t T = ember_qebc_num_tables(self->q);
    PyObject *list = PyList_New(T);
    for (int32_t t = 0; list && t < T; t++) {
        const ember_qtable_config *c = ember_qebc_table(self->q, t);
        ember_qremap_kind kind = EMBER_QREMAP_NONE;
        int64_t kept = 0;
        ember_qebc_get_remap(self->q, t, &kind, &kept, NULL, NULL, 0);
        PyObject *row = Py_BuildValue("(ssLisLsL)", c->name, ember_qtype_name(c->qtype), (long long)c->rows, (int)c->dim,
                                      ember_pooling_name(c->pooling), (long long)c->num_embeddings,
                                      ember_qremap_kind_name(kind), (long long)kept);
        if (!row) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, t, row);
    }
    PyThread_release_lock(self->lock);
    return list;
}

static PyObject *qebc_output_dim(QEBCObject *self, void *closure) {
    (void)closure;
    if (qebc_enter(self) != 0) return NULL;
    const int32_t d = ember_qebc_output_dim(self->q);
    PyThread_release_lock(self->lock);
    return PyLong_FromLong(d);
}

// read_rows(t, out uint8 [rows * row_bytes])
static PyObject *qebc_read_rows(QEBCObject *self, PyObject *args) {
    int t;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "iO", &t, &out)) return NULL;
    Py_buffer ov;
    if (ember_py_buffer(out, "out", "B", 1, &ov) != 0) return NULL;
    PyObject *ret = NULL;
    if (qebc_enter(self) == 0) {
        const ember_qtable_config *c = ember_qebc_table(self->q, t);
        const size_t need = c ? ember_qtype_row_bytes(c->qtype, c->dim) * (size_t)c->rows : 0;
        if (!c) ember_py_invalid("read_rows: table %d outside [0, %d)", t, (int)ember_qebc_num_tables(self->q));
        else if ((size_t)ov.len != need)
            ember_py_invalid("read_rows: out holds %lld bytes, table '%s' has %zu", (long long)ov.len, c->name, need);
        else {
            const ember_status st = ember_qebc_read_rows(self->q, t, 0, c->rows, ov.buf);
            ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
        }
        PyThread_release_lock(self->lock);
    }
    PyBuffer_Release(&ov);
    return ret;
}

static PyObject *qebc_close(QEBCObject *self, PyObject *noargs) {
    (void)noargs;
    ember_py_lock(self->lock);
    qebc_free_c(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *qebc_bytes(QEBCObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(self->ctx ? ember_ctx_bytes_outstanding(self->ctx) : 0);
}

static PyObject *qebc_closed(QEBCObject *self, void *closure) {
    (void)closure;
    ember_py_lock(self->lock);
    const int closed = self->q == NULL;
    PyThread_release_lock(self->lock);
    return PyBool_FromLong(closed);
}

static PyMethodDef qebc_methods[] = {
    {"forward", (PyCFunction)qebc_forward, METH_VARARGS, "forward(values, lengths, offsets, weights, F, B, out)"},
    {"tables", (PyCFunction)qebc_tables, METH_NOARGS,
     "[(name, qtype, rows, dim, pooling, num_embeddings, remap, kept)] of every table."},
    {"read_rows", (PyCFunction)qebc_read_rows, METH_VARARGS, "read_rows(t, out): table t's stored rows' bytes."},
    {"close", (PyCFunction)qebc_close, METH_NOARGS, "Frees the collection now."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef qebc_getset[] = {
    {"output_dim", (getter)qebc_output_dim, NULL, "sum of the features' dims", NULL},
    {"bytes_outstanding", (getter)qebc_bytes, NULL, "bytes its context holds", NULL},
    {"closed", (getter)qebc_closed, NULL, "close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject QEBCType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.QEBC",
    .tp_basicsize = sizeof(QEBCObject),
    .tp_dealloc = (destructor)(void (*)(void))qebc_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A serving bundle's quantized collection (ember_qebc); use ember.QuantEmbeddingBagCollection.",
    .tp_methods = qebc_methods,
    .tp_getset = qebc_getset,
    .tp_new = qebc_new,
};

// ---- the row functions -------------------------------------------------------------------------

static int parse_qtype(const char *name, ember_qtype *t) {
    if (ember_qtype_parse(name, t) != EMBER_OK) {
        ember_py_invalid("unknown quantized type '%s' (fp32, fp16, int8, int4, int2)", name);
        return -1;
    }
    return 0;
}

// qtype_row_bytes(qtype, dim)
static PyObject *py_row_bytes(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *name;
    int dim;
    ember_qtype t;
    if (!PyArg_ParseTuple(args, "si", &name, &dim) || parse_qtype(name, &t) != 0) return NULL;
    if (dim < 1) return ember_py_invalid("dim %d: must be >= 1", dim);
    return PyLong_FromSize_t(ember_qtype_row_bytes(t, dim));
}

// quantize_rows(qtype, dim, src float32, dst uint8) / dequantize_rows(qtype, dim, src uint8, dst float32)
static PyObject *rows_fn(PyObject *args, int quantize) {
    const char *name;
    int dim;
    PyObject *src, *dst;
    ember_qtype t;
    if (!PyArg_ParseTuple(args, "siOO", &name, &dim, &src, &dst) || parse_qtype(name, &t) != 0) return NULL;
    if (dim < 1) return ember_py_invalid("dim %d: must be >= 1", dim);
    Py_buffer sv, dv;
    if (ember_py_buffer(src, "src", quantize ? "f" : "B", 0, &sv) != 0) return NULL;
    if (ember_py_buffer(dst, "dst", quantize ? "B" : "f", 1, &dv) != 0) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    const size_t rb = ember_qtype_row_bytes(t, dim), fb = 4 * (size_t)dim;
    const size_t in = quantize ? fb : rb, outb = quantize ? rb : fb;
    const long long n = (long long)((size_t)sv.len / in);
    PyObject *ret = NULL;
    if ((size_t)sv.len % in != 0 || (size_t)dv.len != (size_t)n * outb) {
        ember_py_invalid("%s: src of %lld bytes and dst of %lld bytes for rows of %zu -> %zu bytes",
                         quantize ? "quantize_rows" : "dequantize_rows", (long long)sv.len, (long long)dv.len, in, outb);
    } else {
        ember_ctx *ctx = NULL;
        if (ember_py_ctx_create(1, &ctx) == 0) {
            ember_status st;
            Py_BEGIN_ALLOW_THREADS
            st = quantize ? ember_quantize_rows(ctx, t, dim, n, sv.buf, dv.buf)
                          : ember_dequantize_rows(ctx, t, dim, n, sv.buf, dv.buf);
            Py_END_ALLOW_THREADS
            ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(ctx, st);
            ember_ctx_destroy(ctx);
        }
    }
    PyBuffer_Release(&sv);
    PyBuffer_Release(&dv);
    return ret;
}

static PyObject *py_quantize(PyObject *mod, PyObject *args) {
    (void)mod;
    return rows_fn(args, 1);
}

static PyObject *py_dequantize(PyObject *mod, PyObject *args) {
    (void)mod;
    return rows_fn(args, 0);
}

// bundle_blob(dir, name) -> bytes
static PyObject *py_bundle_blob(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *dir, *name;
    if (!PyArg_ParseTuple(args, "ss", &dir, &name)) return NULL;
    ember_ctx *ctx = NULL;
    if (ember_py_ctx_create(1, &ctx) != 0) return NULL;
    size_t n = 0;
    PyObject *ret = NULL;
    ember_status st = ember_qebc_read_blob(ctx, dir, name, NULL, 0, &n);
    if (st == EMBER_OK && (ret = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n))) {
        st = ember_qebc_read_blob(ctx, dir, name, PyBytes_AS_STRING(ret), n, NULL);
        if (st != EMBER_OK) Py_CLEAR(ret);
    }
    if (st != EMBER_OK) ember_py_raise(ctx, st);
    ember_ctx_destroy(ctx);
    return ret;
}

static PyMethodDef quant_functions[] = {
    {"qtype_row_bytes", py_row_bytes, METH_VARARGS, "qtype_row_bytes(qtype, dim): bytes of one row."},
    {"quantize_rows", py_quantize, METH_VARARGS, "quantize_rows(qtype, dim, src float32, dst uint8)."},
    {"dequantize_rows", py_dequantize, METH_VARARGS, "dequantize_rows(qtype, dim, src uint8, dst float32)."},
    {"bundle_blob", py_bundle_blob, METH_VARARGS, "bundle_blob(dir, name) -> bytes (CRC-32 checked)."},
    {NULL, NULL, 0, NULL},
};

int ember_py_quant_add(PyObject *module) {
    if (PyType_Ready(&QEBCType) != 0) return -1;
    if (PyModule_AddObjectRef(module, "QEBC", (PyObject *)&QEBCType) != 0) return -1;
    return PyModule_AddFunctions(module, quant_functions);
}
