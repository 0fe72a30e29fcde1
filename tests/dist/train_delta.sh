#!/usr/bin/env bash
# Incremental checkpoints from the command line (`ember train --checkpoint_delta_interval`):
#   - a run of 9 steps with deltas every 2 and no full interval saves step-0000000002 in full and
#     then deltas into it at steps 4, 6 and 8 (its report says "delta saved"), and in full at the
#     end (step 9); the chain verifies and `ember ckpt info` names it and the step it holds;
#   - a run stopped after step 6 leaves step-0000000002 holding step 6; `--resume` from it trains
#     on to step 12 and ends with the uninterrupted run's digest (every loss, the eval outputs,
#     the dense model, every table and its optimizer state), the resumed run inheriting the delta
#     interval (its own deltas go into its first full save: step-0000000008 at step 10);
#   - the option without a save directory is refused in one line.
# Usage: train_delta.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  printf 'train_delta.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
common=(--batch_size 256 --num_embeddings 3000 --limit_val_batches 2 --eval_interval 3 --progress lines --digest)

"$@" "$ember" train "${common[@]}" --limit_train_batches 9 --save_dir "$dir/a" --checkpoint_delta_interval 2 \
  >"$dir/a.txt" 2>&1 || fail "the run with deltas failed"
grep -q "^  checkpoints at the end into '$dir/a/step-\*', keeping the newest 3; deltas every 2 steps into the newest" \
  "$dir/a.txt" || fail "the report does not say where the deltas go"
[ "$(grep -c "^checkpoint '$dir/a/step-0000000002' delta saved" "$dir/a.txt")" = 3 ] ||
  fail "expected 3 deltas into step-0000000002"
grep -q "^checkpoint '$dir/a/step-0000000002' saved" "$dir/a.txt" || fail "no full save at step 2"
grep -q "^checkpoint '$dir/a/step-0000000009' saved" "$dir/a.txt" || fail "no full save at the end"
"$ember" ckpt info --verify "$dir/a/step-0000000002" >"$dir/info.txt" 2>&1 || fail "ckpt info failed on the chain"
grep -q "generation 4 (deltas on generation 1)" "$dir/info.txt" || fail "ckpt info does not name the chain"
grep -q "step 8" "$dir/info.txt" || fail "ckpt info does not give the step the chain holds"
grep -q '^verify: OK' "$dir/info.txt" || fail "the chain does not verify"

# Stopped after step 6 (its end save falls on a delta step: none more), resumed to step 12.
"$@" "$ember" train "${common[@]}" --limit_train_batches 12 >"$dir/full.txt" 2>&1 || fail "the uninterrupted run failed"
"$@" "$ember" train "${common[@]}" --limit_train_batches 6 --save_dir "$dir/b" --checkpoint_delta_interval 2 \
  >"$dir/b.txt" 2>&1 || fail "the first half failed"
[ "$(ls "$dir/b")" = step-0000000002 ] || fail "expected only step-0000000002 in the save directory: $(ls "$dir/b")"
"$@" "$ember" train "${common[@]}" --limit_train_batches 12 --resume "$dir/b" >"$dir/resume.txt" 2>&1 ||
  fail "the resume failed"
grep -q "^  resume      '$dir/b/step-0000000002': step 6," "$dir/resume.txt" || fail "the resume did not start at step 6"
grep -q "^checkpoint '$dir/b/step-0000000008' saved" "$dir/resume.txt" || fail "the resumed run's first full save"
grep -q "^checkpoint '$dir/b/step-0000000008' delta saved" "$dir/resume.txt" || fail "the resumed run's delta"
a=$(grep '^digest:' "$dir/full.txt") b=$(grep '^digest:' "$dir/resume.txt")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "resumed from a chain: '$b', uninterrupted: '$a'"

"$ember" train --checkpoint_delta_interval 5 >"$dir/nodir.txt" 2>&1 && fail "a delta interval without a save directory ran"
grep -q "^ember train: --checkpoint_delta_interval saves checkpoints: give --save_dir DIR" "$dir/nodir.txt" ||
  fail "no one-line refusal without --save_dir"
echo "train_delta.sh: deltas into the newest full checkpoint; resumed from a chain: $a"
