#!/usr/bin/env bash
# The Python package's tests (docs/python.md), in one of two modes:
#
#   release (default): makes or reuses the venv outside the clone (scripts/pyenv.sh: numpy, pytest,
#     mpi4py, scikit-build-core, and torch, torchrec, fbgemm-gpu-cpu), installs the package from
#     this checkout into it (pip; scikit-build-core drives the CMake build in build-python/,
#     incremental after the first time), and runs pytest on tests/python. The torch and torchrec
#     tests skip, saying so, when those do not import; the numpy tests never need torch.
#     `scripts/test.sh` runs this after the C suites.
#   sanitize: the same tests against the library and the extension built with AddressSanitizer and
#     UndefinedBehaviorSanitizer (gcc; build dir build-python-sanitize/), installed into a venv of
#     their own ($EMBER_PYENV-sanitize, default ~/.cache/ember/pyenv-sanitize: the base set, no
#     torch), so the release install is never touched. The interpreter is not instrumented: it runs
#     with gcc's ASan and UBSan runtimes preloaded (LD_PRELOAD, inherited by every process a test
#     starts: mpiexec's ranks too, though not MPI's launcher itself), ASAN_OPTIONS=detect_leaks=0
#     (CPython leaks by design; ember.bytes_outstanding() and the tests' exact counts check
#     ember's own memory), UBSan halting on the first error. The sanitizers write their reports to
#     build-python-sanitize/logs/; any report fails the run, even from a process whose exit status
#     a test does not check (the timeout tests end their jobs with MPI_Abort), and is printed. The
#     torch tests are left out, each skipping with the reason (EMBER_TEST_NO_TORCH,
#     tests/python/conftest.py): ember.torch reaches the extension only through the numpy calls
#     the numpy tests make (it hands it numpy views of torch tensors); under ASan they pass but
#     would add about 4 minutes to CI for no C path of their own. About 1 minute of tests on 2
#     cores, plus about 2.5 for a first build. `.ci/run` runs this after the C suites under the
#     sanitizers.
#
# Usage: scripts/test-python.sh [release|sanitize] [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=release
case "${1:-}" in
  release|sanitize) mode=$1; shift ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
t0=$(date +%s)

if [ "$mode" = release ]; then
  venv=$(bash scripts/pyenv.sh | tail -n 1)
  echo "test-python.sh: venv $venv" >&2
  "$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps .
  t1=$(date +%s)
  rc=0
  "$venv/bin/python" -m pytest -q -rs tests/python "$@" || rc=$?
  echo "test-python.sh: release: install $((t1 - t0)) s, tests $(($(date +%s) - t1)) s" >&2
  exit "$rc"
fi

venv=$(EMBER_PYENV="${EMBER_PYENV:-$HOME/.cache/ember/pyenv}-sanitize" EMBER_REQUIRE_TORCH=0 \
       bash scripts/pyenv.sh --no-torch | tail -n 1)
echo "test-python.sh: sanitize: venv $venv" >&2
runtimes=()
for lib in libasan.so libubsan.so; do
  path=$(gcc -print-file-name="$lib")
  if [ ! -e "$path" ]; then
    echo "test-python.sh: gcc has no $lib (Debian's libasan and libubsan come with gcc)" >&2
    exit 1
  fi
  runtimes+=("$path")
done
"$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps \
  -C build-dir='build-python-sanitize/{wheel_tag}' -C cmake.build-type=RelWithDebInfo \
  -C cmake.define.CMAKE_C_COMPILER=gcc -C cmake.define.EMBER_SANITIZE=ON .
t1=$(date +%s)
logs="$PWD/build-python-sanitize/logs"
rm -rf "$logs"
mkdir -p "$logs"
# MPI's launcher is not ember's code (Open MPI 4.1's mpiexec has a use-after-free of its own in
# its PMIx logging thread, which ASan reports): the tests find mpiexec first on PATH in a wrapper
# that runs the launcher without the runtimes and hands them to the ranks it starts.
if real=$(command -v mpiexec); then
  wrap="$PWD/build-python-sanitize/bin"
  mkdir -p "$wrap"
  # shellcheck disable=SC2016 # expanded by the wrapper, when it runs
  if "$real" --version 2>/dev/null | grep -q -e "Open MPI" -e OpenRTE; then
    pass='-x LD_PRELOAD="$LD_PRELOAD"'
  else
    pass='-genv LD_PRELOAD "$LD_PRELOAD"' # MPICH's Hydra
  fi
  printf '#!/bin/sh\n# scripts/test-python.sh sanitize: %s without the sanitizers, its ranks with them.\nexec env -u LD_PRELOAD %s %s "$@"\n' \
    "$real" "$real" "$pass" >"$wrap/mpiexec"
  chmod +x "$wrap/mpiexec"
  export PATH="$wrap:$PATH"
fi
rc=0
LD_PRELOAD="${runtimes[0]}:${runtimes[1]}${LD_PRELOAD:+:$LD_PRELOAD}" \
ASAN_OPTIONS="detect_leaks=0:log_path=$logs/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
EMBER_TEST_NO_TORCH="left out of the sanitized run (scripts/test-python.sh sanitize): ember.torch reaches the \
extension only through the numpy calls the numpy tests make" \
  "$venv/bin/python" -m pytest -q -rs tests/python "$@" || rc=$?
echo "test-python.sh: sanitize: build and install $((t1 - t0)) s, tests $(($(date +%s) - t1)) s" >&2
reports=("$logs"/*)
if [ -e "${reports[0]}" ]; then
  for f in "${reports[@]}"; do
    echo "test-python.sh: sanitizer report $f:" >&2
    cat "$f" >&2
  done
  echo "test-python.sh: sanitize: ${#reports[@]} sanitizer report(s) above: FAILED" >&2
  exit 1
fi
exit "$rc"
