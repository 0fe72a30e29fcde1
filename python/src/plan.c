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

// The planner's inputs shared by plan() and predict(): pooling factors (a float32 buffer or
// None) and the topology (None, or (host_of sequence or None, ranks_per_host, intra_host_bw,
// inter_host_bw, mem_bw, round_s, disk_bw)), into *pc (world_size and batch_size set by the
// caller). Holds *pv (when *have_pf) and *host_of (PyMem) until plan_inputs_release. 0, or -1
// with the exception set and nothing held.
typedef struct {
    Py_buffer pv;
    int have_pf;
    int32_t *host_of;
} plan_inputs;

static void plan_inputs_release(plan_inputs *in) {
    if (in->have_pf) PyBuffer_Release(&in->pv);
    in->have_pf = 0;
    PyMem_Free(in->host_of);
    in->host_of = NULL;
}

static int plan_inputs_parse(const char *what, PyObject *pf, PyObject *topo, int32_t num_features,
                             ember_plan_config *pc, plan_inputs *in) {
    memset(in, 0, sizeof *in);
    if (pf != Py_None) {
        if (ember_py_buffer(pf, "pooling_factor", "f", 0, &in->pv) != 0) return -1;
        in->have_pf = 1;
        if (in->pv.len / 4 != num_features) {
            ember_py_invalid("%s: pooling_factor has %lld entries for %d features", what,
                             (long long)(in->pv.len / 4), (int)num_features);
            plan_inputs_release(in);
            return -1;
        }
        pc->pooling_factor = in->pv.buf;
    }
    if (topo == Py_None) return 0;
    PyObject *hosts;
    int per_host;
    if (!PyArg_ParseTuple(topo, "Oiddddd;a topology (host_of, ranks_per_host, intra_host_bw, inter_host_bw, mem_bw, "
                                "round_s, disk_bw)",
                          &hosts, &per_host, &pc->intra_host_bw, &pc->inter_host_bw, &pc->mem_bw, &pc->round_s,
                          &pc->disk_bw)) {
        plan_inputs_release(in);
        return -1;
    }
    pc->ranks_per_host = per_host;
    if (hosts == Py_None) return 0;
    PyObject *seq = PySequence_Fast(hosts, "host_of: expected a sequence of ints");
    if (!seq) {
        plan_inputs_release(in);
        return -1;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != pc->world_size) {
        ember_py_invalid("%s: host_of has %zd entries for world_size %d", what, n, (int)pc->world_size);
    } else if (!(in->host_of = PyMem_Calloc((size_t)n + 1, sizeof(int32_t)))) {
        PyErr_NoMemory();
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            const long h = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
            if ((h == -1 && PyErr_Occurred()) || h < INT32_MIN || h > INT32_MAX) {
                PyErr_Clear();
                ember_py_invalid("%s: host_of[%zd] is not an int32", what, i);
                break;
            }
            in->host_of[i] = (int32_t)h;
        }
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        plan_inputs_release(in);
        return -1;
    }
    pc->host_of = in->host_of;
    return 0;
}

// (storage_bytes, step_bytes, step_seconds, inter_bytes) lists of world entries.
static PyObject *stats_tuple(const ember_plan_stats *st, int world) {
    PyObject *l[4] = {PyList_New(world), PyList_New(world), PyList_New(world), PyList_New(world)};
    if (!l[0] || !l[1] || !l[2] || !l[3]) {
        for (int i = 0; i < 4; i++) Py_XDECREF(l[i]);
        return NULL;
    }
    for (int r = 0; r < world; r++) {
        PyList_SET_ITEM(l[0], r, PyLong_FromSize_t(st->storage_bytes[r]));
        PyList_SET_ITEM(l[1], r, PyFloat_FromDouble(st->step_bytes[r]));
        PyList_SET_ITEM(l[2], r, PyFloat_FromDouble(st->step_seconds[r]));
        PyList_SET_ITEM(l[3], r, PyFloat_FromDouble(st->inter_bytes[r]));
    }
    return Py_BuildValue("(NNNN)", l[0], l[1], l[2], l[3]);
}

typedef struct {
    size_t *storage;
    double *step, *seconds, *inter;
} stats_arrays;

static int stats_alloc(stats_arrays *a, int world, ember_plan_stats *st) {
    a->storage = PyMem_Calloc((size_t)world, sizeof *a->storage);
    a->step = PyMem_Calloc((size_t)world, sizeof *a->step);
    a->seconds = PyMem_Calloc((size_t)world, sizeof *a->seconds);
    a->inter = PyMem_Calloc((size_t)world, sizeof *a->inter);
    *st = (ember_plan_stats){a->storage, a->step, a->seconds, a->inter};
    if (a->storage && a->step && a->seconds && a->inter) return 0;
    PyErr_NoMemory();
    return -1;
}

static void stats_free(stats_arrays *a) {
    PyMem_Free(a->storage);
    PyMem_Free(a->step);
    PyMem_Free(a->seconds);
    PyMem_Free(a->inter);
}

// plan(tables, features, world_size, batch_size, memory_per_rank, pooling_factor or None, allow,
//      dp_max_bytes, topology or None[, rank_speed: floats or None]) -> plan list (predict()
//      gives a plan's estimates). Local.
static PyObject *py_plan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tables, *features, *pf, *topo, *speeds = Py_None;
    int world, batch, allow;
    unsigned long long memory, dp_max;
    if (!PyArg_ParseTuple(args, "OOiiKOiKO|O", &tables, &features, &world, &batch, &memory, &pf, &allow, &dp_max, &topo,
                          &speeds))
        return NULL;
    if (world < 1) return ember_py_invalid("plan: world_size %d < 1", world);
    double *speed = NULL;
    if (speeds != Py_None) {
        PyObject *seq = PySequence_Fast(speeds, "plan: rank_speed must be a sequence of numbers");
        if (!seq) return NULL;
        if (PySequence_Fast_GET_SIZE(seq) != world) {
            Py_DECREF(seq);
            return ember_py_invalid("plan: rank_speed has %zd entries, world_size is %d",
                                    PySequence_Fast_GET_SIZE(seq), world);
        }
        if (!(speed = PyMem_Calloc((size_t)world, sizeof(double)))) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        for (int q = 0; q < world && !PyErr_Occurred(); q++) speed[q] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, q));
        Py_DECREF(seq);
        if (PyErr_Occurred()) {
            PyMem_Free(speed);
            return NULL;
        }
    }
    ember_py_config c;
    if (ember_py_config_parse(tables, features, &c) != 0) return NULL;
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = world;
    pc.batch_size = batch;
    pc.memory_per_rank = (size_t)memory;
    pc.allow = allow;
    pc.dp_max_bytes = (size_t)dp_max;
    pc.rank_speed = speed;
    plan_inputs in;
    if (plan_inputs_parse("plan", pf, topo, c.cfg.num_features, &pc, &in) != 0) {
        ember_py_config_free(&c);
        PyMem_Free(speed);
        return NULL;
    }
    PyObject *ret = NULL;
    ember_ctx *ctx = NULL;
    const int32_t T = c.cfg.num_tables;
    ember_table_plan *plan = PyMem_Calloc((size_t)T + 1, sizeof *plan);
    if (!plan) {
        PyErr_NoMemory();
    } else if (ember_py_ctx_create(1, &ctx) == 0) {
        ember_ctx_set_rank(ctx, ember_py_world_rank());
        ember_status st;
        Py_BEGIN_ALLOW_THREADS
        st = ember_plan_create(ctx, &c.cfg, &pc, plan, NULL);
        Py_END_ALLOW_THREADS
        if (st != EMBER_OK) {
            ember_py_raise(ctx, st);
        } else {
            ret = ember_py_plan_list(plan, T);
            ember_plan_release(ctx, plan, T);
        }
        ember_ctx_destroy(ctx);
    }
    PyMem_Free(plan);
    PyMem_Free(speed);
    plan_inputs_release(&in);
    ember_py_config_free(&c);
    return ret;
}

// predict(tables, features, plans, world_size, batch_size, pooling_factor or None, topology or
// None) -> stats tuple (ember_plan_predict). Local.
static PyObject *py_predict(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tables, *features, *plans, *pf, *topo;
    int world, batch;
    if (!PyArg_ParseTuple(args, "OOOiiOO", &tables, &features, &plans, &world, &batch, &pf, &topo)) return NULL;
    if (world < 1) return ember_py_invalid("predict_plan: world_size %d < 1", world);
    ember_py_config c;
    if (ember_py_config_parse(tables, features, &c) != 0) return NULL;
    ember_table_plan *plan;
    if (ember_py_plan_parse(plans, c.cfg.num_tables, &plan) != 0) {
        ember_py_config_free(&c);
        return NULL;
    }
    ember_plan_config pc = EMBER_PLAN_CONFIG_DEFAULT;
    pc.world_size = world;
    pc.batch_size = batch;
    plan_inputs in;
    PyObject *ret = NULL;
    if (plan_inputs_parse("predict_plan", pf, topo, c.cfg.num_features, &pc, &in) == 0) {
        stats_arrays a;
        ember_plan_stats stats;
        ember_ctx *ctx = NULL;
        if (stats_alloc(&a, world, &stats) == 0 && ember_py_ctx_create(1, &ctx) == 0) {
            ember_ctx_set_rank(ctx, ember_py_world_rank());
            ember_status st;
            Py_BEGIN_ALLOW_THREADS
            st = ember_plan_predict(ctx, &c.cfg, &pc, plan, &stats);
            Py_END_ALLOW_THREADS
            ret = st == EMBER_OK ? stats_tuple(&stats, world) : ember_py_raise(ctx, st);
            ember_ctx_destroy(ctx);
        }
        stats_free(&a);
        plan_inputs_release(&in);
    }
    ember_py_plan_free(plan, c.cfg.num_tables);
    ember_py_config_free(&c);
    return ret;
}

// probe_disk(dir: bytes or None, bytes) -> bytes/s (ember_plan_probe_disk). Local.
static PyObject *py_probe_disk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dir_obj;
    long long bytes;
    if (!PyArg_ParseTuple(args, "OL", &dir_obj, &bytes)) return NULL;
    const char *dir = dir_obj == Py_None ? NULL : PyBytes_AsString(dir_obj);
    if (dir_obj != Py_None && !dir) return NULL;
    ember_ctx *ctx = NULL;
    if (ember_py_ctx_create(1, &ctx) != 0) return NULL;
    ember_ctx_set_rank(ctx, ember_py_world_rank());
    double bw = 0;
    ember_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ember_plan_probe_disk(ctx, dir, bytes, &bw);
    Py_END_ALLOW_THREADS
    PyObject *ret = st == EMBER_OK ? PyFloat_FromDouble(bw) : ember_py_raise(ctx, st);
    ember_ctx_destroy(ctx);
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
    {"predict", py_predict, METH_VARARGS, "ember_plan_predict; use ember.predict_plan."},
    {"probe_disk", py_probe_disk, METH_VARARGS, "ember_plan_probe_disk; use ember.probe_disk."},
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
