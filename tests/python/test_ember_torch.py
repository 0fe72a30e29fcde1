"""ember.torch: the PyTorch modules over ember's collections.

- a DLRM-like model trained on W = 2 and 3 ranks equals the one-process model on the global batch
  (torch_cases.py under mpiexec: plans dp tw cw rw twrw auto, SGD and Adagrad, uneven batches,
  allreduce_dense_grads "mean" and "sum"), and on one rank;
- TorchRec KeyedJaggedTensor inputs (keys in the collection's order or permuted) give a
  KeyedTensor equal to the plain-tensor call;
- the gradient of per-id weights equals torch.nn.EmbeddingBag's per_sample_weights gradient;
- state_dict / load_state_dict with TorchRec's keys; strict loading refuses a missing key;
- a forward under torch.no_grad needs no backward, and training goes on.
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import ember  # noqa: E402
import ember.torch as et  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MPIEXEC = shutil.which("mpiexec")


def _tables(**kw):
    return [ember.TableConfig("t0", 13, 4, feature_names=["f0", "f1"], **kw),
            ember.TableConfig("t1", 7, 3, feature_names=["f2"], **kw)]


def _batch(rng, B=5, F=3, rows=(13, 13, 7), weighted=False):
    lengths = rng.integers(0, 4, F * B).astype(np.int32)
    values = np.concatenate([rng.integers(0, rows[f], int(lengths[f * B:(f + 1) * B].sum()))
                             for f in range(F)]).astype(np.int64)
    w = rng.uniform(0.5, 2.0, values.shape[0]).astype(np.float32) if weighted else None
    return values, lengths, w


def _run(cmd, timeout=280):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%s: no result in %d s (a hang): %s %s" % (cmd, timeout, e.stdout, e.stderr))
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout[-5000:], r.stderr[-5000:])
    assert "0 failures" in r.stdout, r.stdout
    print(r.stdout)


# ---- (a) distributed training equals one process ---------------------------------------------

@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
@pytest.mark.parametrize("W", [2, 3])
def test_dlrm_sharded_equals_one_process(W):
    cmd = [MPIEXEC, "-n", str(W)]
    if "Open MPI" in subprocess.run([MPIEXEC, "--version"], capture_output=True, text=True).stdout:
        cmd.append("--oversubscribe")
    _run(cmd + [sys.executable, os.path.join(HERE, "torch_cases.py")])


def test_dlrm_sharded_one_rank():
    """The same cases as a one-rank job (a subprocess: this process never initialises MPI)."""
    _run([sys.executable, os.path.join(HERE, "torch_cases.py"), "auto"])


# ---- (b) TorchRec KeyedJaggedTensor ----------------------------------------------------------

def test_keyed_jagged_tensor_input(rng):
    jt = pytest.importorskip("torchrec.sparse.jagged_tensor")
    values, lengths, w = _batch(rng, weighted=True)
    B = 5
    a = et.EmbeddingBagCollection(_tables(), seed=3)
    plain = a(torch.from_numpy(values), torch.from_numpy(lengths), torch.from_numpy(w))
    kjt = jt.KeyedJaggedTensor(keys=["f0", "f1", "f2"], values=torch.from_numpy(values),
                               lengths=torch.from_numpy(lengths), weights=torch.from_numpy(w))
    kt = a(kjt)
    assert isinstance(kt, jt.KeyedTensor)
    assert kt.keys() == ["f0", "f1", "f2"] and list(kt.length_per_key()) == [4, 4, 3]
    assert torch.equal(kt.values(), plain)
    # The same batch with its keys in another order: bags and ids reordered, the same output.
    order = [2, 0, 1]
    lens2 = lengths.reshape(3, B)
    starts = np.concatenate([[0], np.cumsum(lens2.sum(1))])
    seg = [np.arange(starts[k], starts[k + 1]) for k in range(3)]
    idx = np.concatenate([seg[k] for k in order])
    perm = jt.KeyedJaggedTensor(keys=["f2", "f0", "f1"], values=torch.from_numpy(values[idx]),
                                lengths=torch.from_numpy(lens2[order].reshape(-1)),
                                weights=torch.from_numpy(w[idx]))
    kt2 = a(perm)
    assert kt2.keys() == ["f0", "f1", "f2"]
    assert torch.equal(kt2.values(), plain)
    for f in ("f0", "f1", "f2"):
        assert torch.equal(kt2[f], kt[f])
    # Keys that are not the features are refused.
    bad = jt.KeyedJaggedTensor(keys=["f0", "f1", "zz"], values=torch.from_numpy(values),
                               lengths=torch.from_numpy(lengths))
    with pytest.raises(ember.InvalidArgumentError, match="zz"):
        a(bad)
    # A batch size per feature (TorchRec's VBE) is the collections' (ember.KJT), not the modules'.
    vbe = jt.KeyedJaggedTensor(keys=["f0", "f1", "f2"], values=torch.arange(4, dtype=torch.int64) % 3,
                               lengths=torch.ones(4, dtype=torch.int32), stride_per_key_per_rank=[[1], [2], [1]])
    with pytest.raises(ember.UnsupportedError, match="batch size per feature"):
        a(vbe)


def test_keyed_jagged_tensor_permuted_weight_grad(rng):
    """Per-id weights of a permuted KJT get their gradient in their own order."""
    jt = pytest.importorskip("torchrec.sparse.jagged_tensor")
    values, lengths, w = _batch(rng, weighted=True)
    B = 5
    lens2 = lengths.reshape(3, B)
    starts = np.concatenate([[0], np.cumsum(lens2.sum(1))])
    seg = [np.arange(starts[k], starts[k + 1]) for k in range(3)]
    order = [1, 2, 0]
    idx = np.concatenate([seg[k] for k in order])
    g = torch.from_numpy(rng.standard_normal((B, 11)).astype(np.float32))
    grads = []
    for keys, v, ln, ww in [(["f0", "f1", "f2"], values, lengths, w),
                            ([["f0", "f1", "f2"][k] for k in order], values[idx], lens2[order].reshape(-1), w[idx])]:
        m = et.EmbeddingBagCollection(_tables(lr=0.0), seed=3)
        wt = torch.from_numpy(ww.copy()).requires_grad_(True)
        kt = m(jt.KeyedJaggedTensor(keys=keys, values=torch.from_numpy(v), lengths=torch.from_numpy(ln), weights=wt))
        (kt.values() * g).sum().backward()
        grads.append(wt.grad.numpy())
    got = np.empty_like(grads[0])
    got[idx] = grads[1]
    np.testing.assert_allclose(got, grads[0], rtol=1e-6, atol=1e-7)


# ---- (c) per-id weights' gradient -------------------------------------------------------------

@pytest.mark.parametrize("features", [1, 2])
def test_weight_grad_equals_torch_embeddingbag(rng, features):
    """dL/dw of the local module equals torch.nn.EmbeddingBag(mode="sum")'s per_sample_weights
    gradient over the same (pre-update) table."""
    names = ["f%d" % k for k in range(features)]
    t = [ember.TableConfig("t0", 17, 6, feature_names=names, optimizer="adagrad", lr=0.1)]
    m = et.EmbeddingBagCollection(t, seed=7)
    table = torch.from_numpy(m.ebc.read("t0").copy())
    B = 6
    values, lengths, w = _batch(rng, B=B, F=features, rows=(17,) * features, weighted=True)
    wt = torch.from_numpy(w.copy()).requires_grad_(True)
    g = torch.from_numpy(rng.standard_normal((B, 6 * features)).astype(np.float32))
    out = m(torch.from_numpy(values), torch.from_numpy(lengths), wt)
    (out * g).sum().backward()
    eb = torch.nn.EmbeddingBag(17, 6, mode="sum")
    with torch.no_grad():
        eb.weight.copy_(table)
    wr = torch.from_numpy(w.copy()).requires_grad_(True)
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))
    ref = eb(torch.from_numpy(values), offsets, per_sample_weights=wr)  # [F*B, 6], bag f*B + b
    ref = ref.view(features, B, 6).permute(1, 0, 2).reshape(B, 6 * features)
    torch.testing.assert_close(out.detach(), ref.detach(), rtol=1e-6, atol=1e-6)
    (ref * g).sum().backward()
    torch.testing.assert_close(wt.grad, wr.grad, rtol=1e-5, atol=1e-6)
    assert m.ebc.step("t0") == 1


def test_weights_without_grad_and_detached(rng):
    values, lengths, w = _batch(rng, weighted=True)
    m = et.EmbeddingBagCollection(_tables(), seed=1)
    wt = torch.from_numpy(w)
    out = m(torch.from_numpy(values), torch.from_numpy(lengths), wt)
    out.sum().backward()
    assert wt.grad is None and m.ebc.step("t0") == 1


# ---- (d) state_dict ---------------------------------------------------------------------------

def test_state_dict_round_trip_torchrec_keys(rng):
    a = et.EmbeddingBagCollection(_tables(optimizer="adam"), seed=1)
    values, lengths, _ = _batch(rng)
    a(torch.from_numpy(values), torch.from_numpy(lengths)).sum().backward()
    sd = a.state_dict()
    assert sorted(sd) == ["embedding_bags.t0.weight", "embedding_bags.t1.weight"]
    assert tuple(sd["embedding_bags.t0.weight"].shape) == (13, 4)
    b = et.EmbeddingBagCollection(_tables(optimizer="adam"), seed=2)
    assert not np.array_equal(b.ebc.read("t0"), a.ebc.read("t0"))
    res = b.load_state_dict(sd)
    assert not res.missing_keys and not res.unexpected_keys
    for t in ("t0", "t1"):
        assert np.array_equal(b.ebc.read(t), a.ebc.read(t))
    # Inside a model: the prefix is the module's name; dense and table keys together.
    model = torch.nn.ModuleDict({"sparse": b, "dense": torch.nn.Linear(3, 2)})
    msd = model.state_dict()
    assert {"sparse.embedding_bags.t0.weight", "sparse.embedding_bags.t1.weight", "dense.weight",
            "dense.bias"} == set(msd)
    c = torch.nn.ModuleDict({"sparse": et.EmbeddingBagCollection(_tables(optimizer="adam"), seed=9),
                             "dense": torch.nn.Linear(3, 2)})
    c.load_state_dict(msd)
    assert np.array_equal(c["sparse"].ebc.read("t1"), a.ebc.read("t1"))
    assert torch.equal(c["dense"].weight, model["dense"].weight)


def test_load_state_dict_strict_missing_key_raises():
    a = et.EmbeddingBagCollection(_tables(), seed=1)
    b = et.EmbeddingBagCollection(_tables(), seed=2)
    sd = a.state_dict()
    del sd["embedding_bags.t1.weight"]
    before = {t: b.ebc.read(t) for t in ("t0", "t1")}
    with pytest.raises(RuntimeError, match="embedding_bags.t1.weight"):
        b.load_state_dict(sd)
    assert np.array_equal(b.ebc.read("t1"), before["t1"])
    res = b.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["embedding_bags.t1.weight"]
    assert np.array_equal(b.ebc.read("t0"), a.ebc.read("t0"))
    assert np.array_equal(b.ebc.read("t1"), before["t1"])
    # A table of the wrong shape is refused.
    sd = a.state_dict()
    sd["embedding_bags.t0.weight"] = torch.zeros(12, 4)
    with pytest.raises(ember.InvalidArgumentError):
        b.load_state_dict(sd)


# ---- (e) no_grad ------------------------------------------------------------------------------

def test_no_grad_forward_then_training(rng):
    """Evaluation under torch.no_grad (no backward follows) between training steps changes
    nothing: the same tables as training without it."""
    batches = [_batch(rng) for _ in range(4)]
    evals = [_batch(rng) for _ in range(4)]
    a = et.EmbeddingBagCollection(_tables(optimizer="rowwise_adagrad", lr=0.1), seed=4)
    b = et.EmbeddingBagCollection(_tables(optimizer="rowwise_adagrad", lr=0.1), seed=4)
    for (v, ln, _), (ev, el, _) in zip(batches, evals):
        with torch.no_grad():
            out = b(torch.from_numpy(ev), torch.from_numpy(el))
            assert not out.requires_grad
        b(torch.from_numpy(ev), torch.from_numpy(el))  # a grad-enabled forward never backwarded
        for m in (a, b):
            (m(torch.from_numpy(v), torch.from_numpy(ln)) ** 2).sum().backward()
    for t in ("t0", "t1"):
        assert np.array_equal(a.ebc.read(t), b.ebc.read(t))
        assert a.ebc.step(t) == b.ebc.step(t) == 4


def test_allreduce_dense_grads_one_rank_subprocess():
    """allreduce_dense_grads on one rank: "mean" and "sum" leave the gradients as they are, float64
    gradients keep their precision, parameters without a gradient get zeros."""
    code = r'''
import torch, ember, ember.torch as et
comm = ember.Comm()
p = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64)); p.grad = torch.tensor([1e-12 + 1.0, 3.0], dtype=torch.float64)
q = torch.nn.Parameter(torch.ones(2, 2)); q.grad = torch.full((2, 2), 0.5)
r = torch.nn.Parameter(torch.ones(3))
for conv in ("mean", "sum"):
    et.allreduce_dense_grads([p, q, r], comm, conv)
assert p.grad[0].item() == 1e-12 + 1.0, p.grad
assert torch.equal(q.grad, torch.full((2, 2), 0.5)) and torch.equal(r.grad, torch.zeros(3))
try:
    et.allreduce_dense_grads([q], comm, "median")
except ember.InvalidArgumentError as e:
    assert "median" in e.message
else:
    raise AssertionError("median accepted")
comm.close()
print("0 failures")
'''
    _run([sys.executable, "-c", code], timeout=60)
