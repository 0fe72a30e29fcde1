#!/usr/bin/env bash
# Smoke test of the torch peer benchmark (CTest bench.peers_smoke): runs
# torch_embeddingbag.py --quick and checks its JSON lines (residuals small, optimizer semantics
# as ember's). Exits 77 (CTest's SKIP_RETURN_CODE) when torch or numpy does not import in the
# chosen interpreter: EMBER_PEERS_PYTHON, else bench/peers/.venv/bin/python (bench/peers/setup.sh
# makes it; nothing is installed here), else python3. Never touches the network.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
py="${EMBER_PEERS_PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$here/.venv/bin/python" ]; then py="$here/.venv/bin/python"; else py="$(command -v python3 || true)"; fi
fi
if [ -z "$py" ]; then
  echo "peers_smoke: skipped: no python3 found"
  exit 77
fi
if ! why="$("$py" -c 'import numpy, torch' 2>&1)"; then
  echo "peers_smoke: skipped: torch/numpy do not import in $py: $(printf '%s' "$why" | tail -n 1)"
  echo "peers_smoke: run bench/peers/setup.sh to create bench/peers/.venv"
  exit 77
fi
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
if ! "$py" "$here/torch_embeddingbag.py" --quick --threads 1,2 >"$out"; then
  echo "peers_smoke: torch_embeddingbag.py --quick failed"
  exit 1
fi
"$py" - "$out" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tbe = [r for r in recs if r.get("bench") == "tbe"]
ran = [r for r in tbe if "skipped" not in r]
sem = [r for r in recs if r.get("bench") == "tbe_semantics"]
fails = []
for r in ran:
    tol = 1e-5 if r["dtype"] == "fp32" else 1e-2  # relative; 16-bit outputs round to 8 or 11 bits
    for f in ("op", "pool", "dtype", "T", "E", "D", "B", "L", "dist", "threads", "ms_med", "ms_min", "gbps", "iters"):
        if f not in r:
            fails.append(f"missing {f}: {r}")
    if r["op"].startswith(("fwd", "train_")) and not (r.get("residual_rel", 1e9) <= tol):
        fails.append(f"residual_rel {r.get('residual_rel')} > {tol}: {r}")
    if r["iters"] < 2:
        fails.append(f"iters < 2: {r}")
fails += [f"semantics: {r}" for r in sem if not r.get("ok")]
if not ran or len(sem) < 6:
    fails.append(f"too few results: {len(ran)} timed lines, {len(sem)} semantics lines")
for f in fails:
    print("peers_smoke: FAIL", f)
print(f"peers_smoke: {len(ran)} timed lines, {len(tbe) - len(ran)} skipped, {len(sem)} semantics checks")
sys.exit(1 if fails else 0)
PY
