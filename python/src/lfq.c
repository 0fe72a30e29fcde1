// python/src/lfq.c — ember._ember._LFQ: the C half of ember.LFQ (python/ember/lfq.py), over the
// public headers ember/lfq.h and ember/comm.h.
//
// An _LFQ owns its own ember_ctx and, when given an ember.Comm, its own duplicate of that
// communicator created on that context (ember_lfq requires the comm and the module to share a
// context). The Python layer converts arrays and names; this file checks every buffer's dtype and
// shape itself (the type can be used directly and must never crash the interpreter), releases the
// GIL around the library calls that compute or communicate, and keeps the distributed rule: a
// refusal by the binding inside a Collective call is recorded on the context and agreed
// (ember_comm_agree) where the library's own call would agree first, so every rank raises and
// none waits.
//
// Threads: every method takes the object's lock around its use of the module (waiting without the
// GIL), so two Python threads never run one module at once (ember_lfq is thread-compatible).
// Buffers are acquired before the lock: nothing under it calls back into Python code.
//
// Memory shared with numpy: params/grads are exported through _LFQTensor objects (buffer
// protocol). Each holds a reference to its _LFQ, and close() while such buffers are alive defers
// freeing the module until the last one is released, so an array never dangles.
#include "binding.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ember/lfq.h"

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;  // taken around every use of ctx / q / comm
    ember_ctx *ctx;           // owned; NULL once freed
    ember_lfq *q;             // owned; NULL before creation and once freed
    ember_comm *comm;         // owned duplicate of comm_obj's communicator, or NULL
    PyObject *comm_obj;       // the ember.Comm given (for its timeout; NULL after close)
    int closed;               // close() was called: every method refuses
    int closing;              // close() is freeing the communicator (GIL released)
    int timed_out;            // a call of this module missed a collective deadline
    Py_ssize_t exports;       // live buffers over the parameter / gradient slabs
    int32_t saved_B, saved_N; // shape of the last successful training forward; 0: none
    // The resolved configuration's shape, fixed at creation (read without the lock).
    int32_t dim, C, D, f64, proj;
    size_t final_bytes;       // bytes the context still held when the module was freed
} LFQObject;

typedef struct {
    PyObject_HEAD
    LFQObject *owner;         // strong reference
    int grad;                 // 0: parameter, 1: its gradient
    int id;                   // ember_lfq_param_id
    int ndim;
    Py_ssize_t shape[2], strides[2];
} TensorObject;

static PyTypeObject LFQType;
static PyTypeObject TensorType;

// ---- errors and the lock ----------------------------------------------------------------------

// Raises the exception of `st` with the context's message. After EMBER_ERR_TIMEOUT a collective
// is still in flight in MPI, possibly on the module's buffers: the module is then never freed.
static PyObject *raise_st(LFQObject *self, ember_status st) {
    if (st == EMBER_ERR_TIMEOUT) self->timed_out = 1;
    return ember_py_raise(self->ctx, st);
}

// The rank the module's messages name: its context's (its communicator's rank, or the process's
// in MPI_COMM_WORLD); the process's when it has no context (closed, or not made yet).
static int msg_rank(const LFQObject *self) {
    const int32_t r = self && self->ctx ? ember_ctx_rank(self->ctx) : -1;
    return r >= 0 ? (int)r : ember_py_world_rank();
}

// A refusal by the binding (the lock held): recorded on the module's context and, inside a
// Collective call, agreed with the other ranks (who are in the library call's first agreement).
// Returns NULL with the exception set.
EMBER_PY_PRINTF(4, 5) static PyObject *refuse(LFQObject *self, int collective, ember_status st, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ember_ctx_set_error(self->ctx, st, "%s", msg);
    if (collective && self->comm) {
        Py_BEGIN_ALLOW_THREADS
        st = ember_comm_agree(self->comm, st);
        Py_END_ALLOW_THREADS
    }
    return raise_st(self, st);
}

// Takes the lock if the module is open; otherwise raises StateError and returns 0.
static int enter(LFQObject *self, const char *who) {
    if (!self->lock) {
        ember_py_error(EMBER_ERR_STATE, msg_rank(self), "%s: the LFQ module is not created", who);
        return 0;
    }
    ember_py_lock(self->lock);
    if (!self->q || self->closed) {
        PyThread_release_lock(self->lock);
        ember_py_error(EMBER_ERR_STATE, msg_rank(self), "%s: the LFQ module is %s", who,
                       self->closed ? "closed" : "not created");
        return 0;
    }
    return 1;
}

static PyObject *leave(LFQObject *self, PyObject *result) {
    PyThread_release_lock(self->lock);
    return result;
}

// ---- lifetime ---------------------------------------------------------------------------------

// Follows the ember.Comm's deadline (comm.timeout_s may change at any time; a closed Comm leaves
// the last one).
static void sync_timeout(LFQObject *self) {
    if (!self->comm || !self->comm_obj) return;
    double t = ember_py_comm_timeout(self->comm_obj);
    if (t >= 0) ember_comm_set_timeout(self->comm, t);
}

// Frees the module, its communicator and its context (no buffer may be exported). After a
// collective timeout nothing is freed (ember/comm.h: MPI may still write the buffers of the
// collective that timed out; the job is to end): the handles are dropped.
static void free_all(LFQObject *self) {
    if (self->timed_out) {
        self->final_bytes = self->ctx ? ember_ctx_bytes_outstanding(self->ctx) : self->final_bytes;
        self->q = NULL;
        self->comm = NULL;
        self->ctx = NULL;
        return;
    }
    if (self->q) ember_lfq_set_comm(self->q, NULL);
    ember_lfq_destroy(self->q);
    self->q = NULL;
    ember_py_comm_destroy(self->comm);
    self->comm = NULL;
    if (self->ctx) {
        self->final_bytes = ember_ctx_bytes_outstanding(self->ctx);
        ember_ctx_destroy(self->ctx);
        self->ctx = NULL;
    }
}

// Closes: the communicator goes now (at a point every rank reaches in order, or at interpreter
// exit before MPI is finalised: the module's registry calls close_at_exit); the memory shared
// with numpy arrays stays until the last of them is released.
static void close_now(LFQObject *self) {
    if (self->closed) return;
    self->closed = 1;
    if (self->comm) {
        ember_py_untrack((PyObject *)self);
        if (self->q) ember_lfq_set_comm(self->q, NULL);
        ember_comm *c = self->comm;
        self->comm = NULL;
        self->closing = 1; // an array released meanwhile must not free the context under us
        if (!self->timed_out) {
            Py_BEGIN_ALLOW_THREADS
            ember_py_comm_destroy(c);
            Py_END_ALLOW_THREADS
        }
        self->closing = 0;
    }
    Py_CLEAR(self->comm_obj);
    if (self->exports == 0) free_all(self);
}

static void close_at_exit(PyObject *obj) { close_now((LFQObject *)obj); }

static int fits_i32(long long v) { return v >= INT32_MIN && v <= INT32_MAX; }

// _LFQ(**config, comm=None, refuse=None): ember_lfq_create with every field by its C name (enums
// as their values). Collective on comm when given: every failure is agreed, and `refuse` (the
// Python layer's refusal of an argument) raises InvalidArgumentError on every rank.
static int LFQ_init(LFQObject *self, PyObject *args, PyObject *kwds) {
    static const char *const kwlist[] = {"dim", "codebook_size", "num_codebooks", "codebook_scale",
                                         "entropy_loss_weight", "commitment_loss_weight", "diversity_gamma",
                                         "inv_temperature", "projection", "projection_has_bias",
                                         "soft_clamp_input_value", "spherical", "softplus_entropy_loss",
                                         "entropy_loss_offset", "frac_per_sample_entropy", "dist_mean", "dtype",
                                         "seed", "max_tokens", "comm", "refuse", NULL};
    ember_lfq_config cfg = EMBER_LFQ_CONFIG_DEFAULT;
    long long dim = cfg.dim, K = cfg.codebook_size, C = cfg.num_codebooks, max_tokens = 0;
    int projection = (int)cfg.projection, dist_mean = (int)cfg.dist_mean, dtype = (int)cfg.dtype;
    int has_bias = cfg.projection_has_bias, spherical = cfg.spherical, softplus = cfg.softplus_entropy_loss;
    unsigned long long seed = 0;
    PyObject *comm_obj = Py_None;
    const char *refusal = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$LLLdddddipdppddiiKLOz:_LFQ", (char **)kwlist, &dim, &K, &C,
                                     &cfg.codebook_scale, &cfg.entropy_loss_weight, &cfg.commitment_loss_weight,
                                     &cfg.diversity_gamma, &cfg.inv_temperature, &projection, &has_bias,
                                     &cfg.soft_clamp_input_value, &spherical, &softplus, &cfg.entropy_loss_offset,
                                     &cfg.frac_per_sample_entropy, &dist_mean, &dtype, &seed, &max_tokens, &comm_obj,
                                     &refusal))
        return -1;
    if (self->lock) {
        ember_py_error(EMBER_ERR_STATE, msg_rank(self), "LFQ: the module is already created");
        return -1;
    }
    if (!(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    // Without a communicator of its own the module cannot tell the other ranks: a failure is local.
    if (ember_py_ctx_create(0, &self->ctx) != 0) return -1;
    ember_ctx_set_rank(self->ctx, ember_py_world_rank()); // messages name the process (a comm renames it)
    if (comm_obj != Py_None) {
        if (ember_py_comm_derive(comm_obj, self->ctx, &self->comm) != 0) {
            free_all(self);
            return -1;
        }
        if (ember_py_track((PyObject *)self, close_at_exit) != 0) {
            free_all(self);
            return -1;
        }
        Py_INCREF(comm_obj);
        self->comm_obj = comm_obj;
    }
    // From here every failure is agreed over the communicator.
    ember_status st = EMBER_OK;
    if (refusal) {
        st = ember_ctx_set_error(self->ctx, EMBER_ERR_INVALID_ARG, "%s", refusal);
    } else if (!fits_i32(dim) || !fits_i32(K) || !fits_i32(C)) {
        st = ember_ctx_set_error(self->ctx, EMBER_ERR_INVALID_ARG,
                                 "LFQ: dim %lld, codebook_size %lld, num_codebooks %lld: each must fit in int32", dim, K,
                                 C);
    } else if (max_tokens < 0) {
        st = ember_ctx_set_error(self->ctx, EMBER_ERR_INVALID_ARG, "LFQ: max_tokens = %lld must be >= 0", max_tokens);
    } else {
        cfg.dim = (int32_t)dim;
        cfg.codebook_size = (int32_t)K;
        cfg.num_codebooks = (int32_t)C;
        cfg.projection = (ember_lfq_projection)projection;
        cfg.projection_has_bias = has_bias != 0;
        cfg.spherical = spherical != 0;
        cfg.softplus_entropy_loss = softplus != 0;
        cfg.dist_mean = (ember_lfq_dist_mean)dist_mean;
        cfg.dtype = (ember_dtype)dtype;
        cfg.seed = (uint64_t)seed;
        cfg.max_tokens = (int64_t)max_tokens;
        cfg.comm = self->comm;
        Py_BEGIN_ALLOW_THREADS
        st = ember_lfq_create(self->ctx, &cfg, &self->q);
        Py_END_ALLOW_THREADS
    }
    if (self->comm) {
        Py_BEGIN_ALLOW_THREADS
        st = ember_comm_agree(self->comm, st);
        if (st == EMBER_OK) {
            // The gradient slab must have one length on every rank before allreduce_grads may run
            // (the library compares the whole configuration only at the first training forward).
            int64_t n = 0, span[2];
            ember_lfq_params(self->q, &n);
            span[0] = n;
            span[1] = -n;
            st = ember_comm_allreduce_max_i64(self->comm, span, 2);
            if (st == EMBER_OK && span[0] != -span[1])
                st = ember_ctx_set_error(self->ctx, EMBER_ERR_INVALID_ARG,
                                         "LFQ: the ranks are configured differently: their parameter counts range "
                                         "from %lld to %lld",
                                         (long long)-span[1], (long long)span[0]);
        }
        Py_END_ALLOW_THREADS
    }
    if (st != EMBER_OK) {
        raise_st(self, st);
        if (self->comm) ember_py_untrack((PyObject *)self);
        free_all(self);
        Py_CLEAR(self->comm_obj);
        return -1;
    }
    const ember_lfq_config *c = ember_lfq_get_config(self->q);
    self->dim = c->dim;
    self->C = c->num_codebooks;
    self->D = ember_lfq_codebook_dim(self->q);
    self->f64 = c->dtype == EMBER_DTYPE_F64;
    self->proj = c->projection == EMBER_LFQ_PROJ_LINEAR;
    return 0;
}

static void LFQ_dealloc(LFQObject *self) {
    if (self->comm) ember_py_untrack((PyObject *)self);
    free_all(self); // no export can be alive: each holds a reference to self
    Py_CLEAR(self->comm_obj);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *LFQ_close(LFQObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->lock) Py_RETURN_NONE;
    ember_py_lock(self->lock);
    close_now(self);
    return leave(self, Py_NewRef(Py_None));
}

// ---- buffers ----------------------------------------------------------------------------------

static const char *float_format(const LFQObject *self) { return self->f64 ? "d" : "f"; }

// The dimensions of an acquired buffer (1-d when the exporter gave no shape); at most 3 stored.
static int dims_of(const Py_buffer *v, Py_ssize_t *dims) {
    if (!v->shape) {
        dims[0] = v->itemsize ? v->len / v->itemsize : 0;
        return 1;
    }
    for (int i = 0; i < v->ndim && i < 3; i++) dims[i] = v->shape[i];
    return v->ndim;
}

// "(a, b, c)" into buf.
static const char *shape_str(const Py_buffer *v, char *buf, size_t cap) {
    Py_ssize_t d[3] = {0, 0, 0};
    const int nd = dims_of(v, d);
    size_t at = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < nd && i < 3 && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, i ? ", %zd" : "%zd", d[i]);
    if (at < cap) snprintf(buf + at, cap - at, "%s", nd > 3 ? ", ...)" : nd == 1 ? ",)" : ")");
    return buf;
}

static int has_shape3(const Py_buffer *v, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c) {
    Py_ssize_t d[3];
    return dims_of(v, d) == 3 && d[0] == a && d[1] == b && d[2] == c;
}

typedef struct {
    Py_buffer v[4];
    int n;
    char error[512]; // why an acquisition failed ("" when all succeeded)
} views;

static void views_release(views *vs) {
    for (int i = 0; i < vs->n; i++)
        if (vs->v[i].obj) PyBuffer_Release(&vs->v[i]);
}

// Acquires vs->v[i] from objs[i] (None: left empty, obj NULL) with the given formats. On failure
// releases what it had, keeps the message in vs->error (for an agreed refusal), clears the
// exception and returns -1.
static int views_get(views *vs, int n, PyObject *const *objs, const char *const *what, const char *const *formats,
                     const int *writable) {
    memset(vs, 0, sizeof *vs);
    vs->n = n;
    for (int i = 0; i < n; i++) {
        if (objs[i] == Py_None) continue;
        if (ember_py_buffer(objs[i], what[i], formats[i], writable[i], &vs->v[i]) != 0) {
            vs->v[i].obj = NULL;
            ember_py_take_error(vs->error, sizeof vs->error); // without its " (rank R)": added again
            views_release(vs);
            return -1;
        }
    }
    return 0;
}

// ---- forward / backward -----------------------------------------------------------------------

static PyObject *losses_dict(const ember_lfq_losses *L) {
    return Py_BuildValue("{s:d,s:d,s:d,s:d,s:d,s:L,s:L}", "aux", L->aux, "entropy", L->entropy,
                         "per_sample_entropy", L->per_sample_entropy, "codebook_entropy", L->codebook_entropy,
                         "commitment", L->commitment, "tokens", (long long)L->tokens, "entropy_tokens",
                         (long long)L->entropy_tokens);
}

static PyObject *forward_locked(LFQObject *self, views *vs, int ok, int training) {
    const int collective = training && self->comm;
    const char *what[4] = {"LFQ.forward: x", "LFQ.forward: mask", "LFQ.forward: out", "LFQ.forward: indices"};
    Py_buffer *v = vs->v;
    char s1[96];
    if (!ok) return refuse(self, collective, EMBER_ERR_INVALID_ARG, "%s", vs->error);
    if (!v[0].obj || !v[2].obj || !v[3].obj)
        return refuse(self, collective, EMBER_ERR_INVALID_ARG, "LFQ.forward: x, out and indices are required");
    Py_ssize_t d[3] = {0, 0, 0};
    const int nd = dims_of(&v[0], d);
    const Py_ssize_t B = d[0], N = d[1];
    if (nd != 3 || d[2] != self->dim || B < 1 || N < 1 || B > INT32_MAX || N > INT32_MAX)
        return refuse(self, collective, EMBER_ERR_INVALID_ARG,
                      "LFQ.forward: x has shape %s, expected [B, N, dim = %d] with B, N >= 1",
                      shape_str(&v[0], s1, sizeof s1), (int)self->dim);
    Py_ssize_t md[3] = {0, 0, 0};
    if (v[1].obj && (dims_of(&v[1], md) != 2 || md[0] != B || md[1] != N))
        return refuse(self, collective, EMBER_ERR_INVALID_ARG,
                      "LFQ.forward: mask has shape %s, expected [B, N] = (%zd, %zd)", shape_str(&v[1], s1, sizeof s1),
                      B, N);
    for (int i = 2; i < 4; i++) {
        const int32_t last = i == 2 ? self->dim : self->C;
        if (!has_shape3(&v[i], B, N, last))
            return refuse(self, collective, EMBER_ERR_INVALID_ARG, "%s has shape %s, expected (%zd, %zd, %d)", what[i],
                          shape_str(&v[i], s1, sizeof s1), B, N, (int)last);
    }
    ember_lfq_losses L;
    memset(&L, 0, sizeof L);
    ember_status st;
    if (collective) sync_timeout(self);
    Py_BEGIN_ALLOW_THREADS
    st = ember_lfq_forward(self->q, v[0].buf, (int32_t)B, (int32_t)N, v[1].obj ? (const uint8_t *)v[1].buf : NULL,
                           training != 0, v[2].buf, (int64_t *)v[3].buf, &L);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) {
        // The saved state survives a refused forward, but not a broken communicator.
        if (st == EMBER_ERR_COMM || st == EMBER_ERR_TIMEOUT) self->saved_B = self->saved_N = 0;
        return raise_st(self, st);
    }
    if (training) {
        self->saved_B = (int32_t)B;
        self->saved_N = (int32_t)N;
    }
    return losses_dict(&L);
}

// forward(x, mask, training, out, indices) -> losses dict (ember_lfq_forward). x [B, N, dim] of
// the module dtype, mask [B, N] uint8 or None, out [B, N, dim] and indices [B, N, C] int64
// writable. Collective on the module's comm in training.
static PyObject *LFQ_forward(LFQObject *self, PyObject *args, PyObject *kwds) {
    static const char *const kwlist[] = {"x", "mask", "training", "out", "indices", NULL};
    PyObject *objs[4] = {Py_None, Py_None, Py_None, Py_None};
    int training = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOpOO:forward", (char **)kwlist, &objs[0], &objs[1], &training,
                                     &objs[2], &objs[3]))
        return NULL;
    const char *ff = float_format(self);
    const char *what[4] = {"LFQ.forward: x", "LFQ.forward: mask", "LFQ.forward: out", "LFQ.forward: indices"};
    const char *formats[4] = {ff, "B", ff, "q"};
    const int writable[4] = {0, 0, 1, 1};
    views vs;
    const int ok = views_get(&vs, 4, objs, what, formats, writable) == 0;
    if (!enter(self, "LFQ.forward")) {
        views_release(&vs);
        return NULL;
    }
    PyObject *r = forward_locked(self, &vs, ok, training);
    views_release(&vs);
    return leave(self, r);
}

static PyObject *backward_locked(LFQObject *self, views *vs, int ok, double grad_aux) {
    const int collective = self->comm != NULL;
    const char *what[2] = {"LFQ.backward: grad_out", "LFQ.backward: grad_x"};
    Py_buffer *v = vs->v;
    char s1[96];
    if (self->saved_B == 0)
        return refuse(self, collective, EMBER_ERR_STATE,
                      "LFQ.backward: no training forward to differentiate (forward with training=True first)");
    if (!ok) return refuse(self, collective, EMBER_ERR_INVALID_ARG, "%s", vs->error);
    for (int i = 0; i < 2; i++)
        if (v[i].obj && !has_shape3(&v[i], self->saved_B, self->saved_N, self->dim))
            return refuse(self, collective, EMBER_ERR_INVALID_ARG,
                          "%s has shape %s, expected (%d, %d, %d) as the last training forward's x", what[i],
                          shape_str(&v[i], s1, sizeof s1), (int)self->saved_B, (int)self->saved_N, (int)self->dim);
    ember_status st;
    if (collective) sync_timeout(self);
    Py_BEGIN_ALLOW_THREADS
    st = ember_lfq_backward(self->q, v[0].obj ? v[0].buf : NULL, grad_aux, v[1].obj ? v[1].buf : NULL);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) return raise_st(self, st);
    Py_RETURN_NONE;
}

// backward(grad_out or None, grad_aux, grad_x or None) (ember_lfq_backward): shapes those of the
// last training forward. Collective on the module's comm.
static PyObject *LFQ_backward(LFQObject *self, PyObject *args, PyObject *kwds) {
    static const char *const kwlist[] = {"grad_out", "grad_aux", "grad_x", NULL};
    PyObject *objs[2] = {Py_None, Py_None};
    double grad_aux = 1.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OdO:backward", (char **)kwlist, &objs[0], &grad_aux, &objs[1]))
        return NULL;
    const char *what[2] = {"LFQ.backward: grad_out", "LFQ.backward: grad_x"};
    const char *formats[2] = {float_format(self), float_format(self)};
    const int writable[2] = {0, 1};
    views vs;
    const int ok = views_get(&vs, 2, objs, what, formats, writable) == 0;
    if (!enter(self, "LFQ.backward")) {
        views_release(&vs);
        return NULL;
    }
    PyObject *r = backward_locked(self, &vs, ok, grad_aux);
    views_release(&vs);
    return leave(self, r);
}

static PyObject *decode_locked(LFQObject *self, views *vs, int project_out) {
    Py_buffer *v = vs->v;
    const int64_t width = project_out && self->proj ? self->dim : (int64_t)self->C * self->D;
    Py_ssize_t di[3], dc[3];
    const int ni = dims_of(&v[0], di), nc = dims_of(&v[1], dc);
    if (ni != 2 || di[1] != self->C || nc != 2 || dc[0] != di[0] || dc[1] != width) {
        char s1[96], s2[96];
        return refuse(self, 0, EMBER_ERR_INVALID_ARG,
                      "LFQ.indices_to_codes: indices %s and codes %s, expected [n, C = %d] and [n, %lld]",
                      shape_str(&v[0], s1, sizeof s1), shape_str(&v[1], s2, sizeof s2), (int)self->C,
                      (long long)width);
    }
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_lfq_indices_to_codes(self->q, (const int64_t *)v[0].buf, (int64_t)di[0], project_out != 0, v[1].buf);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) return raise_st(self, st);
    Py_RETURN_NONE;
}

// indices_to_codes(indices [n, C] int64, project_out, codes [n, width] writable). Local.
static PyObject *LFQ_indices_to_codes(LFQObject *self, PyObject *args, PyObject *kwds) {
    static const char *const kwlist[] = {"indices", "project_out", "codes", NULL};
    PyObject *objs[2] = {Py_None, Py_None};
    int project_out = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OpO:indices_to_codes", (char **)kwlist, &objs[0], &project_out,
                                     &objs[1]))
        return NULL;
    if (objs[0] == Py_None || objs[1] == Py_None)
        return ember_py_error(EMBER_ERR_INVALID_ARG, msg_rank(self),
                              "LFQ.indices_to_codes: indices and codes are required");
    const char *what[2] = {"LFQ.indices_to_codes: indices", "LFQ.indices_to_codes: codes"};
    const char *formats[2] = {"q", float_format(self)};
    const int writable[2] = {0, 1};
    views vs;
    if (views_get(&vs, 2, objs, what, formats, writable) != 0)
        return ember_py_error(EMBER_ERR_INVALID_ARG, msg_rank(self), "%s", vs.error);
    if (!enter(self, "LFQ.indices_to_codes")) {
        views_release(&vs);
        return NULL;
    }
    PyObject *r = decode_locked(self, &vs, project_out);
    views_release(&vs);
    return leave(self, r);
}

// ---- parameters, gradients, settings ----------------------------------------------------------

// tensor(grad, id) -> an _LFQTensor exporting the parameter (grad false) or its gradient, or None
// when the configuration has no such parameter. Local.
static PyObject *LFQ_tensor(LFQObject *self, PyObject *args) {
    int grad = 0, id = 0;
    if (!PyArg_ParseTuple(args, "pi:tensor", &grad, &id)) return NULL;
    if (id < 0 || id >= EMBER_LFQ_NUM_PARAMS)
        return ember_py_error(EMBER_ERR_INVALID_ARG, msg_rank(self), "LFQ.tensor: parameter id %d outside [0, %d)",
                              id, (int)EMBER_LFQ_NUM_PARAMS);
    if (!enter(self, "LFQ.tensor")) return NULL;
    int64_t numel = 0;
    const int present = ember_lfq_param(self->q, (ember_lfq_param_id)id, &numel) != NULL;
    leave(self, NULL);
    if (!present) Py_RETURN_NONE;
    const Py_ssize_t CD = (Py_ssize_t)self->C * self->D, dim = self->dim;
    const Py_ssize_t esz = self->f64 ? (Py_ssize_t)sizeof(double) : (Py_ssize_t)sizeof(float);
    TensorObject *t = PyObject_New(TensorObject, &TensorType);
    if (!t) return NULL;
    t->owner = (LFQObject *)Py_NewRef((PyObject *)self);
    t->grad = grad;
    t->id = id;
    switch (id) {
    case EMBER_LFQ_PROJ_IN_WEIGHT: t->ndim = 2, t->shape[0] = CD, t->shape[1] = dim; break;
    case EMBER_LFQ_PROJ_IN_BIAS: t->ndim = 1, t->shape[0] = CD, t->shape[1] = 1; break;
    case EMBER_LFQ_PROJ_OUT_WEIGHT: t->ndim = 2, t->shape[0] = dim, t->shape[1] = CD; break;
    default: t->ndim = 1, t->shape[0] = dim, t->shape[1] = 1; break;
    }
    t->strides[1] = esz;
    t->strides[0] = t->ndim == 2 ? esz * t->shape[1] : esz;
    if (t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1) != (Py_ssize_t)numel) { // header and binding disagree
        Py_DECREF(t);
        return ember_py_error(EMBER_ERR_STATE, msg_rank(self),
                              "LFQ.tensor: %s has %lld elements, not its documented shape's",
                              ember_lfq_param_name((ember_lfq_param_id)id), (long long)numel);
    }
    return (PyObject *)t;
}

static PyObject *LFQ_param_name(PyObject *Py_UNUSED(cls), PyObject *arg) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    const char *name = id >= 0 && id < EMBER_LFQ_NUM_PARAMS ? ember_lfq_param_name((ember_lfq_param_id)id) : NULL;
    if (!name) return ember_py_invalid("LFQ.param_name: unknown parameter id %ld", id);
    return PyUnicode_FromString(name);
}

static PyObject *LFQ_zero_grad(LFQObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!enter(self, "LFQ.zero_grad")) return NULL;
    ember_status st = ember_lfq_zero_grad(self->q);
    return leave(self, st == EMBER_OK ? Py_NewRef(Py_None) : raise_st(self, st));
}

// allreduce_grads(convention: 0 mean, 1 sum). Collective on the module's comm.
static PyObject *LFQ_allreduce_grads(LFQObject *self, PyObject *arg) {
    long conv = PyLong_AsLong(arg);
    if (conv == -1 && PyErr_Occurred()) return NULL;
    if (!enter(self, "LFQ.allreduce_grads")) return NULL;
    // ember_lfq_allreduce_grads refuses an unknown convention before any agreement; agreeing here
    // keeps the other ranks (in ember_comm_allreduce_grads' agreement) from waiting.
    if (conv != EMBER_GRAD_MEAN && conv != EMBER_GRAD_SUM)
        return leave(self, refuse(self, 1, EMBER_ERR_INVALID_ARG,
                                  "LFQ.allreduce_grads: unknown gradient convention %ld", conv));
    sync_timeout(self);
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_lfq_allreduce_grads(self->q, (ember_grad_convention)conv);
    Py_END_ALLOW_THREADS
    return leave(self, st == EMBER_OK ? Py_NewRef(Py_None) : raise_st(self, st));
}

// refuse(status, message, collective): the Python layer's refusal, recorded on the context and,
// when collective with a comm, agreed where the library call it replaces agrees first. Raises.
static PyObject *LFQ_refuse(LFQObject *self, PyObject *args) {
    int code = 0, collective = 0;
    const char *message = NULL;
    if (!PyArg_ParseTuple(args, "isp:refuse", &code, &message, &collective)) return NULL;
    ember_status st = (ember_status)code;
    if (code >= 0 || strcmp(ember_status_name(st), "UNKNOWN") == 0) st = EMBER_ERR_INVALID_ARG;
    if (!enter(self, "LFQ")) return NULL;
    return leave(self, refuse(self, collective, st, "%s", message));
}

static PyObject *LFQ_set_inv_temperature(LFQObject *self, PyObject *arg) {
    double tau = PyFloat_AsDouble(arg);
    if (tau == -1.0 && PyErr_Occurred()) return NULL;
    if (!enter(self, "LFQ.set_inv_temperature")) return NULL;
    ember_status st = ember_lfq_set_inv_temperature(self->q, tau);
    return leave(self, st == EMBER_OK ? Py_NewRef(Py_None) : raise_st(self, st));
}

static PyObject *LFQ_set_seed(LFQObject *self, PyObject *arg) {
    unsigned long long seed = PyLong_AsUnsignedLongLong(arg);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return ember_py_error(EMBER_ERR_INVALID_ARG, msg_rank(self),
                              "LFQ.set_seed: the seed must be an integer in [0, 2^64)");
    }
    if (!enter(self, "LFQ.set_seed")) return NULL;
    ember_status st = ember_lfq_set_seed(self->q, (uint64_t)seed);
    return leave(self, st == EMBER_OK ? Py_NewRef(Py_None) : raise_st(self, st));
}

// The resolved configuration (ember_lfq_get_config) as a dict, enums by name, plus codebook_dim.
static PyObject *LFQ_config(LFQObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!enter(self, "LFQ.config")) return NULL;
    const ember_lfq_config *c = ember_lfq_get_config(self->q);
    PyObject *r = Py_BuildValue(
        "{s:i,s:i,s:i,s:d,s:d,s:d,s:d,s:d,s:s,s:O,s:d,s:O,s:O,s:d,s:d,s:s,s:s,s:K,s:L,s:i}", "dim", (int)c->dim,
        "codebook_size", (int)c->codebook_size, "num_codebooks", (int)c->num_codebooks, "codebook_scale",
        c->codebook_scale, "entropy_loss_weight", c->entropy_loss_weight, "commitment_loss_weight",
        c->commitment_loss_weight, "diversity_gamma", c->diversity_gamma, "inv_temperature", c->inv_temperature,
        "projection", ember_lfq_projection_name(c->projection), "projection_has_bias",
        c->projection_has_bias ? Py_True : Py_False, "soft_clamp_input_value", c->soft_clamp_input_value, "spherical",
        c->spherical ? Py_True : Py_False, "softplus_entropy_loss", c->softplus_entropy_loss ? Py_True : Py_False,
        "entropy_loss_offset", c->entropy_loss_offset, "frac_per_sample_entropy", c->frac_per_sample_entropy,
        "dist_mean", ember_lfq_dist_mean_name(c->dist_mean), "dtype",
        c->dtype == EMBER_DTYPE_F64 ? "float64" : "float32", "seed", (unsigned long long)c->seed, "max_tokens",
        (long long)c->max_tokens, "codebook_dim", (int)self->D);
    return leave(self, r);
}

static PyObject *LFQ_get_bytes_outstanding(LFQObject *self, void *Py_UNUSED(closure)) {
    if (!self->lock) return PyLong_FromSize_t(0);
    ember_py_lock(self->lock);
    const size_t n = self->ctx ? ember_ctx_bytes_outstanding(self->ctx) : self->final_bytes;
    return leave(self, PyLong_FromSize_t(n));
}

static PyObject *LFQ_get_saved_shape(LFQObject *self, void *Py_UNUSED(closure)) {
    if (self->saved_B == 0) Py_RETURN_NONE;
    return Py_BuildValue("(ii)", (int)self->saved_B, (int)self->saved_N);
}

static PyObject *LFQ_get_closed(LFQObject *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->closed || !self->q);
}

static PyObject *LFQ_get_rank(LFQObject *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLong(self->comm ? ember_comm_rank(self->comm) : 0);
}

static PyObject *LFQ_get_size(LFQObject *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLong(self->comm ? ember_comm_size(self->comm) : 1);
}

static PyMethodDef LFQ_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))LFQ_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(x, mask, training, out, indices) -> losses dict (ember_lfq_forward)"},
    {"backward", (PyCFunction)(void (*)(void))LFQ_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(grad_out, grad_aux, grad_x) (ember_lfq_backward)"},
    {"indices_to_codes", (PyCFunction)(void (*)(void))LFQ_indices_to_codes, METH_VARARGS | METH_KEYWORDS,
     "indices_to_codes(indices, project_out, codes) (ember_lfq_indices_to_codes)"},
    {"tensor", (PyCFunction)LFQ_tensor, METH_VARARGS, "tensor(grad, id) -> buffer exporter or None"},
    {"param_name", (PyCFunction)LFQ_param_name, METH_O | METH_STATIC, "param_name(id) -> str"},
    {"zero_grad", (PyCFunction)LFQ_zero_grad, METH_NOARGS, "zero_grad() (ember_lfq_zero_grad)"},
    {"allreduce_grads", (PyCFunction)LFQ_allreduce_grads, METH_O, "allreduce_grads(convention: 0 mean, 1 sum)"},
    {"refuse", (PyCFunction)LFQ_refuse, METH_VARARGS, "refuse(status, message, collective): raises, agreed"},
    {"set_inv_temperature", (PyCFunction)LFQ_set_inv_temperature, METH_O, "set_inv_temperature(tau)"},
    {"set_seed", (PyCFunction)LFQ_set_seed, METH_O, "set_seed(seed)"},
    {"config", (PyCFunction)LFQ_config, METH_NOARGS, "config() -> the resolved configuration"},
    {"close", (PyCFunction)LFQ_close, METH_NOARGS, "close(): frees the module (its memory once no array shares it)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef LFQ_getset[] = {
    {"bytes_outstanding", (getter)LFQ_get_bytes_outstanding, NULL,
     "bytes held by the module's context (after it is freed: what it still held then)", NULL},
    {"saved_shape", (getter)LFQ_get_saved_shape, NULL, "(B, N) of the last training forward, or None", NULL},
    {"closed", (getter)LFQ_get_closed, NULL, "whether the module is closed (or was never created)", NULL},
    {"rank", (getter)LFQ_get_rank, NULL, "rank in the module's communicator (0 without)", NULL},
    {"size", (getter)LFQ_get_size, NULL, "ranks in the module's communicator (1 without)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LFQType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember._LFQ",
    .tp_basicsize = sizeof(LFQObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C half of ember.LFQ (ember/lfq.h); use ember.LFQ.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LFQ_init,
    .tp_dealloc = (destructor)LFQ_dealloc,
    .tp_methods = LFQ_methods,
    .tp_getset = LFQ_getset,
};

// ---- _LFQTensor: a parameter or gradient exported to numpy ------------------------------------

static int Tensor_getbuffer(TensorObject *self, Py_buffer *view, int flags) {
    LFQObject *o = self->owner;
    if (!o->q || o->closed) {
        PyErr_SetString(PyExc_BufferError, "LFQ: the module is closed");
        view->obj = NULL;
        return -1;
    }
    int64_t numel = 0;
    void *p = self->grad ? ember_lfq_grad(o->q, (ember_lfq_param_id)self->id, &numel)
                         : ember_lfq_param(o->q, (ember_lfq_param_id)self->id, &numel);
    const Py_ssize_t esz = self->strides[self->ndim - 1];
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && self->ndim == 2 && self->shape[0] > 1 &&
        self->shape[1] > 1) {
        PyErr_SetString(PyExc_BufferError, "LFQ: parameters are C-contiguous (row-major), not Fortran-contiguous");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, p, (Py_ssize_t)numel * esz, 0, flags) != 0) return -1;
    view->format = (flags & PyBUF_FORMAT) ? (char *)(esz == (Py_ssize_t)sizeof(double) ? "d" : "f") : NULL;
    if ((flags & PyBUF_ND) == PyBUF_ND) { // else a flat view of bytes, as PyBuffer_FillInfo made it
        view->itemsize = esz;
        view->ndim = self->ndim;
        view->shape = self->shape;
        view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    }
    o->exports++;
    return 0;
}

static void Tensor_releasebuffer(TensorObject *self, Py_buffer *Py_UNUSED(view)) {
    LFQObject *o = self->owner;
    if (--o->exports == 0 && o->closed && !o->closing) free_all(o);
}

static void Tensor_dealloc(TensorObject *self) {
    Py_CLEAR(self->owner);
    PyObject_Free(self);
}

static PyBufferProcs Tensor_as_buffer = {
    .bf_getbuffer = (getbufferproc)Tensor_getbuffer,
    .bf_releasebuffer = (releasebufferproc)Tensor_releasebuffer,
};

static PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember._LFQTensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A parameter or gradient of an LFQ module, shared through the buffer protocol.",
    .tp_dealloc = (destructor)Tensor_dealloc,
    .tp_as_buffer = &Tensor_as_buffer,
};

int ember_py_lfq_add(PyObject *module) {
    if (PyType_Ready(&LFQType) < 0 || PyType_Ready(&TensorType) < 0) return -1;
    if (PyModule_AddObject(module, "_LFQ", Py_NewRef((PyObject *)&LFQType)) < 0) {
        Py_DECREF(&LFQType);
        return -1;
    }
    if (PyModule_AddObject(module, "_LFQTensor", Py_NewRef((PyObject *)&TensorType)) < 0) {
        Py_DECREF(&TensorType);
        return -1;
    }
    return 0;
}
