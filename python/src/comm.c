// python/src/comm.c — ember._ember.Comm (an ember_comm on its own context), MPI's initialisation
// and finalisation for Python programs, and the registry of objects holding MPI resources.
//
// MPI: a Comm initialises MPI when nobody has (MPI_Init_thread, MPI_THREAD_SERIALIZED: the GIL
// and the objects' locks serialise ember's calls, a program's own threads may call MPI in turn).
// At interpreter exit (Python's atexit, registered at import) every live object holding an
// ember_comm is closed, then MPI is finalised if and only if this module initialised it: never
// when mpi4py or the embedding program did (they finalise it themselves).
#include "binding.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

static int mpi_initialised_here; // this module called MPI_Init_thread

// ---- Registry of objects holding MPI resources -------------------------------------------------

typedef struct {
    PyObject *obj; // borrowed
    ember_py_closer close;
} tracked;
static tracked *registry;
static Py_ssize_t registry_len, registry_cap;

int ember_py_track(PyObject *obj, ember_py_closer close) {
    if (registry_len == registry_cap) {
        const Py_ssize_t cap = registry_cap ? 2 * registry_cap : 16;
        tracked *r = PyMem_Realloc(registry, (size_t)cap * sizeof *r);
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        registry = r;
        registry_cap = cap;
    }
    registry[registry_len++] = (tracked){obj, close};
    return 0;
}

void ember_py_untrack(PyObject *obj) {
    for (Py_ssize_t i = 0; i < registry_len; i++)
        if (registry[i].obj == obj) {
            registry[i] = registry[--registry_len];
            return;
        }
}

static int mpi_finalized(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    return fin;
}

void ember_py_comm_destroy(ember_comm *comm) {
    if (comm && !mpi_finalized() && !ember_py_timed_out) ember_comm_destroy(comm);
}

// Makes sure MPI is initialised; 0, or -1 with StateError (finalised) / CommunicationError raised.
static int ensure_mpi(void) {
    int init = 0;
    MPI_Initialized(&init);
    if (mpi_finalized()) {
        ember_py_error(EMBER_ERR_STATE, 0, "ember.Comm: MPI is already finalised");
        return -1;
    }
    if (init) return 0;
    int provided = 0, rc;
    Py_BEGIN_ALLOW_THREADS
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
        ember_py_error(EMBER_ERR_COMM, 0, "ember.Comm: MPI_Init_thread failed: %s", text);
        return -1;
    }
    mpi_initialised_here = 1;
    return 0;
}

// _finalize(): closes every tracked object, then finalises MPI if this module initialised it.
// Registered with atexit at import; idempotent.
static PyObject *py_finalize(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    int init = 0;
    MPI_Initialized(&init);
    if (ember_py_timed_out && init && !mpi_finalized()) {
        // MPI_Finalize would progress the collective that timed out, on buffers long gone.
        static const char *streams[] = {"stdout", "stderr"};
        for (int i = 0; i < 2; i++) {
            PyObject *f = PySys_GetObject(streams[i]); // borrowed
            PyObject *r = f && f != Py_None ? PyObject_CallMethod(f, "flush", NULL) : NULL;
            Py_XDECREF(r);
            PyErr_Clear();
        }
        // Not MPI_Abort: its launcher kills every rank at once, and a line still in the launcher's
        // pipe (this rank's or another's) can be lost with it (seen under MPICH). A rank that
        // exits without finalising is counted gone once its output is read to the end, and the
        // launcher then ends the job with a non-zero status (Open MPI and MPICH), as ember's CLI.
        fprintf(stderr,
                "ember (rank %d): a collective missed its deadline earlier in this process; MPI cannot finalise "
                "with it in flight: exiting without finalising (the launcher ends the job)\n",
                ember_py_world_rank());
        fflush(NULL);
        _exit(1);
    }
    while (registry_len > 0) {
        tracked t = registry[registry_len - 1];
        ember_py_untrack(t.obj);
        Py_INCREF(t.obj);
        t.close(t.obj);
        Py_DECREF(t.obj);
    }
    if (mpi_initialised_here && !mpi_finalized()) {
        mpi_initialised_here = 0;
        Py_BEGIN_ALLOW_THREADS
        MPI_Finalize();
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *py_mpi_state(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    int init = 0;
    MPI_Initialized(&init);
    return Py_BuildValue("(iii)", init, mpi_finalized(), mpi_initialised_here);
}

// ---- Comm ------------------------------------------------------------------------------------

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    ember_ctx *ctx;
    ember_comm *comm;
} CommObject;

static PyTypeObject CommType;

static void comm_close_c(CommObject *self) {
    ember_py_comm_destroy(self->comm);
    self->comm = NULL;
    ember_ctx_destroy(self->ctx);
    self->ctx = NULL;
}

static void comm_closer(PyObject *obj) {
    CommObject *self = (CommObject *)obj;
    ember_py_lock(self->lock);
    comm_close_c(self);
    PyThread_release_lock(self->lock);
}

static void comm_dealloc(CommObject *self) {
    ember_py_untrack((PyObject *)self);
    comm_close_c(self);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

// Comm(fortran_handle or None, timeout_s, refusal=None). Collective on the communicator.
// `refusal`: an exception the Python layer raised on this rank for the arguments (a timeout_s that
// is no number): the duplicate is made anyway and the refusal agreed over it, so that every rank
// raises it (nothing is left waiting in the duplication) and no Comm is returned anywhere.
static PyObject *comm_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *handle, *refusal = Py_None;
    double timeout;
    if (kwds && PyDict_Size(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "Comm takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "Od|O", &handle, &timeout, &refusal)) return NULL;
    long long fint = 0;
    if (handle != Py_None) {
        fint = PyLong_AsLongLong(handle);
        if (fint == -1 && PyErr_Occurred()) return NULL;
    }
    if (ensure_mpi() != 0) return NULL;
    MPI_Comm mc = handle == Py_None ? MPI_COMM_WORLD : MPI_Comm_f2c((MPI_Fint)fint);
    if (mc == MPI_COMM_NULL) return ember_py_invalid("ember.Comm: the MPI communicator is MPI_COMM_NULL");
    CommObject *self = (CommObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (ember_py_ctx_create(0, &self->ctx) != 0) {
        Py_DECREF(self);
        return NULL;
    }
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_comm_create(self->ctx, mc, &self->comm);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK) {
        ember_py_raise(self->ctx, st);
        Py_DECREF(self);
        return NULL;
    }
    // The deadline is local, but a rank refusing it (or its Python-side refusal) must not leave
    // the others with a Comm.
    if (refusal != Py_None) {
        if (ember_py_set_pending(refusal) <= 0) { // not an exception: agreed as INVALID_ARG
            PyErr_Clear();
            ember_py_invalid("ember.Comm: refused arguments");
        }
        ember_py_agree(self->comm, self->ctx); // fails (this rank refuses) and raises the agreed error
        Py_DECREF(self);
        return NULL;
    }
    st = ember_comm_set_timeout(self->comm, timeout);
    Py_BEGIN_ALLOW_THREADS
    st = ember_comm_agree(self->comm, st);
    Py_END_ALLOW_THREADS
    if (st != EMBER_OK || ember_py_track((PyObject *)self, comm_closer) != 0) {
        if (st != EMBER_OK) ember_py_raise(self->ctx, st);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

// Takes the lock and checks the object is open; -1 with StateError (unlocked) otherwise.
static int comm_enter(CommObject *self) {
    ember_py_lock(self->lock);
    if (!self->comm) {
        PyThread_release_lock(self->lock);
        ember_py_closed("ember.Comm");
        return -1;
    }
    ember_ctx_clear_error(self->ctx);
    return 0;
}

static void comm_leave(CommObject *self) { PyThread_release_lock(self->lock); }

int ember_py_comm_agree_obj(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &CommType)) {
        PyErr_SetString(PyExc_TypeError, "expected an ember._ember.Comm");
        return -1;
    }
    CommObject *self = (CommObject *)obj;
    // The pending exception (if any) waits while the lock is taken: nothing under it calls Python.
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (comm_enter(self) != 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return -1;
    }
    PyErr_Restore(type, value, tb);
    const int rc = ember_py_agree(self->comm, self->ctx);
    comm_leave(self);
    return rc;
}

// agree(exc or None): the Python layer's agreement of a collective call's outcome. Every rank
// calls it (or a collective method, which agrees first) once; raises the agreed error.
static PyObject *comm_agree(CommObject *self, PyObject *exc) {
    if (ember_py_set_pending(exc) < 0) return NULL;
    return ember_py_comm_agree_obj((PyObject *)self) == 0 ? Py_NewRef(Py_None) : NULL;
}

static PyObject *comm_barrier(CommObject *self, PyObject *args) {
    (void)args;
    if (comm_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    if (ember_py_agree(self->comm, self->ctx) == 0) {
        ember_status st;
        Py_BEGIN_ALLOW_THREADS
        st = ember_comm_barrier(self->comm);
        Py_END_ALLOW_THREADS
        ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    }
    comm_leave(self);
    return ret;
}

// allreduce_grads(array, convention): float32 or float64, C-contiguous, writable; in place.
static PyObject *comm_allreduce_grads(CommObject *self, PyObject *args) {
    PyObject *arr;
    int conv;
    if (!PyArg_ParseTuple(args, "Oi", &arr, &conv)) return NULL;
    Py_buffer v;
    int held = 0, f64 = 0;
    // Pick the function by the array's item size; ember_py_buffer checks the rest.
    Py_buffer probe;
    if (PyObject_GetBuffer(arr, &probe, PyBUF_FORMAT) == 0) {
        f64 = probe.itemsize == 8;
        PyBuffer_Release(&probe);
    } else {
        PyErr_Clear();
    }
    if (ember_py_buffer(arr, "allreduce_grads: array", f64 ? "d" : "f", 1, &v) == 0) held = 1;
    // A refusal here is agreed like the Python layer's: every rank raises it.
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (comm_enter(self) != 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        if (held) PyBuffer_Release(&v);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    PyObject *ret = NULL;
    if (ember_py_agree(self->comm, self->ctx) == 0) {
        ember_status st;
        const size_t n = (size_t)(v.len / v.itemsize);
        Py_BEGIN_ALLOW_THREADS
        st = f64 ? ember_comm_allreduce_grads_f64(self->comm, (ember_grad_convention)conv, v.buf, n)
                 : ember_comm_allreduce_grads(self->comm, (ember_grad_convention)conv, v.buf, n);
        Py_END_ALLOW_THREADS
        ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(self->ctx, st);
    }
    comm_leave(self);
    if (held) PyBuffer_Release(&v);
    return ret;
}

// detect_topology(probe_bytes, reps) -> (host_of list, num_hosts, intra_bw, inter_bw, round_s)
// (ember_plan_detect_topology; the bandwidths and round_s 0 unless probed). Collective.
static PyObject *comm_detect_topology(CommObject *self, PyObject *args) {
    long long probe;
    int reps;
    if (!PyArg_ParseTuple(args, "Li", &probe, &reps)) return NULL;
    if (comm_enter(self) != 0) return NULL;
    PyObject *ret = NULL;
    int32_t *host_of = NULL;
    if (ember_py_agree(self->comm, self->ctx) == 0) {
        const int32_t W = ember_comm_size(self->comm);
        host_of = PyMem_Calloc((size_t)W, sizeof *host_of);
        if (!host_of) {
            PyErr_NoMemory();
        } else {
            int32_t hosts = 0;
            double intra = 0, inter = 0, round_s = 0;
            ember_status st;
            Py_BEGIN_ALLOW_THREADS
            st = ember_plan_detect_topology(self->comm, host_of, &hosts, probe, reps, &intra, &inter, &round_s);
            Py_END_ALLOW_THREADS
            if (st != EMBER_OK) {
                ember_py_raise(self->ctx, st);
            } else {
                PyObject *list = PyList_New(W);
                for (int32_t r = 0; list && r < W; r++) PyList_SET_ITEM(list, r, PyLong_FromLong(host_of[r]));
                if (list) ret = Py_BuildValue("(Nlddd)", list, (long)hosts, intra, inter, round_s);
            }
        }
    }
    PyMem_Free(host_of);
    comm_leave(self);
    return ret;
}

static PyObject *comm_close(CommObject *self, PyObject *args) {
    (void)args;
    ember_py_untrack((PyObject *)self);
    ember_py_lock(self->lock);
    comm_close_c(self);
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *comm_get_rank(CommObject *self, void *closure) {
    (void)closure;
    if (comm_enter(self) != 0) return NULL;
    const int32_t r = ember_comm_rank(self->comm);
    comm_leave(self);
    return PyLong_FromLong(r);
}

static PyObject *comm_get_size(CommObject *self, void *closure) {
    (void)closure;
    if (comm_enter(self) != 0) return NULL;
    const int32_t n = ember_comm_size(self->comm);
    comm_leave(self);
    return PyLong_FromLong(n);
}

static PyObject *comm_get_timeout(CommObject *self, void *closure) {
    (void)closure;
    if (comm_enter(self) != 0) return NULL;
    const double t = ember_comm_timeout(self->comm);
    comm_leave(self);
    return PyFloat_FromDouble(t);
}

static int comm_set_timeout(CommObject *self, PyObject *value, void *closure) {
    (void)closure;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "timeout_s cannot be deleted");
        return -1;
    }
    const double t = PyFloat_AsDouble(value);
    if (t == -1.0 && PyErr_Occurred()) return -1;
    if (comm_enter(self) != 0) return -1;
    ember_status st = ember_comm_set_timeout(self->comm, t);
    if (st != EMBER_OK) ember_py_raise(self->ctx, st);
    comm_leave(self);
    return st == EMBER_OK ? 0 : -1;
}

static PyObject *comm_get_bytes_sent(CommObject *self, void *closure) {
    (void)closure;
    if (comm_enter(self) != 0) return NULL;
    const uint64_t b = ember_comm_bytes_sent(self->comm);
    comm_leave(self);
    return PyLong_FromUnsignedLongLong((unsigned long long)b);
}

static PyObject *comm_get_closed(CommObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->comm == NULL);
}

// The Fortran handle of the library's duplicate (for mpi4py: MPI.Comm.f2py(handle)).
static PyObject *comm_get_fint(CommObject *self, void *closure) {
    (void)closure;
    if (comm_enter(self) != 0) return NULL;
    const MPI_Fint f = MPI_Comm_c2f(ember_comm_mpi(self->comm));
    comm_leave(self);
    return PyLong_FromLong((long)f);
}

static PyMethodDef comm_methods[] = {
    {"agree", (PyCFunction)(void (*)(void))comm_agree, METH_O, NULL},
    {"barrier", (PyCFunction)(void (*)(void))comm_barrier, METH_NOARGS, NULL},
    {"allreduce_grads", (PyCFunction)(void (*)(void))comm_allreduce_grads, METH_VARARGS, NULL},
    {"detect_topology", (PyCFunction)(void (*)(void))comm_detect_topology, METH_VARARGS, NULL},
    {"close", (PyCFunction)(void (*)(void))comm_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef comm_getset[] = {
    {"rank", (getter)(void (*)(void))comm_get_rank, NULL, NULL, NULL},
    {"size", (getter)(void (*)(void))comm_get_size, NULL, NULL, NULL},
    {"timeout_s", (getter)(void (*)(void))comm_get_timeout, (setter)(void (*)(void))comm_set_timeout, NULL, NULL},
    {"bytes_sent", (getter)(void (*)(void))comm_get_bytes_sent, NULL, NULL, NULL},
    {"closed", (getter)(void (*)(void))comm_get_closed, NULL, NULL, NULL},
    {"fint", (getter)(void (*)(void))comm_get_fint, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._ember.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_dealloc = (destructor)(void (*)(void))comm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An ember_comm on its own context; use ember.Comm.",
    .tp_methods = comm_methods,
    .tp_getset = comm_getset,
    .tp_new = comm_new,
};

int ember_py_comm_derive(PyObject *comm_obj, ember_ctx *ctx, ember_comm **out) {
    *out = NULL;
    if (!PyObject_TypeCheck(comm_obj, &CommType)) {
        PyErr_Format(PyExc_TypeError, "expected an ember Comm, got %s", Py_TYPE(comm_obj)->tp_name);
        return -1;
    }
    CommObject *c = (CommObject *)comm_obj;
    if (comm_enter(c) != 0) return -1;
    MPI_Comm mc = ember_comm_mpi(c->comm);
    const double timeout = ember_comm_timeout(c->comm);
    comm_leave(c);
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_comm_create(ctx, mc, out);
    Py_END_ALLOW_THREADS
    if (st == EMBER_OK) st = ember_comm_set_timeout(*out, timeout);
    if (st != EMBER_OK) {
        ember_py_raise(ctx, st);
        ember_py_comm_destroy(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

double ember_py_comm_timeout(PyObject *comm_obj) {
    if (!PyObject_TypeCheck(comm_obj, &CommType)) return -1.0;
    CommObject *c = (CommObject *)comm_obj;
    ember_py_lock(c->lock);
    const double t = c->comm ? ember_comm_timeout(c->comm) : -1.0;
    PyThread_release_lock(c->lock);
    return t;
}

static PyMethodDef comm_module_methods[] = {
    {"_finalize", py_finalize, METH_NOARGS,
     "Closes every object holding an MPI communicator, then finalises MPI if ember initialised it (atexit)."},
    {"mpi_state", py_mpi_state, METH_NOARGS, "(MPI initialised, MPI finalised, initialised by ember)."},
    {NULL, NULL, 0, NULL},
};

int ember_py_comm_add(PyObject *module) {
    if (PyType_Ready(&CommType) != 0) return -1;
    if (PyModule_AddObjectRef(module, "Comm", (PyObject *)&CommType) != 0) return -1;
    if (PyModule_AddFunctions(module, comm_module_methods) != 0) return -1;
    // atexit.register(_ember._finalize): runs before the interpreter tears objects down.
    PyObject *fin = PyObject_GetAttrString(module, "_finalize");
    PyObject *atexit = fin ? PyImport_ImportModule("atexit") : NULL;
    PyObject *r = atexit ? PyObject_CallMethod(atexit, "register", "O", fin) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(atexit);
    Py_XDECREF(fin);
    return r ? 0 : -1;
}
