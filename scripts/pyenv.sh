#!/usr/bin/env bash
# Creates or updates the Python environment that ember's Python package, its tests and the Python
# benchmarks run in: a venv OUTSIDE the clone (so a fresh clone, a worktree and CI share it), made
# from Debian's /usr/bin/python3, whose path it prints as the last line of stdout. Messages go to
# stderr.
#
# Usage: scripts/pyenv.sh [--no-torch]
#   --no-torch           only the base set (numpy, pytest, scikit-build-core, mpi4py); a venv that
#                        already has the torch set keeps it
# Env:
#   EMBER_PYENV          the venv's path (default $HOME/.cache/ember/pyenv)
#   EMBER_REQUIRE_TORCH  1: exit non-zero when the torch set cannot be installed (default: warn,
#                        leave the base set, exit 0)
#
# The sets, pinned to versions that work together:
#   base:  numpy, pytest, scikit-build-core, mpi4py. mpi4py's PyPI wheel carries no MPI: at import
#          it loads the system's libmpi.so (the Debian alternative, Open MPI here, the library
#          libember links; an MPI already loaded in the process first), so an mpi4py communicator
#          can be handed to ember (MPI_Comm_f2c of its py2f handle). The wheel installs in seconds
#          where a source build of mpi4py takes minutes on 2 cores.
#   torch: torch 2.14.1 with FBGEMM's CPU build fbgemm-gpu-cpu 1.9.0 (fbgemm_gpu's own table pairs
#          fbgemm 1.9 with torch 2.14, as bench/peers/setup.sh) and torchrec 1.9.2, the release
#          built for fbgemm 1.9. torchrec's metadata requires "fbgemm-gpu", the CUDA build, which
#          cannot load without NVIDIA's driver and would be a second download of the same package;
#          so torchrec is installed with --no-deps and its other requirements (tensordict,
#          torchmetrics 1.0.3, tqdm, pyre-extensions; iopath, which its datasets read files with)
#          by name. `pip check` therefore reports "torchrec requires fbgemm-gpu": expected,
#          fbgemm-gpu-cpu provides the same fbgemm_gpu.
#          PyPI's Linux torch is the CUDA build: its nvidia-* and triton dependencies come along
#          (about 5 GiB installed); the CUDA parts are unused on CPU.
#
# Idempotent: the venv keeps a marker ($EMBER_PYENV/ember-pyenv.txt) naming the sets installed and
# their pins; when it already names what is asked for, the script only checks that the venv's
# interpreter runs and returns at once. A changed pin below reinstalls that set. Two runs at once
# take turns (flock on $EMBER_PYENV.lock).
set -euo pipefail

want_torch=1
for a in "$@"; do
  case "$a" in
    --no-torch) want_torch=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
    *) echo "pyenv.sh: unknown argument '$a' (usage: scripts/pyenv.sh [--no-torch])" >&2; exit 2 ;;
  esac
done
require_torch="${EMBER_REQUIRE_TORCH:-0}"
if [ "$want_torch" = 0 ] && [ "$require_torch" = 1 ]; then
  echo "pyenv.sh: --no-torch with EMBER_REQUIRE_TORCH=1: torch cannot be both skipped and required" >&2
  exit 2
fi

venv="${EMBER_PYENV:-$HOME/.cache/ember/pyenv}"
py=/usr/bin/python3

base_pins=(numpy==2.4.6 pytest==9.2.0 scikit-build-core==1.1.2 mpi4py==4.1.2)
torch_pins=(torch==2.14.1 fbgemm-gpu-cpu==1.9.0 tensordict==0.15.3 torchmetrics==1.0.3 tqdm==4.70.1
            pyre-extensions==0.0.32 iopath==0.1.10)
torchrec_pin=torchrec==1.9.2
base_line="base ${base_pins[*]}"
torch_line="torch ${torch_pins[*]} $torchrec_pin"
marker="$venv/ember-pyenv.txt"

log() { echo "pyenv.sh: $*" >&2; }

# The marker names the set: quick exit when everything asked for is there and the interpreter runs.
have() { [ -f "$marker" ] && grep -qxF "$1" "$marker"; }
complete() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" -c '' 2>/dev/null || return 1
  have "$base_line" || return 1
  [ "$want_torch" = 0 ] || have "$torch_line"
}
if complete; then
  echo "$venv"
  exit 0
fi

# Debian's packages the venv, mpi4py and ember's extension need, only what is missing (as scripts/setup.sh).
pkgs=(python3-venv python3-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing Debian packages ${missing[*]} and not root to install them: apt-get install ${missing[*]}"
    exit 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if complete; then   # another run finished it while this one waited
  echo "$venv"
  exit 0
fi

t0=$(date +%s)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c '' 2>/dev/null; then
  log "creating $venv from $py"
  rm -rf "$venv"
  "$py" -m venv "$venv" >&2
fi
vpy="$venv/bin/python"
pip=("$vpy" -m pip --disable-pip-version-check)
export PIP_PROGRESS_BAR=off
touch "$marker"
# Rewrites the marker without a set's old line (a pin changed) and with its new one.
mark() {
  local kind="$1" line="$2"
  { grep -v "^$kind " "$marker" || true; echo "$line"; } >"$marker.new"
  mv "$marker.new" "$marker"
}

if ! have "$base_line"; then
  log "installing the base set: ${base_pins[*]}"
  "${pip[@]}" install --quiet --upgrade pip >&2
  "${pip[@]}" install --quiet --only-binary mpi4py "${base_pins[@]}" >&2
  "$vpy" -c 'import numpy, pytest, scikit_build_core; from mpi4py import MPI
print("pyenv.sh: mpi4py", MPI.Get_library_version().splitlines()[0][:60])' >&2
  mark base "$base_line"
fi

torch_ok=1
if [ "$want_torch" = 1 ] && ! have "$torch_line"; then
  log "installing the torch set: ${torch_pins[*]} $torchrec_pin (a few GiB from PyPI)"
  # Any fbgemm-gpu (the CUDA build) from an earlier install would shadow or break the CPU build.
  if "${pip[@]}" show fbgemm-gpu >/dev/null 2>&1; then
    "${pip[@]}" uninstall --quiet -y fbgemm-gpu >&2
    "${pip[@]}" install --quiet --no-deps --force-reinstall "fbgemm-gpu-cpu==1.9.0" >&2 || true
  fi
  if "${pip[@]}" install --quiet "${torch_pins[@]}" >&2 &&
     "${pip[@]}" install --quiet --no-deps "$torchrec_pin" >&2 &&
     "$vpy" - >&2 <<'PY'
import torch, torchrec, fbgemm_gpu  # noqa: F401
from torchrec.distributed.model_parallel import DistributedModelParallel  # noqa: F401
from torchrec.models.dlrm import DLRM  # noqa: F401
print("pyenv.sh: torch", torch.__version__, "torchrec", torchrec.__version__ if hasattr(torchrec, "__version__") else "?",
      "fbgemm_gpu", getattr(fbgemm_gpu, "__version__", "?"))
PY
  then
    mark torch "$torch_line"
  else
    torch_ok=0
  fi
fi

log "done in $(($(date +%s) - t0)) s; $(du -sh "$venv" 2>/dev/null | cut -f1) in $venv"
if [ "$torch_ok" = 0 ]; then
  if [ "$require_torch" = 1 ]; then
    log "ERROR: the torch set (${torch_pins[*]} $torchrec_pin) could not be installed or imported, and EMBER_REQUIRE_TORCH=1"
    exit 1
  fi
  log "WARNING: the torch set (${torch_pins[*]} $torchrec_pin) could not be installed or imported;" \
      "the venv has the base set only (torch tests and benchmarks will skip). EMBER_REQUIRE_TORCH=1 makes this an error."
fi
echo "$venv"
