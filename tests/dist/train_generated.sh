#!/usr/bin/env bash
# `ember train --num_generated_batches N` (synthetic batches 0..N-1 generated before training and
# cycled): with N = the steps it trains the same batches as without, the same digest; with N = 3
# over 6 steps, the digest of 2 epochs of 3 batches (batch g is batch g mod N); a run resumed from
# step 4 ends with the uninterrupted run's digest, and a resume with another N is refused naming
# the option; with the loader thread or without, the same digest.
# Usage: train_generated.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1

fails=0
say() { printf '%s\n' "$*"; }
bad() { say "FAIL  $*"; fails=$((fails + 1)); }
# digest OUT ARGS...: ember train under the launcher (bounded), its output in OUT; prints the digest.
digest() {
  local out=$1
  shift
  timeout 120 "$@" >"$out" 2>&1 || bad "$out: exit $?: $(tail -n 5 "$out")"
  grep '^digest:' "$out"
}
same() {  # what A B
  if [ -n "$2" ] && [ "$2" = "$3" ]; then say "ok    $1"; else bad "$1: '$2' and '$3'"; fi
}

common=(--batch_size 64 --limit_val_batches 2 --eval_interval 0 --progress lines --digest)
plain=$(digest plain.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 6)
all=$(digest all.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 6 --num_generated_batches 6)
same "N = 6 over 6 steps: the batches of a run without the option" "$plain" "$all"
cycle=$(digest cycle.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 6 --num_generated_batches 3)
epochs=$(digest epochs.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 3 --epochs 2)
same "N = 3 over 6 steps: 2 epochs of batches 0..2" "$cycle" "$epochs"
[ "$cycle" != "$plain" ] || bad "N = 3 trained the batches of a run without the option"
for pf in 0 2; do
  got=$(digest "pf$pf.txt" "$@" "$ember" train "${common[@]}" --limit_train_batches 6 --num_generated_batches 3 \
    --prefetch_batches "$pf")
  same "N = 3, --prefetch_batches $pf" "$cycle" "$got"
done
digest saved.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 4 --num_generated_batches 3 \
  --save_dir ck --checkpoint_interval 4 >/dev/null
resumed=$(digest resumed.txt "$@" "$ember" train "${common[@]}" --limit_train_batches 6 --num_generated_batches 3 \
  --resume ck/step-0000000004)
same "resumed at step 4 (batch 4 is batch 1)" "$cycle" "$resumed"
timeout 120 "$@" "$ember" train "${common[@]}" --limit_train_batches 6 --num_generated_batches 5 \
  --resume ck/step-0000000004 >other.txt 2>&1 && bad "a resume with another N was accepted"
grep -q 'num_generated_batches) is 3 in the checkpoint, 5 here' other.txt ||
  bad "a resume with another N: no line naming it: $(grep 'ember train' other.txt | head -n 2)"

if [ "$fails" -eq 0 ]; then say "train_generated: all passed"; exit 0; fi
say "train_generated: $fails failure(s)"
exit 1
