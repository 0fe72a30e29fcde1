#!/usr/bin/env bash
# `ember serve` end to end (docs/serving.md): a short run saved, exported to an int8 bundle,
# evaluated with --predictions (every eval sample's inputs and probability), then served under a
# loopback load (dist/serve_load.py: concurrent clients exact to the bit, bad requests refused,
# SIGTERM under load). Then refusals: serving on 2 ranks, a bad --host, a port in use.
# Usage: serve.sh EMBER PYTHON LAUNCHER...   (LAUNCHER: e.g. mpiexec -n 2)
set -u
ember=$1 python=$2
shift 2
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  printf 'serve.sh: %s\n' "$*"
  for f in "$dir"/*.txt; do printf -- '--- %s\n' "$f"; cat "$f"; done
  exit 1
}
one() { [ "$(grep -cE -- "$2" "$1")" -eq 1 ] || fail "$(basename "$1"): not one line matching /$2/"; }

"$@" "$ember" train --batch_size 1024 --limit_train_batches 30 --limit_val_batches 4 --eval_interval 0 \
  --progress lines --save_dir "$dir/run" >"$dir/train.txt" 2>&1 || fail "the run failed"
"$ember" export --load "$dir/run" --output "$dir/b" >"$dir/export.txt" 2>&1 || fail "export failed"
"$ember" eval --load "$dir/b" --predictions "$dir/pred" >"$dir/eval.txt" 2>&1 || fail "eval --predictions failed"
"$python" "$(dirname "$0")/serve_load.py" "$ember" "$dir/b" "$dir/pred" >"$dir/load.txt" 2>&1 ||
  fail "serve_load.py failed"
cat "$dir/load.txt"

"$@" "$ember" serve --load "$dir/b" --port 0 >"$dir/ranks.txt" 2>&1 && fail "ember serve ran on 2 ranks"
one "$dir/ranks.txt" "^ember serve: error: ember serve runs as one process \(it was started on 2 ranks\)"
"$ember" serve --load "$dir/b" --host nowhere >"$dir/host.txt" 2>&1 && fail "ember serve took --host nowhere"
one "$dir/host.txt" "^ember serve: error: --host 'nowhere': not an IPv4 address"
"$ember" eval --load "$dir/b" --predictions "$dir/none/p" >"$dir/pred_dir.txt" 2>&1 && fail "--predictions into nowhere"
one "$dir/pred_dir.txt" "^ember eval: error: --predictions: cannot create '$dir/none/p.inputs'"
# A port in use: the second server says so and exits.
"$ember" serve --load "$dir/b" --port 0 >"$dir/first.txt" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "^serving" "$dir/first.txt" && break; sleep 0.1; done
port=$(sed -n 's/.*on http:\/\/127\.0\.0\.1:\([0-9]*\):.*/\1/p' "$dir/first.txt")
[ -n "$port" ] || fail "the first server did not start"
"$ember" serve --load "$dir/b" --port "$port" >"$dir/busy.txt" 2>&1 && fail "two servers on port $port"
one "$dir/busy.txt" "^ember serve: error: cannot listen on 127\.0\.0\.1:$port"
kill -TERM "${pids[0]}"
wait "${pids[0]}" || fail "the first server did not exit 0 on SIGTERM"
pids=()
one "$dir/first.txt" "^stopped: 0 requests answered"
echo "serve.sh: ok"
