"""The planner (ember.plan, ember.describe_plan, ember.TablePlan), checkpoint inspection
(ember.Checkpoint) and a one-process communicator (ember.Comm without mpiexec: ember initialises
MPI itself and finalises it at exit). Those that start MPI run in a subprocess, so that this
process never initialises MPI."""
import json
import os
import subprocess
import sys

import pytest

import ember

HERE = os.path.dirname(os.path.abspath(__file__))

SHORT = {"data_parallel": "dp", "table_wise": "tw", "column_wise": "cw", "row_wise": "rw",
         "table_row_wise": "twrw", "grid_shard": "grid"}


def short(s):
    return SHORT.get(s, s)


def tables():
    T = ember.TableConfig
    return [T("small", 10, 8), T("big", 400000, 64, optimizer="adam"), T("mid", 20000, 32, feature_names=["m1", "m2"]),
            T("wide", 50000, 128, optimizer="rowwise_adagrad")]


def test_rank_speed_gives_a_slow_rank_less():
    """ember.plan(rank_speed=): rank 1 four times slower than the model gets fewer of 8 table-wise
    tables than with equal speeds; a speed list of the wrong length, or a speed that is not
    positive, is refused naming it."""
    T = ember.TableConfig
    ts = [T("t%d" % i, 200000 + 10000 * i, 32) for i in range(8)]
    even = ember.plan(ts, 2, allow=["tw"])
    slow = ember.plan(ts, 2, allow=["tw"], rank_speed=[1.0, 0.25])
    on1 = [sum(p.ranks[0] == 1 for p in plan) for plan in (even, slow)]
    assert on1[1] < on1[0], on1
    with pytest.raises(ember.InvalidArgumentError, match="rank_speed has 1 entries"):
        ember.plan(ts, 2, rank_speed=[1.0])
    with pytest.raises(ember.InvalidArgumentError, match=r"rank_speed\[1\] -1"):
        ember.plan(ts, 2, rank_speed=[1.0, -1.0])


def test_plan_is_deterministic_and_respects_allow():
    p1 = ember.plan(tables(), 4)
    p2 = ember.plan(tables(), 4)
    assert p1 == p2 and len(p1) == 4
    assert all(isinstance(p, ember.TablePlan) for p in p1)
    assert short(p1[0].scheme) == "dp", "a 320-byte table is data-parallel: %s" % (p1[0],)
    for allow in (["rw"], ["tw"], ["tw", "rw"]):
        got = {short(p.scheme) for p in ember.plan(tables(), 4, allow=allow)}
        assert got <= set(allow), "allow=%s gave %s" % (allow, got)
    tw = ember.plan(tables(), 4, allow=["tw"])
    assert all(len(p.ranks) == 1 and 0 <= p.ranks[0] < 4 for p in tw)
    assert len({p.ranks[0] for p in tw}) > 1, "table-wise tables all on one rank: %s" % (tw,)
    desc = ember.describe_plan(tables(), p1, world_size=4)
    lines = desc.strip().splitlines()
    assert len(lines) == 4 and all(t.name in desc for t in tables())


def test_plan_memory_budget():
    # big: 400000 x 64 fp32 + two Adam moments = 307 MB: no single rank of 100 MB holds it.
    p = ember.plan(tables(), 4, memory_per_rank=100 << 20, allow=["tw", "rw"])
    assert short(p[1].scheme) == "rw"
    with pytest.raises(ember.OutOfMemoryError) as ei:
        ember.plan(tables(), 2, memory_per_rank=100 << 20)
    assert isinstance(ei.value, MemoryError) and "big" in ei.value.message


def test_plan_refusals():
    with pytest.raises(ember.InvalidArgumentError):
        ember.plan(tables(), 0)
    with pytest.raises(ember.InvalidArgumentError, match="bogus"):
        ember.plan(tables(), 2, allow=["bogus"])
    with pytest.raises(ember.InvalidArgumentError):
        ember.plan(tables(), 2, pooling_factor=[1.0, 2.0])  # 5 features
    with pytest.raises(ember.InvalidArgumentError):
        ember.TablePlan("diagonal")
    with pytest.raises(ember.InvalidArgumentError):
        ember.describe_plan(tables(), [ember.TablePlan("tw", ranks=(0,))])  # one plan, four tables


def test_checkpoint_inspection_refusals(tmp_path):
    with pytest.raises(ember.EmberIOError) as ei:
        ember.Checkpoint(str(tmp_path / "nowhere"))
    assert isinstance(ei.value, OSError) and "nowhere" in ei.value.message
    d = tmp_path / "bad"
    d.mkdir()
    (d / "manifest.json").write_text('{"format": "something else", "tables": 3}')
    with pytest.raises(ember.FormatError) as ei:
        ember.Checkpoint(str(d))
    assert isinstance(ei.value, ValueError)


SINGLETON = r'''
import json, os, sys
import numpy as np
import ember
out = {}
comm = ember.Comm(timeout_s=20.0)
out["rank_size"] = [comm.rank, comm.size]
comm.timeout_s = 5.0
out["timeout"] = comm.timeout_s
try:
    comm.timeout_s = -1.0
    out["negative_timeout"] = "accepted"
except ember.InvalidArgumentError as e:
    out["negative_timeout"] = "refused"
for name, make in (("Comm", lambda: ember.Comm(timeout_s=float("nan"))),
                   ("setter", lambda: setattr(comm, "timeout_s", float("nan")))):
    try:
        make()
        out["nan_timeout_" + name] = "accepted"
    except ember.InvalidArgumentError as e:
        out["nan_timeout_" + name] = e.message
x = np.arange(4, dtype=np.float32)
comm.allreduce_grads(x, convention="mean")
out["allreduce_w1"] = x.tolist()
tables = [ember.TableConfig("a", 10, 4, optimizer="adam"), ember.TableConfig("b", 1, 3, pooling="mean")]
kjt = ember.KJT(np.array([1, 9, 9, 0, 0], np.int64), np.array([2, 1, 1, 1], np.int32))
out["schemes"] = {}
with ember.EmbeddingBagCollection(tables, seed=3) as local:
    want = local.forward(kjt)
    for scheme in ("dp", "tw", "cw", "rw", "twrw", "auto"):
        with ember.ShardedEmbeddingBagCollection(tables, scheme, comm=comm, seed=3) as s:
            out["schemes"][scheme] = bool(np.array_equal(s.forward(kjt), want))
    with ember.ShardedEmbeddingBagCollection(tables, "rw", comm=comm, seed=3) as s:
        s.forward(kjt)
        s.backward(kjt, np.ones((2, 7), np.float32))
        s.save(sys.argv[1], blobs={"note": b"w1"})
with ember.Checkpoint(sys.argv[1]) as c:
    out["ckpt"] = [c.world_size, c.generation, c.blob_names, [t["name"] for t in c.tables]]
    c.verify()
comm.close()
print("RESULT " + json.dumps(out))
'''


def _env():
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")


def test_one_process_comm_and_checkpoint(tmp_path):
    """Without mpiexec: ember starts MPI itself (one rank), every scheme equals the local
    collection, a checkpoint saves and verifies, and the process exits cleanly (MPI finalised by
    ember at exit). Then the checkpoint is corrupted: verify() names the bad record."""
    d = str(tmp_path / "ck")
    r = subprocess.run([sys.executable, "-c", SINGLETON, d], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, r.stdout
    out = json.loads(line[0][7:])
    assert out["rank_size"] == [0, 1]
    assert out["timeout"] == 5.0 and out["negative_timeout"] == "refused"
    for name in ("Comm", "setter"):  # the message names the value given, not a stand-in
        msg = out["nan_timeout_" + name]
        assert "nan s" in msg and "timeout" in msg and msg.endswith("(rank 0)"), (name, msg)
    assert out["allreduce_w1"] == [0.0, 1.0, 2.0, 3.0]
    assert all(out["schemes"].values()), out["schemes"]
    assert out["ckpt"] == [1, 1, ["note"], ["a", "b"]]
    # Flip one byte of a data file: the manifest still opens, verify() refuses.
    data = sorted(f for f in os.listdir(d) if f.endswith(".bin"))
    assert data
    path = os.path.join(d, data[0])
    with open(path, "r+b") as f:
        f.seek(7)
        b = f.read(1)
        f.seek(7)
        f.write(bytes([b[0] ^ 0x40]))
    with ember.Checkpoint(d) as c:
        with pytest.raises(ember.FormatError):
            c.verify()
    with pytest.raises(ember.InvalidArgumentError, match="nope"):
        with ember.Checkpoint(d) as c:
            c.read_blob("nope")
    with ember.Checkpoint(d) as c:  # a NUL byte in a name: ember's refusal, not Python's bare ValueError
        for call in (c.read_blob, c.blob_size):
            with pytest.raises(ember.InvalidArgumentError) as ei:
                call("no\0te")
            msg = ei.value.message
            assert "blob" in msg and repr("no\0te") in msg and msg.endswith("(rank 0)"), msg


def small_tables():
    T = ember.TableConfig
    return [T("a", 1000, 16, feature_names=["a1", "a2"]), T("b", 20000, 64, optimizer="adam"),
            T("c", 5000, 32, optimizer="rowwise_adagrad"), T("d", 300, 8, optimizer="sgd")]


TWO_HOSTS = ember.Topology(host_of=(0, 0, 1, 1), intra_host_bw=10e9, inter_host_bw=125e6, round_s=20e-6)


def test_predict_plan_storage_is_what_the_tables_hold():
    """predict_plan's storage over the ranks adds up to the bytes a local collection allocates for
    the same tables (weights + optimizer state), under every whole-table and split placement (a
    column-wise table's row-wise optimizer state, one float per row, is held by every slice)."""
    ts = small_tables()
    local = ember.EmbeddingBagCollection(ts)
    held = sum(sum(local.table_bytes(t.name)) for t in ts)
    local.close()
    for W in (1, 3, 4):
        for plan in ("tw", "rw", "cw", "twrw"):
            st = ember.predict_plan(ts, plan, W)
            assert len(st.storage_bytes) == W and len(st.step_seconds) == W
            extra = 5000 * 4 * (min(W, 32) - 1) if plan == "cw" else 0  # "c": rowwise_adagrad, dim 32
            assert sum(st.storage_bytes) == held + extra, (W, plan, st.storage_bytes, held)
            assert st.step_seconds == [0.0] * W and st.step_s == 0.0, "no bandwidths, no seconds"
            assert all(b > 0 for b in st.step_bytes) or plan == "tw"
    dp = ember.predict_plan(ts, "dp", 3)
    assert dp.storage_bytes == [held] * 3, "data-parallel: every rank holds every table"


def test_plan_with_a_topology():
    """Two hosts joined by a slow link: the predictions are in seconds, the inter-host bytes are
    what crosses the link, and the planner's plan is predicted no slower than the default
    placements of any single scheme."""
    ts = small_tables()
    pf = {"a1": 4.0, "a2": 2.0, "b": 8.0}
    planned = ember.plan(ts, 4, batch_size=256, pooling_factor=pf, topology=TWO_HOSTS)
    assert planned == ember.plan(ts, 4, batch_size=256, pooling_factor=pf, topology=TWO_HOSTS)
    best = ember.predict_plan(ts, planned, 4, batch_size=256, pooling_factor=pf, topology=TWO_HOSTS)
    assert best.step_s > 0 and all(0 <= i <= b for i, b in zip(best.inter_bytes, best.step_bytes))
    for scheme in ("tw", "rw", "cw", "twrw"):
        other = ember.predict_plan(ts, scheme, 4, batch_size=256, pooling_factor=pf, topology=TWO_HOSTS)
        assert best.step_s <= other.step_s * (1 + 1e-12), (scheme, best.step_s, other.step_s, planned)
    # One host: nothing crosses a link. The same split by ranks_per_host as by host_of.
    one = ember.predict_plan(ts, "rw", 4, topology=ember.Topology(intra_host_bw=10e9))
    assert one.inter_bytes == [0.0] * 4 and one.step_s > 0
    by_count = ember.Topology(ranks_per_host=2, intra_host_bw=10e9, inter_host_bw=125e6, round_s=20e-6)
    assert ember.predict_plan(ts, "rw", 4, topology=by_count) == ember.predict_plan(ts, "rw", 4, topology=TWO_HOSTS)
    # The collection's own plan is a plan predict_plan takes.
    assert ember.predict_plan(ts, [ember.TablePlan("tw", ranks=(3,))] * 4, 4).storage_bytes[:3] == [0, 0, 0]


def test_topology_refusals(tmp_path):
    ts = small_tables()
    for topo, fragment in ((ember.Topology(host_of=(0, 0, 2, 2), intra_host_bw=1e9, inter_host_bw=1e8), "host"),
                           (ember.Topology(host_of=(0, 1)), "host_of"),
                           (ember.Topology(host_of=(0, 0, 1, 1), intra_host_bw=1e9), "inter_host_bw"),
                           (ember.Topology(ranks_per_host=3, intra_host_bw=1e9), "ranks_per_host"),
                           (ember.Topology(intra_host_bw=-1.0), "-1")):
        with pytest.raises(ember.InvalidArgumentError, match=fragment):
            ember.plan(ts, 4, topology=topo)
        with pytest.raises(ember.InvalidArgumentError, match=fragment):
            ember.predict_plan(ts, "rw", 4, topology=topo)
    with pytest.raises(ember.InvalidArgumentError, match="Topology"):
        ember.plan(ts, 4, topology={"host_of": (0, 0, 1, 1)})
    with pytest.raises(ember.InvalidArgumentError, match="host_of"):
        ember.Topology(host_of="01")
    with pytest.raises(ember.InvalidArgumentError, match="auto"):
        ember.predict_plan(ts, "auto", 4)
    with pytest.raises(ember.InvalidArgumentError, match="table"):
        ember.predict_plan(ts, [ember.TablePlan("tw", ranks=(7,))] * 4, 4)  # rank 7 of 4
    bw = ember.probe_disk(tmp_path, 1 << 20)
    assert bw > 0
    with pytest.raises(ember.InvalidArgumentError, match="bytes"):
        ember.probe_disk(tmp_path, 100)
    with pytest.raises(ember.EmberIOError, match="nowhere"):
        ember.probe_disk(tmp_path / "nowhere", 1 << 20)
