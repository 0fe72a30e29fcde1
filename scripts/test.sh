#!/usr/bin/env bash
# Installs what is missing, builds (preset `release`, or the one given), and runs every test.
# After the release suite, the distributed tests (label mpi: everything under mpiexec) run again
# against MPICH, whose ABI Cray MPICH and Intel MPI share (preset `mpich`, which builds only what
# those tests need). Then the Python package's tests (scripts/test-python.sh: its venv outside the
# clone, `pip install .`, pytest on tests/python). The release and sanitize suites include the
# cluster tests (tests/cluster.cmake: network namespaces, scripts/cluster.sh). Extra arguments go
# to both ctest runs.
# Usage: scripts/test.sh [release|sanitize] [extra ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
# The cluster tests (label cluster) need network namespaces; where there are none they skip,
# and this says why.
bash scripts/cluster.sh check || echo "test.sh: the cluster tests will be skipped"
ctest --preset "$preset" -j "$(nproc)" "$@"
if [ "$preset" = release ]; then
  cmake --preset mpich >/dev/null
  cmake --build --preset mpich -j "$(nproc)"
  echo "test.sh: the distributed tests again, under $(build-mpich/bin/ember --version | sed -n 's/^mpi: //p')"
  ctest --preset mpich -j "$(nproc)" "$@"
  bash scripts/test-python.sh
fi
