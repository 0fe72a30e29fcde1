#!/usr/bin/env bash
# Runs ember's TBE benchmark (once per kernel variant asked for), then the Python peers if
# present, alternating for --rounds rounds, then the ratio table if present.
#
# Usage: bench/run_all.sh [--isa LIST|all] [--rounds N] [options]
#          (other options go to `ember bench tbe`; see --help there)
#   e.g. bench/run_all.sh --isa all --rounds 2 --config small --threads 1 --iters 15
#   --isa     kernel variants to run ember under (comma list of generic,avx2,avx512, or all: every
#             variant this host runs); default: the CPU's best. Each line records its "isa".
#   --rounds  repeat ember's variants and the peers, alternately, N times (default 1): the table
#             takes medians over the rounds, so a slow spell of the shared machine hits both sides.
# Env:   EMBER_BIN        the ember binary (default build/bin/ember)
#        EMBER_BENCH_OUT  the results folder (default bench/results/<host>/<date-time>, <host> the
#                         CPU model, its best variant and core count, so results are kept per host)
#
# Writes <out>/ember.jsonl (one JSON object per line, `ember bench tbe --json`) and, when
# bench/run_peers.sh exists, <out>/peers.jsonl (its --out file, given the same selection: the
# options the peers share with ember -- --config small|full, --threads, --ops (the four common
# ops), --pool(s), --dtype(s), --dist(s), --iters, --warmup, --seed, --quick). The peers'
# interpreter: bench/peers/.venv (bench/peers/setup.sh) or EMBER_PEERS_PYTHON. When
# bench/ratio_table.py exists it is run as `python3 bench/ratio_table.py <out>/*.jsonl`.
# Missing peers or table are reported on stderr and skipped. Exit status: ember's.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
ember="${EMBER_BIN:-$root/build/bin/ember}"

source "$here/host.sh"
out="${EMBER_BENCH_OUT:-$root/bench/results/$(bench_host_key)/$(date +%Y%m%d-%H%M%S)}"

if [ ! -x "$ember" ]; then
  echo "run_all: $ember not found; build first: cmake --preset release && cmake --build build -j2" >&2
  exit 2
fi
mkdir -p "$out" || exit 2

# --isa and --rounds are run_all's own; everything else goes to ember (and, filtered, the peers).
isas=("")
rounds=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --isa) isas=(); IFS=, read -ra isas <<< "$2"; shift 2 ;;
    --isa=*) isas=(); IFS=, read -ra isas <<< "${1#*=}"; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --rounds=*) rounds="${1#*=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ "${isas[*]}" = all ]; then
  isas=()
  for v in generic avx2 avx512; do
    if EMBER_ISA=$v "$ember" --version >/dev/null 2>&1; then isas+=("$v")
    else echo "run_all: kernel variant $v: not on this host, skipped" >&2; fi
  done
fi
set -- "${args[@]}"

status=0
run_ember() {
  local isa
  for isa in "${isas[@]}"; do
    echo "run_all: ember bench tbe --json ${isa:+--isa $isa} $* >> $out/ember.jsonl" >&2
    "$ember" bench tbe --json ${isa:+--isa "$isa"} "$@" | tee -a "$out/ember.jsonl"
    local st=${PIPESTATUS[0]}
    [ "$st" -gt "$status" ] && status=$st
  done
}

# The peers' options: run_peers.sh takes --config, --threads, --quick itself and passes what
# follows `--` to both peer scripts (--ops, --pools, --dtypes, --dists, --iters, --warmup,
# --seed); options only ember knows are dropped, and only the ops both sides have are kept.
runner_args=(--out "$out/peers.jsonl")
peer_args=()
while [ $# -gt 0 ]; do
  opt="$1"; val=""
  case "$opt" in
    --*=*) val="${opt#*=}"; opt="${opt%%=*}" ;;
  esac
  case "$opt" in
    --quick) runner_args+=(--quick) ;;
    --json|--no-targets) ;;
    --shape) [ -z "$val" ] && shift
             echo "run_all: the peers have no --shape; they run their own configuration" >&2 ;;
    --config|--threads)
      if [ -z "$val" ]; then shift; val="${1:-}"; fi
      if [ "$opt" = --config ] && [ "$val" = large ]; then
        echo "run_all: the peers have no --config large; they run --config full" >&2; val=full
      fi
      runner_args+=("$opt" "$val") ;;
    --iters|--warmup|--seed|--ops|--pool|--pools|--dtype|--dtypes|--dist|--dists)
      if [ -z "$val" ]; then shift; val="${1:-}"; fi
      case "$opt" in
        --pool) opt=--pools ;; --dtype) opt=--dtypes ;; --dist) opt=--dists ;;
      esac
      if [ "$opt" = --ops ]; then
        keep=()
        IFS=, read -ra ops <<< "$val"
        for o in "${ops[@]}"; do
          case "$o" in
            all) keep=(fwd train_sgd train_rowwise_adagrad train_adam) ;;
            fwd|train_sgd|train_rowwise_adagrad|train_adam) keep+=("$o") ;;
          esac
        done
        val="$(IFS=,; echo "${keep[*]:-}")"
        [ -z "$val" ] && val=fwd
      fi
      peer_args+=("$opt" "$val") ;;
    *) ;;
  esac
  shift
done

ember_args=("${args[@]}")
for ((round = 1; round <= rounds; round++)); do
  [ "$rounds" -gt 1 ] && echo "run_all: round $round of $rounds" >&2
  run_ember "${ember_args[@]}"
  if [ -f "$here/run_peers.sh" ]; then
    echo "run_all: bench/run_peers.sh ${runner_args[*]} -- ${peer_args[*]:-}" >&2
    bash "$here/run_peers.sh" "${runner_args[@]}" -- "${peer_args[@]}" ||
      echo "run_all: bench/run_peers.sh failed (its lines so far are kept)" >&2
  else
    echo "run_all: bench/run_peers.sh is not here: no peer numbers" >&2
  fi
done

if [ -f "$here/ratio_table.py" ]; then
  python3 "$here/ratio_table.py" "$out"/*.jsonl || echo "run_all: bench/ratio_table.py failed" >&2
else
  echo "run_all: bench/ratio_table.py is not here: no ratio table (results in $out)" >&2
fi
exit "$status"
