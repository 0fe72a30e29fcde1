#!/usr/bin/env bash
# `ember train` with tables beyond RAM and beyond fixed id ranges, as a user runs it:
#   - --ssd_tables all --cache_rows N gives the same digest (losses, eval outputs, dense
#     parameters, every table and its optimizer state) as the tables in RAM under the same plan
#     (--sharding tw: the planner may place tables on disk otherwise, as they take less memory);
#   - --hash collisionless trains, and a run stopped at a checkpoint and resumed ends with the
#     uninterrupted run's losses, dense parameters and tables (the id maps, admission candidates
#     and clocks are restored).
# Usage: train_big_tables.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  printf 'train_big_tables.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
common=(--sharding tw --batch_size 256 --num_embeddings 2000 --limit_val_batches 2 --eval_interval 0 --progress lines --digest)
digest() { grep '^digest:' "$1"; }
# Losses, dense parameters, tables: a resumed run's eval outputs also hold the first half's
# final evaluation, which the uninterrupted run does not make.
state() { grep '^digest:' "$1" | sed 's/ outputs [0-9a-f]*//'; }

"$@" "$ember" train "${common[@]}" --limit_train_batches 30 >"$dir/ram.txt" 2>&1 || fail "the run in RAM failed"
"$@" "$ember" train "${common[@]}" --limit_train_batches 30 --ssd_tables all --cache_rows 300 --ssd_dir "$dir" \
  >"$dir/ssd.txt" 2>&1 || fail "the run with tables on disk failed"
[ -n "$(digest "$dir/ram.txt")" ] && [ "$(digest "$dir/ram.txt")" = "$(digest "$dir/ssd.txt")" ] ||
  fail "tables on disk changed the run's numbers"
ls "$dir"/ember-tiered-* >/dev/null 2>&1 && fail "a tiered table's scratch file was left behind"

hash=(--hash collisionless --synth_items 4 --hash_min_count 2 --hash_policy lfu)
"$@" "$ember" train "${common[@]}" "${hash[@]}" --limit_train_batches 30 >"$dir/full.txt" 2>&1 ||
  fail "the collisionless run failed"
"$@" "$ember" train "${common[@]}" "${hash[@]}" --limit_train_batches 15 --save_dir "$dir/ckpt" \
  >"$dir/first.txt" 2>&1 || fail "the first half failed"
"$@" "$ember" train "${common[@]}" "${hash[@]}" --limit_train_batches 30 --resume "$dir/ckpt" \
  >"$dir/resumed.txt" 2>&1 || fail "the resumed run failed"
[ -n "$(state "$dir/full.txt")" ] && [ "$(state "$dir/full.txt")" = "$(state "$dir/resumed.txt")" ] ||
  fail "the resumed collisionless run differs from the uninterrupted one"
echo "train_big_tables.sh: ok"
