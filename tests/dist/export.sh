#!/usr/bin/env bash
# Serving bundles from the command line (docs/serving.md): a short run saved by 2 ranks, then
#   - `ember export` by 2 ranks and by 1 gives the same bundle, byte for byte;
#   - `ember eval --load BUNDLE` by 1 and 2 ranks gives the same loss and AUC, run to run the same
#     outputs (digest), an AUC within 0.005 of the checkpoint's own (int8), and with fp32 tables
#     the checkpoint's AUC exactly;
#   - --prune_below keeps fewer rows and still evaluates; per-table types are applied;
#   - a collisionless (hashed) run exports its occupied rows behind hash remaps, same AUC;
#   - bad input is refused in one line on every rank: an unknown type or table, a bundle given to
#     export or to train --resume, a damaged bundle (its CRC-32 names the table).
# Usage: export.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  printf 'export.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
one() { [ "$(grep -cE -- "$2" "$1")" -eq 1 ] || fail "$(basename "$1"): not one line matching /$2/"; }
auc() { sed -n 's/^eval loss [0-9.]*  eval AUC \([0-9.]*\) .*/\1/p' "$1"; }
outputs() { sed -n 's/^digest: .* outputs \([0-9a-f]*\) .*/\1/p' "$1"; }

"$@" "$ember" train --batch_size 1024 --limit_train_batches 40 --limit_val_batches 4 --eval_interval 0 \
  --progress lines --save_dir "$dir/run" >"$dir/train.txt" 2>&1 || fail "the run failed"
"$@" "$ember" export --load "$dir/run" --output "$dir/b2" >"$dir/export2.txt" 2>&1 || fail "export (2 ranks) failed"
one "$dir/export2.txt" "^done: 26 tables, [0-9]+ of [0-9]+ rows kept, .* MB of fp32 tables in .* MB \(2\.67x smaller\)"
"$ember" export --load "$dir/run" --output "$dir/b1" >"$dir/export1.txt" 2>&1 || fail "export (1 rank) failed"
cmp -s "$dir/b1/q1.bin" "$dir/b2/q1.bin" || fail "1 and 2 ranks exported different bundles"

"$@" "$ember" eval --load "$dir/run" >"$dir/eval_ckpt.txt" 2>&1 || fail "eval of the checkpoint failed"
"$@" "$ember" eval --load "$dir/b2" --digest >"$dir/eval_b2.txt" 2>&1 || fail "eval of the bundle (2 ranks) failed"
"$ember" eval --load "$dir/b2" --digest >"$dir/eval_b1.txt" 2>&1 || fail "eval of the bundle (1 rank) failed"
one "$dir/eval_b2.txt" "^ember eval: '$dir/b2': serving bundle \(quantized tables\) of DLRM after 40 steps"
# (The outputs digest folds the samples in rank order: equal run to run at one world size.)
"$@" "$ember" eval --load "$dir/b2" --digest >"$dir/eval_b2_again.txt" 2>&1 || fail "eval of the bundle (again) failed"
[ -n "$(outputs "$dir/eval_b2.txt")" ] && [ "$(outputs "$dir/eval_b2.txt")" = "$(outputs "$dir/eval_b2_again.txt")" ] ||
  fail "the bundle's outputs differ run to run"
[ "$(grep '^eval loss' "$dir/eval_b1.txt")" = "$(grep '^eval loss' "$dir/eval_b2.txt")" ] ||
  fail "the bundle's loss and AUC differ between 1 and 2 ranks"
a=$(auc "$dir/eval_ckpt.txt") b=$(auc "$dir/eval_b2.txt")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(a > 0.6 && (d < 0 ? -d : d) <= 0.005) }' ||
  fail "int8 AUC $b is not within 0.005 of the checkpoint's $a"
"$ember" export --load "$dir/run" --output "$dir/f32" --quantize fp32 >"$dir/export_f32.txt" 2>&1 || fail "fp32 export failed"
"$ember" eval --load "$dir/f32" >"$dir/eval_f32.txt" 2>&1 || fail "eval of the fp32 bundle failed"
[ "$(auc "$dir/eval_f32.txt")" = "$a" ] || fail "fp32 bundle AUC $(auc "$dir/eval_f32.txt"), checkpoint $a"

"$ember" export --load "$dir/run" --output "$dir/p" --quantize int4,t_cat_20=int8 --prune_below 0.02 \
  >"$dir/export_p.txt" 2>&1 || fail "pruned export failed"
one "$dir/export_p.txt" "^  t_cat_20     int8 "
one "$dir/export_p.txt" "^  t_cat_3      int4 "
kept=$(sed -n 's/^done: 26 tables, \([0-9]*\) of \([0-9]*\) rows kept.*/\1 \2/p' "$dir/export_p.txt")
read -r k n <<<"$kept"
[ -n "$k" ] && [ "$k" -lt "$n" ] || fail "--prune_below 0.02 kept every row ($kept)"
"$@" "$ember" eval --load "$dir/p" >"$dir/eval_p.txt" 2>&1 || fail "eval of the pruned bundle failed"

"$ember" train --hash collisionless --batch_size 512 --limit_train_batches 20 --limit_val_batches 2 --eval_interval 0 \
  --progress lines --save_dir "$dir/hrun" >"$dir/train_hashed.txt" 2>&1 || fail "the hashed run failed"
"$ember" export --load "$dir/hrun" --output "$dir/hb" >"$dir/export_h.txt" 2>&1 || fail "hashed export failed"
kept=$(sed -n 's/^done: 26 tables, \([0-9]*\) of \([0-9]*\) rows kept.*/\1 \2/p' "$dir/export_h.txt")
read -r k n <<<"$kept"
[ -n "$k" ] && [ "$k" -lt "$n" ] || fail "the hashed export kept every row ($kept): free rows should go"
"$ember" eval --load "$dir/hrun" >"$dir/eval_hrun.txt" 2>&1 || fail "eval of the hashed checkpoint failed"
"$ember" eval --load "$dir/hb" >"$dir/eval_hb.txt" 2>&1 || fail "eval of the hashed bundle failed"
a=$(auc "$dir/eval_hrun.txt") b=$(auc "$dir/eval_hb.txt")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(a > 0.5 && (d < 0 ? -d : d) <= 0.005) }' ||
  fail "hashed int8 AUC $b is not within 0.005 of the checkpoint's $a"

"$@" "$ember" export --load "$dir/run" --output "$dir/x" --quantize int3 >"$dir/bad_type.txt" 2>&1 &&
  fail "export took --quantize int3"
one "$dir/bad_type.txt" "^ember export: error: --quantize 'int3': unknown type 'int3'"
"$@" "$ember" export --load "$dir/run" --output "$dir/x" --quantize int8,t_cat_99=int4 >"$dir/bad_table.txt" 2>&1 &&
  fail "export took an unknown table"
one "$dir/bad_table.txt" "^ember export: error: --quantize 'int8,t_cat_99=int4': the model has no table 't_cat_99'"
"$@" "$ember" export --load "$dir/b2" --output "$dir/x" >"$dir/bad_load.txt" 2>&1 && fail "export took a bundle"
one "$dir/bad_load.txt" "^ember export: error: --load '$dir/b2' is a serving bundle already"
"$@" "$ember" train --limit_train_batches 2 --resume "$dir/b2" >"$dir/bad_resume.txt" 2>&1 && fail "resumed a bundle"
one "$dir/bad_resume.txt" "^ember train: error: --resume '$dir/b2' is a serving bundle"
[ ! -e "$dir/x" ] || fail "a refused export left $dir/x"
# One bit of t_cat_0's rows flipped (byte 100 of the data file).
byte=$(od -An -tu1 -j100 -N1 "$dir/b1/q1.bin" | tr -d ' ')
printf "\\x$(printf %02x $((byte ^ 16)))" | dd of="$dir/b1/q1.bin" bs=1 seek=100 conv=notrunc status=none
"$@" "$ember" eval --load "$dir/b1" >"$dir/damaged.txt" 2>&1 && fail "eval took a damaged bundle"
one "$dir/damaged.txt" "^ember eval: error: bundle '$dir/b1': table 't_cat_0' rows fails its CRC-32"
echo "export.sh: ok"
