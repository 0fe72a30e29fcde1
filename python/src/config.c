// python/src/config.c — a collection's configuration from the Python layer's tuples (binding.h:
// ember_py_config), and what the library says of a table's tensors and tiers.
#include "binding.h"

#include <string.h>

// Re-raises the pending exception (PyArg_ParseTuple's, most likely an integer too large for its C
// field: the library's kind of error) as InvalidArgumentError naming table t.
static void refuse_table_tuple(Py_ssize_t t) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *text = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!text) PyErr_Clear();
    ember_py_invalid("table %zd: %s", t, text ? text : "malformed configuration");
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

// Table t's configuration from its tuple (binding.h); 0, or -1 with InvalidArgumentError.
static int table_from_tuple(PyObject *tuple, Py_ssize_t t, ember_table_config *c) {
    *c = (ember_table_config)EMBER_TABLE_CONFIG_DEFAULT;
    long long rows = 0, cache_rows = 0, min_count = 0, ttl = 0;
    int dim = 0, pooling = 0, dtype = 0, init = 0, optim = 0, wd_mode = 0, sr = 0, policy = 0;
    int bucket_rows = 0, hash_policy = 0;
    PyObject *hash = Py_None;
    if (!PyArg_ParseTuple(tuple, "sLiiiifffifffffifffiLi|O;a table tuple", &c->name, &rows, &dim, &pooling, &dtype,
                          &init, &c->init.a, &c->init.b, &c->init.std, &optim, &c->optim.lr, &c->optim.eps,
                          &c->optim.beta1, &c->optim.beta2, &c->optim.weight_decay, &wd_mode,
                          &c->optim.initial_accumulator, &c->optim.momentum, &c->optim.eta, &sr, &cache_rows, &policy,
                          &hash) ||
        (hash != Py_None &&
         !PyArg_ParseTuple(hash, "iLiL;a hash tuple (bucket_rows, min_count, policy, ttl_steps)", &bucket_rows,
                           &min_count, &hash_policy, &ttl))) {
        refuse_table_tuple(t);
        return -1;
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
    if (hash != Py_None) {
        c->hash.enabled = 1;
        c->hash.bucket_rows = bucket_rows;
        c->hash.min_count = min_count;
        c->hash.policy = (ember_evict_policy)hash_policy;
        c->hash.ttl_steps = ttl;
    }
    return 0;
}

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
    for (Py_ssize_t t = 0; t < T; t++)
        if (table_from_tuple(PySequence_Fast_GET_ITEM(tseq, t), t, &out->tables[t]) != 0) goto fail;
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

// table_tensors(table tuple) -> [(name, rows, cols, dtype)]: the tensors of a table of this
// configuration, without a collection.
PyObject *ember_py_table_tensors(PyObject *self, PyObject *table) {
    (void)self;
    ember_py_config c;
    PyObject *tables = PyTuple_Pack(1, table);
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

PyObject *ember_py_tier_stats_dict(const ember_tier_stats *x) {
    return Py_BuildValue("{sLsLsLsLsLsLsLsL}", "hits", (long long)x->hits, "misses", (long long)x->misses,
                         "evictions", (long long)x->evictions, "rows_read", (long long)x->rows_read, "rows_written",
                         (long long)x->rows_written, "bytes_read", (long long)x->bytes_read, "bytes_written",
                         (long long)x->bytes_written, "prefetched", (long long)x->prefetched);
}
