"""ember.bytes_outstanding(): the process-wide count of the bytes every ember object holds through
the library (the allocator hooks of the contexts the binding creates). Objects created, used and
closed in a loop bring it back to its baseline exactly after each close, and so does the garbage
collection of an unclosed object. The sharded collection, Comm and Checkpoint run as a
one-rank job here (dist_cases.py memory, a subprocess so that this process never initialises
MPI); test_dist.py runs the same case under mpiexec with 2 ranks.
"""
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ember

HERE = os.path.dirname(os.path.abspath(__file__))


def _tables():
    return [ember.TableConfig("a", 300, 16, optimizer="adam", feature_names=["fa", "fb"]),
            ember.TableConfig("b", 1, 4, optimizer="rowwise_adagrad", dtype="fp16")]


def _kjt(rng, B=5):
    ids = np.concatenate([rng.integers(0, 300, 2 * B * 3), np.zeros(B * 3, np.int64)]).astype(np.int64)
    return ember.KJT(ids, np.full(3 * B, 3, np.int32))


def test_bytes_outstanding_local_loop(rng):
    """50 local collections created, trained, read and closed: back to the baseline after each;
    a weights_view keeps the storage's bytes until it goes; a refused creation holds nothing."""
    gc.collect()
    base = ember.bytes_outstanding()
    kjt = _kjt(rng)
    for i in range(50):
        ebc = ember.EmbeddingBagCollection(_tables(), seed=i, num_threads=1 + i % 2)
        out = ebc.forward(kjt)
        ebc.backward(kjt, np.ones_like(out))
        ebc.read("a", "momentum2")
        held = ember.bytes_outstanding() - base
        assert held >= ebc.bytes_outstanding >= 300 * 16 * 4 * 3, (i, held, ebc.bytes_outstanding)
        if i % 10 == 0:
            view = ebc.weights_view("a")
            ebc.close()
            assert ember.bytes_outstanding() - base >= 300 * 16 * 4  # the view holds the weights
            del view
        else:
            ebc.close()
        assert ebc.bytes_outstanding == 0
        assert ember.bytes_outstanding() == base, "iteration %d: %d bytes left" % (i, ember.bytes_outstanding() - base)
    with pytest.raises(ember.InvalidArgumentError):
        ember.EmbeddingBagCollection(_tables() + [ember.TableConfig("a", 3, 4)])  # duplicate name
    assert ember.bytes_outstanding() == base


def test_bytes_outstanding_garbage_collection(rng):
    """Unclosed collections (and one in a reference cycle) freed by garbage collection."""
    gc.collect()
    base = ember.bytes_outstanding()
    kjt = _kjt(rng)
    for i in range(50):
        ebc = ember.EmbeddingBagCollection(_tables(), seed=i)
        ebc.forward(kjt)
        assert ember.bytes_outstanding() > base
        cycle = i % 10 == 0
        if cycle:
            ebc.cycle = ebc  # only the cycle collector frees it
        del ebc
        if cycle:
            gc.collect()
        assert ember.bytes_outstanding() == base, "iteration %d" % i
    with ember.EmbeddingBagCollection(_tables(), seed=1) as ebc:
        ebc.forward(kjt)
    assert ember.bytes_outstanding() == base


def test_bytes_outstanding_threads(rng):
    """Four threads creating, training and closing collections at once (the count is atomic)."""
    gc.collect()
    base = ember.bytes_outstanding()
    kjt = _kjt(rng)
    errors = []

    def work(k):
        try:
            for i in range(25):
                with ember.EmbeddingBagCollection(_tables(), seed=k * 100 + i, num_threads=1) as ebc:
                    out = ebc.forward(kjt)
                    ebc.backward(kjt, np.ones_like(out))
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert ember.bytes_outstanding() == base


def test_bytes_outstanding_lfq(rng):
    """LFQ modules created, run and closed (or collected) 50 times."""
    gc.collect()
    base = ember.bytes_outstanding()
    x = rng.standard_normal((2, 3, 4))
    for i in range(50):
        q = ember.LFQ(dim=4, codebook_size=16, seed=i)
        out, _, _ = q.forward(x)
        q.backward(np.ones_like(out))
        assert ember.bytes_outstanding() > base
        if i % 2 and hasattr(q, "close"):
            q.close()
        del q
        gc.collect()
        assert ember.bytes_outstanding() == base, "iteration %d" % i


def test_bytes_outstanding_zero_in_a_fresh_process():
    """0 at import, while nothing exists; 0 again once the last object is closed."""
    code = """
        import numpy as np, ember
        assert ember.bytes_outstanding() == 0, ember.bytes_outstanding()
        ebc = ember.EmbeddingBagCollection([ember.TableConfig("t", 10, 4)])
        ebc.forward(ember.KJT(np.array([1, 2], np.int64), np.array([2], np.int32)))
        assert ember.bytes_outstanding() > 0
        ebc.close()
        assert ember.bytes_outstanding() == 0, ember.bytes_outstanding()
        print("zero")
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "zero", r.stdout + r.stderr


def test_bytes_outstanding_sharded_one_rank(tmp_path):
    """The sharded collection (every scheme), Comm and Checkpoint on one rank, 50 times each."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "dist_cases.py"), "memory", str(tmp_path / "ckpt")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, "exit %d\n%s\n%s" % (r.returncode, r.stdout[-4000:], r.stderr[-4000:])
    assert "0 failures" in r.stdout, r.stdout
