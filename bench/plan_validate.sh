#!/usr/bin/env bash
# The planner's predicted step time against the measured one on a shaped cluster of 2 hosts x S
# ranks (scripts/cluster.sh; --slots S, default 2): `ember train` (DLRM defaults, --sharding auto) and two
# `ember bench shard` configurations (every scheme but grid, whose bench placement differs from
# `ember plan --sharding grid`), at each link rate. One JSON line per (rate, model, scheme):
# predicted_ms, measured_ms, rel_err = (predicted - measured) / measured. The bandwidths and the
# collective round the predictions use are those `ember train`'s probe measured at that rate.
#   bench/plan_validate.sh [--build DIR] [--cluster PATH/cluster.sh] [--name C] [--net 10.78.0]
#                          [--rates "1gbit 10gbit"] [--iters N] [--batches N] [--slots S]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build cluster=$root/scripts/cluster.sh name=planval net=10.78.0 rates="1gbit 10gbit" iters=5 batches=30 slots=2
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "plan_validate.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
ember=$build/bin/ember
[ -x "$ember" ] || { echo "plan_validate.sh: no $ember (build first)" >&2; exit 1; }
[ -f "$cluster" ] || { echo "plan_validate.sh: no $cluster" >&2; exit 1; }
bash "$cluster" check >/dev/null || { echo "plan_validate.sh: skipped: this machine cannot create namespaces" >&2; exit 0; }
py=/usr/bin/python3
bash "$cluster" --name "$name" --net "$net" up --hosts 2 --slots "$slots" >&2
trap 'bash "$cluster" --name "$name" down >&2' EXIT
crun() { bash "$cluster" --name "$name" run -n $((2 * slots)) -- "$@" 2>&1; }
json() { # rate model scheme predicted measured
  $py -c 'import json,sys; r,m,s,p,x=sys.argv[1:6]; p=float(p); x=float(x)
print(json.dumps({"bench":"plan_validate","rate":r,"model":m,"scheme":s,"hosts":2,"ranks_per_host":int(sys.argv[6]),
 "predicted_ms":round(p,3),"measured_ms":round(x,3),"rel_err":round((p-x)/x,3)}))' "$@" "$slots"
}
# Bench configurations: tables rows dim pooling batch-per-rank.
configs=("8 50000 64 20 512" "4 200000 32 5 1024")
for rate in $rates; do
  bash "$cluster" --name "$name" shape "$rate" >&2
  out=$(crun "$ember" train --limit_train_batches "$batches" --eval_interval 0 --threads 1)
  topo=$(grep -m1 '^  topology' <<<"$out") || { echo "$out" >&2; exit 1; }
  intra=$(sed -E 's/.*intra-host ([0-9.]+) Gbit.*/\1/' <<<"$topo")
  inter=$(sed -E 's/.*inter-host ([0-9.]+) Gbit.*/\1/' <<<"$topo")
  round=$(sed -E 's/.*round ([0-9.]+) ms.*/\1/' <<<"$topo")
  echo "$rate: $topo" >&2
  intra_flag="--intra_gbps $intra"
  [ "$slots" = 1 ] && intra_flag="" # nothing stays inside a host
  line=$(grep -m1 '^step time: measured' <<<"$out")
  meas=$(sed -E 's/.*measured ([0-9.]+) ms.*/\1/' <<<"$line")
  pred=$(sed -E 's/.*predicted ([0-9.]+) ms.*/\1/' <<<"$line")
  json "$rate" dlrm_default auto "$pred" "$meas"
  for cfg in "${configs[@]}"; do
    read -r T E D L B <<<"$cfg"
    rows=$(printf "$E,%.0s" $(seq "$T")); rows=${rows%,}
    bout=$(crun "$ember" bench shard --tables "$T" --rows "$E" --dim "$D" --pooling "$L" --batch_size "$B" \
           --iters "$iters")
    for s in dp tw cw rw twrw; do
      meas=$(grep "\"scheme\":\"$s\"" <<<"$bout" | sed -E 's/.*"ms_med":([0-9.]+).*/\1/')
      pred=$("$ember" plan --sharding "$s" --world_size $((2 * slots)) --ranks_per_host "$slots" --batch_size $((B * 2 * slots)) \
             --pooling_factor "$L" --embedding_dim "$D" --num_embeddings_per_feature "$rows" \
             $intra_flag --inter_gbps "$inter" --round_ms "$round" |
             sed -nE 's/^predicted step time ([0-9.]+) ms.*/\1/p')
      json "$rate" "bench_T${T}_E${E}_D${D}_L${L}_B${B}" "$s" "$pred" "$meas"
    done
  done
done
