#!/usr/bin/env bash
# What a checkpoint of `ember train` records of its run (trainer.json, apps/ember/trainstate.h):
#   - `ember eval --load` loads every kind of checkpoint the trainer writes and prints the run's
#     last evaluation: a default run, a --hash collisionless run (its tables hashed as they were:
#     --synth_items, --hash_min_count, --hash_policy), a run with its tables on disk;
#   - `ember train --resume` refuses another --hash_policy, --hash_ttl or --synth_items in one line
#     naming the option and both values;
#   - a checkpoint of an older ember, whose trainer.json has none of those fields (rewritten with
#     its CRC-32 recomputed, tests/dist/ckpt_blob.py), still loads and resumes, the absent fields
#     meaning their defaults.
# Usage: ckpt_config.sh EMBER PYTHON LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1 python=$2
shift 2
blob=$(dirname "$0")/ckpt_blob.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  printf 'ckpt_config.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
common=(--batch_size 256 --num_embeddings 2000 --limit_train_batches 12 --limit_val_batches 2 --eval_interval 0
        --progress lines)
# The run's last evaluation as eval --load prints it.
last_eval() { sed -nE 's/^eval AUC ([0-9.]+) .* eval loss ([0-9.]+)$/eval loss \2  eval AUC \1/p' "$1"; }
evaluated() { grep -Eo '^eval loss [0-9.]+  eval AUC [0-9.]+' "$1"; }

# name, then the run's options: train, save, eval --load the save directory.
run_and_load() {
  local name=$1
  shift
  "${launch[@]}" "$ember" train "${common[@]}" "$@" --save_dir "$dir/$name" >"$dir/$name.txt" 2>&1 ||
    fail "the $name run failed"
  "${launch[@]}" "$ember" eval --load "$dir/$name" >"$dir/${name}_eval.txt" 2>&1 ||
    fail "eval --load of the $name run failed"
  local want got
  want=$(last_eval "$dir/$name.txt")
  got=$(evaluated "$dir/${name}_eval.txt")
  [ -n "$want" ] && [ "$want" = "$got" ] ||
    fail "eval --load of the $name run printed '$got', the run ended with '$want'"
}
launch=("$@")
hash=(--hash collisionless --synth_items 4 --hash_min_count 2 --hash_policy lfu)
run_and_load default
run_and_load collisionless "${hash[@]}"
run_and_load tiered --ssd_tables all --cache_rows 300 --ssd_dir "$dir"
"$ember" ckpt info "$dir/collisionless" >"$dir/info.txt" 2>&1 || fail "ckpt info failed"
grep -q "^  hashing     collisionless: buckets of 16 rows, a value gets a row at its occurrence 2, lfu eviction$" \
  "$dir/info.txt" || fail "ckpt info does not show the hashing"

# Another hashing or synthetic item count: refused by name.
refused() { # what, then the resume's extra options
  local what=$1
  shift
  "${launch[@]}" "$ember" train "${common[@]}" "$@" >"$dir/refused.txt" 2>&1 && fail "a resume with $* was accepted"
  [ "$(grep -c "^ember train: error: --resume: $what" "$dir/refused.txt")" -eq 1 ] ||
    fail "a resume with $*: not one line '$what'"
}
refused "hashed tables' eviction policy (--hash_policy) is lfu in the checkpoint, lru here" \
  --resume "$dir/collisionless" --hash collisionless --synth_items 4 --hash_min_count 2
refused "synthetic items per table row (--synth_items) are 4 in the checkpoint, 2 here" \
  --resume "$dir/collisionless" --hash collisionless --synth_items 2 --hash_min_count 2 --hash_policy lfu
"${launch[@]}" "$ember" train "${common[@]}" --hash collisionless --hash_policy ttl --hash_ttl 5 --save_dir "$dir/ttl" \
  >"$dir/ttl.txt" 2>&1 || fail "the ttl run failed"
refused "hashed rows' time to live in steps (--hash_ttl) is 5 in the checkpoint, 6 here" \
  --resume "$dir/ttl" --hash collisionless --hash_policy ttl --hash_ttl 6
refused "hashing of categorical values (--hash) is collisionless in the checkpoint, modulo here" \
  --resume "$dir/ttl"

# An older ember's checkpoint: no hashing, synthetic items or storage fields.
old=$dir/default/step-0000000012
"$python" "$blob" "$old" drop trainer.json model.hash drop trainer.json model.hash_bucket_rows \
  drop trainer.json model.hash_min_count drop trainer.json model.hash_policy drop trainer.json model.hash_ttl \
  drop trainer.json data.synth_items drop trainer.json storage || fail "ckpt_blob.py failed"
"$python" "$blob" "$old" print trainer.json | grep -Eq '"(hash|synth_items|storage)' && fail "the fields are still there"
"${launch[@]}" "$ember" eval --load "$old" >"$dir/old_eval.txt" 2>&1 || fail "eval --load of an older checkpoint failed"
[ "$(evaluated "$dir/old_eval.txt")" = "$(last_eval "$dir/default.txt")" ] ||
  fail "eval --load of an older checkpoint printed another evaluation"
"${launch[@]}" "$ember" train "${common[@]}" --limit_train_batches 14 --resume "$old" --save_dir "$dir/more" \
  >"$dir/old_resume.txt" 2>&1 || fail "train --resume of an older checkpoint failed"
grep -q "^  resume      '$old': step 12" "$dir/old_resume.txt" || fail "the resume did not start at step 12"
echo "ckpt_config.sh: ok"
