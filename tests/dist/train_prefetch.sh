#!/usr/bin/env bash
# `ember train --prefetch_batches` from the command line: the loader thread (2 batches ahead, the
# default) and no loader (0) give the same digest on synthetic data and on a Criteo file with
# malformed lines skipped (and the same malformed-line report); a fatal malformed line in a later
# training batch ends both the same way, one error line from rank 0 and a non-zero exit, within a
# time bound; the report gives the data wait beside the step time; an interrupted run (SIGINT to
# the launcher) ends promptly.
# Usage: train_prefetch.sh EMBER LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1

# gen BAD: 960 lines (label, 13 counts, 26 hexadecimal hashes), those for which the awk condition
# BAD holds malformed.
gen() {
  awk 'BEGIN { srand(11); for (i = 1; i <= 960; i++) {
               if ('"$1"') { print "malformed\tline"; continue }
               printf "%d", (rand() < 0.3);
               for (j = 0; j < 13; j++) printf "\t%d", int(rand() * rand() * 100);
               for (c = 0; c < 26; c++) printf "\t%x", int(rand() * 2147483647); printf "\n" } }'
}
# Lines 100, 513..576 (all of training batch 7, after the held-out head of 64) and 700.
gen 'i == 100 || (i >= 513 && i <= 576) || i == 700' >skip.tsv
# One in training batch 5 (lines 385..448), none before.
gen 'i == 420' >fatal.tsv

fails=0
say() { printf '%s\n' "$*"; }
bad() { say "FAIL  $*"; fails=$((fails + 1)); }
# run OUT ARGS...: ember train under the launcher (bounded), all output into OUT; its exit status.
run() {
  local out=$1
  shift
  timeout 120 "$@" >"$out" 2>&1
}

common=(--batch_size 64 --eval_interval 3 --progress lines --digest)
for data in synthetic criteo; do
  if [ "$data" = synthetic ]; then
    args=(--limit_train_batches 12 --limit_val_batches 2)
  else
    args=(--dataset criteo --data_path skip.tsv --limit_val_batches 1 --epochs 2)
  fi
  for pf in 0 2; do
    run "$data.$pf" "$@" "$ember" train "${common[@]}" "${args[@]}" --prefetch_batches "$pf" ||
      bad "$data --prefetch_batches $pf: exit $?: $(cat "$data.$pf")"
  done
  d0=$(grep '^digest:' "$data.0")
  d2=$(grep '^digest:' "$data.2")
  if [ -n "$d0" ] && [ "$d0" = "$d2" ]; then say "ok    $data: the same digest with and without the loader"
  else bad "$data: digests '$d0' (--prefetch_batches 0) and '$d2' (2)"; fi
  r0=$(grep -E '^(criteo: skipped|skipped )' "$data.0")
  r2=$(grep -E '^(criteo: skipped|skipped )' "$data.2")
  [ "$r0" = "$r2" ] || bad "$data: malformed-line reports differ: '$r0' and '$r2'"
  if [ "$data" = criteo ]; then
    printf '%s\n' "$r0" | grep -q '^skipped 2 global batch(es) without a usable line$' ||
      bad "criteo: no skipped batch reported: '$r0'"
  fi
  # The data wait, per evaluation and for the run, beside the samples/s and the step time.
  for pf in 0 2; do
    grep -qE '^step time: measured [0-9.]+ ms.*; waiting for data [0-9.]+ ms of it \([0-9.]+%\)$' "$data.$pf" &&
      grep -qE '^step +[0-9]+ .* samples/s  data wait [0-9.]+ ms/step$' "$data.$pf" ||
      bad "$data --prefetch_batches $pf: no data wait in the report: $(cat "$data.$pf")"
  done
  grep -q '^  loader      none: ' "$data.0" && grep -q '^  loader      a thread per source produces 2 batches ahead' "$data.2" ||
    bad "$data: the configuration does not say how the data is produced"
done

# Fatal: every rank stops at training batch 5 (lines 385..448) with the same line, once.
for pf in 0 2; do
  run "fatal.$pf" "$@" "$ember" train --dataset criteo --data_path fatal.tsv --malformed fatal \
    --batch_size 64 --limit_val_batches 1 --eval_interval 2 --progress lines --prefetch_batches "$pf"
  status=$?
  errors=$(grep -c '^ember train: error: ' "fatal.$pf")
  if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || [ "$errors" -ne 1 ] ||
    ! grep -qE "^ember train: error: criteo: 'fatal.tsv' line 420: 2 tab-separated fields, expected 40 \(rank [0-9]+\)$" "fatal.$pf"; then
    bad "fatal, --prefetch_batches $pf: exit $status (124: the bound), $errors error line(s): $(cat "fatal.$pf")"
  fi
done
e0=$(grep '^ember train: error: ' fatal.0)
e2=$(grep '^ember train: error: ' fatal.2)
if [ -n "$e0" ] && [ "$e0" = "$e2" ]; then say "ok    fatal line: the same error line with and without the loader"
else bad "fatal line: '$e0' (--prefetch_batches 0) and '$e2' (2)"; fi

# Interrupted: SIGINT to the launcher after the first evaluation; the job is gone within 30 s.
"$@" "$ember" train --limit_train_batches 100000 --eval_interval 5 --batch_size 256 --limit_val_batches 1 \
  --progress lines >long.out 2>&1 &
job=$!
for _ in $(seq 1 600); do grep -q '^step ' long.out && break; sleep 0.1; done
grep -q '^step ' long.out || bad "SIGINT: the run printed no step within 60 s: $(cat long.out)"
kill -INT "$job" 2>/dev/null
for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then
  bad "SIGINT: the job still runs after 30 s"
  kill -KILL "$job" 2>/dev/null
else
  say "ok    SIGINT: the job ended"
fi
wait "$job" 2>/dev/null
exit $((fails > 0))
