#!/usr/bin/env bash
# A cluster on one machine: N "hosts", each a network namespace with its own address, joined by
# veth pairs to a bridge, and Open MPI across them over TCP only.
#
#   scripts/cluster.sh [--name C] [--net 10.77.0] up [--hosts 2] [--slots 2]
#   scripts/cluster.sh [--name C] run [mpiexec options] -- program args...
#   scripts/cluster.sh [--name C] shape RATE|off     e.g. 1gbit, 10gbit (every host's link, both ways)
#   scripts/cluster.sh [--name C] cut HOST | heal HOST   host index 0..N-1: its link down / up
#   scripts/cluster.sh [--name C] status | down
#   scripts/cluster.sh [--name C] leftovers           what of C exists (processes, namespaces, links,
#                                                     state): one line each, exit 1 if anything
#   scripts/cluster.sh check                          can this machine create namespaces? (exit 0/1)
#
# Host i is namespace "<C>-h<i>" with address <net>.<i+1>/24 on its eth0; the other end of its
# veth pair, "<C>h<i>", is a port of the bridge "<C>br". The root namespace holds <net>.254 on the
# bridge: mpiexec runs there and its daemons (one orted per host) are started inside their
# namespace by a launcher agent that Open MPI's rsh launcher calls (plm_rsh_agent), so every rank
# of host i lives in host i's network namespace. Open MPI is limited to its TCP transport (btl
# tcp,self; out-of-band traffic on the bridge subnet too): ranks of one host talk over that host's
# loopback, ranks of different hosts over the bridge, through the shaped links. Processes still
# share the machine's filesystem, CPUs and memory; MPI_COMM_TYPE_SHARED groups the ranks of one
# host (Open MPI takes locality from the daemon that started them).
#
# Shaping: a token bucket (tc tbf) on both directions of every host's link (the host's eth0 for
# traffic leaving it, its bridge port for traffic entering it): bandwidth only. This kernel has no
# netem, so latency is not added: the link keeps the veth/TCP stack's own (tens of microseconds).
#
# State lives in /tmp/ember-cluster-<C>/ (hostfile, launcher agent, the temporary directories of
# mpiexec and of every host's daemon). The name (default "ember", at most 8 characters) keeps
# clusters of different users of one machine apart; each needs its own --net (remembered: later
# commands on the cluster need only its name). Needs root, iproute2 and Open MPI's mpiexec.
#
# `down` takes away everything of the cluster, whatever state it was left in (an interrupted `up`,
# a killed script): every process inside its namespaces, every process of the root namespace
# whose command line names its state directory (mpiexec and the launcher agents: an mpiexec whose
# parent was killed keeps running, and after a cut it waits for the lost host's daemon for about
# 15 minutes), the namespaces, veth pairs and bridge named after it, and its state directory.
set -euo pipefail

name=ember
net=""
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
help() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    -h|--help) help ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
cmd=$1; shift
[[ "$name" =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "cluster.sh: --name '$name': 1-8 lower-case letters/digits" >&2; exit 2; }
dir=/tmp/ember-cluster-$name
# The subnet: as given, else the one the cluster was brought up with, else 10.77.0.
[ -n "$net" ] || net=$(cat "$dir/net" 2>/dev/null || echo 10.77.0)
[[ "$net" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "cluster.sh: --net '$net': three octets, e.g. 10.77.0" >&2; exit 2; }
br=${name}br

nhosts() { [ -f "$dir/hosts" ] && cat "$dir/hosts" || echo 0; }
# What exists of the cluster, found on the machine rather than from its state (which an
# interrupted `up` or a killed `down` may have left behind or taken away): its namespaces, its
# links (bridge and host ports), and the processes inside the namespaces or naming $dir/.
cluster_netns() { ip netns list 2>/dev/null | awk -v p="$name-h" 'index($1, p) == 1 && substr($1, length(p) + 1) ~ /^[0-9]+$/ { print $1 }'; }
cluster_links() { ip -o link show 2>/dev/null | awk -F': ' -v n="$name" '{ sub(/@.*/, "", $2) } $2 == n "br" || ($2 ~ "^" n "h[0-9]+$") { print $2 }'; }
cluster_pids() {
  local n p a
  for n in $(cluster_netns); do ip netns pids "$n" 2>/dev/null || true; done
  for p in /proc/[0-9]*; do
    mapfile -d '' -t a 2>/dev/null <"$p/cmdline" || continue
    [[ "${a[*]}" == *"$dir/"* ]] && echo "${p#/proc/}"
  done
  return 0
}
need_up() { [ "$(nhosts)" -gt 0 ] || { echo "cluster.sh: cluster '$name' is not up (scripts/cluster.sh --name $name up)" >&2; exit 1; }; }
ns() { echo "$name-h$1"; }
port() { echo "${name}h$1"; }

# Why namespaces cannot be made here (empty: they can). Tries a throwaway namespace and veth pair.
why_not() {
  [ "$(id -u)" = 0 ] || { echo "not root"; return; }
  command -v ip >/dev/null || { echo "no 'ip' (iproute2)"; return; }
  command -v tc >/dev/null || { echo "no 'tc' (iproute2)"; return; }
  command -v mpiexec.openmpi >/dev/null || command -v mpiexec >/dev/null || { echo "no mpiexec"; return; }
  local t=embchk$$
  if ! ip netns add "$t" 2>/dev/null; then echo "cannot create network namespaces (ip netns add failed)"; return; fi
  if ! ip link add "${t}a" type veth peer name "${t}b" 2>/dev/null; then
    ip netns del "$t"; echo "cannot create veth pairs"; return
  fi
  ip link del "${t}a" 2>/dev/null || true
  ip netns del "$t"
}

# tc token bucket on device $2 (in namespace $3, or the root namespace when empty): rate $1 or off.
shape_dev() {
  local rate=$1 dev=$2 in=()
  [ -n "${3:-}" ] && in=(-n "$3")
  tc "${in[@]}" qdisc del dev "$dev" root 2>/dev/null || true
  [ "$rate" = off ] && return 0
  local bits burst
  bits=$(echo "$rate" | awk '{ u = tolower($1); v = u + 0; sub(/^[0-9.]+/, "", u);
    m = (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : -1; print (m < 0 || v <= 0) ? -1 : v * m }')
  [ "$bits" != -1 ] || { echo "cluster.sh shape: rate '$rate': a number with kbit, mbit or gbit (e.g. 1gbit)" >&2; exit 2; }
  # burst: 4 ms worth of the rate, at least 128 KiB (tbf needs rate/HZ at the least).
  burst=$(awk -v b="$bits" 'BEGIN { x = b / 8 * 0.004; if (x < 131072) x = 131072; printf "%d", x }')
  tc "${in[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
}

case "$cmd" in
  check)
    r=$(why_not)
    if [ -n "$r" ]; then echo "cluster.sh: no cluster on this machine: $r"; exit 1; fi
    echo "cluster.sh: network namespaces, veth pairs and tc are available"
    ;;
  up)
    hosts=2 slots=2
    while [ $# -gt 0 ]; do
      case "$1" in
        --hosts) hosts=$2; shift 2 ;;
        --slots) slots=$2; shift 2 ;;
        *) echo "cluster.sh up: unknown option '$1'" >&2; exit 2 ;;
      esac
    done
    [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] || { echo "cluster.sh up: --hosts $hosts: 1-200" >&2; exit 2; }
    [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || { echo "cluster.sh up: --slots $slots: at least 1" >&2; exit 2; }
    [ "$(nhosts)" = 0 ] || { echo "cluster.sh: cluster '$name' is already up ($(nhosts) hosts); 'down' it first" >&2; exit 1; }
    r=$(why_not); [ -z "$r" ] || { echo "cluster.sh: cannot build a cluster here: $r" >&2; exit 1; }
    mkdir -p "$dir"
    echo 0 > "$dir/hosts" # partially up: 'down' cleans whatever exists
    echo "$net" > "$dir/net"
    trap 'echo "cluster.sh: up failed; cleaning up" >&2; bash "$0" --name "$name" --net "$net" down >/dev/null 2>&1 || true' ERR
    ip link add "$br" type bridge
    ip addr add "$net.254/24" dev "$br"
    ip link set "$br" up
    : > "$dir/hostfile"
    for ((i = 0; i < hosts; i++)); do
      ip netns add "$(ns $i)"
      echo $((i + 1)) > "$dir/hosts"
      ip link add "$(port $i)" type veth peer name eth0 netns "$(ns $i)"
      ip link set "$(port $i)" master "$br" up
      ip -n "$(ns $i)" addr add "$net.$((i + 1))/24" dev eth0
      ip -n "$(ns $i)" link set eth0 up
      ip -n "$(ns $i)" link set lo up
      echo "$net.$((i + 1)) slots=$slots" >> "$dir/hostfile"
    done
    # The launcher agent: Open MPI calls it as `agent <host> <command...>`; it runs the command in
    # the host's namespace (the address's last octet - 1 is the host index) with a temporary
    # directory of the host's own: daemons of "hosts" sharing one /tmp and one host name would
    # share Open MPI's session directory, and one of them crashes now and then (seen: 1 start in 10).
    cat > "$dir/agent" <<EOF
#!/bin/sh
host=\$1; shift
i=\$((\${host##*.} - 1))
mkdir -p "$dir/tmp-h\$i"
TMPDIR="$dir/tmp-h\$i" exec ip netns exec $name-h\$i /bin/sh -c "\$*"
EOF
    chmod +x "$dir/agent"
    trap - ERR
    echo "cluster.sh: '$name' up: $hosts hosts x $slots slots on $net.0/24 (hostfile $dir/hostfile)"
    ;;
  down)
    # The processes first (mpiexec, daemons, ranks; a rank whose link was cut), until none is left:
    # a namespace deleted while a process still holds it lives on without its name.
    for _ in $(seq 1 50); do
      pids=$(cluster_pids | sort -u)
      [ -z "$pids" ] && break
      kill -9 $pids 2>/dev/null || true
      sleep 0.1
    done
    for l in $(cluster_links); do ip link del "$l" 2>/dev/null || true; done
    for n in $(cluster_netns); do ip netns del "$n" 2>/dev/null || true; done
    rm -rf "$dir"
    left=$(bash "$0" --name "$name" leftovers 2>&1) || { echo "cluster.sh: '$name' not entirely down:" >&2; echo "$left" >&2; exit 1; }
    echo "cluster.sh: '$name' down"
    ;;
  leftovers)
    found=0
    for p in $(cluster_pids | sort -un); do
      c=$(ps -o pid=,etime=,args= -p "$p" 2>/dev/null | cut -c1-300) && [ -n "$c" ] && echo "process $c" && found=1
    done
    for n in $(cluster_netns); do echo "network namespace $n"; found=1; done
    for l in $(cluster_links); do echo "link $l"; found=1; done
    [ -e "$dir" ] && { echo "directory $dir"; found=1; }
    [ "$found" = 0 ]
    ;;
  status)
    need_up
    n=$(nhosts)
    echo "cluster '$name': $n hosts, bridge $br ($net.254)"
    for ((i = 0; i < n; i++)); do
      st=$(ip -o link show "$(port $i)" | grep -o 'state [A-Z]*' || true)
      q=$(ip netns exec "$(ns $i)" tc qdisc show dev eth0 | head -1)
      echo "  host $i: $(ns $i) $net.$((i + 1)) link $st; $q"
    done
    ;;
  shape)
    need_up
    [ $# -eq 1 ] || { echo "cluster.sh shape: RATE (e.g. 1gbit) or off" >&2; exit 2; }
    n=$(nhosts)
    for ((i = 0; i < n; i++)); do
      shape_dev "$1" eth0 "$(ns $i)"   # leaving host i
      shape_dev "$1" "$(port $i)"      # entering host i
    done
    echo "cluster.sh: every link of '$name' $([ "$1" = off ] && echo "unshaped" || echo "shaped to $1 each way")"
    ;;
  cut|heal)
    need_up
    [ $# -eq 1 ] && [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -lt "$(nhosts)" ] || { echo "cluster.sh $cmd: host index 0..$(( $(nhosts) - 1 ))" >&2; exit 2; }
    ip link set "$(port $1)" "$([ "$cmd" = cut ] && echo down || echo up)"
    echo "cluster.sh: host $1 $([ "$cmd" = cut ] && echo "cut off" || echo "reconnected")"
    ;;
  run)
    need_up
    mpiexec=$(command -v mpiexec.openmpi || command -v mpiexec)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # mpiexec's session directory under the cluster's (one killed leaves it behind; `down` takes it).
    mkdir -p "$dir/tmp"
    export TMPDIR="$dir/tmp"
    exec "$mpiexec" --hostfile "$dir/hostfile" \
      --mca plm_rsh_agent "$dir/agent" --mca plm_rsh_no_tree_spawn 1 \
      --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
      --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \
      "$@"
    ;;
  *) usage ;;
esac
