#!/usr/bin/env bash
# Checkpoints the way a user meets them: `ember train --save_dir D --checkpoint_interval 20` is
# killed (SIGKILL, the launcher and every rank) after its first committed checkpoint; `ember train
# --resume D` trains on to the end and prints the uninterrupted run's digest line (every step's
# loss, the eval outputs, the dense parameters, every table with its optimizer state); D then
# holds the newest --keep_checkpoints checkpoints and no unfinished one; `ember ckpt info --verify`
# and `ember eval --load` read it; a resume with another model is refused with one line.
# Usage: resume_kill.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
job=""
# A process and all its descendants: the launcher and its ranks (Open MPI puts every rank in a
# process group of its own, so killing the launcher's group does not reach them).
tree() { local c; echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
cleanup() { [ -n "$job" ] && kill -KILL $(tree "$job") 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() {
  printf 'resume_kill.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
steps=400
common=(--batch_size 256 --num_embeddings 2000 --limit_train_batches $steps --limit_val_batches 2
        --eval_interval 100 --progress lines --digest)
"$@" "$ember" train "${common[@]}" >"$dir/full.txt" 2>&1 || fail "the uninterrupted run failed"

# The interrupted run: one kill reaches mpiexec and every rank at once, as a node failure would.
# Its launcher's session directory goes in ours (a killed mpiexec leaves it behind).
mkdir "$dir/tmp"
TMPDIR=$dir/tmp "$@" "$ember" train "${common[@]}" --save_dir "$dir/ckpt" --checkpoint_interval 20 \
  --keep_checkpoints 2 >"$dir/killed.txt" 2>&1 &
job=$!
for _ in $(seq 1 1200); do
  compgen -G "$dir/ckpt/step-*/manifest.json" >/dev/null && break
  sleep 0.05
done
kill -KILL $(tree "$job") 2>/dev/null
wait "$job" 2>/dev/null
job=""
compgen -G "$dir/ckpt/step-*/manifest.json" >/dev/null || fail "no checkpoint was committed"
grep -q '^done:' "$dir/killed.txt" && fail "the run ended before the kill: nothing to resume (make it longer)"
# Give the killed ranks a moment to be gone before the next run reads the directory.
sleep 0.2

"$@" "$ember" train "${common[@]}" --resume "$dir/ckpt" >"$dir/resumed.txt" 2>&1 || fail "the resumed run failed"
grep -q "^  resume      '$dir/ckpt/step-" "$dir/resumed.txt" || fail "the resumed run does not say where it resumed"
want=$(grep '^digest:' "$dir/full.txt")
got=$(grep '^digest:' "$dir/resumed.txt")
[ -n "$want" ] && [ "$want" = "$got" ] || fail "digests differ: uninterrupted '$want', resumed '$got'"

# Kept: the newest 2 committed checkpoints (the end's and the one before), nothing unfinished.
kept=$(cd "$dir/ckpt" && ls -d step-* | tr '\n' ' ')
[ "$kept" = "step-0000000380 step-0000000400 " ] || fail "save directory holds '$kept'"
for d in "$dir"/ckpt/step-*; do [ -f "$d/manifest.json" ] || fail "unfinished checkpoint $d left"; done

"$ember" ckpt info --verify "$dir/ckpt" >"$dir/info.txt" 2>&1 || fail "ember ckpt info failed"
for re in "^latest committed: checkpoint '$dir/ckpt/step-0000000400': generation 1, written by 2 ranks$" \
          "^  position    step $steps: epoch 0, next batch $steps; " \
          "^  optimizers  dense adagrad lr 0.05 \\(step $steps\\), embeddings rowwise_adagrad" \
          "^  t_cat_25 +2000 x 16 +rowwise_adagrad +fp32 +$steps " \
          "^  dense.params +[0-9]+ bytes$" \
          "^verify: OK, a load accepts the manifest and every record of the 26 tables and 3 blobs matches its CRC-32$"; do
  grep -Eq "$re" "$dir/info.txt" || fail "ember ckpt info: no line matches /$re/"
done

# The saved model's evaluation is the resumed run's last one.
"$@" "$ember" eval --load "$dir/ckpt" >"$dir/eval.txt" 2>&1 || fail "ember eval failed"
want=$(sed -nE 's/^eval AUC ([0-9.]+) .* eval loss ([0-9.]+)$/eval loss \2  eval AUC \1/p' "$dir/resumed.txt")
got=$(grep -Eo '^eval loss [0-9.]+  eval AUC [0-9.]+' "$dir/eval.txt")
[ -n "$want" ] && [ "$want" = "$got" ] || fail "ember eval printed '$got', the run ended with '$want'"

# Another model: refused before training, one line naming the field and both values.
"$@" "$ember" train "${common[@]}" --resume "$dir/ckpt" --embedding_optimizer adam >"$dir/mismatch.txt" 2>&1 &&
  fail "a resume with another embedding optimizer was accepted"
n=$(grep -c "^ember train: error: --resume: embedding optimizer is rowwise_adagrad in the checkpoint, adam here" \
  "$dir/mismatch.txt")
[ "$n" -eq 1 ] || fail "the refused resume printed $n matching lines, wanted 1"
exit 0
