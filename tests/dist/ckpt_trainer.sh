#!/usr/bin/env bash
# trainer.json of a checkpoint of `ember train`, damaged or from an older ember, with the
# checkpoint's CRC-32s recomputed so that the library opens it (tests/dist/ckpt_blob.py):
#   - another "format": `ember ckpt info`, `ember eval --load` and `ember train --resume` each
#     refuse it in one line quoting the format it has (the message was once formatted from a
#     freed string: garbage in a release build, a heap-use-after-free under ASan);
#   - without dense.params: eval --load names --load, train --resume names --resume.
# Usage: ckpt_trainer.sh EMBER PYTHON LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1 python=$2
shift 2
blob=$(dirname "$0")/ckpt_blob.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  printf 'ckpt_trainer.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
# Exactly one line of FILE matches REGEX.
one() { [ "$(grep -cE -- "$2" "$1")" -eq 1 ] || fail "$(basename "$1"): not one line matching /$2/"; }

common=(--batch_size 256 --num_embeddings 100 --limit_train_batches 4 --limit_val_batches 1 --eval_interval 0
        --progress lines)
"$@" "$ember" train "${common[@]}" --save_dir "$dir/good" >"$dir/train.txt" 2>&1 || fail "the run failed"
ck=$dir/good/step-0000000004
[ -f "$ck/manifest.json" ] || fail "no checkpoint $ck"
copy() { rm -rf "$dir/$1" && cp -r "$ck" "$dir/$1" && echo "$dir/$1"; }

# Another format, 13 bytes as the real one: the message quotes it.
bad=$(copy format)
"$python" "$blob" "$bad" set trainer.json format '"ember-train/9"' || fail "ckpt_blob.py failed"
"$ember" ckpt info --verify "$bad" >"$dir/info_format.txt" 2>&1 || fail "ckpt info failed on a foreign trainer.json"
foreign="trainer.json has format 'ember-train/9', this ember reads 'ember-train/1'"
one "$dir/info_format.txt" "^  trainer     none readable: '$bad': $foreign"
grep -q '^verify: OK' "$dir/info_format.txt" || fail "ckpt info: the rewritten checkpoint does not verify"
"$@" "$ember" eval --load "$bad" >"$dir/eval_format.txt" 2>&1 && fail "eval --load accepted a foreign trainer.json"
one "$dir/eval_format.txt" "^ember eval: error: '$bad': $foreign"
"$@" "$ember" train "${common[@]}" --resume "$bad" >"$dir/resume_format.txt" 2>&1 &&
  fail "train --resume accepted a foreign trainer.json"
one "$dir/resume_format.txt" "^ember train: error: '$bad': $foreign"

# No dense parameters: each command names its own flag.
bad=$(copy noparams)
"$python" "$blob" "$bad" remove dense.params || fail "ckpt_blob.py failed"
"$@" "$ember" eval --load "$bad" >"$dir/eval_noparams.txt" 2>&1 &&
  fail "eval --load accepted a checkpoint without dense.params"
one "$dir/eval_noparams.txt" "^ember eval: error: --load '$bad': the checkpoint has no dense.params"
"$@" "$ember" train "${common[@]}" --resume "$bad" >"$dir/resume_noparams.txt" 2>&1 &&
  fail "train --resume accepted a checkpoint without dense.params"
one "$dir/resume_noparams.txt" "^ember train: error: --resume '$bad': the checkpoint has no dense.params"
echo "ckpt_trainer.sh: ok"
