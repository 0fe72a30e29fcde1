#!/usr/bin/env bash
# The ranks x threads table of `ember train` on this host: every (ranks, threads) with
# ranks x threads <= cores, plus one oversubscribed row (cores ranks x 2 threads), each run the
# same training (same global batch, model and data: only the split of the work changes).
#
# Usage: bench/train_grid.sh [options] [-- ember train options]
#   --cores N      cores to fill (default: nproc)
#   --rounds N     runs of each configuration (default 3); a round runs every configuration
#                  once, so the configurations alternate and a slow spell of a shared machine
#                  touches all of them, not one
#   --steps N      --limit_train_batches of each run (default 200)
#   --only R:T,..  just these configurations (e.g. 1:2,2:1)
#   --no-oversubscribed   without the oversubscribed row
# Env:   EMBER_BIN (default build/bin/ember), MPIEXEC (default mpiexec).
#
# Prints one JSON object per run on stdout as it ends:
#   {"ranks":1,"threads":2,"round":0,"samples_per_s":104557,"train_s":5.9,"wall_s":7.2,"status":0}
# (samples_per_s and train_s are the trainer's own figures over the training steps, evaluation
# and start-up excluded; wall_s is the whole mpiexec command), then the table on stderr: per
# configuration the median samples/s, its spread over the rounds (min, max), and the median
# relative to 1 x 1. Quote medians; a wide spread says the machine was busy.
# Exit status: 0 when every run succeeded, 1 otherwise, 2 for bad usage.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
ember="${EMBER_BIN:-$root/build/bin/ember}"
mpiexec="${MPIEXEC:-mpiexec}"
cores=$(nproc)
rounds=3
steps=200
only=""
oversub=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cores) cores=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --no-oversubscribed) oversub=0; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "train_grid: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
for v in "$cores" "$rounds" "$steps"; do
  case "$v" in ''|*[!0-9]*|0) echo "train_grid: --cores, --rounds and --steps take positive integers" >&2; exit 2 ;; esac
done
if [ ! -x "$ember" ]; then
  echo "train_grid: $ember not found; build first: cmake --preset release && cmake --build --preset release" >&2
  exit 2
fi
# Open MPI as root, more ranks than cores for the oversubscribed row (other MPIs ignore these).
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}

configs=()
if [ -n "$only" ]; then
  IFS=, read -ra configs <<< "$only"
else
  for ((r = 1; r <= cores; r++)); do
    for ((t = 1; r * t <= cores; t++)); do configs+=("$r:$t"); done
  done
  [ "$oversub" = 1 ] && configs+=("$cores:2")
fi
for c in "${configs[@]}"; do
  case "$c" in [1-9]*:[1-9]*) ;; *) echo "train_grid: --only '$c': expected RANKS:THREADS" >&2; exit 2 ;; esac
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT
status=0
for ((i = 0; i < rounds; i++)); do
  for c in "${configs[@]}"; do
    r=${c%%:*} t=${c##*:}
    start=$(date +%s.%N)
    out=$("$mpiexec" -n "$r" "$ember" train --threads "$t" --limit_train_batches "$steps" --eval_interval 0 \
          --progress lines "$@" 2>&1)
    rc=$?
    end=$(date +%s.%N)
    # "done: S steps, N samples in X s of training (Y samples/s)"
    line=$(printf '%s\n' "$out" | grep -E '^done: ' | tail -n 1)
    sps=$(printf '%s\n' "$line" | sed -n 's/.*(\([0-9.]*\) samples\/s).*/\1/p')
    secs=$(printf '%s\n' "$line" | sed -n 's/.* in \([0-9.]*\) s of training.*/\1/p')
    if [ "$rc" -ne 0 ] || [ -z "$sps" ]; then
      status=1
      printf 'train_grid: %s ranks x %s threads failed (exit %s):\n%s\n' "$r" "$t" "$rc" "$out" >&2
      sps=null secs=null
    fi
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
    printf '{"ranks":%d,"threads":%d,"round":%d,"samples_per_s":%s,"train_s":%s,"wall_s":%s,"status":%d}\n' \
      "$r" "$t" "$i" "$sps" "$secs" "$wall" "$rc"
    [ "$sps" != null ] && echo "$r $t $sps $wall" >> "$results"
  done
done

# The table: medians over the rounds, in the order of the configurations.
{
  printf '\nember train on %s cores, %s round(s) of %s steps (%s)\n' "$cores" "$rounds" "$steps" "${*:-defaults}"
  printf '%6s %8s %6s %14s %12s %12s %9s %9s\n' ranks threads cores "samples/s" min max "vs 1x1" "wall s"
  for c in "${configs[@]}"; do
    r=${c%%:*} t=${c##*:}
    awk -v r="$r" -v t="$t" '$1 == r && $2 == t { print $3, $4 }' "$results" | sort -n | awk '
      { v[NR] = $1; w[NR] = $2 } END { if (NR) print v[int((NR + 1) / 2)] * 0.5 + v[int(NR / 2) + 1] * 0.5, v[1], v[NR], w[int((NR + 1) / 2)] }'
  done | paste -d' ' <(printf '%s\n' "${configs[@]}") - | awk -v base="$(awk '$1 == 1 && $2 == 1 { print $3 }' "$results" | sort -n |
      awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] * 0.5 + v[int(NR / 2) + 1] * 0.5 }')" '
    NF >= 5 {
      split($1, rt, ":")
      rel = base > 0 ? sprintf("%.2f", $2 / base) : "-"
      printf "%6d %8d %6d %14.0f %12.0f %12.0f %9s %9s\n", rt[1], rt[2], rt[1] * rt[2], $2, $3, $4, rel, $5
    }'
} >&2
exit $status
