// python/src/sebc.c — ember._ember.SEBC: a sharded collection (ember/shard.h, ember/state.h) on a
// context and communicator of its own (a duplicate of its Comm's, following the Comm's deadline).
//
// Every collective method agrees first on the outcome of its argument checks here and in the
// Python layer (ember_py_agree): a rank whose arguments are refused raises, and so does every
// other rank, with the failing rank's message; the Python layer's own refusals call agree(exc)
// in place of the method. Only then the library's call, which agrees on its own checks.
#include "binding.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    ember_ctx *ctx;
    ember_comm *comm;
    ember_sebc *s;
    PyObject *parent; // the ember._ember.Comm it was created on (strong reference)
} SEBCObject;

static PyTypeObject SEBCType;

static void sebc_close_c(SEBCObject *self) {
    ember_sebc_destroy(self->s);
    self->s = NULL;
    ember_py_comm_destroy(self->comm);
    self->comm = NULL;
    ember_ctx_destroy(self->ctx);
    self->ctx = NULL;
}

static void sebc_closer(PyObject *obj) {
    SEBCObject *self = (SEBCObject *)obj;
    ember_py_lock(self->lock);
    sebc_close_c(self);
    PyThread_release_lock(self->lock);
}

static void sebc_dealloc(SEBCObject *self) {
    ember_py_untrack((PyObject *)self);
    sebc_close_c(self);
    Py_CLEAR(self->parent);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

// SEBC(comm, tables, features, bounds, seed, num_threads, max_batch_size, max_nnz, plans, convention
//      [, ssd_dir, group_size]) (group_size > 0: 2D, ember_sebc_create_2d)
// Collective on comm: agrees on the arguments (on comm), then creates its communicator and the
// collection.
static PyObject *sebc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *parent, *tables, *features, *plans;
    int bounds, num_threads, max_batch, conv, group_size = 0;
    unsigned long long seed;
    long long max_nnz;
    const char *ssd_dir = NULL;
    if (kwds && PyDict_Size(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "SEBC takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOiKiiLOi|zi", &parent, &tables, &features, &bounds, &seed, &num_threads, &max_batch,
                          &max_nnz, &plans, &conv, &ssd_dir, &group_size))
        return NULL;
    ember_py_config c;
    memset(&c, 0, sizeof c);
    ember_table_plan *plan = NULL;
    SEBCObject *self = (SEBCObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->parent = Py_NewRef(parent);
    // Everything that can fail locally comes before the agreement on the parent communicator.
    if (!(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
    } else if (ember_py_config_parse(tables, features, &c) == 0) {
        c.cfg.bounds = (ember_bounds_mode)bounds;
        c.cfg.seed = seed;
        c.cfg.max_batch_size = max_batch;
        c.cfg.max_nnz = max_nnz;
        c.cfg.ssd_dir = ssd_dir;
        if (ember_py_plan_parse(plans, c.cfg.num_tables, &plan) == 0) ember_py_ctx_create(num_threads, &self->ctx);
    }
    if (ember_py_comm_agree_obj(parent) != 0) goto fail;
    if (ember_py_comm_derive(parent, self->ctx, &self->comm) != 0) goto fail;
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = group_size > 0 ? ember_sebc_create_2d(self->comm, &c.cfg, plan, (ember_grad_convention)conv, group_size, &self->s)
                        : ember_sebc_create(self->comm, &c.cfg, plan, (ember_grad_convention)conv, &self->s);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) {
        ember_py_raise(self->ctx, st);
        goto fail;
    }
    if (ember_py_track((PyObject *)self, sebc_closer) != 0) goto fail;
    ember_py_plan_free(plan, c.cfg.num_tables);
    ember_py_config_free(&c);
    return (PyObject *)self;
fail:
    ember_py_plan_free(plan, c.cfg.num_tables);
    ember_py_config_free(&c);
    Py_DECREF(self);
    return NULL;
}

// Takes the lock, checks the object is open and follows the parent's deadline; -1 with StateError
// (unlocked) otherwise. A pending exception (an argument refused before) is kept for the agreement.
static int sebc_enter(SEBCObject *self) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    ember_py_lock(self->lock);
    if (!self->s) {
        PyThread_release_lock(self->lock);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        ember_py_closed("ShardedEmbeddingBagCollection");
        return -1;
    }
    const double t = ember_py_comm_timeout(self->parent);
    if (t >= 0 && t != ember_comm_timeout(self->comm)) ember_comm_set_timeout(self->comm, t);
    ember_ctx_clear_error(self->ctx);
    PyErr_Restore(type, value, tb);
    return 0;
}

static void sebc_leave(SEBCObject *self) { PyThread_release_lock(self->lock); }

// The agreement of the arguments' outcome (a pending exception is this rank's refusal); on failure
// the agreed error is raised and the method leaves through its label `out`.
#define AGREE_OR_OUT(self) \
    if (ember_py_agree((self)->comm, (self)->ctx) != 0) goto out

// agree(exc or None)
static PyObject *sebc_agree(SEBCObject *self, PyObject *exc) {
    if (ember_py_set_pending(exc) < 0) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    const int rc = ember_py_agree(self->comm, self->ctx);
    sebc_leave(self);
    return rc == 0 ? Py_NewRef(Py_None) : NULL;
}

// Floats the output of this KJT holds on this rank.
static int64_t output_size(const SEBCObject *self, const ember_kjt *k) { return ember_sebc_output_size(self->s, k); }

// forward(kjt parts, out), backward(..., grad_out),
// backward_start(..., grad_out) and prefetch(..., None): Collective. One body: the KJT and the
// [output size] float buffer (written by forward, read by the backwards, none for prefetch).
enum pass { PASS_FORWARD, PASS_BACKWARD, PASS_BACKWARD_START, PASS_PREFETCH };

static PyObject *sebc_pass(SEBCObject *self, PyObject *args, enum pass mode) {
    static const char *const names[] = {"forward", "backward", "backward_start", "prefetch"};
    const char *what = mode == PASS_FORWARD ? "out" : "grad_out";
    PyObject *parts, *buf;
    if (!PyArg_ParseTuple(args, "OO", &parts, &buf)) return NULL;
    ember_py_kjt k;
    Py_buffer bv = {0};
    int held = 0;
    const int has_buf = mode != PASS_PREFETCH;
    if (ember_py_kjt_get(parts, &k) == 0) {
        if (!has_buf || ember_py_buffer(buf, what, "f", mode == PASS_FORWARD, &bv) == 0) held = 1;
        else ember_py_kjt_release(&k);
    }
    if (sebc_enter(self) != 0) goto release;
    PyObject *ret = NULL;
    if (held && has_buf && bv.len / 4 != output_size(self, &k.kjt))
        ember_py_invalid("%s: %s holds %lld floats, the output has %lld", names[mode], what, (long long)(bv.len / 4),
                         (long long)output_size(self, &k.kjt));
    AGREE_OR_OUT(self);
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    switch (mode) {
    case PASS_FORWARD: st = ember_sebc_forward(self->s, &k.kjt, bv.buf); break;
    case PASS_BACKWARD: st = ember_sebc_backward(self->s, &k.kjt, bv.buf); break;
    case PASS_BACKWARD_START: st = ember_sebc_backward_start(self->s, &k.kjt, bv.buf); break;
    default: st = ember_sebc_prefetch(self->s, &k.kjt); break;
    }
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    if (held) {
        if (has_buf) PyBuffer_Release(&bv);
        ember_py_kjt_release(&k);
    }
    return ret;
release:
    if (held) {
        if (has_buf) PyBuffer_Release(&bv);
        ember_py_kjt_release(&k);
    }
    return NULL;
}

static PyObject *sebc_forward(SEBCObject *self, PyObject *args) { return sebc_pass(self, args, PASS_FORWARD); }
static PyObject *sebc_backward(SEBCObject *self, PyObject *args) { return sebc_pass(self, args, PASS_BACKWARD); }
static PyObject *sebc_backward_start(SEBCObject *self, PyObject *args) {
    return sebc_pass(self, args, PASS_BACKWARD_START);
}
static PyObject *sebc_prefetch(SEBCObject *self, PyObject *args) { return sebc_pass(self, args, PASS_PREFETCH); }

// backward_finish()   Collective.
static PyObject *sebc_backward_finish(SEBCObject *self, PyObject *noargs) {
    (void)noargs;
    if (sebc_enter(self) != 0) return NULL;
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_sebc_backward_finish(self->s);
    Py_END_ALLOW_THREADS
    PyObject *ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    sebc_leave(self);
    return ret;
}

// set_lr(t, lr)   Local.
static PyObject *sebc_set_lr(SEBCObject *self, PyObject *args) {
    int t;
    float lr;
    if (!PyArg_ParseTuple(args, "if", &t, &lr)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    ember_status st = ember_sebc_set_lr(self->s, t, lr);
    PyObject *ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    sebc_leave(self);
    return ret;
}

// step(t) -> int   Collective.
static PyObject *sebc_step(SEBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    AGREE_OR_OUT(self);
    int64_t step = 0;
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_sebc_step(self->s, t, &step);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? PyLong_FromLongLong((long long)step) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    return ret;
}

// set_step(t, step)   Local.
static PyObject *sebc_set_step(SEBCObject *self, PyObject *args) {
    int t;
    long long step;
    if (!PyArg_ParseTuple(args, "iL", &t, &step)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    ember_status st = ember_sebc_set_step(self->s, t, step);
    PyObject *ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    sebc_leave(self);
    return ret;
}

// tier_stats(t) -> dict of this rank's pieces of table t   Local.
static PyObject *sebc_tier_stats(SEBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    ember_tier_stats x;
    ember_status st = ember_sebc_tier_stats(self->s, t, &x);
    PyObject *ret = st == EMBER_OK ? ember_py_tier_stats_dict(&x) : ember_py_raise(self->ctx, st);
    sebc_leave(self);
    return ret;
}

// Elements of table t's tensor `name` (rows x cols), 0 when there is no such tensor.
static int64_t tensor_elems(const SEBCObject *self, int t, const char *name) {
    const ember_table_config *tc = ember_sebc_table(self->s, t);
    if (!tc) return 0;
    ember_tensor_info ti[EMBER_MAX_TENSORS];
    const int32_t n = ember_table_tensors(tc, ti);
    for (int32_t i = 0; i < n; i++)
        if (strcmp(ti[i].name, name) == 0) return ti[i].rows * ti[i].cols;
    return 0;
}

// read(t, tensor, dtype, root, out or None) and write(t, tensor, dtype, root, src or None), the
// array's items those of `dtype` (ember_py_dtype_format). Collective. The buffer is needed where
// the library reads or writes it: on root, or everywhere when root is -1.
static PyObject *sebc_read_write(SEBCObject *self, PyObject *args, int write) {
    int t, dtype, root;
    const char *name;
    PyObject *arr;
    if (!PyArg_ParseTuple(args, "isiiO", &t, &name, &dtype, &root, &arr)) return NULL;
    // The array's items are those of `dtype` (int64 for a hashed table's "ids"); whether the
    // tensor takes that dtype is the library's to say.
    const char *format = ember_py_dtype_format((ember_dtype)dtype);
    const Py_ssize_t es = (Py_ssize_t)ember_dtype_size((ember_dtype)dtype);
    Py_buffer v;
    int held = 0;
    if (!format)
        ember_py_invalid("%s: unknown dtype %d", write ? "write" : "read", dtype);
    else if (arr != Py_None && ember_py_buffer(arr, write ? "write: array" : "read: out", format, !write, &v) == 0)
        held = 1;
    if (sebc_enter(self) != 0) {
        if (held) PyBuffer_Release(&v);
        return NULL;
    }
    PyObject *ret = NULL;
    const int32_t me = ember_comm_rank(self->comm);
    if (!PyErr_Occurred()) {
        const int64_t n = tensor_elems(self, t, name);
        if (root < 0 || root == me) {
            if (!held)
                ember_py_invalid("%s: no array on rank %d (root %d)", write ? "write" : "read", (int)me, root);
            else if (n > 0 && v.len / es != n)
                ember_py_invalid("%s: table %d tensor '%s' has %lld elements, the array %lld",
                                 write ? "write" : "read", t, name, (long long)n, (long long)(v.len / es));
        }
    }
    AGREE_OR_OUT(self);
    ember_status st;
    void *buf = held ? v.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    st = write ? ember_sebc_write_as(self->s, t, name, (ember_dtype)dtype, buf, root)
               : ember_sebc_read_as(self->s, t, name, (ember_dtype)dtype, buf, root);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    if (held) PyBuffer_Release(&v);
    return ret;
}
static PyObject *sebc_read(SEBCObject *self, PyObject *args) { return sebc_read_write(self, args, 0); }
static PyObject *sebc_write(SEBCObject *self, PyObject *args) { return sebc_read_write(self, args, 1); }

// convert_dtype(t, dtype)   Collective.
static PyObject *sebc_convert_dtype(SEBCObject *self, PyObject *args) {
    int t, dtype;
    if (!PyArg_ParseTuple(args, "ii", &t, &dtype)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    AGREE_OR_OUT(self);
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_sebc_convert_dtype(self->s, t, (ember_dtype)dtype);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    return ret;
}

// dtypes() -> [storage dtype of each table] (after conversions and loads). Local.
static PyObject *sebc_dtypes(SEBCObject *self, PyObject *args) {
    (void)args;
    if (sebc_enter(self) != 0) return NULL;
    const int32_t T = ember_sebc_num_tables(self->s);
    PyObject *list = PyList_New(T);
    for (int32_t t = 0; list && t < T; t++)
        PyList_SET_ITEM(list, t, PyLong_FromLong(ember_sebc_table(self->s, t)->dtype));
    sebc_leave(self);
    return list;
}

// set_wire_precision(forward, backward): ember_dtype codes. Collective (the library agrees on
// the values: ranks that differ all raise).
static PyObject *sebc_set_wire_precision(SEBCObject *self, PyObject *args) {
    int fwd, bwd;
    if (!PyArg_ParseTuple(args, "ii", &fwd, &bwd)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    AGREE_OR_OUT(self);
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_sebc_set_wire_precision(self->s, (ember_dtype)fwd, (ember_dtype)bwd);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    return ret;
}

// wire_precision() -> (forward, backward) ember_dtype codes. Local.
static PyObject *sebc_wire_precision(SEBCObject *self, PyObject *args) {
    (void)args;
    if (sebc_enter(self) != 0) return NULL;
    ember_dtype fwd, bwd;
    ember_sebc_wire_precision(self->s, &fwd, &bwd);
    sebc_leave(self);
    return Py_BuildValue("(ii)", (int)fwd, (int)bwd);
}

// reshard(plans, chunk_bytes) -> (bytes_sent, bytes_received, seconds). Collective: the plans are
// parsed (a refusal agreed on), then ember_sebc_reshard agrees on them as create does.
static PyObject *sebc_reshard(SEBCObject *self, PyObject *args) {
    PyObject *plans;
    unsigned long long chunk;
    if (!PyArg_ParseTuple(args, "OK", &plans, &chunk)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    ember_table_plan *plan = NULL;
    const int32_t T = ember_sebc_num_tables(self->s);
    (void)ember_py_plan_parse(plans, T, &plan); // a failure stays pending for the agreement
    AGREE_OR_OUT(self);
    ember_status st;
    ember_reshard_stats rs = {0};
    Py_BEGIN_ALLOW_THREADS
    st = ember_sebc_reshard(self->s, plan, (size_t)chunk, &rs);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_BuildValue("(KKd)", (unsigned long long)rs.bytes_sent,
                                         (unsigned long long)rs.bytes_received, rs.seconds)
                         : ember_py_raise(self->ctx, st);
out:
    ember_py_plan_free(plan, T);
    sebc_leave(self);
    return ret;
}

// set_wire_loss_scale(forward, backward): floats. Collective, as set_wire_precision.
static PyObject *sebc_set_wire_loss_scale(SEBCObject *self, PyObject *args) {
    float fwd, bwd;
    if (!PyArg_ParseTuple(args, "ff", &fwd, &bwd)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    AGREE_OR_OUT(self);
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_sebc_set_wire_loss_scale(self->s, fwd, bwd);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    return ret;
}

// wire_loss_scale() -> (forward, backward) floats. Local.
static PyObject *sebc_wire_loss_scale(SEBCObject *self, PyObject *args) {
    (void)args;
    if (sebc_enter(self) != 0) return NULL;
    float fwd, bwd;
    ember_sebc_wire_loss_scale(self->s, &fwd, &bwd);
    sebc_leave(self);
    return Py_BuildValue("(dd)", (double)fwd, (double)bwd);
}

// save(dir: bytes, blobs: [(name, buffer)], chunk_bytes)   Collective.
static PyObject *sebc_save(SEBCObject *self, PyObject *args) {
    const char *dir;
    PyObject *blobs;
    unsigned long long chunk;
    int delta = 0;
    if (!PyArg_ParseTuple(args, "yOKp", &dir, &blobs, &chunk, &delta)) return NULL;
    PyObject *seq = PySequence_Fast(blobs, "save: blobs must be a sequence of (name, bytes)");
    if (!seq) return NULL;
    const Py_ssize_t nb = PySequence_Fast_GET_SIZE(seq);
    ember_checkpoint_blob *cb = PyMem_Calloc((size_t)nb + 1, sizeof *cb);
    Py_buffer *views = PyMem_Calloc((size_t)nb + 1, sizeof *views);
    Py_ssize_t held = 0;
    if (!cb || !views) PyErr_NoMemory();
    for (Py_ssize_t i = 0; cb && views && i < nb && !PyErr_Occurred(); i++) {
        PyObject *data;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sO;a blob (name, bytes)", &cb[i].name, &data)) break;
        if (ember_py_buffer(data, "save: blob", "B", 0, &views[i]) != 0) break;
        held++;
        cb[i].data = views[i].buf;
        cb[i].bytes = (size_t)views[i].len;
    }
    PyObject *ret = NULL;
    if (nb > INT32_MAX && !PyErr_Occurred()) ember_py_invalid("save: %zd blobs", nb);
    if (sebc_enter(self) != 0) goto release;
    AGREE_OR_OUT(self);
    ember_checkpoint_options opts = EMBER_CHECKPOINT_OPTIONS_DEFAULT;
    opts.chunk_bytes = (size_t)chunk;
    opts.blobs = cb;
    opts.num_blobs = (int32_t)nb;
    opts.delta = delta;
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_checkpoint_save(self->s, dir, &opts);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
release:
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(cb);
    Py_DECREF(seq);
    return ret;
}

// load(dir: bytes, chunk_bytes)   Collective.
static PyObject *sebc_load(SEBCObject *self, PyObject *args) {
    const char *dir;
    unsigned long long chunk;
    if (!PyArg_ParseTuple(args, "yK", &dir, &chunk)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    AGREE_OR_OUT(self);
    ember_checkpoint_options opts = EMBER_CHECKPOINT_OPTIONS_DEFAULT;
    opts.chunk_bytes = (size_t)chunk;
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_checkpoint_load(self->s, dir, &opts);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    return ret;
}

// agree_digest(fn, name, value): every rank passed the same 64-bit value (a digest of what it
// was given), or every rank raises InvalidArgumentError naming `name` and a rank that differs.
// Collective.
static PyObject *sebc_agree_digest(SEBCObject *self, PyObject *args) {
    const char *fn, *name;
    long long value;
    if (!PyArg_ParseTuple(args, "ssL", &fn, &name, &value)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    AGREE_OR_OUT(self); // first, as every collective method: a rank may arrive with its refusal
    const ember_arg a = {.name = name, .value = (int64_t)value, .digest = 1};
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_comm_agree_args(self->comm, EMBER_OK, fn, &a, 1);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    return ret;
}

// bcast_i64(array int64 (writable), root): broadcast in place from root.   Collective.
static PyObject *sebc_bcast_i64(SEBCObject *self, PyObject *args) {
    PyObject *arr;
    int root;
    if (!PyArg_ParseTuple(args, "Oi", &arr, &root)) return NULL;
    Py_buffer v;
    int held = ember_py_buffer(arr, "bcast: array", "q", 1, &v) == 0;
    if (sebc_enter(self) != 0) {
        if (held) PyBuffer_Release(&v);
        return NULL;
    }
    PyObject *ret = NULL;
    const int32_t W = ember_comm_size(self->comm);
    if (held && (root < 0 || root >= W)) ember_py_invalid("bcast: root %d outside [0, %d)", root, (int)W);
    AGREE_OR_OUT(self);
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_comm_bcast(self->comm, v.buf, (size_t)v.len, root);
    Py_END_ALLOW_THREADS
    ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
out:
    sebc_leave(self);
    if (held) PyBuffer_Release(&v);
    return ret;
}

// pieces(t) -> [(row_begin, row_end, col_begin, col_end, replicated)] this rank holds. Local.
static PyObject *sebc_pieces(SEBCObject *self, PyObject *args) {
    int t;
    if (!PyArg_ParseTuple(args, "i", &t)) return NULL;
    if (sebc_enter(self) != 0) return NULL;
    const int32_t n = ember_sebc_num_pieces(self->s, t);
    PyObject *list = PyList_New(n);
    for (int32_t i = 0; list && i < n; i++) {
        ember_piece p;
        ember_status st = ember_sebc_piece(self->s, t, i, &p);
        PyObject *item = st == EMBER_OK ? Py_BuildValue("(LLiii)", (long long)p.row_begin, (long long)p.row_end,
                                                        (int)p.col_begin, (int)p.col_end, (int)p.replicated)
                                        : ember_py_raise(self->ctx, st);
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, item);
    }
    sebc_leave(self);
    return list;
}

static PyObject *sebc_close(SEBCObject *self, PyObject *args) {
    (void)args;
    ember_py_untrack((PyObject *)self);
    ember_py_lock(self->lock);
    sebc_close_c(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *sebc_get_closed(SEBCObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->s == NULL);
}

static PyObject *sebc_get_bytes(SEBCObject *self, void *closure) {
    (void)closure;
    ember_py_lock(self->lock);
    const size_t b = self->ctx ? ember_ctx_bytes_outstanding(self->ctx) : 0;
    PyThread_release_lock(self->lock);
    return PyLong_FromSize_t(b);
}

static PyObject *sebc_get_bytes_sent(SEBCObject *self, void *closure) {
    (void)closure;
    if (sebc_enter(self) != 0) return NULL;
    const uint64_t b = ember_sebc_bytes_sent_last_step(self->s);
    sebc_leave(self);
    return PyLong_FromUnsignedLongLong((unsigned long long)b);
}

static PyObject *sebc_get_output_dim(SEBCObject *self, void *closure) {
    (void)closure;
    if (sebc_enter(self) != 0) return NULL;
    const int32_t d = ember_sebc_output_dim(self->s);
    sebc_leave(self);
    return PyLong_FromLong(d);
}

// The sharding group's ranks (2D; the communicator's size otherwise).
static PyObject *sebc_get_group_size(SEBCObject *self, void *closure) {
    (void)closure;
    if (sebc_enter(self) != 0) return NULL;
    const int32_t g = ember_sebc_group_size(self->s);
    sebc_leave(self);
    return PyLong_FromLong(g);
}

static PyObject *sebc_get_rank(SEBCObject *self, void *closure) {
    (void)closure;
    if (sebc_enter(self) != 0) return NULL;
    const int32_t r = ember_comm_rank(self->comm);
    sebc_leave(self);
    return PyLong_FromLong(r);
}

static PyMethodDef sebc_methods[] = {
    {"agree", (PyCFunction)(void (*)(void))sebc_agree, METH_O, NULL},
    {"forward", (PyCFunction)(void (*)(void))sebc_forward, METH_VARARGS, NULL},
    {"backward", (PyCFunction)(void (*)(void))sebc_backward, METH_VARARGS, NULL},
    {"backward_start", (PyCFunction)(void (*)(void))sebc_backward_start, METH_VARARGS, NULL},
    {"backward_finish", (PyCFunction)(void (*)(void))sebc_backward_finish, METH_NOARGS, NULL},
    {"prefetch", (PyCFunction)(void (*)(void))sebc_prefetch, METH_VARARGS, NULL},
    {"set_lr", (PyCFunction)(void (*)(void))sebc_set_lr, METH_VARARGS, NULL},
    {"step", (PyCFunction)(void (*)(void))sebc_step, METH_VARARGS, NULL},
    {"set_step", (PyCFunction)(void (*)(void))sebc_set_step, METH_VARARGS, NULL},
    {"tier_stats", (PyCFunction)(void (*)(void))sebc_tier_stats, METH_VARARGS, NULL},
    {"read", (PyCFunction)(void (*)(void))sebc_read, METH_VARARGS, NULL},
    {"write", (PyCFunction)(void (*)(void))sebc_write, METH_VARARGS, NULL},
    {"convert_dtype", (PyCFunction)(void (*)(void))sebc_convert_dtype, METH_VARARGS, NULL},
    {"dtypes", (PyCFunction)(void (*)(void))sebc_dtypes, METH_NOARGS, NULL},
    {"set_wire_precision", (PyCFunction)(void (*)(void))sebc_set_wire_precision, METH_VARARGS, NULL},
    {"wire_precision", (PyCFunction)(void (*)(void))sebc_wire_precision, METH_NOARGS, NULL},
    {"set_wire_loss_scale", (PyCFunction)(void (*)(void))sebc_set_wire_loss_scale, METH_VARARGS, NULL},
    {"reshard", (PyCFunction)(void (*)(void))sebc_reshard, METH_VARARGS, NULL},
    {"wire_loss_scale", (PyCFunction)(void (*)(void))sebc_wire_loss_scale, METH_NOARGS, NULL},
    {"save", (PyCFunction)(void (*)(void))sebc_save, METH_VARARGS, NULL},
    {"load", (PyCFunction)(void (*)(void))sebc_load, METH_VARARGS, NULL},
    {"bcast_i64", (PyCFunction)(void (*)(void))sebc_bcast_i64, METH_VARARGS, NULL},
    {"agree_digest", (PyCFunction)(void (*)(void))sebc_agree_digest, METH_VARARGS, NULL},
    {"pieces", (PyCFunction)(void (*)(void))sebc_pieces, METH_VARARGS, NULL},
    {"close", (PyCFunction)(void (*)(void))sebc_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sebc_getset[] = {
    {"closed", (getter)(void (*)(void))sebc_get_closed, NULL, NULL, NULL},
    {"bytes_outstanding", (getter)(void (*)(void))sebc_get_bytes, NULL, NULL, NULL},
    {"bytes_sent_last_step", (getter)(void (*)(void))sebc_get_bytes_sent, NULL, NULL, NULL},
    {"output_dim", (getter)(void (*)(void))sebc_get_output_dim, NULL, NULL, NULL},
    {"group_size", (getter)(void (*)(void))sebc_get_group_size, NULL, NULL, NULL},
    {"rank", (getter)(void (*)(void))sebc_get_rank, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SEBCType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.SEBC",
    .tp_basicsize = sizeof(SEBCObject),
    .tp_dealloc = (destructor)(void (*)(void))sebc_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A sharded collection (ember_sebc) on its own context and communicator; use "
              "ember.ShardedEmbeddingBagCollection.",
    .tp_methods = sebc_methods,
    .tp_getset = sebc_getset,
    .tp_new = sebc_new,
};

int ember_py_sebc_add(PyObject *module) {
    if (PyType_Ready(&SEBCType) != 0) return -1;
    return PyModule_AddObjectRef(module, "SEBC", (PyObject *)&SEBCType);
}
