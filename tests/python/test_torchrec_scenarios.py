"""The seed scenarios through TorchRec beside ember (tests/python/torchrec_cases.py, 2 ranks under
mpiexec: gloo for TorchRec, MPI for ember). Both results are printed; ember's are asserted; of
TorchRec's only what TorchRec documents is asserted (its data-parallel tables train through DDP,
which averages gradients over the ranks). The rest of TorchRec's behaviour is recorded, not
failed: its model-parallel gradient scaling (GRADIENT_DIVISION), its MEAN divisor per sharding, a
data-parallel table converted to bf16, and the shardings its CPU sharder does not offer.

Skipped when torch, torchrec or mpiexec is missing.
"""
import json
import os
import random
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")

HERE = os.path.dirname(os.path.abspath(__file__))
MPIEXEC = shutil.which("mpiexec")


def _free_port():
    """A port free now, below the ephemeral range (32768 and up on Linux), where the connections
    other jobs open take theirs: between this check and gloo's bind only a listener can take it."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free TCP port in 20000-31999 for gloo's rendezvous")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if MPIEXEC is None:
        pytest.skip("mpiexec not found: the TorchRec scenarios run 2 ranks")
    out = str(tmp_path_factory.mktemp("torchrec") / "results.json")
    cmd = [MPIEXEC, "-n", "2", sys.executable, os.path.join(HERE, "torchrec_cases.py")]
    for attempt in range(3):  # a port taken between the check and gloo's bind: another port
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1",
                   EMBER_TORCHREC_PORT=str(_free_port()), EMBER_TORCHREC_OUT=out)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=480)
        except subprocess.TimeoutExpired as e:
            pytest.fail("torchrec_cases.py did not finish in 480 s: %s" % (e.stderr or b"")[-4000:])
        if r.returncode == 0 or "EADDRINUSE" not in r.stdout + r.stderr:
            break
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-6000:])
    with open(out) as f:
        return json.load(f)


def show(title, res):
    print("\n== %s" % title)
    for side in ("ember", "torchrec"):
        for k, v in res[side].items():
            print("  %-8s %-22s %s" % (side, k, json.dumps(v)))


def test_grad_scaling(results):
    """8 x 4 zeros, SGD lr 1, rank r looks up ids {2r, 2r+1}, dL_r/dy = 0.5 (docs/semantics.md §3)."""
    res = results["grad_scaling"]
    show("gradient scaling (rows' first column after one step)", res)
    for key, rows in res["ember"].items():
        want = -0.25 if key.endswith("/mean") else -0.5
        assert rows == [want] * 4 + [0.0] * 4, "ember %s: %s" % (key, rows)
    # DDP averages data-parallel gradients over the ranks (documented): 0.5 / 2.
    dp = res["torchrec"]["data_parallel"]
    assert dp == [-0.25] * 4 + [0.0] * 4, "TorchRec data_parallel: %s" % (dp,)


def test_mean_divisor(results):
    """Weighted MEAN: ember divides by the id count under every scheme; TorchRec recorded."""
    res = results["mean_divisor"]
    show("weighted MEAN, rank 0's pooled rows", res)
    want = np.array(res["id_count_mean"])
    other = np.array(res["weight_sum_mean"])
    for scheme, out in res["ember"].items():
        out = np.array(out)
        assert np.allclose(out, want, atol=2e-5, rtol=1e-4), "ember %s" % scheme
        assert not np.allclose(out, other, atol=1e-3), "ember %s divides by the weight sum" % scheme
    for sharding, out in res["torchrec"].items():
        if isinstance(out, dict):
            print("  TorchRec %s: not run: %s" % (sharding, out["error"]))
            continue
        out = np.array(out)
        verdict = ("id count" if np.allclose(out, want, atol=1e-5) else
                   "weight sum" if np.allclose(out, other, atol=1e-5) else "neither")
        print("  TorchRec %s divides by: %s (recorded)" % (sharding, verdict))


def test_dp_bf16(results):
    res = results["dp_bf16"]
    show("data-parallel table converted to bf16", res)
    e = res["ember"]
    assert e["state_dict_is_bf16"] and e["forward_reads_bf16"] and e["step_trains_bf16_storage"], e
    assert not e["forward_reads_fp32"]
    print("  TorchRec (recorded): %s" % json.dumps(res["torchrec"]))
