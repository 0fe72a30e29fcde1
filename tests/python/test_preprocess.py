"""`ember preprocess` against TorchRec: its day files read by TorchRec's own reader, and compared
with what TorchRec's BinaryCriteoUtils.tsv_to_npys writes from the same TSV.

ember preprocess writes the layout of the MLPerf-era TorchRec scripts that produced MLPerf's
reference dataset: dense float32 log(x + 3), sparse int32 (the low 32 bits of each hexadecimal
value), labels int32 (N, 1). TorchRec 1.9's tsv_to_npys shifts the dense values by the file's
minimum instead (log(x - min + 2): the same as log(x + 3) when the minimum is -1, as in Criteo's
logs and in the TSV written here) and keeps the whole hexadecimal value as int64. The comparison
states exactly that: labels equal, dense within one ulp (numpy's float32 log against C's logf),
sparse equal to TorchRec's reduced to their low 32 bits; and TorchRec's reader with `hashes` over
ember's files yields the batches of those arrays with ids v mod rows, floored, as `ember train
--dataset criteo_npy` computes them. The CLI is EMBER_CLI, else build/bin/ember (the test skips
without it, or without torchrec).
"""
import os
import subprocess

import numpy as np
import pytest

from test_dcn import _cli

DN, F, N = 13, 26, 301
ROWS = [3, 7, 1000, 65536] + [97] * (F - 4)


def _write_tsv(path, rng):
    lines = []
    for i in range(N):
        dense = ["" if rng.random() < 0.1 else str(int(v)) for v in rng.integers(-1, 5000, size=DN)]
        if i == 0:
            dense[0] = "-1"  # the file's minimum: TorchRec's shift is then log(x + 3) as ember's
        sparse = ["" if rng.random() < 0.05 else "%08x" % v for v in rng.integers(0, 2**32, size=F, dtype=np.uint64)]
        lines.append("\t".join([str(int(rng.integers(0, 2)))] + dense + sparse))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def test_preprocess_equals_torchrec_tsv_to_npys_and_reads_with_its_reader(tmp_path, rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    from torchrec.datasets.criteo import BinaryCriteoUtils, InMemoryBinaryCriteoIterDataPipe

    cli = _cli()
    tsv = str(tmp_path / "day_0.tsv")
    _write_tsv(tsv, rng)
    out = tmp_path / "ember"
    r = subprocess.run([cli, "preprocess", "--input", tsv, "--output_dir", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = {k: str(tmp_path / ("torchrec_%s.npy" % k)) for k in ("dense", "sparse", "labels")}
    BinaryCriteoUtils.tsv_to_npys(tsv, ref["dense"], ref["sparse"], ref["labels"])
    got = {k: np.load(str(out / ("day_0_%s.npy" % k))) for k in ("dense", "sparse", "labels")}
    want = {k: np.load(v) for k, v in ref.items()}

    assert got["labels"].dtype == np.int32 and np.array_equal(got["labels"], want["labels"])
    assert got["dense"].dtype == np.float32 and got["dense"].shape == (N, DN)
    np.testing.assert_array_max_ulp(got["dense"], want["dense"].astype(np.float32), maxulp=1)
    assert got["sparse"].dtype == np.int32 and want["sparse"].min() >= 0 and want["sparse"].max() < 2**32
    assert np.array_equal(got["sparse"], want["sparse"].astype(np.uint32).view(np.int32))
    assert (got["sparse"] < 0).any(), "no hash of 2^31 or above: the test would not see the int32 wrap"

    # TorchRec's reader over ember's files: the batches are the files' rows, the ids floored modulo.
    B = 64
    pipe = InMemoryBinaryCriteoIterDataPipe("train", [str(out / "day_0_dense.npy")], [str(out / "day_0_sparse.npy")],
                                            [str(out / "day_0_labels.npy")], batch_size=B, rank=0, world_size=1,
                                            hashes=ROWS)
    ids = np.mod(got["sparse"].astype(np.int64), np.array(ROWS, dtype=np.int64))  # ember train's rule
    seen = 0
    for batch in pipe:
        n = batch.labels.shape[0]
        rows = slice(seen, seen + n)
        assert np.array_equal(batch.dense_features.numpy(), got["dense"][rows])
        assert np.array_equal(batch.labels.numpy().reshape(-1), got["labels"][rows, 0])
        values = batch.sparse_features.values().numpy().reshape(F, n)  # feature-major, one id each
        assert np.array_equal(values.T, ids[rows])
        seen += n
    assert seen == N
    del torch


def _write_pool_tsv(path, rng, rows):
    """Features 0..12 draw from a pool of 40 values with a long tail (some seen once), 13..25 from all
    of 2^32 (nearly every value new): tables large enough that --memory_mb 1 needs several groups."""
    pool = rng.integers(0, 2**32, size=40, dtype=np.uint64)
    p = 1.0 / np.arange(1, 41) ** 1.5
    p /= p.sum()
    with open(path, "w") as f:
        for _ in range(rows):
            dense = [str(int(v)) for v in rng.integers(-1, 100, size=DN)]
            sparse = ["%08x" % v for v in rng.choice(pool, size=13, p=p)]
            sparse += ["%08x" % v for v in rng.integers(0, 2**32, size=13, dtype=np.uint64)]
            f.write("\t".join([str(int(rng.integers(0, 2)))] + dense + sparse) + "\n")


@pytest.mark.parametrize("threshold,memory_mb", [(3, None), (1, None), (2, 1)])
def test_frequency_threshold_equals_torchrec_sparse_to_contiguous(tmp_path, rng, threshold, memory_mb):
    pytest.importorskip("torchrec")
    pytest.importorskip("iopath")
    from torchrec.datasets.criteo import BinaryCriteoUtils

    cli = _cli()
    tsvs = [str(tmp_path / ("day_%d.tsv" % d)) for d in range(2)]
    for t in tsvs:
        _write_pool_tsv(t, rng, 2000)
    out = tmp_path / "ember"
    cmd = [cli, "preprocess", "--input", ",".join(tsvs), "--output_dir", str(out), "--frequency_threshold",
           str(threshold)] + (["--memory_mb", str(memory_mb)] if memory_mb else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    groups = int(r.stdout.split(" group")[0].rsplit(" ", 1)[1])
    assert (groups > 1) == (memory_mb is not None), r.stdout
    assert not list(out.glob("*raw*")) and not list(out.glob("*.partial")), list(out.iterdir())

    ref = tmp_path / "torchrec"
    ref.mkdir()
    sparse = []
    for d, t in enumerate(tsvs):
        paths = [str(ref / ("day_%d_%s.npy" % (d, k))) for k in ("dense", "sparse", "labels")]
        BinaryCriteoUtils.tsv_to_npys(t, *paths)
        sparse.append(paths[1])
    BinaryCriteoUtils.sparse_to_contiguous(sparse, str(ref), frequency_threshold=threshold)
    for d in range(2):
        got = np.load(str(out / ("day_%d_sparse.npy" % d)))
        want = np.load(str(ref / ("day_%d_sparse_contig_freq.npy" % d)))
        assert got.dtype == np.int32 and got.shape == (2000, F)
        assert np.array_equal(got, want), "day %d: %d ids differ" % (d, int((got != want).sum()))
    assert (got[:, :13] == 1).any() == (threshold > 1)

    # Again: kept. Another threshold, or no remap, into the same directory: refused naming it.
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "with contiguous ids (--frequency_threshold %d): kept" % threshold in r.stdout
    for other in (["--frequency_threshold", str(threshold + 1)], []):
        r = subprocess.run([cli, "preprocess", "--input", ",".join(tsvs), "--output_dir", str(out)] + other,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and "holds contiguous ids of days 0..1" in r.stderr, r.stderr


def _rows(d, day):
    """Day `day` of directory d as one structured view per row (dense, sparse, label bytes)."""
    parts = [np.load(str(d / ("day_%d_%s.npy" % (day, k)))) for k in ("dense", "sparse", "labels")]
    return np.concatenate([p.view(np.uint8).reshape(len(p), -1) for p in parts], axis=1)


def test_shuffle_permutes_the_training_days_jointly(tmp_path, rng):
    """--shuffle_seed: the rows of every day but the last permuted as one set (days keep their sizes,
    the eval day its order); the same seed and budget give the same files (another --memory_mb,
    more buckets, another permutation); a day's rows spread over both output days."""
    cli = _cli()
    tsvs = [str(tmp_path / ("day_%d.tsv" % d)) for d in range(3)]
    for t, n in zip(tsvs, (3000, 2000, 500)):
        _write_pool_tsv(t, rng, n)
    plain = tmp_path / "plain"
    subprocess.run([cli, "preprocess", "--input", ",".join(tsvs), "--output_dir", str(plain)], check=True,
                   capture_output=True)
    before = np.concatenate([_rows(plain, 0), _rows(plain, 1)])
    runs = {}
    for name, extra in (("a", []), ("b", []), ("buckets", ["--memory_mb", "1"])):
        out = tmp_path / name
        r = subprocess.run([cli, "preprocess", "--input", ",".join(tsvs), "--output_dir", str(out), "--shuffle_seed",
                            "11"] + extra, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert ("1 bucket of" in r.stdout) == (name != "buckets"), r.stdout
        d0, d1 = _rows(out, 0), _rows(out, 1)
        assert len(d0) == 3000 and len(d1) == 2000
        assert np.array_equal(_rows(out, 2), _rows(plain, 2)), "the eval day moved"
        after = np.concatenate([d0, d1])
        # A permutation of the same rows (sorted as byte strings, compared whole).
        key = lambda a: a[np.lexsort(a.T[::-1])]
        assert np.array_equal(key(after), key(before))
        assert not np.array_equal(after, before)
        # Day 0's rows (3/5 of the set) spread over both output days, about 3/5 of day 0 staying.
        stay = np.isin(d0.view("V%d" % d0.shape[1]).ravel(), _rows(plain, 0).view("V%d" % d0.shape[1]).ravel())
        assert 0.5 < stay.mean() < 0.7, stay.mean()
        runs[name] = after
    assert np.array_equal(runs["a"], runs["b"]), "the same seed gave another order"
