"""Distributed cases of ember's Python API, run by test_dist.py under mpiexec.

Usage: mpiexec -n W python dist_cases.py CASE [DIR]

Every rank builds the sharded collection and, beside it, a local ember.EmbeddingBagCollection with
the same tables and seed (the single-process reference), feeds its share of a seeded global batch
(uneven shares, a rank with no samples, empty bags, duplicate ids, a one-row table) and checks:
forward outputs against the local collection's forward of the concatenated global batch, and the
tables after backward + several steps (read with root=-1) against the local collection trained on
the global batch. With grad_convention "mean" ember trains J = (1/W) sum_r L_r
(docs/semantics.md §3); rank r's local loss L_r is given the gradient W * G_r, where G_r are the
rows of the global gradient G for its samples, so that dJ/dy = G: the local collection trained
with G is the same objective. With "sum", L_r gets G_r.

Every check is recorded, not raised; at the end of a case the ranks agree on the number of
failures (ember.Comm.allreduce_grads, or mpi4py in the mpi4py case) and every rank exits 1 if any
rank failed, after printing its own failures. An unexpected exception prints its traceback and
ends the job (os._exit), so nothing waits forever; every collective also has a 30 s deadline.

Cases: schemes, conventions, seed_rw_grad, seed_mean, seed_dp_bf16, bad_input, tiered, hashed, mpi4py,
wire, vbe, ckpt_save DIR (W=2), ckpt_load DIR (W=3).
"""
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ember  # noqa: E402
from oracle import (Oracle, assert_close, bf16_bits, bf16_value, feature_rows,  # noqa: E402
                    random_batch, vbe_arrays)

TOL = (2e-5, 1e-4)  # docs/semantics.md §7: distributed vs single process over a few steps
TIMEOUT_S = 30.0

LONG = {"dp": "data_parallel", "tw": "table_wise", "cw": "column_wise", "rw": "row_wise",
        "twrw": "table_row_wise", "grid": "grid_shard"}


def short(scheme):
    for k, v in LONG.items():
        if scheme in (k, v):
            return k
    return scheme


class Run:
    """Per-process state of one case: the communicator, rank, size and the failures so far."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.rank
        self.size = comm.size
        self.failures = []
        self.checks = 0

    def check(self, cond, msg):
        self.checks += 1
        if not cond:
            self.failures.append(msg)
        return bool(cond)

    def close_enough(self, got, want, what, tol=TOL):
        self.checks += 1
        try:
            assert_close(got, want, tol[0], tol[1], what)
            return True
        except AssertionError as e:
            self.failures.append(str(e))
            return False

    def expect_error(self, what, cls, fragments, fn):
        """fn() must raise cls on this rank, its message holding every fragment."""
        self.checks += 1
        try:
            fn()
        except cls as e:
            msg = getattr(e, "message", str(e))
            missing = [f for f in fragments if f not in msg]
            if missing:
                self.failures.append("%s: %s message %r lacks %s" % (what, cls.__name__, msg, missing))
            return e
        except Exception as e:  # the wrong class is a failure, recorded with its message
            self.failures.append("%s: raised %s (%s), want %s" % (what, type(e).__name__, e, cls.__name__))
            return e
        self.failures.append("%s: nothing raised, want %s" % (what, cls.__name__))
        return None


def unaligned(a):
    """A C-contiguous copy of ``a`` one byte off its items' alignment (numpy's flags.aligned False)."""
    u = np.frombuffer(bytearray(a.nbytes + 1), a.dtype, a.size, offset=1).reshape(a.shape)
    u[...] = a
    return u


def total_failures(run, allreduce=None):
    n = np.array([float(len(run.failures))])
    if allreduce is None:
        run.comm.allreduce_grads(n, convention="sum")
        return int(n[0])
    return int(allreduce(int(n[0])))


# ---- tables, plans, batches ------------------------------------------------------------------

def dist_tables(row_norm_optimizer="lamb", dtype2="fp32"):
    """t0 13 x 8 SUM (f0, f1) adam; t1 1 x 4 MEAN (f2) rowwise_adagrad (one row); t2 10 x 6 MEAN
    (f3) sgd; t3 7 x 5 SUM (f4) partial_rowwise_adam; t4 9 x 4 SUM (f5) row_norm_optimizer."""
    T = ember.TableConfig
    u = ("uniform", -0.5, 0.5)
    return [
        T("t0", 13, 8, feature_names=["f0", "f1"], pooling="sum", optimizer="adam", lr=0.02, init=u),
        T("t1", 1, 4, feature_names=["f2"], pooling="mean", optimizer="rowwise_adagrad", lr=0.1,
          initial_accumulator=0.01, init=u),
        T("t2", 10, 6, feature_names=["f3"], pooling="mean", optimizer="sgd", lr=0.1, init=u, dtype=dtype2),
        T("t3", 7, 5, feature_names=["f4"], pooling="sum", optimizer="partial_rowwise_adam", lr=0.02, init=u),
        T("t4", 9, 4, feature_names=["f5"], pooling="sum", optimizer=row_norm_optimizer, lr=0.05, init=u),
    ]


def grid_plan(W, slices=2, group=None):
    group = group or W
    return ember.TablePlan("grid", ranks=tuple((k + c) % W for c in range(slices) for k in range(group)),
                           num_shards=slices, group_size=group)


def plans_for(W, tables):
    """(name, plan argument, tables) of every placement the schemes case runs."""
    out = []
    for s in ("dp", "tw", "cw", "rw", "twrw") + (("grid",) if W % 2 == 0 else ()):
        t = tables if s not in ("cw", "grid") else dist_tables(row_norm_optimizer="adagrad")
        out.append((s, s, t))
    out.append(("dp long name", "data_parallel", tables))
    out.append(("auto", "auto", tables))
    out.append(("planned, no dp", ember.plan(tables, W, batch_size=4, dp_max_bytes=64), tables))
    # A mixed plan as a dict (names and TablePlans) and one as a list.
    out.append(("mixed dict", {
        "t0": grid_plan(W),  # 2 slices, each row-wise over all W ranks (W = 3 too)
        "t1": "dp",
        "t2": ember.TablePlan("cw", ranks=(W - 1, 0), num_shards=2),
        "t3": ember.TablePlan("tw", ranks=(W - 1,)),
        "t4": ember.TablePlan("twrw", ranks=tuple(reversed(range(W))), group_size=W),
    }, tables))
    out.append(("mixed list", [
        ember.TablePlan("cw", ranks=tuple(range(W)), num_shards=W),
        ember.TablePlan("twrw", ranks=(1, 0), group_size=2),
        ember.TablePlan("tw", ranks=(0,)),
        ember.TablePlan("dp"),
        ember.TablePlan("rw"),
    ], dist_tables(row_norm_optimizer="lars_sgd")))
    return out


def shares_for(W):
    """Local batch sizes per step: uneven, one rank with none."""
    if W == 2:
        return [[3, 4], [0, 5], [4, 4]]
    if W == 3:
        return [[3, 1, 4], [2, 5, 0], [3, 3, 3]]
    return [[1 + (r + s) % 3 for r in range(W)] for s in range(3)]


def kjt_of(batch, samples):
    values, lengths, weights, B = batch.arrays(samples)
    return ember.KJT(values, lengths, weights=weights, batch_size=B), (values, lengths, weights, B)


def read_all(sebc, tables):
    """The global state dict of the sharded collection, gathered onto every rank."""
    return sebc.state_dict(root=-1)


def compare_states(run, got, want, what, exact=False):
    for k in sorted(want):
        if k not in got:
            run.check(False, "%s: %s missing from the sharded state dict" % (what, k))
            continue
        g, w = np.asarray(got[k]), np.asarray(want[k])
        if k.endswith(".step"):
            run.check(int(g) == int(w), "%s: %s is %s, want %s" % (what, k, g, w))
        elif exact:
            run.check(g.size == w.size and np.array_equal(g.reshape(-1), w.reshape(-1)),
                      "%s: %s differs bitwise" % (what, k))
        else:
            run.close_enough(g, w, "%s: %s" % (what, k))
    run.check(set(got) == set(want), "%s: keys %s, want %s" % (what, sorted(got), sorted(want)))


def train_both(run, name, sebc, local, tables, conv, steps_shares, seed):
    """Steps of forward + backward on the sharded and the local collection, compared."""
    W, R = run.size, run.rank
    rng = np.random.default_rng(seed)
    rows = feature_rows(tables)
    for step, shares in enumerate(steps_shares):
        Bg = sum(shares)
        batch = random_batch(rng, rows, Bg, weighted=step == 1)
        lo = sum(shares[:R])
        mine = range(lo, lo + shares[R])
        kjt_l, _ = kjt_of(batch, mine)
        kjt_g, _ = kjt_of(batch, range(Bg))
        out = sebc.forward(kjt_l)
        want = local.forward(kjt_g)
        run.check(out.shape == (shares[R], local.output_dim) and out.dtype == np.float32,
                  "%s step %d: forward shape %s dtype %s" % (name, step, out.shape, out.dtype))
        if out.shape == (shares[R], local.output_dim):
            run.close_enough(out, want[lo:lo + shares[R]], "%s step %d: forward" % (name, step))
        G = rng.standard_normal(want.shape).astype(np.float32)
        g_local = G[lo:lo + shares[R]]
        if conv == "mean":
            g_local = (np.float32(W) * g_local).astype(np.float32)
        sebc.backward(kjt_l, g_local)
        local.backward(kjt_g, G)
    compare_states(run, read_all(sebc, tables), local.state_dict(), "%s after %d steps" % (name, len(steps_shares)))


# ---- cases -------------------------------------------------------------------------------

def tiered_tables(cache):
    """t0 120 x 4 SUM (f0) adam and t1 60 x 4 MEAN (f1) rowwise_adagrad with caches of `cache` rows
    (0: in RAM; 36 holds a step's ids, fewer than the rows the steps touch), t2 10 x 4 in RAM."""
    T = ember.TableConfig
    u = ("uniform", -0.5, 0.5)
    return [
        T("t0", 120, 4, feature_names=["f0"], pooling="sum", optimizer="adam", lr=0.02, init=u, cache_rows=cache),
        T("t1", 60, 4, feature_names=["f1"], pooling="mean", optimizer="rowwise_adagrad", lr=0.1,
          initial_accumulator=0.01, init=u, cache_rows=cache, cache_policy="lfu"),
        T("t2", 10, 4, feature_names=["f2"], optimizer="sgd", lr=0.1, init=u),
    ]


def case_tiered(run):
    """Tables on disk (TableConfig.cache_rows) under every scheme that takes them against the
    single process in RAM: the same numbers, caches that evicted and read rows back; a single
    process with tiered tables is bitwise the one in RAM (prefetch included); data-parallel is
    refused on every rank."""
    W = run.size
    ram, disk = tiered_tables(0), tiered_tables(36)
    local = ember.EmbeddingBagCollection(ram, seed=3)
    tiered = ember.EmbeddingBagCollection(disk, seed=3)
    rng = np.random.default_rng(11)
    batches = [random_batch(rng, feature_rows(ram), 9) for _ in range(8)]
    for i, batch in enumerate(batches):
        kjt = kjt_of(batch, range(9))[0]
        want, got = local.forward(kjt), tiered.forward(kjt)
        run.check(np.array_equal(want, got), "one process, step %d: tiered forward differs from RAM" % i)
        if i + 1 < len(batches):
            tiered.prefetch(kjt_of(batches[i + 1], range(9))[0])
        G = rng.standard_normal(want.shape).astype(np.float32)
        local.backward(kjt, G)
        tiered.backward(kjt, G)
    compare_states(run, tiered.state_dict(), local.state_dict(), "one process tiered", exact=True)
    st = tiered.tier_stats("t0")
    run.check(st["evictions"] > 0 and st["rows_read"] > 0 and st["prefetched"] > 0,
              "one process: t0 cache counters %s (want evictions, file reads and rows read ahead)" % st)
    try:
        tiered.tier_stats("t2")
        run.check(False, "tier_stats of a table in RAM did not raise")
    except ember.errors.InvalidArgumentError:
        pass
    local.close()
    tiered.close()
    for plan in ("tw", "cw", "rw", "twrw", "auto"):
        sebc = ember.ShardedEmbeddingBagCollection(disk, plan, comm=run.comm, seed=17)
        local = ember.EmbeddingBagCollection(ram, seed=17)
        try:
            train_both(run, "tiered " + plan, sebc, local, disk, "mean", shares_for(W) * 4, seed=5)
            # Summed over ranks: the pieces missed; a piece holding every row (tw, cw) also evicted
            # rows and read some back from its file (row splits leave each piece fewer rows than
            # its cache: dist.big_tables covers their eviction).
            st = sebc.tier_stats("t0")
            counts = np.array([st["misses"], st["evictions"], st["rows_read"]], dtype=np.float64)
            run.comm.allreduce_grads(counts, convention="sum")
            whole = plan in ("tw", "cw")
            run.check(counts[0] > 0 and (not whole or (counts[1] > 0 and counts[2] > 0)),
                      "tiered %s: misses, evictions and file reads over the ranks %s" % (plan, counts))
        finally:
            sebc.close()
            local.close()
    try:
        ember.ShardedEmbeddingBagCollection(disk, {"t0": "dp", "t1": "tw", "t2": "tw"}, comm=run.comm, seed=17)
        run.check(False, "a data-parallel tiered table was accepted")
    except ember.errors.UnsupportedError as e:
        run.check("t0" in str(e), "the refusal names the table: %s" % e)


def hashed_tables():
    """(table tuples, feature tuples, TableConfigs): "h" 32 x 4, hashed in 8 buckets of 4 rows
    (LRU), and "r" 10 x 3. The extension's table tuple makes "h" hashed (TableConfig cannot yet)."""
    cfgs = [ember.TableConfig("h", 32, 4, init=("uniform", -1.0, 1.0)), ember.TableConfig("r", 10, 3)]
    h = cfgs[0]._c_tuple() + ((4, 0, ember._config.EVICT_POLICIES["lru"], 0),)
    return [h, cfgs[1]._c_tuple()], [("h", 0), ("r", 1)], cfgs


def hashed_forward(coll, keys):
    """Forward of one sample per key in "h" (an empty bag of "r" each) on the extension object."""
    B = len(keys)
    lengths = np.concatenate([np.ones(B, np.int32), np.zeros(B, np.int32)])
    out = np.empty((B, 7), np.float32)
    coll.forward((np.asarray(keys, np.int64), lengths, None, None, 2, B, None, None), out)
    return out


def case_hashed(run):
    """A hashed table's int64 "ids" map through the sharded collection under every scheme: read
    (root -1 and one root) equals the single process's map after the same global batch; a map
    written from one root is read back on every rank and looked up by the next forward; an array
    of another dtype, or the map read as fp32, is refused on every rank."""
    from ember import _config, _ember, _sharded
    W, R = run.size, run.rank
    I64, F32 = _config.DTYPES["int64"], _config.DTYPES["fp32"]
    tables, feats, cfgs = hashed_tables()
    rng = np.random.default_rng(13)
    per = 5
    keys = rng.integers(-2**62, 2**62, size=4 * W, dtype=np.int64)
    keys1 = keys[rng.integers(0, len(keys), size=per * W)]  # repeats across and within ranks
    keys2 = rng.integers(-2**40, 2**40, size=per * W, dtype=np.int64)
    mine = slice(per * R, per * (R + 1))
    for scheme in ("rw", "tw", "cw", "twrw", "dp"):
        plans = [p._c_tuple() for p in _sharded._resolve_plan(scheme, cfgs, W, 512)]
        sebc = _ember.SEBC(run.comm._c, tables, feats, 0, 17, 0, 0, 0, plans, _config.CONVENTIONS["mean"], None)
        local = _ember.EBC(tables, feats, 0, 17)
        other = _ember.EBC(tables, feats, 0, 17)
        try:
            want = hashed_forward(local, keys1)
            got = hashed_forward(sebc, keys1[mine])
            run.check(np.array_equal(got, want[mine]), "hashed %s: forward differs from one process" % scheme)
            local_ids = np.empty((32, 3), np.int64)
            local.read(0, "ids", 0, 32, I64, local_ids)
            ids = np.empty((32, 3), np.int64)
            sebc.read(0, "ids", I64, -1, ids)
            run.check(np.array_equal(ids, local_ids), "hashed %s: ids read on every rank differ from one process's"
                      % scheme)
            at_root = np.full((32, 3), -1, np.int64) if R == W - 1 else None
            sebc.read(0, "ids", I64, W - 1, at_root)
            run.check(R != W - 1 or np.array_equal(at_root, local_ids), "hashed %s: ids read onto the last rank"
                      % scheme)
            # Another map, written from rank 0 alone with its rows' weights (a fresh row's values
            # follow its id, not its slot): every rank reads it back, and the next forward looks
            # the keys up in it.
            want2 = hashed_forward(other, keys2)
            ids2 = np.empty((32, 3), np.int64)
            other.read(0, "ids", 0, 32, I64, ids2)
            w2 = np.empty((32, 4), np.float32)
            other.read(0, "weight", 0, 32, F32, w2)
            sebc.write(0, "ids", I64, 0, ids2 if R == 0 else None)
            sebc.write(0, "weight", F32, 0, w2 if R == 0 else None)
            back = np.zeros((32, 3), np.int64)
            sebc.read(0, "ids", I64, -1, back)
            run.check(np.array_equal(back, ids2), "hashed %s: the map written from rank 0 read back" % scheme)
            got2 = hashed_forward(sebc, keys2[mine])
            run.check(np.array_equal(got2, want2[mine]), "hashed %s: forward after the write" % scheme)
            bad = np.zeros((32, 3), np.float32) if R == 0 else ids2
            run.expect_error("hashed %s: float32 array written as int64" % scheme, ember.InvalidArgumentError,
                             ["expected int64 items, got float32", "(rank 0)"],
                             lambda: sebc.write(0, "ids", I64, -1, bad))
            run.expect_error("hashed %s: ids read as fp32" % scheme, ember.InvalidArgumentError,
                             ["tensor 'ids' cannot be read or written as fp32"],
                             lambda: sebc.read(0, "ids", F32, -1, np.zeros((32, 3), np.float32)))
            after = np.zeros((32, 3), np.int64)
            sebc.read(0, "ids", I64, -1, after)
            run.check(np.array_equal(after[:, 0], ids2[:, 0]), "hashed %s: a refused write changed the map" % scheme)
        finally:
            sebc.close()
            local.close()
            other.close()
    # The package's objects: TableConfig(hashed=True), state dicts carrying the int64 map.
    cfg = [ember.TableConfig("h", 32, 4, init=("uniform", -1.0, 1.0), hashed=True, hash_bucket_rows=4),
           ember.TableConfig("r", 10, 3)]
    for scheme in ("rw", "tw"):
        sharded = ember.ShardedEmbeddingBagCollection(cfg, scheme, comm=run.comm, seed=17)
        single = ember.EmbeddingBagCollection(cfg, seed=17)
        values, lengths = np.ascontiguousarray(keys1[mine]), np.concatenate([np.ones(per, np.int32),
                                                                             np.zeros(per, np.int32)])
        sharded.forward(ember.KJT(values, lengths=lengths))
        single.forward(ember.KJT(keys1, lengths=np.concatenate([np.ones(per * W, np.int32),
                                                                 np.zeros(per * W, np.int32)])))
        got, want = sharded.state_dict(), single.state_dict()
        run.check(got["h.ids"].dtype == np.int64 and np.array_equal(got["h.ids"], want["h.ids"]),
                  "hashed package %s: the state dict's ids differ from one process's" % scheme)
        fresh = ember.ShardedEmbeddingBagCollection(cfg, scheme, comm=run.comm, seed=99)
        fresh.load_state_dict(got)
        run.check(np.array_equal(fresh.read("h", "ids"), want["h.ids"]), "hashed package %s: loaded ids" % scheme)
        for c in (sharded, single, fresh):
            c.close()


def case_schemes(run):
    """Every scheme, the planner's plans and mixed plans against the single process."""
    W = run.size
    tables = dist_tables()
    for name, plan, tbl in plans_for(W, tables):
        sebc = ember.ShardedEmbeddingBagCollection(tbl, plan, comm=run.comm, seed=17)
        local = ember.EmbeddingBagCollection(tbl, seed=17)
        try:
            run.check(sebc.grad_convention == "mean", "%s: default convention %r" % (name, sebc.grad_convention))
            run.check(sebc.output_dim == local.output_dim, "%s: output_dim" % name)
            run.check(len(sebc.plan) == len(tbl), "%s: plan has %d entries" % (name, len(sebc.plan)))
            if isinstance(plan, str) and plan != "auto":
                got = {short(p.scheme) for p in sebc.plan}
                run.check(got == {short(plan)}, "%s: plan schemes %s" % (name, got))
            if plan == "auto":
                want = ember.plan(tbl, W, batch_size=512)
                run.check([(short(p.scheme), tuple(p.ranks), p.num_shards, p.group_size) for p in sebc.plan]
                          == [(short(p.scheme), tuple(p.ranks), p.num_shards, p.group_size) for p in want],
                          "%s: plan %s differs from ember.plan %s" % (name, sebc.plan, want))
                desc = ember.describe_plan(tbl, sebc.plan)
                run.check(all(t.name in desc for t in tbl), "%s: describe_plan %r" % (name, desc))
            # Same seed: the same initial values as the unsharded collection, bitwise.
            compare_states(run, read_all(sebc, tbl), local.state_dict(), "%s initial" % name, exact=True)
            train_both(run, name, sebc, local, tbl, "mean", shares_for(W), seed=5)
            for t in tbl:
                run.check(sebc.step(t.name) == 3, "%s: step(%s) = %s" % (name, t.name, sebc.step(t.name)))
            # A dtype conversion under this placement: the same rounding as the local collection's
            # (both start from the local's trained values), and the next forward reads it.
            sebc.load_state_dict(local.state_dict())
            for t, dt in (("t0", "fp16"), ("t2", "bf16")):
                sebc.convert_dtype(t, dt)
                local.convert_dtype(t, dt)
            compare_states(run, read_all(sebc, tbl), local.state_dict(), "%s converted" % name, exact=True)
            bits = np.asarray(sebc.read("t2", "weight", root=-1, dtype="bf16")).view(np.uint16)
            run.check(np.array_equal(bits, np.asarray(local.read("t2", dtype="bf16")).view(np.uint16)),
                      "%s: bf16 bits of t2" % name)
            rng = np.random.default_rng(21)
            batch = random_batch(rng, feature_rows(tbl), 2 * W, weighted=True)
            kjt_l, _ = kjt_of(batch, range(2 * run.rank, 2 * run.rank + 2))
            want = local.forward(kjt_of(batch, range(2 * W))[0])
            run.close_enough(sebc.forward(kjt_l), want[2 * run.rank:2 * run.rank + 2], "%s: forward after conversion"
                             % name)
        finally:
            sebc.close()
            local.close()


def case_conventions(run):
    """grad_convention "sum" (J = sum_r L_r) and the gather onto one root / scatter from one."""
    W, R = run.size, run.rank
    tables = dist_tables()
    for scheme in ("rw", "dp", "twrw"):
        sebc = ember.ShardedEmbeddingBagCollection(tables, scheme, comm=run.comm, seed=3, grad_convention="sum")
        local = ember.EmbeddingBagCollection(tables, seed=3)
        try:
            run.check(sebc.grad_convention == "sum", "convention %r" % sebc.grad_convention)
            train_both(run, "sum/" + scheme, sebc, local, tables, "sum", shares_for(W), seed=9)
            # root 0: the array on rank 0, None elsewhere.
            w = sebc.read("t0", "weight", root=0)
            w_all = sebc.read("t0", "weight", root=-1)
            sd0 = sebc.state_dict(root=0)
            run.check((sd0 is None) == (R != 0), "state_dict root 0 on rank %d: %s" % (R, type(sd0)))
            if R == 0 and sd0 is not None:
                run.check(np.array_equal(sd0["t0.weight"], w_all), "state_dict root 0 t0.weight")
            if R == 0:
                run.check(w is not None and np.array_equal(w, w_all), "read root 0 on rank 0")
                run.close_enough(w, local.read("t0"), "read root 0 vs the single process")
            else:
                run.check(w is None, "read root 0 gave %r on rank %d" % (type(w), R))
            # write from root W-1: only that rank's array is read (None elsewhere).
            x = np.full((13, 8), 0.25, np.float32) if R == W - 1 else None
            sebc.write("t0", "weight", x, root=W - 1)
            run.check(np.all(sebc.read("t0", "weight", root=-1) == 0.25), "write root %d" % (W - 1))
            m = sebc.read("t1", "momentum1", root=-1)
            run.check(m.shape == (1, 1), "per-row state shape %s" % (m.shape,))
            # Bytes: something crossed the wire in the last step (summed over the ranks).
            sent = np.array([float(sebc.bytes_sent_last_step)])
            run.comm.allreduce_grads(sent, convention="sum")
            run.check(sent[0] > 0 or W == 1, "%s: no bytes sent in a step" % scheme)
            run.check(sebc.bytes_outstanding > 0, "%s: bytes_outstanding %s" % (scheme, sebc.bytes_outstanding))
            # lr 0 on one table: it stays, the others move; steps advance; set_step by hand.
            sebc.set_lr(0.0, table="t3")
            local.set_lr(0.0, table="t3")
            local.load_state_dict(sebc.state_dict(root=-1))
            t3 = sebc.read("t3", "weight", root=-1)
            train_both(run, "sum/%s after set_lr" % scheme, sebc, local, tables, "sum", [shares_for(W)[0]], seed=10)
            run.check(np.array_equal(sebc.read("t3", "weight", root=-1), t3), "%s: t3 moved at lr 0" % scheme)
            run.check(sebc.step("t3") == 4, "%s: step %s" % (scheme, sebc.step("t3")))
            sebc.set_step("t0", 7)
            run.check(sebc.step("t0") == 7, "%s: set_step" % scheme)
            # load_state_dict from root 0 only: every rank ends with rank 0's dict.
            sd = local.state_dict()
            sd["t2.weight"] = sd["t2.weight"] + 1.0
            sebc.load_state_dict(sd if R == 0 else None, root=0)
            compare_states(run, sebc.state_dict(root=-1), sd, "%s: load_state_dict root 0" % scheme, exact=True)
        finally:
            sebc.close()
            local.close()


def case_seed_rw_grad(run):
    """docs/semantics.md §3: 8 x 4 zeros, SGD lr 1, one bag per id, dL_r/dy = 0.5: GRAD_SUM hands
    0.5 to the update (rows -0.5), GRAD_MEAN 0.5 / W, in every scheme; untouched rows stay 0."""
    W, R = run.size, run.rank
    per = max(4 // W, 1)
    for scheme in ("dp", "tw", "cw", "rw", "twrw") + (("grid",) if W % 2 == 0 else ()):
        for conv in ("sum", "mean"):
            t = [ember.TableConfig("table", 8, 4, pooling="sum", optimizer="sgd", lr=1.0, init=("zeros",))]
            # comm=None (MPI_COMM_WORLD) for one convention, the case's ember.Comm for the other.
            comm = None if conv == "sum" else run.comm
            with ember.ShardedEmbeddingBagCollection(t, scheme, comm=comm, grad_convention=conv) as s:
                ids = np.arange(R * per, R * per + per, dtype=np.int64)
                kjt = ember.KJT(ids, np.ones(per, np.int32))
                s.forward(kjt)
                s.backward(kjt, np.full((per, 4), 0.5, np.float32))
                w = s.read("table", "weight", root=-1)
                want = np.float32(-0.5) if conv == "sum" else np.float32(-0.5) / np.float32(W)
                touched = W * per
                ok = np.all(w[:touched] == want) and np.all(w[touched:] == 0.0)
                run.check(ok, "%s %s: rows %s, want %r on rows 0..%d and 0 after"
                          % (scheme, conv, w[:, 0].tolist(), float(want), touched - 1))


def mean_batch(r, weighted):
    """Rank r's MEAN batch over a 10-row table (the C seed scenario's): bags empty, with a
    duplicate, across every row block, one id, duplicates over two blocks; weights whose bag sums
    differ from the id counts; gradients 0.1 (1 + (7r + 3b + d) % 5) - 0.25."""
    L = np.array([0, 3, 5, 1, 5], np.int32)
    WT = np.array([0.5, 2.0, 1.5, 1.0, -0.5, 0.25, 2.0, 0.75, 1.5, -1.0, 3.0, 0.25, 1.0, 0.5], np.float32)
    ids = np.array([3, 3, 7 - r % 2, 0, 4, 5, 9, 2, (r + 6) % 10, 1, 8, 8, 1, (3 * r) % 10], np.int64)
    go = np.array([[0.1 * (1 + (7 * r + 3 * b + d) % 5) - 0.25 for d in range(4)] for b in range(5)], np.float32)
    return ids, L, (WT if weighted else None), go


def case_seed_mean(run):
    """Row-wise MEAN divides by the global bag length (never local mean then sum), and by the id
    count, not the weight sum, in every scheme; a step trains like the single process."""
    W, R = run.size, run.rank
    schemes = ("dp", "tw", "cw", "rw", "twrw") + (("grid",) if W % 2 == 0 else ())
    for scheme in schemes:
        # A bag whose ids live on several ranks' row blocks.
        t = [ember.TableConfig("table", 8, 4, pooling="mean", optimizer="sgd", lr=1.0, init=("uniform", -1, 1))]
        with ember.ShardedEmbeddingBagCollection(t, scheme, comm=run.comm, seed=5) as s, \
                ember.EmbeddingBagCollection(t, seed=5) as ref:
            ids = np.array([0, 3, 7], np.int64) if R == 0 else np.array([R % 8], np.int64)
            kjt = ember.KJT(ids, np.array([len(ids)], np.int32))
            out = s.forward(kjt)
            run.check(np.max(np.abs(out - ref.forward(kjt))) <= 1e-6, "%s: mean over row blocks %s vs %s"
                      % (scheme, out, ref.forward(kjt)))
        for weighted in (False, True):
            t = [ember.TableConfig("table", 10, 4, pooling="mean", optimizer="sgd", lr=1.0,
                                   init=("uniform", -1, 1))]
            with ember.ShardedEmbeddingBagCollection(t, scheme, comm=run.comm, seed=5, grad_convention="sum") as s, \
                    ember.EmbeddingBagCollection(t, seed=5) as ref:
                oracle = Oracle(t, ref.state_dict())
                ids, L, wt, go = mean_batch(R, weighted)
                kjt = ember.KJT(ids, L, weights=wt)
                out = s.forward(kjt)
                want = oracle.forward(ids, L, wt)
                what = "%s weighted=%d" % (scheme, weighted)
                run.close_enough(out, want, what + ": forward vs oracle")
                run.close_enough(out, ref.forward(kjt), what + ": forward vs single process")
                run.check(np.all(out[0] == 0.0), what + ": the empty bag is not 0")
                if weighted:  # dividing by the weight sum would be visibly different
                    j = 0
                    for b, n in enumerate(L):
                        if n:
                            wsum = float(np.sum(wt[j:j + n]))
                            apart = np.max(np.abs(out[b] - want[b] * n / wsum))
                            run.check(apart > 1e-3, "%s bag %d: indistinguishable from the weight-sum mean" % (what, b))
                        j += n
                s.backward(kjt, go)
                parts = [mean_batch(r, weighted) for r in range(W)]
                gids = np.concatenate([p[0] for p in parts])
                gL = np.concatenate([p[1] for p in parts])
                gwt = np.concatenate([p[2] for p in parts]) if weighted else None
                ggo = np.concatenate([p[3] for p in parts])
                gk = ember.KJT(gids, gL, weights=gwt)
                ref.forward(gk)
                ref.backward(gk, ggo)
                oracle.backward(gids, gL, gwt, ggo)
                w1 = s.read("table", "weight", root=-1)
                run.close_enough(w1, ref.read("table"), what + ": weights after a step vs single process")
                run.close_enough(w1, oracle.tables[0].w, what + ": weights after a step vs oracle")
                out = s.forward(kjt)
                run.close_enough(out, oracle.forward(ids, L, wt), what + ": forward after the step")


def dtype_batch(r):
    ids = np.array([r % 8, 5, 2, 2, (r + 3) % 8], np.int64)
    go = np.array([[(1 + b + d + r) * 2.0 ** -9 for d in range(4)] for b in range(2)], np.float32)
    return ids, np.array([2, 3], np.int32), go


def case_seed_dp_bf16(run):
    """A data-parallel table converted to bf16 keeps training the one storage (docs/semantics.md
    §5): the state dict, the next forward and the next update all see the bf16 values, bitwise,
    on every rank. Values chosen so that every quantity is exact (the C seed test's)."""
    W, R = run.size, run.rank
    t = [ember.TableConfig("table", 8, 4, pooling="sum", optimizer="sgd", lr=1.0, init=("zeros",))]
    with ember.ShardedEmbeddingBagCollection(t, "dp", comm=run.comm, grad_convention="sum") as s:
        i = np.arange(32)
        v = (np.where((i // 4) % 2 == 1, -1.0, 1.0) * (1.0 + (1 + i % 15) / 16.0) + 3 * 2.0 ** -10)
        v = v.astype(np.float32).reshape(8, 4)
        b16 = bf16_value(bf16_bits(v))
        s.write("table", "weight", v, root=-1)
        o32 = Oracle(t, {"table.weight": v})
        o16 = Oracle(t, {"table.weight": b16})
        ids, L, go = dtype_batch(R)
        kjt = ember.KJT(ids, L)
        out = s.forward(kjt)
        run.check(np.array_equal(out, o32.forward(ids, L).astype(np.float32)), "fp32 forward is not exact")
        s.convert_dtype("table", "bf16")
        got = s.read("table", "weight", root=-1)
        run.check(np.array_equal(got, b16) and not np.any(got == v), "state dict after conversion")
        bits = np.asarray(s.read("table", "weight", root=-1, dtype="bf16")).view(np.uint16)
        run.check(np.array_equal(bits, bf16_bits(v)), "bf16 bits after conversion")
        out = s.forward(kjt)
        want16 = o16.forward(ids, L)
        run.check(np.array_equal(out, want16.astype(np.float32)), "forward after conversion reads old storage? %s vs %s"
                  % (out.tolist(), want16.tolist()))
        run.check(np.all(np.abs(out - o32.forward(ids, L)) >= 3 * 2.0 ** -10), "forward equals the fp32 one")
        s.backward(kjt, go)
        parts = [dtype_batch(r) for r in range(W)]
        gids = np.concatenate([p[0] for p in parts])
        gL = np.concatenate([p[1] for p in parts])
        ggo = np.concatenate([p[2] for p in parts])
        o16.backward(gids, gL, None, ggo)
        o32.backward(gids, gL, None, ggo)
        bits = np.asarray(s.read("table", "weight", root=-1, dtype="bf16")).view(np.uint16)
        want = o16.tables[0].w.astype(np.float32)
        run.check(np.array_equal(want.astype(np.float64), o16.tables[0].w), "oracle step not exact")
        run.check(np.array_equal(bits, bf16_bits(want)), "bf16 weights after the step differ from the oracle")
        run.check(np.any(bits != bf16_bits(b16)), "the step moved nothing")
        run.check(np.any(bits != bf16_bits(o32.tables[0].w.astype(np.float32))),
                  "indistinguishable from training a detached fp32 copy")
        o16.tables[0].w = bf16_value(bits).astype(np.float64)  # the storage, for the forward below
        out = s.forward(kjt)
        run.check(np.array_equal(out, o16.forward(ids, L).astype(np.float32)), "forward after the step")


def case_bad_input(run):
    """A bad input on one rank raises on every rank, with the failing rank's message, and changes
    nothing; the collection works afterwards (no hang: every collective has a deadline)."""
    W, R = run.size, run.rank
    bad = W - 1
    tag = "(rank %d)" % bad
    tables = dist_tables()
    good_ids = np.array([1, 2, 0, 0, 3, 4, 5], np.int64)
    good_len = np.array([2, 1, 1, 1, 1, 1], np.int32)  # f0..f5, B = 1: f0 has 2 ids

    def probe(build):
        """Whether ember.KJT itself refuses this input (then it never reaches a collective)."""
        try:
            build()
            return False
        except ember.InvalidArgumentError:
            return True

    for scheme in ("dp", "rw", "tw"):
        with ember.ShardedEmbeddingBagCollection(tables, scheme, comm=run.comm, seed=2) as s:
            before = s.state_dict(root=-1)
            # An id outside its table (C-side validation).
            ids = good_ids.copy()
            if R == bad:
                ids[5] = 9  # f4 reads t3 (7 rows)
            run.expect_error(scheme + ": id out of range", ember.OutOfRangeError, [tag, "id 9", "f4"],
                             lambda: s.forward(ember.KJT(ids, good_len)))
            run.expect_error(scheme + ": backward without forward", ember.StateError, [],
                             lambda: s.backward(ember.KJT(good_ids, good_len), np.ones((1, 35), np.float32)))
            # Keys that are not the collection's (a Python-side check inside the collective).
            keys = ["f0", "f1", "f2", "f3", "f4", "f5"] if R != bad else ["f0", "f1", "f2", "f3", "f5", "f4"]
            run.expect_error(scheme + ": wrong keys", ember.InvalidArgumentError, [tag],
                             lambda: s.forward(ember.KJT(good_ids, good_len, keys=keys)))
            # Lengths whose sum is not nnz.
            bad_len = good_len.copy()
            if R == 0:
                bad_len[0] = 3
            if not probe(lambda: ember.KJT(good_ids, np.array([3, 1, 1, 1, 1, 1], np.int32))):
                run.expect_error(scheme + ": lengths sum", ember.InvalidArgumentError, ["(rank 0)"],
                                 lambda: s.forward(ember.KJT(good_ids, bad_len)))
            # Float ids, when ember.KJT accepts them lazily and forward refuses.
            if not probe(lambda: ember.KJT(np.array([1.5]), np.array([1, 0, 0, 0, 0, 0], np.int32))):
                vals = good_ids.astype(np.float64) + 0.5 if R == bad else good_ids
                run.expect_error(scheme + ": float ids", ember.InvalidArgumentError, [tag],
                                 lambda: s.forward(ember.KJT(vals, good_len)))
            # A NaN gradient on one rank after a good forward; a gradient of the wrong shape.
            kjt = ember.KJT(good_ids, good_len)
            s.forward(kjt)
            g = np.ones((1, 35), np.float32)
            if R == bad:
                g[0, 7] = np.nan
            run.expect_error(scheme + ": nan gradient", ember.NumericError, [tag], lambda: s.backward(kjt, g))
            s.forward(kjt)
            g = np.ones((1, 35) if R != bad else (1, 34), np.float32)
            run.expect_error(scheme + ": gradient shape", ember.InvalidArgumentError, [tag],
                             lambda: s.backward(kjt, g))
            # Backward with another KJT than the forward's.
            s.forward(kjt)
            other = ember.KJT(good_ids[::-1].copy(), good_len) if R == bad else kjt
            run.expect_error(scheme + ": another kjt", ember.InvalidArgumentError, [tag],
                             lambda: s.backward(other, np.ones((1, 35), np.float32)))
            # A table name one rank does not know.
            run.expect_error(scheme + ": unknown table", ember.InvalidArgumentError, [tag, "nope"],
                             lambda: s.read("nope" if R == bad else "t0", "weight", root=-1))
            # Arrays off their items' alignment: an out= array (written in place) on one rank is
            # refused on every rank, and so is a dense gradient array for allreduce_grads; inputs
            # are copied (below: the step trains).
            run.expect_error(scheme + ": unaligned out", ember.InvalidArgumentError, [tag, "out", "aligned"],
                             lambda: s.forward(kjt, out=unaligned(np.zeros((1, 35), np.float32)) if R == bad else None))
            dense = np.ones(3, np.float32)
            run.expect_error(scheme + ": unaligned allreduce_grads", ember.InvalidArgumentError, [tag, "aligned"],
                             lambda: run.comm.allreduce_grads(unaligned(dense) if R == bad else dense))
            run.check(np.all(dense == 1), "%s: allreduce_grads changed a refused array" % scheme)
            after = s.state_dict(root=-1)
            for k in before:
                run.check(np.array_equal(np.asarray(before[k]), np.asarray(after[k])), "%s: %s changed" % (scheme, k))
            # And it still trains.
            s.forward(kjt)
            s.backward(kjt, np.ones((1, 35), np.float32))
            run.check(s.step("t0") == 1, "%s: step after recovery %s" % (scheme, s.step("t0")))
            s.forward(ember.KJT(unaligned(good_ids), unaligned(good_len)) if R == bad else kjt)
            g = np.ones((1, 35), np.float32)
            s.backward(kjt, unaligned(g) if R == bad else g)
            run.check(s.step("t0") == 2, "%s: step after unaligned inputs %s" % (scheme, s.step("t0")))
    # Configurations that differ between ranks, and a plan only one rank gets wrong.
    t = [ember.TableConfig("user", 31 if R == bad else 30, 4)]
    run.expect_error("rows differ", ember.InvalidArgumentError, ["rows", "31", "30"],
                     lambda: ember.ShardedEmbeddingBagCollection(t, "rw", comm=run.comm))
    t = [ember.TableConfig("user", 30, 4)]
    t[0].feature_names = ["u\0" if R == bad else "u"]  # changed after construction, on one rank
    run.expect_error("a NUL byte in a feature name", ember.InvalidArgumentError, [tag, "user", repr("u\0"), "NUL"],
                     lambda: ember.ShardedEmbeddingBagCollection(t, "rw", comm=run.comm))
    t = [ember.TableConfig("user", 30, 4)]
    run.expect_error("bad scheme on one rank", ember.InvalidArgumentError, [tag],
                     lambda: ember.ShardedEmbeddingBagCollection(t, "bogus" if R == bad else "rw", comm=run.comm))
    t = [ember.TableConfig("user", 30, 4, optimizer="lamb")]
    run.expect_error("lamb column-wise", ember.UnsupportedError, ["user"],
                     lambda: ember.ShardedEmbeddingBagCollection(t, "cw", comm=run.comm))
    run.expect_error("tw on a rank outside", ember.InvalidArgumentError, ["user"],
                     lambda: ember.ShardedEmbeddingBagCollection(
                         t, [ember.TablePlan("tw", ranks=(W,))], comm=run.comm))


def case_collective_args(run):
    """Arguments every rank must give alike, given differently on one rank (the review's cases):
    every rank raises InvalidArgumentError naming the argument, nothing changes, nothing hangs,
    and the same call with equal arguments then works."""
    W, R = run.size, run.rank
    bad = W - 1
    odd = lambda even, other: other if R == bad else even  # noqa: E731
    for scheme, plan, tables in plans_for(W, dist_tables()):
        if scheme not in ("dp", "tw", "cw", "rw", "twrw", "grid"):
            continue
        with ember.ShardedEmbeddingBagCollection(tables, plan, comm=run.comm, seed=2) as s:
            before = s.state_dict(root=-1)
            run.expect_error(scheme + ": read tables", ember.InvalidArgumentError, ["table"],
                             lambda: s.read(odd("t0", "t2"), "weight", root=-1))
            run.expect_error(scheme + ": read tensors", ember.InvalidArgumentError, ["tensor"],
                             lambda: s.read("t0", odd("weight", "momentum1"), root=-1))
            run.expect_error(scheme + ": write tables", ember.InvalidArgumentError, ["table"],
                             lambda: s.write(odd("t2", "t4"), "weight", np.zeros((odd(10, 9), odd(6, 4)), np.float32)))
            w = np.array(before["t2.weight"]) + (1.0 if R == bad else 0.0)
            run.expect_error(scheme + ": write values", ember.InvalidArgumentError, ["the array"],
                             lambda: s.write("t2", "weight", w, root=-1))
            nan = np.array(before["t2.weight"])
            nan[3, 1] = np.nan if R == bad else nan[3, 1]
            run.expect_error(scheme + ": write nan", ember.NumericError, ["row 3 column 1: nan", "(rank %d)" % bad],
                             lambda: s.write("t2", "weight", nan, root=-1))
            # load_state_dict(root=-1): other values on one rank; other keys on one rank.
            sd = {k: (np.array(v) + (0.5 if R == bad and k == "t3.weight" else 0.0)) if not k.endswith(".step")
                  else v for k, v in before.items()}
            run.expect_error(scheme + ": load values", ember.InvalidArgumentError, ["state dict"],
                             lambda: s.load_state_dict(sd, root=-1))
            part = {k: v for k, v in before.items() if R != bad or k != "t0.momentum2"}
            run.expect_error(scheme + ": load keys", ember.InvalidArgumentError, ["state dict"],
                             lambda: s.load_state_dict(part, root=-1, strict=False))
            after = s.state_dict(root=-1)
            for k in before:
                run.check(np.array_equal(np.asarray(before[k]), np.asarray(after[k])), "%s: %s changed" % (scheme, k))
            s.load_state_dict(before, root=-1)  # equal on every rank: works
            s.write("t2", "weight", np.array(before["t2.weight"]), root=-1)
    # Comm.allreduce_grads: 20 values on one rank, 10 on the others.
    g = np.ones(odd(20, 10), np.float32)
    run.expect_error("allreduce_grads count", ember.InvalidArgumentError, ["count"],
                     lambda: run.comm.allreduce_grads(g, convention="sum"))
    run.check(np.all(g == 1.0), "allreduce_grads: the array changed")
    g = np.ones(20, np.float32)
    run.comm.allreduce_grads(g, convention="sum")
    run.check(np.all(g == W), "allreduce_grads after: %s" % g[:3])


def case_bad_scalars(run):
    """Scalar arguments of a wrong type or out of range on one rank, in Collective calls and in
    the creation of a Comm or a collection: every rank raises InvalidArgumentError with the failing
    rank's message (the argument and its value named), nothing hangs, nothing changes, and the
    collection works afterwards."""
    W, R = run.size, run.rank
    bad = W - 1
    tag = "(rank %d)" % bad

    def on_bad(value, good):
        return value if R == bad else good

    t = [ember.TableConfig("user", 30, 4)]
    for arg, value, good, frags in [("num_threads", -2, 0, ["num_threads", "-2"]),
                                    ("num_threads", 2**40, 0, ["num_threads", str(2**40)]),
                                    ("max_nnz", 2**70, 0, ["max_nnz", str(2**70)]),
                                    ("max_batch_size", "8", 0, ["max_batch_size", "'8'"]),
                                    ("seed", 2**64, 0, ["seed", str(2**64)]),
                                    ("batch_size_hint", 1.5, 512, ["batch_size_hint", "1.5"])]:
        run.expect_error("collection %s=%r" % (arg, value), ember.InvalidArgumentError, [tag] + frags,
                         lambda: ember.ShardedEmbeddingBagCollection(t, "auto", comm=run.comm,
                                                                     **{arg: on_bad(value, good)}))
    run.expect_error("Comm timeout_s='x'", ember.InvalidArgumentError, [tag, "timeout_s", "'x'"],
                     lambda: ember.Comm(timeout_s=on_bad("x", 10.0)))
    run.expect_error("Comm timeout_s=-1", ember.InvalidArgumentError, [tag, "-1"],
                     lambda: ember.Comm(timeout_s=on_bad(-1.0, 10.0)))
    run.expect_error("Comm timeout_s=nan", ember.InvalidArgumentError, [tag, "timeout", "nan s"],
                     lambda: ember.Comm(timeout_s=on_bad(float("nan"), 10.0)))
    with ember.Comm(timeout_s=30.0) as c:  # the world still works after the refused ones
        c.barrier()
    kjt = ember.KJT(np.array([R % 30], np.int64), np.array([1], np.int32))
    for scheme in ("rw", "tw"):
        with ember.ShardedEmbeddingBagCollection(t, scheme, comm=run.comm, seed=3) as s:
            before = s.state_dict(root=-1)
            run.expect_error(scheme + ": read root='x'", ember.InvalidArgumentError, [tag, "root", "'x'"],
                             lambda: s.read("user", root=on_bad("x", -1)))
            run.expect_error(scheme + ": read root=2**70", ember.InvalidArgumentError, [tag, "root", str(2**70)],
                             lambda: s.read("user", root=on_bad(2**70, -1)))
            run.expect_error(scheme + ": state_dict root=W", ember.InvalidArgumentError, [tag, "root", str(W)],
                             lambda: s.state_dict(root=on_bad(W, 0)))
            d = {k: (v if k != "user.step" else on_bad("x", v)) for k, v in before.items()}
            run.expect_error(scheme + ": load_state_dict step='x'", ember.InvalidArgumentError,
                             [tag, "user.step", "'x'"], lambda: s.load_state_dict(d))
            d = {k: (v if k != "user.step" else on_bad(2**70, v)) for k, v in before.items()}
            run.expect_error(scheme + ": load_state_dict step=2**70", ember.InvalidArgumentError,
                             [tag, "user.step", str(2**70)], lambda: s.load_state_dict(d))
            run.expect_error(scheme + ": save dir=5", ember.InvalidArgumentError, [tag, "dir", "5"],
                             lambda: s.save(on_bad(5, "/nonexistent/ember-never-written")))
            run.expect_error(scheme + ": save chunk_bytes=-1", ember.InvalidArgumentError,
                             [tag, "chunk_bytes", "-1"],
                             lambda: s.save("/nonexistent/ember-never-written", chunk_bytes=on_bad(-1, 0)))
            run.expect_error(scheme + ": save blob name with a NUL byte", ember.InvalidArgumentError,
                             [tag, "blob name", repr("a\0b")],
                             lambda: s.save("/nonexistent/ember-never-written",
                                            blobs={on_bad("a\0b", "meta"): b"x"}))
            run.expect_error(scheme + ": load chunk_bytes='x'", ember.InvalidArgumentError,
                             [tag, "chunk_bytes", "'x'"],
                             lambda: s.load("/nonexistent/ember-never-written", chunk_bytes=on_bad("x", 0)))
            # Local calls refuse locally (every rank calls them alike).
            run.expect_error(scheme + ": set_lr('fast')", ember.InvalidArgumentError, ["lr", "'fast'"],
                             lambda: s.set_lr("fast"))
            run.expect_error(scheme + ": set_step(2**70)", ember.InvalidArgumentError, ["step", str(2**70)],
                             lambda: s.set_step("user", 2**70))
            after = s.state_dict(root=-1)
            for k in before:
                run.check(np.array_equal(np.asarray(before[k]), np.asarray(after[k])), "%s: %s changed" % (scheme, k))
            s.forward(kjt)
            s.backward(kjt, np.ones((1, 4), np.float32))
            run.check(s.step("user") == 1, "%s: step after the refusals %s" % (scheme, s.step("user")))
    # A TablePlan whose numbers were changed after construction, on one rank (checked again inside
    # the collective creation).
    p = ember.TablePlan("tw", ranks=(0,))
    p.ranks = (on_bad(2**40, 0),)
    run.expect_error("TablePlan ranks 2**40", ember.InvalidArgumentError, [tag, "ranks", str(2**40)],
                     lambda: ember.ShardedEmbeddingBagCollection(t, [p], comm=run.comm))


def case_memory(run, d):
    """ember.bytes_outstanding() returns to its baseline exactly after every close and after the
    garbage collection of an unclosed object: sharded collections of every scheme (created,
    trained, saved, closed 50 times), Comms and Checkpoints (opened, read, closed 50 times)."""
    import gc
    W, R = run.size, run.rank
    base = ember.bytes_outstanding()
    run.check(base > 0, "the run's own Comm holds bytes: %d" % base)
    tables = [ember.TableConfig("a", 40, 8, optimizer="adam", feature_names=["fa", "fb"]),
              ember.TableConfig("b", 7, 4, optimizer="rowwise_adagrad")]
    schemes = ["dp", "tw", "cw", "rw", "twrw"]
    rng = np.random.default_rng(5 + R)
    B = 3 + R
    kjt = ember.KJT(np.concatenate([rng.integers(0, 40, 2 * B * 2), rng.integers(0, 7, B * 2)]).astype(np.int64),
                    np.full(3 * B, 2, np.int32))

    def check_base(what):
        now = ember.bytes_outstanding()
        run.check(now == base, "%s: ember.bytes_outstanding() %d, baseline %d" % (what, now, base))

    for i in range(50):
        s = ember.ShardedEmbeddingBagCollection(tables, schemes[i % len(schemes)], comm=run.comm, seed=i)
        out = s.forward(kjt)
        s.backward(kjt, np.ones_like(out))
        held = ember.bytes_outstanding() - base
        run.check(held >= s.bytes_outstanding > 0, "iteration %d: process %d, collection %d"
                  % (i, held, s.bytes_outstanding))
        if i == 0:
            s.save(d, blobs={"meta": b"memory"})
        s.close()
        run.check(s.bytes_outstanding == 0, "closed collection holds %d" % s.bytes_outstanding)
        check_base("sharded %d (%s) closed" % (i, schemes[i % len(schemes)]))
    for i in range(5):  # garbage collection of unclosed ones
        s = ember.ShardedEmbeddingBagCollection(tables, schemes[i], comm=run.comm, seed=i)
        s.forward(kjt)
        del s
        gc.collect()
        check_base("sharded %d collected" % i)
    for i in range(50):
        c = ember.Comm(run.comm, timeout_s=30.0)
        c.barrier()
        run.check(ember.bytes_outstanding() > base, "a Comm holds bytes")
        c.close()
        check_base("Comm %d closed" % i)
    run.comm.barrier()  # the checkpoint is complete on every rank's view
    for i in range(50):
        c = ember.Checkpoint(d)
        run.check(ember.bytes_outstanding() > base, "a Checkpoint holds bytes")
        run.check(c.read_blob("meta") == b"memory" and c.world_size == W, "checkpoint contents")
        if i == 0:
            c.verify()
        c.close()
        check_base("Checkpoint %d closed" % i)
    c = ember.Checkpoint(d)
    del c
    gc.collect()
    check_base("Checkpoint collected")


def ckpt_tables(load_side):
    """The checkpoint's tables: t2 stored bf16 (the loading side declares fp32: load converts)."""
    return dist_tables(dtype2="fp32" if load_side else "bf16")


def case_ckpt_save(run, d):
    """W = 2: train 3 steps under a mixed plan, save twice (generation 2) with a blob, train a
    step more and save a delta on top (generation 3); rank 0 writes the expected global state
    dict beside the checkpoint."""
    W, R = run.size, run.rank
    tables = ckpt_tables(False)
    plan = {"t0": "rw", "t1": "dp", "t2": "cw", "t3": ember.TablePlan("tw", ranks=(W - 1,)), "t4": "twrw"}
    with ember.ShardedEmbeddingBagCollection(tables, plan, comm=run.comm, seed=12) as s:
        rng = np.random.default_rng(4)
        for step, shares in enumerate(shares_for(W)):
            batch = random_batch(rng, feature_rows(tables), sum(shares), weighted=step == 1)
            lo = sum(shares[:R])
            kjt, _ = kjt_of(batch, range(lo, lo + shares[R]))
            out = s.forward(kjt)
            s.backward(kjt, rng.standard_normal(out.shape).astype(np.float32))
        s.save(d, blobs={"meta": b"first"})
        s.save(d, blobs={"meta": b"hello \x00 world", "empty": b""}, chunk_bytes=64)  # many small records
        before = s.state_dict(root=-1)
        batch = random_batch(rng, feature_rows(tables), W)  # one sample per rank: few rows change
        kjt, _ = kjt_of(batch, range(R, R + 1))
        out = s.forward(kjt)
        s.backward(kjt, rng.standard_normal(out.shape).astype(np.float32))
        s.save(d, blobs={"meta": b"hello \x00 world", "empty": b""}, chunk_bytes=64, delta=True)
        sd = s.state_dict(root=-1)
        run.check(any(not np.array_equal(np.asarray(sd[k]), np.asarray(before[k])) for k in sd),
                  "the step before the delta changed nothing")
        if R == 0:
            np.savez(d.rstrip("/") + ".expected.npz", **{k: np.asarray(v) for k, v in sd.items()})
            with ember.Checkpoint(d) as c:
                run.check(c.world_size == W, "checkpoint world size %s" % c.world_size)
                run.check(c.generation == 3 and c.base_generation == 2,
                          "generation %s on %s" % (c.generation, c.base_generation))
                run.check(sorted(c.blob_names) == ["empty", "meta"], "blobs %s" % (c.blob_names,))
                run.check(c.read_blob("meta") == b"hello \x00 world", "blob bytes")
                run.check(c.read_blob("empty") == b"", "empty blob")
                names = [t["name"] for t in c.tables]
                run.check(names == ["t0", "t1", "t2", "t3", "t4"], "checkpoint tables %s" % names)
                t2 = [t for t in c.tables if t["name"] == "t2"][0]
                run.check(t2["dtype"] == "bf16" and t2["rows"] == 10 and t2["dim"] == 6 and t2["step"] == 4,
                          "t2 in the manifest: %s" % t2)
                t0 = [t for t in c.tables if t["name"] == "t0"][0]
                # 13 x 8 fp32 weight + two Adam moments in records of at most 64 bytes (2 rows).
                run.check(t0["optimizer"] == "adam" and t0["num_records"] >= 3 * 7, "t0 in the manifest: %s" % t0)
                c.verify()
        run.comm.barrier()


def case_ckpt_load(run, d):
    """W = 3, another plan, another seed: load equals the saved tables bitwise (t2 converted back
    to its stored bf16), and the next step equals the single process loaded the same way."""
    W = run.size
    tables = ckpt_tables(True)
    want = dict(np.load(d.rstrip("/") + ".expected.npz"))
    plan = [grid_plan(W) if W % 2 == 0 else ember.TablePlan("cw", ranks=tuple(range(W)), num_shards=W),
            ember.TablePlan("tw", ranks=(1,)), ember.TablePlan("rw"), "dp", ember.TablePlan("tw", ranks=(0,))]
    with ember.ShardedEmbeddingBagCollection(tables, plan, comm=run.comm, seed=99) as s:
        s.load(d)
        got = s.state_dict(root=-1)
        compare_states(run, got, want, "loaded", exact=True)
        with ember.Checkpoint(d) as c:
            run.check(c.world_size == 2 and c.read_blob("meta") == b"hello \x00 world", "checkpoint seen from W=3")
        bits = np.asarray(s.read("t2", "weight", root=-1, dtype="bf16")).view(np.uint16)
        run.check(np.array_equal(bits, bf16_bits(want["t2.weight"])), "t2 not stored as bf16 after load")
        # One more step on both sides (t2 back in fp32 on both: a bf16 update rounds partial sums
        # taken in another order to neighbouring bf16 values, beyond the fp32 tolerance).
        with ember.EmbeddingBagCollection(ckpt_tables(False), seed=1) as local:
            local.load_state_dict(want)
            local.convert_dtype("t2", "fp32")
            s.convert_dtype("t2", "fp32")
            shares = [2, 0, 3][:W] if W == 3 else [1] * W
            train_both(run, "after load", s, local, ckpt_tables(False), "mean", [shares], seed=8)


def case_mpi4py(run_unused=None):
    """An mpi4py communicator passed explicitly: ember.Comm(MPI.COMM_WORLD), the communicator
    itself given to the collection, and sub-communicators from Split (each group trains its own
    collection)."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    comm = ember.Comm(world, timeout_s=TIMEOUT_S)
    run = Run(comm)
    W, R = run.size, run.rank
    run.check((W, R) == (world.size, world.rank), "Comm(MPI.COMM_WORLD) rank/size %s" % ((W, R),))
    comm.barrier()
    x = np.full(5, float(R + 1), np.float32)
    comm.allreduce_grads(x, convention="sum")
    run.check(np.all(x == W * (W + 1) / 2), "allreduce_grads sum %s" % x)
    y = np.full(3, float(R + 1), np.float64)
    comm.allreduce_grads(y, convention="mean")
    run.check(np.allclose(y, (W + 1) / 2), "allreduce_grads mean %s" % y)
    run.check(comm.bytes_sent >= 0, "bytes_sent")
    tables = dist_tables()
    # The mpi4py communicator directly.
    with ember.ShardedEmbeddingBagCollection(tables, "rw", comm=world, seed=4) as s, \
            ember.EmbeddingBagCollection(tables, seed=4) as local:
        run.check(s.comm.size == W and s.comm.rank == R, "collection's comm")
        train_both(run, "mpi4py world", s, local, tables, "mean", shares_for(W), seed=6)
    # Sub-communicators: ranks 0..W-2 together, the last one alone (W >= 2).
    color = 0 if R < W - 1 else 1
    sub = world.Split(color, R)
    subcomm = ember.Comm(sub, timeout_s=TIMEOUT_S)
    sub_run = Run(subcomm)
    n = sub.size
    run.check(subcomm.size == n and subcomm.rank == sub.rank, "sub-communicator rank/size")
    with ember.ShardedEmbeddingBagCollection(tables, "twrw" if n > 1 else "dp", comm=subcomm, seed=4) as s, \
            ember.EmbeddingBagCollection(tables, seed=4) as local:
        shares = [[2] * n, [1 + r for r in range(n)]]
        train_both(sub_run, "mpi4py sub %d" % color, s, local, tables, "mean", shares, seed=7 + color)
    run.failures += sub_run.failures
    subcomm.close()
    sub.Free()
    return run, (lambda v: world.allreduce(v, op=MPI.SUM))


def case_timeout():
    """A rank that arrives 6 s late at a collective of a communicator with a 2 s deadline: the
    others raise CollectiveTimeoutError (a TimeoutError) naming it, in about 2 s; the late rank's
    own call then misses its deadline too. The communicator cannot be used again, so every rank
    reports one line and ends without MPI_Finalize (as ember's trainer aborts the job)."""
    import time
    comm = ember.Comm(timeout_s=2.0)
    W, R = comm.size, comm.rank
    t = [ember.TableConfig("table", 8, 4)]
    s = ember.ShardedEmbeddingBagCollection(t, "rw", comm=comm)
    kjt = ember.KJT(np.array([R % 8], np.int64), np.array([1], np.int32))
    s.forward(kjt)
    if R == W - 1:
        time.sleep(6.0)
    t0 = time.time()
    try:
        s.forward(kjt)
        what = "no error"
    except ember.EmberError as e:
        what = "%s timeout=%s: %s" % (type(e).__name__, isinstance(e, TimeoutError), e.message)
    sys.stdout.write("TIMEOUT rank %d after %.1f s: %s\n" % (R, time.time() - t0, what))
    sys.stdout.flush()
    if R != W - 1:
        time.sleep(7.0)  # let the late rank report before mpiexec ends the job
    os._exit(0)


def case_pipelined(run):
    """The pipelined calls (prefetch, backward_start, backward_finish) against the plain ones on two
    collections with the same plan: bitwise the same outputs and state after every step, uneven
    batches (a rank with none), a prefetch the next forward does not use (dropped, the same
    result); out of order: finish without a start and forward between start and finish raise
    StateError on every rank, and the collection goes on."""
    W, R = run.size, run.rank
    tables = dist_tables()
    rows = feature_rows(tables)
    rng = np.random.default_rng(77)
    steps = shares_for(W) * 2
    batches = [random_batch(rng, rows, sum(s), weighted=i == 1) for i, s in enumerate(steps)]
    mine = [range(sum(s[:R]), sum(s[:R + 1])) for s in steps]
    kjts = [kjt_of(b, m)[0] for b, m in zip(batches, mine)]
    plain = ember.ShardedEmbeddingBagCollection(tables, "auto", comm=run.comm, seed=3)
    piped = ember.ShardedEmbeddingBagCollection(tables, "auto", comm=run.comm, seed=3)
    for i, kjt in enumerate(kjts):
        a = plain.forward(kjt)
        b = piped.forward(kjt)
        run.check(np.array_equal(a, b), "pipelined step %d: forward differs" % i)
        if i + 1 < len(kjts):  # step 2 prefetches a batch its next forward does not take
            piped.prefetch(kjts[0] if i == 2 else kjts[i + 1])
        g = np.random.default_rng(100 + i).standard_normal(a.shape).astype(np.float32)
        plain.backward(kjt, g)
        piped.backward_start(kjt, g)
        if i == 1:
            run.expect_error("forward between backward_start and backward_finish", ember.StateError, ["forward"],
                             lambda: piped.forward(kjt))
        piped.backward_finish()
    compare_states(run, read_all(piped, tables), read_all(plain, tables), "pipelined", exact=True)
    run.expect_error("backward_finish without a start", ember.StateError, [], piped.backward_finish)
    piped.forward(kjts[0])
    piped.close()
    plain.close()


def vbe_kjt_of(batch, samples, users, inverse=True):
    """The KJT of batch's samples with the features of `users` deduplicated (oracle.vbe_arrays);
    without `inverse`, the same bags and no samples (each feature's own bags out)."""
    values, lengths, weights, fbs, inv, _ = vbe_arrays(batch, samples, users)
    return ember.KJT(values, lengths, weights=weights, feature_batch_sizes=fbs,
                     inverse_indices=inv if inverse else None, batch_size=len(list(samples)))


def case_vbe(run):
    """Variable batch size per feature (TorchRec's VBE): features f0 and f3 repeat over groups of 3
    samples (a user's features over a request's candidates) and travel deduplicated. The sharded
    collection on the VBE KJTs gives bitwise the outputs of the same collection on the plain KJTs
    while their tables are equal (each bag is pooled as the samples' were), and trains to the same
    tables within the tolerance (a bag's gradient sums its samples' first), plain and pipelined;
    without inverse indices the output holds each feature's bags."""
    W, R = run.size, run.rank
    tables = dist_tables()
    rows = feature_rows(tables)
    users = {0, 3}
    plain = ember.ShardedEmbeddingBagCollection(tables, "auto", comm=run.comm, seed=5)
    vbe = ember.ShardedEmbeddingBagCollection(tables, "auto", comm=run.comm, seed=5)
    rng = np.random.default_rng(31)
    steps = shares_for(W) * 2
    kjts = []
    for i, shares in enumerate(steps):
        batch = random_batch(rng, rows, sum(shares), weighted=i == 1)
        for f in users:
            for s in range(batch.batch_size):
                batch.bags[f][s] = batch.bags[f][s - s % 3]
        mine = range(sum(shares[:R]), sum(shares[:R + 1]))
        kjts.append((kjt_of(batch, mine)[0], vbe_kjt_of(batch, mine, users), batch, list(mine)))
    dims = [8, 8, 4, 6, 5, 4]
    for i, (kp, kv, batch, mine) in enumerate(kjts):
        a = plain.forward(kp)
        b = vbe.forward(kv)
        if i == 0:  # the same tables: bitwise; later the trained ones differ by summation order
            run.check(b.shape == a.shape and np.array_equal(a, b), "vbe step %d: forward differs" % i)
        else:
            run.close_enough(b, a, "vbe step %d: forward" % i)
        if i == 0:
            # Each feature's own bags: feature f's [B_f, D_f] blocks, one after another.
            c = vbe.forward(vbe_kjt_of(batch, mine, users, inverse=False))
            fbs = vbe_kjt_of(batch, mine, users).feature_batch_sizes
            run.check(c.shape == (int(sum(int(n) * d for n, d in zip(fbs, dims))),), "vbe bags layout shape %s" % (c.shape,))
            first = vbe_arrays(batch, mine, users)[5][0]  # f0's distinct bags: the samples first holding them
            run.check(np.array_equal(c[:fbs[0] * 8].reshape(-1, 8), a[first, :8]), "vbe bags layout: f0's rows")
            vbe.backward(vbe_kjt_of(batch, mine, users, inverse=False), np.zeros_like(c))
            plain.backward(kp, np.zeros_like(a))  # zero gradients: both stay level (adam's state moves alike)
            a = plain.forward(kp)
            b = vbe.forward(kv)
        g = np.random.default_rng(200 + i).standard_normal(a.shape).astype(np.float32)
        plain.backward(kp, g)
        if i % 2:
            vbe.backward(kv, g)
        else:  # pipelined: the next VBE batch's input dist in flight meanwhile
            if i + 1 < len(kjts):
                vbe.prefetch(kjts[i + 1][1])
            vbe.backward_start(kv, g)
            vbe.backward_finish()
    compare_states(run, read_all(vbe, tables), read_all(plain, tables), "vbe after %d steps" % len(kjts))
    # A bag no sample reads, on the last rank: refused on every rank, nothing changes.
    kp, kv, batch, mine = kjts[0]
    bad = ember.KJT(kv.values, kv.lengths, weights=kv.weights, feature_batch_sizes=kv.feature_batch_sizes,
                    inverse_indices=np.zeros_like(kv.inverse_indices) if R == W - 1 else kv.inverse_indices,
                    batch_size=kv.batch_size)
    run.expect_error("a bag no sample reads", ember.InvalidArgumentError, ["no sample reads it"] if R == W - 1 else [],
                     lambda: vbe.forward(bad))
    vbe.close()
    plain.close()


def case_reshard(run):
    """reshard: two steps under "auto", then the same collection moved to row-wise, then to
    table-wise in rounds of 64 bytes, each time equal bitwise to a collection made with that plan
    and given the state before the move (load_state_dict); the step after equal too, the plan
    property following. Ranks that give different plans, and a plan naming a rank outside the
    communicator, raise InvalidArgumentError on every rank and change nothing."""
    W, R = run.size, run.rank
    tables = dist_tables()
    rows = feature_rows(tables)
    rng = np.random.default_rng(31)
    steps = shares_for(W) * 2
    batches = [random_batch(rng, rows, sum(s)) for s in steps]
    kjts = [kjt_of(b, range(sum(s[:R]), sum(s[:R + 1])))[0] for b, s in zip(batches, steps)]
    moving = ember.ShardedEmbeddingBagCollection(tables, "auto", comm=run.comm, seed=3)

    def step(coll, i):
        out = coll.forward(kjts[i])
        coll.backward(kjts[i], np.random.default_rng(200 + i).standard_normal(out.shape).astype(np.float32))
        return out

    step(moving, 0)
    step(moving, 1)
    for i, (plan, chunk) in enumerate((("rw", 0), ("tw", 64))):
        before = moving.state_dict(root=-1)
        stats = moving.reshard(plan, chunk_bytes=chunk)
        run.check(all(p.scheme == plan for p in moving.plan), "reshard %s: plan %s" % (plan, moving.plan))
        run.check(stats["seconds"] >= 0 and (W > 1 or stats["bytes_sent"] == 0), "reshard %s: %s" % (plan, stats))
        fresh = ember.ShardedEmbeddingBagCollection(tables, plan, comm=run.comm, seed=9)
        fresh.load_state_dict(before)
        compare_states(run, read_all(moving, tables), read_all(fresh, tables), "reshard to %s" % plan, exact=True)
        a, b = step(moving, 2 + i), step(fresh, 2 + i)
        run.check(np.array_equal(a, b), "reshard to %s: the next forward differs" % plan)
        compare_states(run, read_all(moving, tables), read_all(fresh, tables), "reshard to %s, a step on" % plan,
                       exact=True)
        fresh.close()
    if W > 1:
        run.expect_error("reshard with plans that differ", ember.InvalidArgumentError, ["plan"],
                         lambda: moving.reshard("rw" if R == 0 else "dp"))
    bad = [ember.TablePlan("tw", [W]) for _ in tables]
    run.expect_error("reshard to a rank outside", ember.InvalidArgumentError, [], lambda: moving.reshard(bad))
    run.check(all(p.scheme == "tw" for p in moving.plan), "after refusals: plan %s" % moving.plan)
    step(moving, 0)
    moving.close()


def case_wire(run):
    """Wire precision (set_wire_precision, the wire_precision= argument) and the topology for the
    planner (detect_topology, plan="auto" with a topology). fp16, bf16 and fp8 forwards within
    their bound of the exact fp32 forward (2^-11, 2^-8, 2^-4 of the pooled absolute values, a
    rounding per partial, plus fp8's subnormal half-step over its loss scale per partial), int8
    within W (2 x the sample's largest pooled absolute value / 510 + 1e-8) (a piece's range
    bounds its error), fewer bytes sent; the precision and loss scales the same on every rank or
    refused on all (ranks that differ, an unknown name, a scale that is not a positive number), a
    gradient fp16 cannot hold refused on every rank with no table changed; the topology the same
    on every rank, one host here."""
    W, R = run.size, run.rank
    tables = dist_tables()
    rows = feature_rows(tables)
    rng = np.random.default_rng(91)
    shares = shares_for(W)[0]
    batch = random_batch(rng, rows, sum(shares))
    kjt = kjt_of(batch, range(sum(shares[:R]), sum(shares[:R + 1])))[0]
    # The pooled absolute values: a local collection over |weights| (|bag weights|: none here).
    absl = ember.EmbeddingBagCollection(tables, seed=3)
    for t in tables:
        absl.write(t.name, "weight", np.abs(absl.read(t.name, "weight")))
    abs_out = absl.forward(kjt)
    absl.close()
    for plan in ("rw", "tw", "twrw"):
        exact = ember.ShardedEmbeddingBagCollection(tables, plan, comm=run.comm, seed=3)
        want = exact.forward(kjt)
        sent32 = exact.bytes_sent_last_step
        run.check(exact.wire_precision == ("fp32", "fp32"), "%s: default wire %s" % (plan, exact.wire_precision))
        rowmax = np.max(abs_out, axis=1, keepdims=True) if abs_out.size else abs_out
        for prec, ulp, scale, floor in (("fp16", 2.0 ** -11, 1.0, 0.0), ("bf16", 2.0 ** -8, 1.0, 0.0),
                                        ("fp8_e4m3", 2.0 ** -4, 64.0, W * 2.0 ** -10 / 64), ("int8", 0.0, 1.0, 0.0)):
            coll = ember.ShardedEmbeddingBagCollection(tables, plan, comm=run.comm, seed=3, wire_precision=prec,
                                                       wire_loss_scale=(scale, 1.0))
            run.check(coll.wire_precision == (prec, prec), "%s: wire %s, want %s" % (plan, coll.wire_precision, prec))
            run.check(coll.wire_loss_scale == (scale, 1.0), "%s: loss scale %s" % (plan, coll.wire_loss_scale))
            got = coll.forward(kjt)
            bound = ulp * abs_out + floor + 2.0 ** -20
            if prec == "int8":
                bound = W * (2 * rowmax / 510 + 1e-8) + 2.0 ** -20
            err = np.abs(got.astype(np.float64) - want)
            run.check(bool(np.all(err <= bound)), "%s %s: forward error over its bound by %g" % (
                plan, prec, float(np.max(err - bound)) if err.size else 0.0))
            if W > 1 and sent32:
                run.check(coll.bytes_sent_last_step < sent32, "%s %s: %d bytes sent, fp32 %d" % (
                    plan, prec, coll.bytes_sent_last_step, sent32))
            coll.close()
        # Mixed precisions after creation, then refusals: nothing changes.
        exact.set_wire_precision("fp16", "bf16")
        run.check(exact.wire_precision == ("fp16", "bf16"), "%s: set_wire_precision gave %s" % (
            plan, exact.wire_precision))
        if W > 1:
            run.expect_error("%s: ranks that differ" % plan, ember.InvalidArgumentError, ["wire"],
                             lambda: exact.set_wire_precision("fp16" if R == 0 else "bf16"))
        run.expect_error("%s: an unknown precision" % plan, ember.InvalidArgumentError, ["int4"],
                         lambda: exact.set_wire_precision("int4" if R == W - 1 else "fp16"))
        run.check(exact.wire_precision == ("fp16", "bf16"), "%s: after refusals %s" % (plan, exact.wire_precision))
        if W > 1:
            run.expect_error("%s: loss scales that differ" % plan, ember.InvalidArgumentError, ["loss scale"],
                             lambda: exact.set_wire_loss_scale(2.0 if R == 0 else 4.0))
        run.expect_error("%s: a loss scale that is not positive" % plan, ember.InvalidArgumentError,
                         ["not a positive finite number"], lambda: exact.set_wire_loss_scale(1.0, 0.0 if R == 0 else 1.0))
        run.check(exact.wire_loss_scale == (1.0, 1.0), "%s: loss scale after refusals %s" % (plan, exact.wire_loss_scale))
        exact.set_wire_precision("fp16")
        before = exact.state_dict(root=-1)
        out = exact.forward(kjt)
        g = np.full(out.shape, 1e6, np.float32)  # over fp16's largest value: refused before sending
        if W > 1 and plan != "tw":
            run.expect_error("%s: a gradient fp16 cannot hold" % plan, ember.NumericError, ["65"],
                             lambda: exact.backward(kjt, g))
            compare_states(run, exact.state_dict(root=-1), before, "%s after the refused backward" % plan,
                           exact=True)
        exact.close()
    topo = ember.detect_topology(run.comm, probe_bytes=1 << 16, reps=2)
    run.check(topo.host_of == (0,) * W, "detect_topology: host_of %s on one machine" % (topo.host_of,))
    run.check((topo.intra_host_bw > 0) == (W > 1) and topo.inter_host_bw == 0,
              "detect_topology: intra %g inter %g" % (topo.intra_host_bw, topo.inter_host_bw))
    mine = np.array([topo.intra_host_bw, topo.round_s])
    everyone = mine.copy()
    run.comm.allreduce_grads(everyone, convention="mean")
    run.check(np.allclose(mine, everyone, rtol=1e-12, atol=0),
              "detect_topology: rank %d has %s, the mean %s" % (R, mine, everyone))
    world = ember.detect_topology()  # on a duplicate of the world it makes and frees itself
    run.check(world.host_of == topo.host_of, "detect_topology on the world: %s" % (world.host_of,))
    run.expect_error("detect_topology: probe_bytes", ember.InvalidArgumentError, ["probe_bytes"],
                     lambda: ember.detect_topology(run.comm, probe_bytes=-1 if R == 0 else 0))
    coll = ember.ShardedEmbeddingBagCollection(tables, "auto", comm=run.comm, seed=3, topology=topo,
                                               batch_size_hint=64)
    run.check(coll.plan == ember.plan(tables, W, batch_size=64, topology=topo), "auto plan with a topology")
    coll.close()


def same_everywhere(run, array):
    """Whether every rank holds these bytes (summed over ranks as exact float64 16-bit words)."""
    raw = np.ascontiguousarray(array).tobytes()
    words = np.frombuffer(raw + b"\0" * (len(raw) % 2), dtype=np.uint16).astype(np.float64)
    total = run.comm.allreduce_grads(words.copy(), "sum")
    return bool(np.array_equal(total, words * run.size))


def case_twod(run, d):
    """2D (sharding_group_size): tables sharded within groups of G ranks, replicated over the
    groups; equal to the single process, replicas bitwise equal; the checkpoint (one group's) loads
    into a one-group collection bitwise; reshard and conversions refused."""
    W = run.size
    G = W // 2 if W % 2 == 0 else 1
    tables = dist_tables()
    for k, (name, plan, tbl) in enumerate(plans_for(G, tables)[:3]):
        name = "2d %s G=%d" % (name, G)
        sebc = ember.ShardedEmbeddingBagCollection(tbl, plan, comm=run.comm, seed=17, sharding_group_size=G)
        local = ember.EmbeddingBagCollection(tbl, seed=17)
        try:
            run.check(sebc.sharding_group_size == G, "%s: group size %d" % (name, sebc.sharding_group_size))
            train_both(run, name, sebc, local, tbl, "mean", shares_for(W), seed=5)
            # Each group reads its own replica: every rank's view is the same bits.
            state = read_all(sebc, tbl)
            for key in sorted(state):
                run.check(same_everywhere(run, state[key]), "%s: replicas differ in %s" % (name, key))
            path = os.path.join(d, "c%d" % k)
            sebc.save(path)
            with ember.ShardedEmbeddingBagCollection(tbl, "rw", comm=run.comm, seed=1) as one:
                one.load(path)
                compare_states(run, read_all(one, tbl), state, "%s loaded into one group" % name, exact=True)
            for call in (lambda: sebc.reshard(plan), lambda: sebc.convert_dtype(tbl[0].name, "fp16")):
                try:
                    call()
                    run.check(False, "%s: not refused under 2D" % name)
                except ember.UnsupportedError as e:
                    run.check("sharding groups" in str(e), "%s: refusal %r" % (name, str(e)))
        finally:
            sebc.close()
            local.close()


CASES = {
    "twod": case_twod,
    "wire": case_wire,
    "vbe": case_vbe,
    "schemes": case_schemes,
    "conventions": case_conventions,
    "seed_rw_grad": case_seed_rw_grad,
    "seed_mean": case_seed_mean,
    "seed_dp_bf16": case_seed_dp_bf16,
    "bad_input": case_bad_input,
    "bad_scalars": case_bad_scalars,
    "collective_args": case_collective_args,
    "ckpt_save": case_ckpt_save,
    "ckpt_load": case_ckpt_load,
    "memory": case_memory,
    "tiered": case_tiered,
    "hashed": case_hashed,
    "pipelined": case_pipelined,
    "reshard": case_reshard,
}


def main(argv):
    if len(argv) >= 2 and argv[1] == "timeout":
        case_timeout()
    if len(argv) < 2 or argv[1] not in list(CASES) + ["mpi4py"]:
        sys.stderr.write("usage: dist_cases.py CASE [DIR]; cases: %s mpi4py\n" % " ".join(CASES))
        return 2
    case = argv[1]
    try:
        if case == "mpi4py":
            run, allreduce = case_mpi4py()
        else:
            allreduce = None
            run = Run(ember.Comm(timeout_s=TIMEOUT_S))
            if case.startswith("ckpt") or case in ("memory", "twod"):
                CASES[case](run, argv[2])
            else:
                CASES[case](run)
        n = total_failures(run, allreduce)
    except Exception:
        sys.stderr.write("rank %s: unexpected exception in case %s:\n%s"
                         % (os.environ.get("OMPI_COMM_WORLD_RANK", "?"), case, traceback.format_exc()))
        sys.stderr.flush()
        os._exit(3)
    for f in run.failures:
        sys.stderr.write("rank %d: %s: %s\n" % (run.rank, case, f))
    if run.rank == 0:
        print("%s: W=%d: %d checks on rank 0, %d failures over all ranks" % (case, run.size, run.checks, n))
    sys.stdout.flush()
    sys.stderr.flush()
    run.comm.close()
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
