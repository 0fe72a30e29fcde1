"""`ember train --interaction dcn` against TorchRec's DLRM_DCN in float64.

The C trainer trains two SGD steps on day files written here in TorchRec's npy layout (one id per
feature), or in MLPerf's multi-hot layout (day_{d}_sparse_multi_hot.npz: np.savez of 26 arrays
"0".."25" of shape [N, k_f]), and saves a checkpoint after each. TorchRec's DLRM_DCN (in float64, with torch.optim.SGD) is loaded with the
first checkpoint's dense parameters and tables, takes the second batch (the day's next rows: one
rank reads them in order), and its parameters after the step must equal the second checkpoint's:
forward, BCE, every gradient (bottom MLP, cross net, top MLP, embedding rows with duplicate ids)
and the update in one comparison. The CLI is EMBER_CLI, else build/bin/ember of this checkout
(scripts/test-python.sh builds neither: the release ctest pass before it does); without it, or
without torch and torchrec, the test skips saying so.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from read_checkpoint import read_checkpoint

F, DN = 26, 13                   # the trainer's Criteo shape
D, B, ROWS = 4, 16, 5            # embedding dim, batch, rows of every table (ids repeat)
BOTTOM, TOP = [8, D], [8, 1]
LAYERS, RANK = 2, 3              # the cross net
LR = 0.5

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli():
    path = os.environ.get("EMBER_CLI") or os.path.join(ROOT, "build", "bin", "ember")
    if not os.access(path, os.X_OK):
        pytest.skip("the ember CLI is not built (%s; set EMBER_CLI or build the release preset)" % path)
    return path


HOT = [1 + f % 4 for f in range(F)]  # multi-hot: 1 to 4 ids per sample


def _write_days(d, rng, n, hot=None, savez=np.savez):
    """Two days; with `hot`, each day's categorical features as MLPerf's multi-hot archive instead
    of day_{d}_sparse.npy. Returns day 0's bags: [feature] -> int64 [n, k_f] (k_f 1 without hot)."""
    bags0 = None
    for day in range(2):
        dense = np.log(rng.integers(0, 100, size=(n, DN)).astype(np.float32) + 3).astype(np.float32)
        labels = rng.integers(0, 2, size=(n, 1), dtype=np.int32)
        np.save(os.path.join(d, "day_%d_dense.npy" % day), dense)
        np.save(os.path.join(d, "day_%d_labels.npy" % day), labels)
        if hot is None:
            sparse = rng.integers(0, 2**31 - 1, size=(n, F), dtype=np.int32)
            np.save(os.path.join(d, "day_%d_sparse.npy" % day), sparse)
            bags = [sparse[:, f:f + 1].astype(np.int64) for f in range(F)]
        else:
            bags = [rng.integers(-2**31, 2**31 - 1, size=(n, k), dtype=np.int32) for k in hot]
            savez(os.path.join(d, "day_%d_sparse_multi_hot.npz" % day),
                  **{str(f): (b[:, 0] if k == 1 and f % 2 else b) for f, (b, k) in enumerate(zip(bags, hot))})
            bags = [b.astype(np.int64) for b in bags]
        bags0 = bags0 or bags
    return bags0


def _load(ckpt):
    problems = []
    _, tables, blobs, _, _ = read_checkpoint(ckpt, problems.append)
    assert not problems, problems
    params = np.frombuffer(blobs["dense.params"], dtype="<f4").astype(np.float64)
    weights = [tables["t_cat_%d" % f]["weight"].astype(np.float64) for f in range(F)]
    return params, weights


def _torchrec_model(torch, params, weights):
    """TorchRec's DLRM_DCN in float64 with the slab's values (the layout dlrm.h states)."""
    from torchrec.models.dlrm import DLRM_DCN
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name="t_cat_%d" % f, embedding_dim=D,
                                                            num_embeddings=ROWS, feature_names=["cat_%d" % f])
                                         for f in range(F)], device=torch.device("cpu"))
    model = DLRM_DCN(embedding_bag_collection=ebc, dense_in_features=DN, dense_arch_layer_sizes=BOTTOM,
                     over_arch_layer_sizes=TOP, dcn_num_layers=LAYERS, dcn_low_rank_dim=RANK).double()
    at = [0]

    def take(shape):
        n = int(np.prod(shape))
        out = torch.from_numpy(params[at[0]:at[0] + n].reshape(shape).copy())
        at[0] += n
        return out

    linears = [m for m in model.dense_arch.modules() if isinstance(m, torch.nn.Linear)]
    cross = model.inter_arch.crossnet
    over = [m for m in model.over_arch.modules() if isinstance(m, torch.nn.Linear)]
    N = (F + 1) * D
    with torch.no_grad():
        for lin in linears:
            lin.weight.copy_(take(lin.weight.shape))
            lin.bias.copy_(take(lin.bias.shape))
        for l in range(LAYERS):
            cross.V_kernels[l].copy_(take((RANK, N)))
            cross.W_kernels[l].copy_(take((N, RANK)))
            cross.bias[l].copy_(take((N,)))
        for lin in over:
            lin.weight.copy_(take(lin.weight.shape))
            lin.bias.copy_(take(lin.bias.shape))
        assert at[0] == params.size, "the slab holds %d values, the model %d" % (params.size, at[0])
        for f in range(F):
            ebc.embedding_bags["t_cat_%d" % f].weight.copy_(torch.from_numpy(weights[f]))
    return model, linears, cross, over


def _train_cmd(cli, data, save, hot):
    cmd = [cli, "train", "--dataset", "criteo_npy", "--data_dir", str(data), "--train_days", "1",
           "--interaction", "dcn", "--dcn_num_layers", str(LAYERS), "--dcn_low_rank_dim", str(RANK),
           "--embedding_dim", str(D), "--num_embeddings", str(ROWS),
           "--dense_arch_layer_sizes", ",".join(map(str, BOTTOM)), "--over_arch_layer_sizes", ",".join(map(str, TOP)),
           "--batch_size", str(B), "--limit_train_batches", "2", "--limit_val_batches", "1", "--eval_interval", "0",
           "--dense_optimizer", "sgd", "--embedding_optimizer", "sgd", "--learning_rate", str(LR),
           "--sharding", "dp", "--threads", "1", "--save_dir", str(save), "--checkpoint_interval", "1",
           "--progress", "lines"]
    if hot:
        cmd += ["--multi_hot_sizes", ",".join(map(str, hot))]
    return cmd


@pytest.mark.parametrize("multi_hot", [False, True], ids=["one_hot_npy", "multi_hot_npz"])
def test_dcn_step_equals_torchrec_dlrm_dcn_in_float64(tmp_path, rng, multi_hot):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    cli = _cli()
    data, save = tmp_path / "days", tmp_path / "ckpt"
    data.mkdir()
    hot = HOT if multi_hot else None
    bags = _write_days(str(data), rng, 4 * B, hot)
    r = subprocess.run(_train_cmd(cli, data, save, hot), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dcn interaction %d wide" % ((F + 1) * D) in r.stdout, r.stdout
    p1, w1 = _load(str(save / "step-0000000001"))
    p2, w2 = _load(str(save / "step-0000000002"))

    model, linears, cross, over = _torchrec_model(torch, p1, w1)
    # The second batch: rows [B, 2B) of day 0, ids modulo the rows (TorchRec's hashes), each
    # feature's bags in sample order.
    dense = np.load(str(data / "day_0_dense.npy"))[B:2 * B].astype(np.float64)
    labels = np.load(str(data / "day_0_labels.npy"))[B:2 * B, 0].astype(np.float64)
    values = np.concatenate([(b[B:2 * B] % ROWS).reshape(-1) for b in bags])
    lengths = np.concatenate([np.full(B, b.shape[1], dtype=np.int32) for b in bags])
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=["cat_%d" % f for f in range(F)],
                                              values=torch.from_numpy(values), lengths=torch.from_numpy(lengths))
    if multi_hot:
        assert "_sparse_multi_hot.npz (MLPerf's multi-hot archives)" in r.stdout, r.stdout
    logits = model(dense_features=torch.from_numpy(dense), sparse_features=kjt).squeeze(1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(labels))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    opt.zero_grad()
    loss.backward()
    opt.step()

    got, want = [], []
    for lin in linears:
        want += [lin.weight, lin.bias]
    for l in range(LAYERS):
        want += [cross.V_kernels[l], cross.W_kernels[l], cross.bias[l]]
    for lin in over:
        want += [lin.weight, lin.bias]
    want = np.concatenate([t.detach().numpy().reshape(-1) for t in want])
    moved = np.abs(p2 - p1)
    assert moved.max() > 1e-3, "the step hardly moved the dense parameters: the comparison would be empty"
    bad = np.abs(p2 - want) > 1e-6 + 1e-5 * np.abs(want)
    assert not bad.any(), "dense parameter %d after the step: ember %.9g, TorchRec float64 %.9g (before %.9g)" % (
        np.argmax(bad), p2[np.argmax(bad)], want[np.argmax(bad)], p1[np.argmax(bad)])
    # Each cross layer's kernels and bias moved, so the comparison covers them.
    N = (F + 1) * D
    start = sum(lin.weight.numel() + lin.bias.numel() for lin in linears)
    for l in range(LAYERS):
        size = 2 * N * RANK + N
        assert moved[start + l * size:start + (l + 1) * size].max() > 1e-4, "cross layer %d did not move" % l
    touched = 0
    for f in range(F):
        ref = model.sparse_arch.embedding_bag_collection.embedding_bags["t_cat_%d" % f].weight.detach().numpy()
        np.testing.assert_allclose(w2[f], ref, rtol=1e-5, atol=1e-6, err_msg="table t_cat_%d" % f)
        touched += int((w2[f] != w1[f]).any())
    assert touched == F


def test_multi_hot_archives_refused_with_reasons(tmp_path, rng):
    """What a user of MLPerf's files can get wrong: every case one line naming the file."""
    cli = _cli()
    cases = [
        # the archive without --multi_hot_sizes: the one-hot file is missing, the flag is named
        ("no_sizes", np.savez, None, "give --multi_hot_sizes"),
        # np.savez_compressed: deflated members cannot be mapped in place
        ("compressed", np.savez_compressed, HOT, "is compressed (np.savez_compressed)"),
        # widths other than the sizes given
        ("widths", np.savez, [2] + HOT[1:], "feature cat_0 has 1 ids per sample, --multi_hot_sizes says 2"),
    ]
    for name, savez, sizes, want in cases:
        data = tmp_path / name
        data.mkdir()
        _write_days(str(data), rng, 2 * B, HOT, savez)
        r = subprocess.run(_train_cmd(cli, data, tmp_path / (name + "_ckpt"), sizes), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode != 0, (name, r.stdout, r.stderr)
        errors = [l for l in r.stderr.splitlines() if "error" in l]
        assert len(errors) == 1 and want in errors[0], (name, r.stderr)
