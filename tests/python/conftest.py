"""Shared fixtures of the Python tests (tests/python).

- `rng`: a numpy Generator seeded from the test's name, so each test sees its own fixed stream.
- `make_tables`: a factory of ember.TableConfig lists (shapes chosen to hit one-row tables and
  features sharing a table), with keyword overrides applied to every table.
- the report header names the ember build, the ISA, and which optional parts (torch, torchrec,
  mpiexec, mpi4py) are present; the terminal summary repeats every skip with its reason.
- EMBER_TEST_NO_TORCH (scripts/test-python.sh sanitize sets it): a reason; torch, torchrec and
  fbgemm_gpu then refuse to import with it, so every torch test skips giving that reason, whether
  or not torch is installed.

Running: install the package into a virtual environment (pip install --no-build-isolation . with
numpy, pytest, scikit-build-core; mpi4py optional) and run `python -m pytest tests/python`. The
torch tests need torch in the same environment, the TorchRec scenarios torchrec too; both skip,
saying why, when those are missing. The MPI tests (test_dist.py) need mpiexec; as root they set
Open MPI's OMPI_ALLOW_RUN_AS_ROOT variables themselves.
"""
import hashlib
import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

NO_TORCH = os.environ.get("EMBER_TEST_NO_TORCH")


class _NoTorch:
    """A meta path finder refusing torch and what needs it, with the reason NO_TORCH gives."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchrec", "fbgemm_gpu"):
            raise ModuleNotFoundError(NO_TORCH, name=name)  # what importorskip turns into a skip
        return None


if NO_TORCH:
    sys.meta_path.insert(0, _NoTorch)


def _optional(name):
    try:
        mod = __import__(name)
        return getattr(mod, "__version__", "present")
    except Exception as e:  # an optional part that does not import is reported, not fatal
        return "missing (%s)" % (type(e).__name__,)


def pytest_report_header(config):
    lines = []
    try:
        import ember
        lines.append("ember %s, isa %s; %s" % (ember.__version__, ember.isa_best(), ember.build_info()))
    except Exception as e:
        lines.append("ember: does not import (%s: %s)" % (type(e).__name__, e))
    lines.append("numpy %s; mpiexec %s; mpi4py %s" % (np.__version__, shutil.which("mpiexec") or "missing",
                                                    _optional("mpi4py")))
    # torch is only probed by name here (importing it would slow every run down).
    import importlib.util
    for name in ("torch", "torchrec"):
        if NO_TORCH:
            lines.append("%s: %s" % (name, NO_TORCH))
        else:
            lines.append("%s: %s" % (name, "installed" if importlib.util.find_spec(name) else "not installed"))
    return lines


def pytest_terminal_summary(terminalreporter):
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section("skipped, and why")
    for rep in skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        terminalreporter.write_line("%s: %s" % (rep.nodeid, reason))


@pytest.fixture
def rng(request):
    seed = int.from_bytes(hashlib.sha256(request.node.nodeid.encode()).digest()[:4], "little")
    return np.random.default_rng(seed)


@pytest.fixture
def make_tables():
    """make_tables(kind="mixed", **overrides) -> [ember.TableConfig]:
    "mixed":  t0 13 x 8 SUM read by features f0, f1; t1 1 x 4 MEAN (one row) read by f2;
              t2 10 x 6 MEAN read by f3
    "one":    t0 12 x 8 with one feature f0
    "none":   s0 9 x 4 and s1 1 x 4, pooling "none" (sequence), features g0, g1
    Every override (pooling, optimizer, lr, dtype, ...) applies to every table; pooling= replaces
    the per-table poolings."""
    import ember

    def make(kind="mixed", **kw):
        if kind == "mixed":
            spec = [("t0", 13, 8, ["f0", "f1"], "sum"), ("t1", 1, 4, ["f2"], "mean"),
                    ("t2", 10, 6, ["f3"], "mean")]
        elif kind == "one":
            spec = [("t0", 12, 8, ["f0"], "sum")]
        elif kind == "none":
            spec = [("s0", 9, 4, ["g0"], "none"), ("s1", 1, 4, ["g1"], "none")]
        else:
            raise ValueError(kind)
        kw = dict(kw)
        kw.setdefault("init", ("uniform", -0.5, 0.5))
        pooling = kw.pop("pooling", None)
        return [ember.TableConfig(n, r, d, feature_names=f, pooling=pooling or p, **kw) for n, r, d, f, p in spec]

    return make

