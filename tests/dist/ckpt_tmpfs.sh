#!/usr/bin/env bash
# A real full disk: checkpoints saved again and again into a tmpfs that holds one and a half of
# them. The second save runs out of space (ENOSPC from the file system, not an injected one): it
# must fail on every rank naming the reason, leave nothing of itself behind, and the first
# checkpoint must still load whole. Then a save into a new directory on the full disk: it fails
# the same way and removes the directory it created. Skipped (exit 77, with the reason) where this machine does
# not let the test mount a tmpfs (not root, or a container without CAP_SYS_ADMIN).
# Usage: ckpt_tmpfs.sh SAVER NP MPIEXEC NUMPROC_FLAG [MPIEXEC_PREFLAGS...]
set -u
saver=$1 np=$2 mpiexec=$3 npflag=$4
shift 4
. "$(dirname "$0")/tmpfs_mount.sh"
trap tmpfs_unmount EXIT
# The saver's table: 300000 x 16 fp32 weights + 300000 row-wise Adagrad values = 20.4 MB.
tmpfs_mount 32m "the injected full disk of dist.checkpoint.np* covers the failure path"
ck=$mnt/ck
out=$("$mpiexec" "$npflag" "$np" "$@" "$saver" save "$ck" 1 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^saved' | head -5
fail=0
[ "$rc" -ne 0 ] || { echo "ckpt_tmpfs: the saver did not fail on a full disk"; fail=1; }
printf '%s\n' "$out" | grep -q '^saved 1$' || { echo "ckpt_tmpfs: the first save did not fit"; fail=1; }
printf '%s\n' "$out" | grep -q 'No space left on device' || { echo "ckpt_tmpfs: no OS reason in the error"; fail=1; }
left=$(ls "$ck" | grep -v -e '^manifest.json$' -e '^g1-r[0-9]*\.bin$')
[ -z "$left" ] || { echo "ckpt_tmpfs: the failed save left: $left"; fail=1; }
rm -f "$ck".pid.*
fresh=$mnt/fresh
out=$("$mpiexec" "$npflag" "$np" "$@" "$saver" save "$fresh" 1 2>&1)
rc=$?
[ "$rc" -ne 0 ] || { echo "ckpt_tmpfs: the save into a new directory did not fail on a full disk"; fail=1; }
printf '%s\n' "$out" | grep -q 'No space left on device' ||
  { echo "ckpt_tmpfs: no OS reason in the error of the save into a new directory:"; printf '%s\n' "$out" | head -5; fail=1; }
[ ! -e "$fresh" ] || { echo "ckpt_tmpfs: the failed save left its new directory:" $(ls -A "$fresh"); fail=1; }
rm -f "$fresh".pid.*
v=$("$mpiexec" "$npflag" "$np" "$@" "$saver" verify "$ck" 2>&1)
printf '%s\n' "$v" | grep -q '^ok 1$' || { echo "ckpt_tmpfs: the first checkpoint does not load whole:"; printf '%s\n' "$v"; fail=1; }
[ "$fail" -eq 0 ] && echo "ckpt_tmpfs: the second save failed with ENOSPC on a 32 MiB tmpfs, left nothing, and the first checkpoint loads whole; a save into a new directory failed and removed it"
exit "$fail"
