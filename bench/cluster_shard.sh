#!/usr/bin/env bash
# `ember bench shard` on one host and on the one-machine cluster (scripts/cluster.sh) with its
# links shaped to each given rate, in alternating rounds so that every network sees the same
# machine load. Prints (and with --out appends to FILE) the bench's JSON lines, each with
# "net": "one_host" or the rate and "round".
#
# Usage: bench/cluster_shard.sh [options] [-- ember bench shard options]
#   --ember PATH    the ember binary (default build/bin/ember)
#   --hosts H       cluster hosts (default 2)     --slots S   ranks per host (default 2)
#   --rates LIST    comma-separated link rates (default 10gbit,1gbit)
#   --rounds N      alternations (default 3)      --out FILE  append the JSON lines there
# One host: mpiexec -n H*S with Open MPI's shared-memory transport. Needs root (namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
ember=build/bin/ember hosts=2 slots=2 rates=10gbit,1gbit rounds=3 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ember) ember=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster_shard.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
ember=$(readlink -f "$ember")
np=$((hosts * slots))
c() { bash scripts/cluster.sh --name benchc --net 10.77.250 "$@"; }
c down >/dev/null 2>&1 || true
trap 'c down >/dev/null 2>&1 || true' EXIT
c up --hosts "$hosts" --slots "$slots" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
emit() { # net round: tags the bench's JSON lines
  sed -n "s/^{\(.*\)}$/{\"net\":\"$1\",\"round\":$2,\"hosts\":$3,\1}/p" | tee -a "${out:-/dev/null}"
}
for ((r = 0; r < rounds; r++)); do
  mpiexec.openmpi -n "$np" --oversubscribe --mca btl self,vader "$ember" bench shard "$@" | emit one_host "$r" 1
  for rate in ${rates//,/ }; do
    c shape "$rate" >/dev/null
    c run -n "$np" "$ember" bench shard "$@" | emit "$rate" "$r" "$hosts"
  done
done
