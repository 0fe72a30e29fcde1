// python/src/kjt.c — configurations and KJTs from the Python layer's arguments (internal.h).
#include <string.h>

#include "internal.h"

int ember_py_config_parse(PyObject *tables, PyObject *features, ember_py_config *out) {
    memset(out, 0, sizeof *out);
    PyObject *tseq = PySequence_Fast(tables, "tables: expected a sequence of table tuples");
    if (!tseq) return -1;
    PyObject *fseq = PySequence_Fast(features, "features: expected a sequence of (name, table) tuples");
    if (!fseq) {
        Py_DECREF(tseq);
        return -1;
    }
    const Py_ssize_t T = PySequence_Fast_GET_SIZE(tseq), F = PySequence_Fast_GET_SIZE(fseq);
    if (T > INT32_MAX || F > INT32_MAX) {
        ember_py_invalid("tables: %zd tables and %zd features exceed the int32 counts", T, F);
        goto fail;
    }
    out->tables = PyMem_Calloc((size_t)T + 1, sizeof *out->tables);
    out->features = PyMem_Calloc((size_t)F + 1, sizeof *out->features);
    if (!out->tables || !out->features) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t t = 0; t < T; t++) {
        ember_table_config *c = &out->tables[t];
        *c = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
        long long rows = 0;
        int dim = 0, pooling = 0, dtype = 0, init = 0, optim = 0, wd_mode = 0, sr = 0, policy = 0;
        long long cache_rows = 0;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(tseq, t), "sLiiiifffifffffifffiLi;a table tuple", &c->name,
                              &rows, &dim, &pooling, &dtype, &init, &c->init.a, &c->init.b, &c->init.std, &optim,
                              &c->optim.lr, &c->optim.eps, &c->optim.beta1, &c->optim.beta2, &c->optim.weight_decay,
                              &wd_mode, &c->optim.initial_accumulator, &c->optim.momentum, &c->optim.eta, &sr,
                              &cache_rows, &policy)) {
            // An integer too large for its C field, most likely: the library's kind of error.
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyObject *s = value ? PyObject_Str(value) : NULL;
            ember_py_invalid("table %zd: %s", t, s ? PyUnicode_AsUTF8(s) : "malformed configuration");
            Py_XDECREF(s);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            goto fail;
        }
        c->rows = rows;
        c->dim = dim;
        c->pooling = (ember_pooling)pooling;
        c->dtype = (ember_dtype)dtype;
        c->init.kind = (ember_init_kind)init;
        c->optim.kind = (ember_optim_kind)optim;
        c->optim.weight_decay_mode = (ember_weight_decay_mode)wd_mode;
        c->stochastic_rounding = sr;
        c->cache_rows = cache_rows;
        c->cache_policy = (ember_evict_policy)policy;
    }
    for (Py_ssize_t f = 0; f < F; f++) {
        ember_feature_config *c = &out->features[f];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fseq, f), "si;a feature tuple (name, table)", &c->name,
                              &c->table))
            goto fail;
    }
    Py_DECREF(tseq);
    Py_DECREF(fseq);
    out->cfg = (ember_ebc_config)EMBER_EBC_CONFIG_DEFAULT;
    out->cfg.tables = out->tables;
    out->cfg.num_tables = (int32_t)T;
    out->cfg.features = out->features;
    out->cfg.num_features = (int32_t)F;
    return 0;
fail:
    Py_DECREF(tseq);
    Py_DECREF(fseq);
    ember_py_config_free(out);
    return -1;
}

void ember_py_config_free(ember_py_config *c) {
    PyMem_Free(c->tables);
    PyMem_Free(c->features);
    c->tables = NULL;
    c->features = NULL;
}

void ember_py_kjt_release(ember_py_kjt *k) {
    for (int i = 0; i < 4; i++)
        if (k->held[i]) {
            PyBuffer_Release(&k->views[i]);
            k->held[i] = 0;
        }
}

int ember_py_kjt_get(PyObject *values, PyObject *lengths, PyObject *offsets, PyObject *weights, long long F,
                     long long B, ember_py_kjt *out) {
    memset(out, 0, sizeof *out);
    if (F < 0 || F > INT32_MAX || B < 0 || B > INT32_MAX) {
        ember_py_invalid("KJT: %lld features x batch size %lld outside [0, 2^31)", F, B);
        return -1;
    }
    const long long bags = F * B;
    static const char *what[4] = {"KJT values", "KJT lengths", "KJT offsets", "KJT weights"};
    static const char *fmt[4] = {"q", "i", "q", "f"};
    PyObject *obj[4] = {values, lengths, offsets, weights};
    for (int i = 0; i < 4; i++) {
        if (obj[i] == Py_None) continue;
        if (ember_py_buffer(obj[i], what[i], fmt[i], 0, &out->views[i]) != 0) {
            ember_py_kjt_release(out);
            return -1;
        }
        out->held[i] = 1;
    }
    if (!out->held[0]) {
        ember_py_invalid("KJT values: None (an int64 array of ids is needed, possibly empty)");
        return -1;
    }
    const long long nnz = (long long)(out->views[0].len / 8);
    if (out->held[1] && out->views[1].len / 4 != bags) {
        ember_py_invalid("KJT lengths: %lld entries for %lld features x batch size %lld = %lld bags",
                         (long long)(out->views[1].len / 4), F, B, bags);
        goto fail;
    }
    if (out->held[2] && out->views[2].len / 8 != bags + 1) {
        ember_py_invalid("KJT offsets: %lld entries for %lld bags (F*B + 1 = %lld needed)",
                         (long long)(out->views[2].len / 8), bags, bags + 1);
        goto fail;
    }
    if (!out->held[1] && !out->held[2]) {
        ember_py_invalid("KJT: neither lengths nor offsets given");
        goto fail;
    }
    if (out->held[3] && out->views[3].len / 4 != nnz) {
        ember_py_invalid("KJT weights: %lld entries for %lld values", (long long)(out->views[3].len / 4), nnz);
        goto fail;
    }
    out->kjt.num_features = (int32_t)F;
    out->kjt.batch_size = (int32_t)B;
    out->kjt.values = out->views[0].buf;
    out->kjt.lengths = out->held[1] ? out->views[1].buf : NULL;
    out->kjt.offsets = out->held[2] ? out->views[2].buf : NULL;
    out->kjt.weights = out->held[3] ? out->views[3].buf : NULL;
    out->kjt.nnz = nnz;
    return 0;
fail:
    ember_py_kjt_release(out);
    return -1;
}
