#!/usr/bin/env bash
# The planner's time against the world size: `ember plan` (the 26 tables of 'ember train', 10M
# rows each, a 64 MiB budget per rank) at each world size, on bytes (one host), on predicted time
# (8 ranks per host, 100/10 Gbit/s) and on predicted time with grid offered. One JSON line per
# case: seconds (wall, the whole command), the tables planned (must be 26) and whether the case
# is within the bound: 10 s at any world size up to 65,536, the documented maximum. Exits 1 when
# a case is over the bound or fails.
#   bench/plan_scale.sh [--build DIR] [--sizes "1024 4096 16384 65536"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build sizes="1024 4096 16384 65536" bound=10
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "plan_scale.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
ember=$build/bin/ember
[ -x "$ember" ] || { echo "plan_scale.sh: no $ember (build first)" >&2; exit 1; }
common=(--num_embeddings 10000000 --embedding_dim 64 --memory_per_rank $((64 << 20)) --batch_size 65536)
status=0
for w in $sizes; do
  for mode in bytes timed grid; do
    extra=()
    [ "$mode" = bytes ] || extra=(--ranks_per_host 8 --intra_gbps 100 --inter_gbps 10)
    [ "$mode" = grid ] && extra+=(--grid)
    t0=$(date +%s.%N)
    if out=$("$ember" plan "${common[@]}" --world_size "$w" "${extra[@]}" 2>&1); then rc=0; else rc=$?; fi
    t1=$(date +%s.%N)
    tables=$(printf '%s\n' "$out" | grep -c '^t_cat_' || true)
    python3 -c 'import json,sys; w,m,t0,t1,n,rc,b=sys.argv[1:8]; s=float(t1)-float(t0)
print(json.dumps({"bench":"plan_scale","world_size":int(w),"mode":m,"seconds":round(s,3),"tables":int(n),
 "rc":int(rc),"bound_s":float(b),"within":s<float(b) and int(rc)==0 and int(n)==26}))' \
      "$w" "$mode" "$t0" "$t1" "$tables" "$rc" "$bound"
    if [ "$rc" != 0 ] || [ "$tables" != 26 ] || python3 -c "import sys; sys.exit(0 if $t1-$t0 >= $bound else 1)"; then
      echo "plan_scale.sh: world size $w ($mode): rc $rc, $tables tables, over the bound or failed:" >&2
      printf '%s\n' "$out" | tail -3 >&2
      status=1
    fi
  done
done
exit $status
