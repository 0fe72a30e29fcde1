#!/usr/bin/env bash
# `ember train --save_dir` on a real full disk: the save directory lies in a tmpfs that holds two
# checkpoints and a half, so the run's third save runs out of space (ENOSPC from the file system).
# The run must fail naming the reason and leave no directory of the failed step behind (the CLI
# made it, the CLI removes it). A run resumed from the first checkpoint then saves its step 4
# again into the second's directory and fails too: that directory held a good checkpoint and
# must stay, whole. The save directory then verifies (`ember ckpt info --verify`) and resumes
# (`ember train --resume`, saving elsewhere) to the uninterrupted run's digest.
# Skipped (exit 77, with the reason) where this machine does not let the test mount a tmpfs.
# Usage: train_tmpfs.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
. "$(dirname "$0")/tmpfs_mount.sh"
trap 'tmpfs_unmount; rm -rf "$dir"' EXIT
fail() {
  printf 'train_tmpfs.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
# A checkpoint: 26 tables of 5000 x 16 fp32 weights and 5000 row-wise Adagrad values, 8.7 MiB.
tmpfs_mount 22m "ckpt_tmpfs.sh covers the library's side of a full disk"
ck=$mnt/ck
step() { printf '%s/step-%010d' "$ck" "$1"; }
common=(--batch_size 256 --num_embeddings 5000 --limit_train_batches 6 --limit_val_batches 1 --eval_interval 0
        --progress lines --digest)
"$@" "$ember" train "${common[@]}" >"$dir/full.txt" 2>&1 || fail "the uninterrupted run failed"

# Steps 2 and 4 fit; step 6 does not.
"$@" "$ember" train "${common[@]}" --save_dir "$ck" --checkpoint_interval 2 >"$dir/full_disk.txt" 2>&1 &&
  fail "the run did not fail on a full disk"
grep -q "^checkpoint '$(step 4)' saved" "$dir/full_disk.txt" || fail "the second checkpoint did not fit"
grep -q '^ember train: error: .*No space left on device' "$dir/full_disk.txt" || fail "no OS reason in the error"
left=$(cd "$ck" && ls -A | tr '\n' ' ')
[ "$left" = "step-0000000002 step-0000000004 " ] || fail "the save directory holds '$left' after the failed save"

# From step 2, step 4 again: its save fails, the committed step 4 stays.
"$@" "$ember" train "${common[@]}" --resume "$(step 2)" --checkpoint_interval 2 >"$dir/again.txt" 2>&1 &&
  fail "the second run did not fail on a full disk"
grep -q '^ember train: error: .*No space left on device' "$dir/again.txt" || fail "no OS reason in the second error"
left=$(cd "$ck" && ls -A | tr '\n' ' ')
[ "$left" = "step-0000000002 step-0000000004 " ] || fail "the save directory holds '$left' after the failed re-save"
for s in 2 4; do
  [ -f "$(step $s)/manifest.json" ] || fail "checkpoint $(step $s) lost its manifest"
done

"$@" "$ember" ckpt info --verify "$ck" >"$dir/info.txt" 2>&1 || fail "ember ckpt info --verify failed"
grep -q "^latest committed: checkpoint '$(step 4)': generation 1" "$dir/info.txt" || fail "ckpt info: not step 4"
grep -q '^verify: OK' "$dir/info.txt" || fail "ckpt info: the latest checkpoint does not verify"

"$@" "$ember" train "${common[@]}" --resume "$ck" --save_dir "$dir/more" >"$dir/resumed.txt" 2>&1 ||
  fail "the resumed run failed"
grep -q "^  resume      '$(step 4)'" "$dir/resumed.txt" || fail "the run did not resume from step 4"
want=$(grep '^digest:' "$dir/full.txt")
got=$(grep '^digest:' "$dir/resumed.txt")
[ -n "$want" ] && [ "$want" = "$got" ] || fail "digests differ: uninterrupted '$want', resumed '$got'"
echo "train_tmpfs: saves that ran out of space on a 22 MiB tmpfs left no step directory of their own and" \
     "kept the committed one they would have replaced; the last checkpoint verifies and resumes to the" \
     "uninterrupted run's digest"
exit 0
