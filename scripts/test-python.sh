#!/usr/bin/env bash
# The Python package's tests (docs/python.md): makes or reuses the venv outside the clone
# (scripts/pyenv.sh: numpy, pytest, mpi4py, scikit-build-core, and torch, torchrec, fbgemm-gpu-cpu),
# installs the package from this checkout into it (pip; scikit-build-core drives the CMake build in
# build-python/, incremental after the first time), and runs pytest on tests/python. The torch and
# torchrec tests skip, saying so, when those do not import; the numpy tests never need torch.
# Extra arguments go to pytest. `scripts/test.sh` runs this after the C suites.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(bash scripts/pyenv.sh | tail -n 1)
echo "test-python.sh: venv $venv" >&2
"$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps .
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
"$venv/bin/python" -m pytest -q -rs tests/python "$@"
