#!/usr/bin/env bash
# Checkpoints readable outside ember: ckpt_dump saves a collection of every dtype, optimizer-state
# shape and scheme under mpiexec -n NP (records of 64 bytes, two blobs) and writes the gathered
# state dict as raw reference files; read_checkpoint.py then rebuilds every tensor from the
# checkpoint's manifest and records with numpy alone and compares it bitwise with the references.
# numpy must be importable by PYTHON (Debian's /usr/bin/python3 with apt's python3-numpy): a
# missing numpy fails the test, it is not skipped.
# Usage: ckpt_numpy.sh DUMP READER PYTHON NP MPIEXEC NUMPROC_FLAG [MPIEXEC_PREFLAGS...]
set -u
dump=$1 reader=$2 python=$3 np=$4 mpiexec=$5 npflag=$6
shift 6
if ! "$python" -c 'import numpy' 2>/dev/null; then
  echo "ckpt_numpy: FAILED: $python cannot import numpy: run scripts/setup.sh (it installs python3-numpy)"
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mpiexec" "$npflag" "$np" "$@" "$dump" "$dir/ck" "$dir/ref" || { echo "ckpt_numpy: ckpt_dump failed"; exit 1; }
echo "ckpt_numpy: $(ls "$dir/ck" | tr '\n' ' ')"
"$python" "$reader" "$dir/ck" "$dir/ref"
