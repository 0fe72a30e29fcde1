#!/usr/bin/env bash
# Runs one program under mpiexec across a cluster of network-namespace hosts (scripts/cluster.sh):
# brings the cluster up, runs, brings it down (also on failure or interruption). Exits 77 (the
# tests' "skipped") with the reason printed where this machine cannot create namespaces.
# Usage: run.sh NAME NET HOSTS SLOTS NP RATE program args...   (RATE: e.g. 1gbit, or off)
set -u
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
name=$1 net=$2 hosts=$3 slots=$4 np=$5 rate=$6
shift 6
if ! why=$(bash "$cluster" check); then
  echo "SKIPPED: $why"
  exit 77
fi
c() { bash "$cluster" --name "$name" --net "$net" "$@"; }
c down >/dev/null 2>&1 # a cluster left behind by an interrupted run of this test
trap 'c down >/dev/null 2>&1' EXIT
c up --hosts "$hosts" --slots "$slots" || exit 1
c shape "$rate" >/dev/null || exit 1
c run -n "$np" "$@"
