"""Quantized inference tables from Python (include/ember/quant.h, docs/serving.md): the row
layouts exchanged with FBGEMM's CPU quantize/dequantize operators in both directions, a serving
bundle of `ember export` loaded by ember.QuantEmbeddingBagCollection and by the ember.torch module,
its forward against a float64 sum of the dequantized rows, and refusals. The CLI is EMBER_CLI, else
build/bin/ember of this checkout (the bundle tests skip, saying so, without one)."""

import os
import subprocess

import numpy as np
import pytest

import ember

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("EMBER_CLI") or os.path.join(ROOT, "build", "bin", "ember")


def rows(n, dim, seed):
    r = np.random.default_rng(seed)
    x = (r.standard_normal((n, dim)) * r.uniform(0.01, 2.0, (n, 1)) + r.uniform(-1, 1, (n, 1))).astype(np.float32)
    x[0] = 0.5  # a constant row
    return x


@pytest.mark.parametrize("qtype", ["fp32", "fp16", "int8", "int4", "int2"])
@pytest.mark.parametrize("dim", [1, 4, 16, 31, 64, 128])
def test_rows_round_trip_within_bound(qtype, dim):
    x = rows(40, dim, dim)
    q = ember.quantize_rows(x, qtype)
    assert q.dtype == np.uint8 and q.shape == (40, ember.row_bytes(qtype, dim))
    y = ember.dequantize_rows(q, qtype, dim)
    span = (x.max(axis=1) - x.min(axis=1))[:, None].astype(np.float64)
    levels = {"fp32": None, "fp16": None, "int8": 255, "int4": 15, "int2": 3}[qtype]
    if levels is None:
        bound = np.abs(x) * (2.0 ** -11 if qtype == "fp16" else 0.0) + 1e-30
    else:  # half a step, the fp16 scale's rounding, the fp16 bias's rounding
        bound = span / levels * (0.5 + levels * 2.0 ** -11) + np.abs(x) * 2.0 ** -10 + 1e-6
    assert np.all(np.abs(y.astype(np.float64) - x) <= bound)


def test_refusals():
    with pytest.raises(ember.NumericError, match="row 1 column 2"):
        ember.quantize_rows(np.array([[1, 2, 3], [1, 2, np.nan]], np.float32), "int8")
    with pytest.raises(ember.InvalidArgumentError, match="unknown quantized type 'int3'"):
        ember.quantize_rows(np.zeros((2, 3), np.float32), "int3")
    with pytest.raises(ember.InvalidArgumentError, match="rows of 5 bytes"):
        ember.dequantize_rows(np.zeros((2, 5), np.uint8), "int8", 4)
    with pytest.raises(ember.FormatError, match="no bundle.json"):
        ember.QuantEmbeddingBagCollection(os.path.dirname(__file__))




def _fbgemm():
    torch = pytest.importorskip("torch", reason="the FBGEMM exchange needs torch")
    try:
        import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"fbgemm_gpu does not import: {e}")
    return torch


@pytest.mark.parametrize("dim", [8, 16, 64, 100, 128])
def test_int8_rows_exchange_with_fbgemm(dim):
    torch = _fbgemm()
    x = rows(64, dim, 100 + dim)
    ours = ember.quantize_rows(x, "int8")
    theirs = torch.ops.fbgemm.FloatToFused8BitRowwiseQuantized(torch.from_numpy(x)).numpy()
    assert theirs.shape == ours.shape
    assert np.array_equal(ours, theirs)  # the same bytes
    # Each side reads the other's rows.
    back = torch.ops.fbgemm.Fused8BitRowwiseQuantizedToFloat(torch.from_numpy(ours)).numpy()
    assert np.allclose(back, ember.dequantize_rows(ours, "int8", dim), rtol=2.0 ** -22, atol=1e-7)
    mine = ember.dequantize_rows(theirs, "int8", dim)
    assert np.allclose(mine, torch.ops.fbgemm.Fused8BitRowwiseQuantizedToFloat(torch.from_numpy(theirs)).numpy(),
                       rtol=2.0 ** -22, atol=1e-7)


@pytest.mark.parametrize("qtype,bits", [("int4", 4), ("int2", 2)])
@pytest.mark.parametrize("dim", [8, 16, 64, 128])
def test_nbit_rows_exchange_with_fbgemm(qtype, bits, dim):
    torch = _fbgemm()
    x = rows(64, dim, 200 + dim)
    ours = ember.quantize_rows(x, qtype)
    theirs = torch.ops.fbgemm.FloatToFusedNBitRowwiseQuantizedSBHalf(torch.from_numpy(x), bits).numpy()
    assert theirs.shape == ours.shape
    assert np.array_equal(ours, theirs)  # the same bytes: packed values, fp16 scale and bias
    back = torch.ops.fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(torch.from_numpy(ours), bits).numpy()
    assert np.allclose(back, ember.dequantize_rows(ours, qtype, dim), rtol=2.0 ** -22, atol=1e-6)
    assert np.allclose(ember.dequantize_rows(theirs, qtype, dim),
                       torch.ops.fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(torch.from_numpy(theirs), bits).numpy(),
                       rtol=2.0 ** -22, atol=1e-6)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not os.access(CLI, os.X_OK):
        pytest.skip("the ember CLI is not built (%s; set EMBER_CLI or build the release preset)" % CLI)
    d = tmp_path_factory.mktemp("bundle")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([CLI, "train", "--batch_size", "256", "--limit_train_batches", "10", "--limit_val_batches", "1",
                    "--eval_interval", "0", "--progress", "lines", "--save_dir", str(d / "run")], check=True,
                   env=env, capture_output=True)
    subprocess.run([CLI, "export", "--load", str(d / "run"), "--output", str(d / "b"), "--quantize",
                    "int4,t_cat_0=int8,t_cat_1=fp16", "--prune_below", "0.005"], check=True, env=env,
                   capture_output=True)
    return str(d / "b")


def _sample_kjt(q, seed, weighted=False, B=5):
    r = np.random.default_rng(seed)
    F = len(q.feature_names)
    lengths = r.integers(0, 4, F * B).astype(np.int32)
    ids = []
    for f in range(F):
        n_ids = q.tables[q._feature_table[f]]["num_embeddings"] or q.tables[q._feature_table[f]]["rows"]
        ids.append(r.integers(0, n_ids, int(lengths[f * B:(f + 1) * B].sum())))
    values = np.concatenate(ids).astype(np.int64)
    w = r.uniform(0.5, 2, values.shape[0]).astype(np.float32) if weighted else None
    return ember.KJT(values, lengths=lengths, weights=w, keys=q.feature_names, batch_size=B)


def _oracle(q, kjt):
    """float64 sums of the dequantized stored rows, through the bundle's own remaps."""
    with open(os.path.join(q._dir, "bundle.json")) as f:
        import json
        manifest = json.load(f)
    B = kjt.batch_size
    out = np.zeros((B, q.output_dim))
    pos, col = 0, 0
    data = open(os.path.join(q._dir, manifest["data"]), "rb").read()
    for f, name in enumerate(q.feature_names):
        t = q._feature_table[f]
        d = q.tables[t]
        deq = ember.dequantize_rows(q.rows(t), d["qtype"], d["dim"]).astype(np.float64)
        remap = None
        if d["remap"] != "none":
            at = manifest["tables"][t]["remap_data"]
            pairs = np.frombuffer(data, np.int64, 2 * d["kept"], at["offset"]).reshape(-1, 2)
            remap = dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))
        for b in range(B):
            n = int(kjt.lengths[f * B + b])
            kept = 0
            for j in range(pos, pos + n):
                i = int(kjt.values[j])
                row = remap.get(i, -1) if remap is not None else i
                if row < 0:
                    continue
                kept += 1
                w = 1.0 if kjt.weights is None else float(kjt.weights[j])
                out[b, col:col + d["dim"]] += w * deq[row]
            if d["pooling"] == "mean" and kept:
                out[b, col:col + d["dim"]] /= kept
            pos += n
        col += d["dim"]
    return out


def test_bundle_forward_matches_oracle(bundle):
    with ember.QuantEmbeddingBagCollection(bundle, num_threads=2) as q:
        assert [t["qtype"] for t in q.tables[:3]] == ["int8", "fp16", "int4"]
        assert any(t["remap"] == "array" and t["kept"] < t["num_embeddings"] for t in q.tables)
        assert q.output_dim == 26 * 16
        for seed, weighted in ((1, False), (2, True)):
            kjt = _sample_kjt(q, seed, weighted)
            got = q(kjt)
            assert np.allclose(got, _oracle(q, kjt), rtol=1e-5, atol=1e-6)
        assert b'"format": "ember-train/1"' in q.blob("trainer.json") or b'"ember-train/1"' in q.blob("trainer.json")
        assert len(q.blob("dense.params")) % 4 == 0
        with pytest.raises(ember.InvalidArgumentError, match="has no blob 'nope'"):
            q.blob("nope")
        with pytest.raises(ember.OutOfRangeError):
            q(ember.KJT(np.array([10 ** 9] + [0] * 25, np.int64), lengths=np.ones(26, np.int32),
                        keys=q.feature_names, batch_size=1))
    assert ember.bytes_outstanding() == 0


def test_bundle_torch_module(bundle):
    torch = pytest.importorskip("torch", reason="ember.torch needs torch")
    import ember.torch as et
    m = et.QuantEmbeddingBagCollection(bundle, num_threads=1)
    kjt = _sample_kjt(m.qebc, 3)
    out = m(torch.from_numpy(kjt.values), torch.from_numpy(kjt.lengths))
    assert out.dtype == torch.float32 and tuple(out.shape) == (5, m.qebc.output_dim)
    assert np.array_equal(out.numpy(), m.qebc.forward(kjt))
    try:
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    except Exception:  # noqa: BLE001
        return
    tkjt = KeyedJaggedTensor.from_lengths_sync(keys=m.feature_names, values=torch.from_numpy(kjt.values),
                                               lengths=torch.from_numpy(kjt.lengths))
    kt = m(tkjt)
    assert kt.keys() == m.feature_names
    assert np.array_equal(kt.values().numpy(), out.numpy())
    m.qebc.close()


_SERVE_PROGRAM = """
import sys
import numpy as np
import torch
import ember.torch  # registers ember::quant_lookup
ep = torch.export.load(sys.argv[1])
inputs = np.load(sys.argv[2])
with torch.no_grad():
    out = ep.module()(*(torch.from_numpy(inputs[k]) for k in ("dense", "values", "lengths")))
np.save(sys.argv[3], out.numpy())
"""


def test_bundle_model_exported_runs_in_another_process(bundle, tmp_path):
    """A model around the bundle's tables (torch.export: dynamic batch size), saved with
    torch.export.save and run by a fresh interpreter that only imports ember.torch: its scores
    equal the module's here, bit for bit, on a batch of another size than the one traced."""
    torch = pytest.importorskip("torch", reason="ember.torch needs torch")
    import ember.torch as et

    class Scorer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sparse = et.QuantEmbeddingBagCollection(bundle, num_threads=1)
            torch.manual_seed(0)
            self.top = torch.nn.Linear(self.sparse.qebc.output_dim + 13, 1)

        def forward(self, dense, values, lengths):
            return self.top(torch.cat([dense, self.sparse(values, lengths)], dim=1)).squeeze(1)

    model = Scorer()
    kjt = _sample_kjt(model.sparse.qebc, 4)
    dense = torch.from_numpy(np.random.default_rng(4).standard_normal((5, 13)).astype(np.float32))
    auto = torch.export.Dim.AUTO
    ep = torch.export.export(model, (dense, torch.from_numpy(kjt.values), torch.from_numpy(kjt.lengths)),
                             dynamic_shapes=({0: auto}, {0: auto}, {0: auto}))
    assert any("ember.quant_lookup" in str(n.target) for n in ep.graph.nodes)
    torch.export.save(ep, str(tmp_path / "scorer.pt2"))
    other = _sample_kjt(model.sparse.qebc, 5, B=9)
    other_dense = np.random.default_rng(5).standard_normal((9, 13)).astype(np.float32)
    np.savez(tmp_path / "in.npz", dense=other_dense, values=other.values, lengths=other.lengths)
    (tmp_path / "serve.py").write_text(_SERVE_PROGRAM)
    import sys
    r = subprocess.run([sys.executable, str(tmp_path / "serve.py"), str(tmp_path / "scorer.pt2"),
                        str(tmp_path / "in.npz"), str(tmp_path / "out.npy")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    with torch.no_grad():
        want = model(torch.from_numpy(other_dense), torch.from_numpy(other.values),
                     torch.from_numpy(other.lengths)).numpy()
    assert np.array_equal(np.load(tmp_path / "out.npy"), want)
    model.sparse.qebc.close()
