#!/usr/bin/env bash
# 2D parallelism (ember train --sharding_group_size) on the one-machine cluster (scripts/cluster.sh):
# H hosts x S ranks, links shaped to RATE, a model whose pooled-row all-to-all dominates (wide
# rows, a large batch); the 1D plans (each table-wise, row-wise, data-parallel and the planner's)
# against 2D with a group per host, in alternating rounds. One JSON line per run: the plan, the
# measured step time (ms), samples/s, eval AUC; then one line per 1D plan with the ratio of 2D's
# median step to its median step.
#
# Usage: bench/2d.sh [--hosts 2] [--slots 2] [--rate 1gbit] [--rounds 3] [--out FILE]
#                    [-- ember train options]
# Needs root (namespaces) and a release build (build/bin/ember).
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=2 slots=2 rate=1gbit rounds=3 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "2d.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
ember=$(readlink -f build/bin/ember)
np=$((hosts * slots))
c() { bash scripts/cluster.sh --name bench2d --net 10.77.251 "$@"; }
c down >/dev/null 2>&1 || true
trap 'c down >/dev/null 2>&1 || true' EXIT
c up --hosts "$hosts" --slots "$slots" >/dev/null
c shape "$rate" >/dev/null
model=(--dataset synthetic --embedding_dim 128 --dense_arch_layer_sizes 64,128 --batch_size 8192
       --limit_train_batches 40 --limit_val_batches 2 --threads 1 --num_embeddings 20000)
declare -A steps
for ((r = 0; r < rounds; r++)); do
  for plan in tw rw dp auto "tw --sharding_group_size $slots"; do
    line=$(c run -n "$np" "$ember" train "${model[@]}" --sharding $plan "$@" 2>&1 | tee /tmp/2d-bench.log |
           awk '/^step time: measured/ { ms = $4 } /samples\/s\)$/ { sps = $(NF-1); sub(/\(/, "", sps) }
                /^eval AUC/ { auc = $3 } END { printf "%s %s %s", ms, sps, auc }') ||
      { echo "2d.sh: the run of --sharding $plan failed:" >&2; tail -20 /tmp/2d-bench.log >&2; exit 1; }
    read -r ms sps auc <<< "$line"
    key=${plan// /_}
    steps[$key]="${steps[$key]:-} $ms"
    fmt='{"bench":"2d","net":"%s","hosts":%d,"ranks":%d,"round":%d,"sharding":"%s",'
    fmt+='"step_ms":%s,"samples_per_s":%s,"eval_auc":%s}\n'
    # shellcheck disable=SC2059
    printf "$fmt" "$rate" "$hosts" "$np" "$r" "$plan" "$ms" "$sps" "$auc" | tee -a "${out:-/dev/null}"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
twod=$(echo "${steps[tw_--sharding_group_size_$slots]}" | median)
for plan in tw rw dp auto; do
  m=$(echo "${steps[$plan]}" | median)
  ratio=$(awk -v a="$twod" -v b="$m" 'BEGIN { printf "%.3f", a / b }')
  printf '{"bench":"2d","net":"%s","ranks":%d,"vs":"%s","step_ms_1d":%s,"step_ms_2d":%s,"ratio":%s}\n' \
    "$rate" "$np" "$plan" "$m" "$twod" "$ratio" | tee -a "${out:-/dev/null}"
done
