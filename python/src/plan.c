// python/src/plan.c — sharding plans: the planner (ember/plan.h), plan descriptions and the
// names of the schemes (ember/shard.h), for ember.plan, ember.describe_plan and ember.TablePlan.
#include "binding.h"

#include <string.h>

void ember_py_plan_free(ember_table_plan *plan, int32_t num_tables) {
    if (!plan) return;
    for (int32_t t = 0; t < num_tables; t++) PyMem_Free(plan[t].ranks);
    PyMem_Free(plan);
}

int ember_py_plan_parse(PyObject *plans, int32_t num_tables, ember_table_plan **out) {
    *out = NULL;
    PyObject *seq = PySequence_Fast(plans, "plan: expected a sequence of table plans");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != num_tables) {
        ember_py_invalid("plan: %zd table plans for %d tables", PySequence_Fast_GET_SIZE(seq), (int)num_tables);
        Py_DECREF(seq);
        return -1;
    }
    ember_table_plan *p = PyMem_Calloc((size_t)num_tables + 1, sizeof *p);
    if (!p) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t t = 0; t < num_tables; t++) {
        int scheme, shards, group;
        PyObject *ranks;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, t), "iiiO;a table plan (scheme, num_shards, group_size, "
                                                                "ranks)",
                              &scheme, &shards, &group, &ranks))
            goto fail;
        PyObject *rseq = PySequence_Fast(ranks, "plan ranks: expected a sequence of ints");
        if (!rseq) goto fail;
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(rseq);
        p[t].scheme = (ember_shard_scheme)scheme;
        p[t].num_shards = shards;
        p[t].group_size = group;
        if (n > INT32_MAX) {
            Py_DECREF(rseq);
            ember_py_invalid("plan: table %d has %zd ranks", (int)t, n);
            goto fail;
        }
        p[t].num_ranks = (int32_t)n;
        p[t].ranks = n ? PyMem_Calloc((size_t)n, sizeof(int32_t)) : NULL;
        if (n && !p[t].ranks) {
            Py_DECREF(rseq);
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            const long r = PyLong_AsLong(PySequence_Fast_GET_ITEM(rseq, i));
            if ((r == -1 && PyErr_Occurred()) || r < INT32_MIN || r > INT32_MAX) {
                PyErr_Clear();
                Py_DECREF(rseq);
                ember_py_invalid("plan: table %d rank %zd is not an int32", (int)t, i);
                goto fail;
            }
            p[t].ranks[i] = (int32_t)r;
        }
        Py_DECREF(rseq);
    }
    Py_DECREF(seq);
    *out = p;
    return 0;
fail:
    Py_DECREF(seq);
    ember_py_plan_free(p, num_tables);
    return -1;
}

PyObject *ember_py_plan_list(const ember_table_plan *plan, int32_t num_tables) {
    PyObject *list = PyList_New(num_tables);
    if (!list) return NULL;
    for (int32_t t = 0; t < num_tables; t++) {
        PyObject *ranks = PyTuple_New(plan[t].num_ranks);
        if (!ranks) {
            Py_DECREF(list);
            return NULL;
        }
        for (int32_t i = 0; i < plan[t].num_ranks; i++) PyTuple_SET_ITEM(ranks, i, PyLong_FromLong(plan[t].ranks[i]));
        PyObject *item = Py_BuildValue("(iiiN)", (int)plan[t].scheme, (int)plan[t].num_shards, (int)plan[t].group_size,
                                       ranks);
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, t, item);
    }
    return list;
}

// plan(tables, features, world_size, batch_size, memory_per_rank, pooling_factor or None, allow,
//      dp_max_bytes) -> (plan list, storage_bytes list, step_bytes list). Local.
static PyObject *py_plan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tables, *features, *pf;
    int world, batch, allow;
    unsigned long long memory, dp_max;
    if (!PyArg_ParseTuple(args, "OOiiKOiK", &tables, &features, &world, &batch, &memory, &pf, &allow, &dp_max))
        return NULL;
    if (world < 1) return ember_py_invalid("plan: world_size %d < 1", world);
    ember_py_config c;
    if (ember_py_config_parse(tables, features, &c) != 0) return NULL;
    Py_buffer pv;
    int have_pf = 0;
    if (pf != Py_None) {
        if (ember_py_buffer(pf, "plan: pooling_factor", "f", 0, &pv) != 0) {
            ember_py_config_free(&c);
            return NULL;
        }
        have_pf = 1;
        if (pv.len / 4 != c.cfg.num_features) {
            ember_py_invalid("plan: pooling_factor has %lld entries for %d features", (long long)(pv.len / 4),
                             (int)c.cfg.num_features);
            PyBuffer_Release(&pv);
            ember_py_config_free(&c);
            return NULL;
        }
    }
    PyObject *ret = NULL;
    ember_ctx *ctx = NULL;
    const int32_t T = c.cfg.num_tables;
    ember_table_plan *plan = PyMem_Calloc((size_t)T + 1, sizeof *plan);
    size_t *storage = PyMem_Calloc((size_t)world, sizeof *storage);
    double *step = PyMem_Calloc((size_t)world, sizeof *step);
    if (!plan || !storage || !step) {
        PyErr_NoMemory();
    } else if (ember_py_ctx_create(1, &ctx) == 0) {
        ember_ctx_set_rank(ctx, ember_py_world_rank());
        ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
        pc.world_size = world;
        pc.batch_size = batch;
        pc.memory_per_rank = (size_t)memory;
        pc.pooling_factor = have_pf ? pv.buf : NULL;
        pc.allow = allow;
        pc.dp_max_bytes = (size_t)dp_max;
        ember_plan_stats stats = {.storage_bytes = storage, .step_bytes = step};
        ember_status st;
        Py_BEGIN_ALLOW_THREADS
        st = ember_plan_create(ctx, &c.cfg, &pc, plan, &stats);
        Py_END_ALLOW_THREADS
        if (st != EMBER_OK) {
            ember_py_raise(ctx, st);
        } else {
            PyObject *pl = ember_py_plan_list(plan, T);
            PyObject *sl = PyList_New(world), *bl = PyList_New(world);
            if (pl && sl && bl) {
                for (int r = 0; r < world; r++) {
                    PyList_SET_ITEM(sl, r, PyLong_FromSize_t(storage[r]));
                    PyList_SET_ITEM(bl, r, PyFloat_FromDouble(step[r]));
                }
                ret = PyTuple_Pack(3, pl, sl, bl);
            }
            Py_XDECREF(pl);
            Py_XDECREF(sl);
            Py_XDECREF(bl);
            ember_plan_release(ctx, plan, T);
        }
        ember_ctx_destroy(ctx);
    }
    PyMem_Free(plan);
    PyMem_Free(storage);
    PyMem_Free(step);
    if (have_pf) PyBuffer_Release(&pv);
    ember_py_config_free(&c);
    return ret;
}

// describe_plan(tables, features, plans) -> str (ember_plan_describe). Local.
static PyObject *py_describe_plan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tables, *features, *plans;
    if (!PyArg_ParseTuple(args, "OOO", &tables, &features, &plans)) return NULL;
    ember_py_config c;
    if (ember_py_config_parse(tables, features, &c) != 0) return NULL;
    ember_table_plan *plan;
    if (ember_py_plan_parse(plans, c.cfg.num_tables, &plan) != 0) {
        ember_py_config_free(&c);
        return NULL;
    }
    const size_t need = ember_plan_describe(&c.cfg, plan, NULL, 0);
    char *buf = PyMem_Malloc(need + 1);
    PyObject *ret = NULL;
    if (!buf) {
        PyErr_NoMemory();
    } else {
        ember_plan_describe(&c.cfg, plan, buf, need + 1);
        ret = PyUnicode_FromString(buf);
        PyMem_Free(buf);
    }
    ember_py_plan_free(plan, c.cfg.num_tables);
    ember_py_config_free(&c);
    return ret;
}

// schemes() -> [(short name, long name, plan fields mask)] by ember_shard_scheme.
static PyObject *py_schemes(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    PyObject *list = PyList_New(EMBER_SHARD_COUNT);
    if (!list) return NULL;
    for (int s = 0; s < EMBER_SHARD_COUNT; s++) {
        PyObject *item = Py_BuildValue("(ssI)", ember_shard_scheme_short_name((ember_shard_scheme)s),
                                       ember_shard_scheme_name((ember_shard_scheme)s),
                                       ember_shard_scheme_plan_fields((ember_shard_scheme)s));
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, s, item);
    }
    return list;
}

// rank_bytes(table tuple, plan tuple, world_size, rank) -> (weight bytes, state bytes). Local.
static PyObject *py_rank_bytes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *table, *plan_tuple;
    int world, rank;
    if (!PyArg_ParseTuple(args, "OOii", &table, &plan_tuple, &world, &rank)) return NULL;
    PyObject *tables = PyTuple_Pack(1, table), *plans = PyTuple_Pack(1, plan_tuple), *features = PyList_New(0);
    PyObject *ret = NULL;
    ember_py_config c;
    ember_table_plan *plan = NULL;
    ember_ctx *ctx = NULL;
    if (tables && plans && features && ember_py_config_parse(tables, features, &c) == 0) {
        if (ember_py_plan_parse(plans, 1, &plan) == 0 && ember_py_ctx_create(1, &ctx) == 0) {
            ember_ctx_set_rank(ctx, ember_py_world_rank());
            size_t w = 0, s = 0;
            ember_status st = ember_shard_rank_bytes(ctx, &c.tables[0], plan, world, rank, &w, &s);
            ret = st == EMBER_OK ? Py_BuildValue("(KK)", (unsigned long long)w, (unsigned long long)s)
                                 : ember_py_raise(ctx, st);
            ember_ctx_destroy(ctx);
        }
        ember_py_plan_free(plan, 1);
        ember_py_config_free(&c);
    }
    Py_XDECREF(tables);
    Py_XDECREF(plans);
    Py_XDECREF(features);
    return ret;
}

// plan_default(scheme, t, dim, world_size, group) -> plan tuple (ember_table_plan_default).
static PyObject *py_plan_default(PyObject *self, PyObject *args) {
    (void)self;
    int scheme, t, dim, world, group;
    if (!PyArg_ParseTuple(args, "iiiii", &scheme, &t, &dim, &world, &group)) return NULL;
    if (world < 1) return ember_py_invalid("plan: world_size %d < 1", world);
    int32_t *ranks = PyMem_Malloc(sizeof(int32_t) * (size_t)world);
    if (!ranks) return PyErr_NoMemory();
    ember_table_plan p;
    const ember_status st = ember_table_plan_default((ember_shard_scheme)scheme, t, dim, world, group, ranks, &p);
    PyObject *out = st == EMBER_OK ? ember_py_plan_list(&p, 1)
                                   : ember_py_invalid("plan: no default placement of table %d (dim %d) under scheme %d "
                                                      "on %d ranks", t, dim, scheme, world);
    PyMem_Free(ranks);
    if (!out || st != EMBER_OK) return out;
    PyObject *item = Py_NewRef(PyList_GET_ITEM(out, 0));
    Py_DECREF(out);
    return item;
}

static PyMethodDef plan_methods[] = {
    {"plan_default", py_plan_default, METH_VARARGS, "ember_table_plan_default of one table; use ember.TablePlan."},
    {"plan", py_plan, METH_VARARGS, "The planner (ember_plan_create); use ember.plan."},
    {"describe_plan", py_describe_plan, METH_VARARGS, "ember_plan_describe; use ember.describe_plan."},
    {"schemes", py_schemes, METH_NOARGS, "[(short name, long name, plan fields)] of every scheme."},
    {"rank_bytes", py_rank_bytes, METH_VARARGS, "ember_shard_rank_bytes of one table."},
    {NULL, NULL, 0, NULL},
};

// The functions, and the bits of schemes()'s plan fields mask (EMBER_PLAN_USES_*).
int ember_py_plan_add(PyObject *module) {
    if (PyModule_AddFunctions(module, plan_methods) != 0) return -1;
    if (PyModule_AddIntConstant(module, "PLAN_USES_RANKS", EMBER_PLAN_USES_RANKS) != 0) return -1;
    if (PyModule_AddIntConstant(module, "PLAN_USES_SHARDS", EMBER_PLAN_USES_SHARDS) != 0) return -1;
    return PyModule_AddIntConstant(module, "PLAN_USES_GROUP", EMBER_PLAN_USES_GROUP);
}
