"""The README's Python example, docs/python.md's pipeline, TorchRec, wire/topology and torch.compile examples and
examples/python/dlrm.py run as a user runs them (need torch).

The DLRM example on 1 and 2 ranks starts from the same model and trains the same global batches,
so its first global loss agrees across world sizes; its JSON line is what bench/python/dlrm_ab.sh
parses. Under --compile aot_eager, and at 2 ranks with --pipeline, it trains the same losses, bit
for bit.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIEXEC = shutil.which("mpiexec")


def run(np_, args, timeout=240):
    cmd = ([MPIEXEC, "-n", str(np_)] if np_ > 1 else []) + [sys.executable] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p


def readme_example():
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize("np_", [1, 2])
def test_readme_example(np_, tmp_path):
    if np_ > 1 and MPIEXEC is None:
        pytest.skip("mpiexec not found")
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    out = run(np_, [str(script)]).stdout
    # Each rank prints "<rank> torch.Size([4, 16])"; the ranks' lines may interleave.
    assert out.count("torch.Size([4, 16])") == np_, out
    assert sorted(re.sub(r"torch\.Size\(\[4, 16\]\)|\s", "", out)) == [str(r) for r in range(np_)], out


def dlrm(np_, *flags):
    p = run(np_, ["examples/python/dlrm.py", "--batch_size", "256", "--limit_train_batches", "8",
                  "--warmup_batches", "2", "--limit_val_batches", "1", "--print_interval", "0", "--json", *flags])
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert len(lines) == 1, p.stdout
    rec = json.loads(lines[0])
    impl = "ember-torch-compile" if "--compile" in flags else "ember-torch"
    assert rec["bench"] == "dlrm" and rec["impl"] == impl and rec["W"] == np_
    assert rec["samples_per_s"] > 0 and math.isfinite(rec["loss_last"])
    assert "eval AUC" in p.stderr
    return rec


def test_dlrm_example_world_sizes_agree():
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    one, two = dlrm(1), dlrm(2)
    # Same initial model and the same first global batch: the same mean loss (float sums differ
    # only in order).
    assert abs(one["loss_first"] - two["loss_first"]) <= 1e-6, (one, two)
    assert abs(one["loss_last"] - two["loss_last"]) <= 1e-3, (one, two)


def test_dlrm_example_pipelined_trains_the_same_losses():
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    plain, piped = dlrm(2), dlrm(2, "--pipeline")
    assert piped["pipeline"] is True
    for k in ("loss_first", "loss_last", "eval_auc"):
        assert plain[k] == piped[k], (k, plain, piped)


def test_python_md_pipeline_example(tmp_path):
    assert python_md_example(tmp_path, "## The training pipeline") == "True"


def test_dlrm_example_compiled_trains_the_same_losses():
    eager, compiled = dlrm(1), dlrm(1, "--compile", "aot_eager")
    for k in ("loss_first", "loss_last", "eval_auc"):
        assert eager[k] == compiled[k], (k, eager, compiled)


def python_md_example(tmp_path, heading):
    text = open(os.path.join(ROOT, "docs", "python.md")).read()
    section = text[text.index(heading):]
    script = tmp_path / "example.py"
    script.write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    return run(1, [str(script)]).stdout.strip()


def test_python_md_compile_example(tmp_path):
    assert python_md_example(tmp_path, "## `torch.compile` and `torch.export`") == "0"


def test_python_md_torchrec_example(tmp_path):
    pytest.importorskip("torchrec", reason="torchrec not installed")
    assert python_md_example(tmp_path, "## From TorchRec and back") == "True"


def test_python_md_wire_and_topology_example(tmp_path):
    lines = python_md_example(tmp_path, "## Wire precision, the topology").splitlines()
    assert [l.split(":")[0] for l in lines[:3]] == ["planned", "rw", "tw"], lines
    ms = [float(l.split(": ")[1].split(" ms")[0]) for l in lines[:3]]
    assert 0 < ms[0] <= min(ms[1:]), lines  # the planner's plan is predicted no slower
    assert lines[-1] == "('fp16', 'bf16')", lines


def test_dlrm_example_refuses_bad_flags():
    p = subprocess.run([sys.executable, "examples/python/dlrm.py", "--dense_arch_layer_sizes", "64,8"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and "--embedding_dim" in p.stderr, p.stderr
