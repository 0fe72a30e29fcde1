// python/src/dense.c — the dense layer's calls the Python package uses (ember/dense.h): the DLRM
// dot interaction's forward and backward, each on a context of its own for the call.
#include "binding.h"

#include "ember/dense.h"

// Every array a float32 buffer of exactly `n` elements (writable where asked).
static int take(PyObject *obj, const char *what, long long n, int writable, Py_buffer *v) {
    if (ember_py_buffer(obj, what, "f", writable, v) != 0) return -1;
    if (v->len / 4 != n) {
        ember_py_invalid("dot_interaction: %s holds %lld floats, expected %lld", what, (long long)(v->len / 4), n);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

// dot_interaction(backward, num_threads, B, F, D, a, b, c, d): forward a = dense, b = emb,
// c = out, d = t; backward a = t, b = dout, c = ddense, d = demb.
static PyObject *py_dot_interaction(PyObject *mod, PyObject *args) {
    (void)mod;
    int backward, num_threads, F, D;
    long long B;
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "piLiiOOOO", &backward, &num_threads, &B, &F, &D, &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    if (B < 0 || F < 1 || D < 1)
        return ember_py_invalid("dot_interaction: batch %lld, %d features of dim %d", B, F, D);
    const long long R = (long long)F + 1, W = ember_dot_interaction_width(F, D);
    static const char *const fnames[] = {"dense", "emb", "out", "t"};
    static const char *const bnames[] = {"t", "dout", "ddense", "demb"};
    const long long fn[] = {B * D, B * F * D, B * W, B * R * D};
    const long long bn[] = {B * R * D, B * W, B * D, B * F * D};
    Py_buffer v[4];
    int got = 0;
    for (; got < 4; got++)
        if (take(o[got], backward ? bnames[got] : fnames[got], backward ? bn[got] : fn[got], got >= 2, &v[got]) != 0)
            break;
    PyObject *ret = NULL;
    ember_ctx *ctx = NULL;
    if (got == 4 && ember_py_ctx_create(num_threads, &ctx) == 0) {
        ember_ctx_set_rank(ctx, ember_py_world_rank());
        ember_status st;
        Py_BEGIN_ALLOW_THREADS
        st = backward ? ember_dot_interaction_backward(ctx, B, F, D, v[0].buf, v[1].buf, v[2].buf, v[3].buf)
                      : ember_dot_interaction_forward(ctx, B, F, D, v[0].buf, v[1].buf, v[2].buf, v[3].buf);
        Py_END_ALLOW_THREADS
        ret = st == EMBER_OK ? Py_NewRef(Py_None) : ember_py_raise(ctx, st);
        ember_ctx_destroy(ctx);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return ret;
}

static PyMethodDef dense_methods[] = {
    {"dot_interaction", py_dot_interaction, METH_VARARGS,
     "dot_interaction(backward, num_threads, B, F, D, a, b, c, d): ember_dot_interaction_forward "
     "(dense, emb, out, t) or _backward (t, dout, ddense, demb)."},
    {NULL, NULL, 0, NULL},
};

int ember_py_dense_add(PyObject *module) { return PyModule_AddFunctions(module, dense_methods); }
