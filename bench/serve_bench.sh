#!/usr/bin/env bash
# `ember serve` under a loopback load (wrk, Debian's): throughput and latency quantiles of
# one-sample binary POST /predict requests, with the server's batching on (--max_batch 256
# --max_wait_us 1000) and off (--max_batch 1 --max_wait_us 0), alternating the two per round.
#
# Usage: bench/serve_bench.sh BUNDLE [--rounds R] [--connections LIST] [--seconds S] [--delay_ms D]
#                                    [--out FILE]
#   BUNDLE       a bundle of `ember export`
#   --connections  concurrent connections, a list (default 1,16,64)
#   --delay_ms     each connection's pause after an answer (default 0: closed loop, as fast as the
#                  server answers; D > 0: about connections * 1000 / D requests/s offered)
#   --seconds      per case (default 10); --rounds (default 2)
# One JSON line per case on stdout and appended to --out (default
# bench/results/<host>/serve-YYYY-MM-DD.jsonl): {"bench":"serve","batching":"on|off",
# "connections":C,"delay_ms":D,"requests_per_s":..,"p50_ms","p90_ms","p99_ms","max_ms",
# "non200","errors","mean_batch": samples / batches from the server's /metrics}.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle=${1:?usage: bench/serve_bench.sh BUNDLE [options]}
shift
rounds=2 conns=1,16,64 seconds=10 delay=0 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --connections) conns=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --delay_ms) delay=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "serve_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "serve_bench.sh: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
ember="${EMBER_BIN:-$root/build/bin/ember}"
source "$root/bench/host.sh"
[ -n "$out" ] || out="$root/bench/results/$(bench_host_key)/serve-$(date +%F).jsonl"
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
# One request's body: the first eval sample of the bundle.
"$ember" eval --load "$bundle" --limit_val_batches 1 --predictions "$tmp/p" >/dev/null
export EMBER_SERVE_INPUTS="$tmp/p.inputs" EMBER_SERVE_DELAY_MS="$delay"
IFS=',' read -r -a clist <<<"$conns"
for ((r = 1; r <= rounds; r++)); do
  modes=(on off)
  ((r % 2 == 0)) && modes=(off on)
  for mode in "${modes[@]}"; do
    if [ "$mode" = on ]; then flags=(--max_batch 256 --max_wait_us 1000); else flags=(--max_batch 1 --max_wait_us 0); fi
    "$ember" serve --load "$bundle" --port 0 --threads 1 "${flags[@]}" >"$tmp/serve.txt" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "^serving" "$tmp/serve.txt" && break; sleep 0.1; done
    port=$(sed -n 's/.*on http:\/\/127\.0\.0\.1:\([0-9]*\):.*/\1/p' "$tmp/serve.txt")
    for c in "${clist[@]}"; do
      before=$(curl -s "http://127.0.0.1:$port/metrics")
      line=$(wrk -t 1 -c "$c" -d "${seconds}s" --timeout 10s -s "$root/bench/serve/post.lua" "http://127.0.0.1:$port/predict" |
             sed -n 's/^EMBER //p')
      after=$(curl -s "http://127.0.0.1:$port/metrics")
      python3 - "$mode" "$c" "$delay" "$line" "$before" "$after" <<'PY' | tee -a "$out"
import json, re, sys
mode, c, delay, line, before, after = sys.argv[1:]
d = json.loads(line)
def get(text, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else 0
samples = get(after, "ember_samples_total") - get(before, "ember_samples_total")
batches = get(after, "ember_batch_size_count") - get(before, "ember_batch_size_count")
print(json.dumps({"bench": "serve", "batching": mode, "connections": int(c), "delay_ms": float(delay),
                  "requests_per_s": round(d["requests"] / d["seconds"], 1), "p50_ms": d["p50_ms"],
                  "p90_ms": d["p90_ms"], "p99_ms": d["p99_ms"], "max_ms": d["max_ms"], "non200": d["non200"],
                  "errors": d["errors"], "mean_batch": round(samples / batches, 2) if batches else None},
                 separators=(",", ":")))
PY
    done
    kill -TERM "$pid"
    wait "$pid" || true
    pid=""
  done
done
