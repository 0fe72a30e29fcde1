#!/usr/bin/env bash
# Creates bench/peers/.venv with the peer libraries that ember is benchmarked against:
# torch (PyPI) and FBGEMM's CPU build (fbgemm-gpu-cpu, PyPI). The two must be a matching pair:
# fbgemm_gpu's own compatibility table (fbgemm_gpu/__init__.py) pairs fbgemm 1.9 with torch 2.14.
# Only the default PyPI index is reachable here, where Linux torch wheels are the CUDA build
# (a few GiB with the nvidia-* dependencies); the CUDA parts are simply unused on CPU.
#
# Idempotent: an existing venv whose imports already work is kept. Never fails the caller:
# on any error it prints why to stderr and exits 0; the peer scripts then print
# {"skipped": ...} lines of their own when they cannot import what they need.
#
# Usage: bench/peers/setup.sh [python-interpreter]     (default: python3)
# Env:   EMBER_PEERS_TORCH (default 2.14.1), EMBER_PEERS_FBGEMM (default 1.9.0)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
py="${1:-python3}"
torch_ver="${EMBER_PEERS_TORCH:-2.14.1}"
fbgemm_ver="${EMBER_PEERS_FBGEMM:-1.9.0}"

check() {
  "$venv/bin/python" - <<'PY' 2>/dev/null
import torch, fbgemm_gpu  # noqa: F401
from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen  # noqa: F401
import sys; print("setup.sh: ok: torch", torch.__version__, "fbgemm_gpu", getattr(fbgemm_gpu, "__version__", "?"), file=sys.stderr)
PY
}

if [ -x "$venv/bin/python" ] && check; then
  exit 0
fi

echo "setup.sh: creating $venv (torch==$torch_ver, fbgemm-gpu-cpu==$fbgemm_ver)" >&2
if ! "$py" -m venv "$venv" >&2; then
  echo "setup.sh: '$py -m venv' failed; peers will report skipped" >&2
  exit 0
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2 || true
if ! "$venv/bin/python" -m pip install --quiet numpy "torch==$torch_ver" "fbgemm-gpu-cpu==$fbgemm_ver" >&2; then
  echo "setup.sh: pip install of torch==$torch_ver fbgemm-gpu-cpu==$fbgemm_ver failed; trying torch alone" >&2
  "$venv/bin/python" -m pip install --quiet numpy "torch==$torch_ver" >&2 || \
    echo "setup.sh: pip install of torch==$torch_ver failed too" >&2
fi
check || echo "setup.sh: imports still fail in $venv; peers will report skipped" >&2
exit 0
