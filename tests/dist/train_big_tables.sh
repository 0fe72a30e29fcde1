#!/usr/bin/env bash
# `ember train` with tables beyond RAM and beyond fixed id ranges, as a user runs it:
#   - --ssd_tables all --cache_rows N gives the same digest (losses, eval outputs, dense
#     parameters, every table and its optimizer state) as the tables in RAM under the same plan
#     (--sharding tw: the planner may place tables on disk otherwise, as they take less memory),
#     with the prefetch staging rows (--overlap on) and without it;
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
# --overlap on (the default) reads the next batch's missing rows ahead while the step runs; off, the
# forward reads them itself: the same numbers, and the report says which happened.
ahead() { sed -n 's/^tiered tables (26): cache hit rate [0-9.]* over [0-9]* row lookups, [0-9]* misses (\([0-9]*\) read ahead.*/\1/p' "$1"; }
[ "$(ahead "$dir/ssd.txt")" -gt 0 ] 2>/dev/null || fail "the prefetch asked for no row with --overlap on"
"$@" "$ember" train "${common[@]}" --limit_train_batches 30 --ssd_tables all --cache_rows 300 --ssd_dir "$dir" \
  --overlap off >"$dir/ssd_plain.txt" 2>&1 || fail "the run with tables on disk and --overlap off failed"
[ "$(digest "$dir/ram.txt")" = "$(digest "$dir/ssd_plain.txt")" ] || fail "--overlap off on disk changed the numbers"
[ "$(ahead "$dir/ssd_plain.txt")" = 0 ] || fail "--overlap off: rows were read ahead"
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
