#!/usr/bin/env bash
# A multi-host test bed on one machine: H "hosts", each a network namespace
# with its own address, joined through a bridge in a switch namespace (a star,
# as hosts on one top-of-rack switch). Each host's link is a veth pair
# (eth0 in the host, pN on the bridge), shaped in both directions: egress on
# eth0 (host -> switch) and egress on pN (switch -> host), so a host's
# traffic pays the link's rate whichever way it flows. The one definition of
# the bed: tests/netns/netns_bed.h and tools/netns_bench.sh both call this.
#
#   netns_bed.sh up NAME H [RATE [DELAY]]   # e.g. up bn123 3 1gbit 100us; RATE "none": unshaped
#   netns_bed.sh exec NAME N CMD...         # CMD on host N (1-based), hostname "hostN" (UTS namespace)
#   netns_bed.sh rsh NAME ADDRESS CMD...    # as ssh: the shell command CMD on the host at ADDRESS
#                                           # (mpirun --mca plm_rsh_agent "netns_bed.sh rsh NAME")
#   netns_bed.sh cut NAME N                 # take host N's link down (no FIN, no RST: only deadlines notice)
#   netns_bed.sh down NAME                  # remove every namespace of the bed (idempotent)
#   netns_bed.sh reap                       # remove beds whose creating process (bn<PID>x...) is gone
#
# `up` prints "host N NAMESPACE ADDRESS" per host, and "warn: ..." for each
# shaping it had to leave out (this kernel may lack netem or tbf); it removes
# what it made when a step fails. Namespaces are NAME_sw and NAME_hN; the
# addresses 10.78.0.N/24 live only inside the bed's namespaces, so beds made
# at once by different processes never meet. Every ip/tc call is bounded.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for unshare) and iproute2.
set -uo pipefail

SUBNET=10.78.0
# Bounds each ip/tc call: a wedged netlink call must not hang a test.
t() { timeout 10 "$@"; }

address() { echo "$SUBNET.$1"; }

# Shapes DEV in namespace NS to RATE with DELAY added; prints warnings. tbf
# holds the rate (its queue sized for ~20 ms at the rate, so TCP sees delay,
# not loss, under load) and netem, its child, the delay. Kernels built
# without netem keep the rate only; without tbf, netem's own rate is the
# fallback; without either the link is unshaped (warned).
shape() {
  local ns=$1 dev=$2 rate=$3 delay=$4
  if t tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst 256kb latency 20ms 2>/dev/null; then
    if [[ "$delay" != 0 ]] &&
      ! t tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$delay" limit 100000 2>/dev/null; then
      echo "warn: no netem qdisc in this kernel: links shaped to $rate only, no added delay"
    fi
  elif t tc -n "$ns" qdisc add dev "$dev" root netem delay "$delay" rate "$rate" limit 100000 2>/dev/null; then
    echo "warn: no tbf qdisc in this kernel: links shaped by netem's rate $rate and delay $delay"
  else
    echo "warn: neither tbf nor netem in this kernel: links unshaped"
  fi
}

down() {
  local name=$1 ns
  for ns in $(t ip netns list | awk '{print $1}' | grep -E "^${name}_(sw|h[0-9]+)$"); do
    t ip netns del "$ns"
  done
  return 0
}

up() {
  local name=$1 hosts=$2 rate=${3:-none} delay=${4:-0} n sw=${1}_sw warnings=""
  [[ "$hosts" =~ ^[0-9]+$ && "$hosts" -ge 1 && "$hosts" -le 250 ]] || { echo "bad host count $hosts" >&2; return 2; }
  down "$name"
  set -e
  trap 'down "$name"; echo "netns_bed: up $name failed" >&2' ERR
  t ip netns add "$sw"
  t ip -n "$sw" link add br0 type bridge
  t ip -n "$sw" link set br0 up
  for ((n = 1; n <= hosts; n++)); do
    local ns=${name}_h$n
    t ip netns add "$ns"
    # Made inside the switch with its peer moved straight into the host: the
    # names never exist in the root namespace, so no two beds collide.
    t ip -n "$sw" link add "p$n" type veth peer name eth0 netns "$ns"
    t ip -n "$sw" link set "p$n" master br0
    t ip -n "$sw" link set "p$n" up
    t ip -n "$ns" addr add "$(address "$n")/24" dev eth0
    t ip -n "$ns" link set eth0 up
    t ip -n "$ns" link set lo up
    if [[ "$rate" != none ]]; then
      warnings+=$(shape "$ns" eth0 "$rate" "$delay")$'\n'
      warnings+=$(shape "$sw" "p$n" "$rate" "$delay")$'\n'
    fi
  done
  trap - ERR
  set +e
  for ((n = 1; n <= hosts; n++)); do echo "host $n ${name}_h$n $(address "$n")"; done
  # Each kind of shortfall once, not once per link.
  printf '%s' "$warnings" | sort -u | grep . || true
}

reap() {
  local ns pid
  for ns in $(t ip netns list | awk '{print $1}' | grep -E '^bn[0-9]+x[0-9]+_(sw|h[0-9]+)$'); do
    pid=${ns#bn}
    pid=${pid%%x*}
    if ! kill -0 "$pid" 2>/dev/null; then t ip netns del "$ns"; fi
  done
  return 0
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down "$2" ;;
  reap) reap ;;
  cut) t ip -n "${2}_h$3" link set eth0 down ;;
  exec)
    # ip netns exec and unshare both exec (no fork), so the caller's pid is
    # CMD's own: a test waits on, and kills, the program itself.
    ns=${2}_h$3 host=host$3
    shift 3
    exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
    ;;
  rsh)
    # What an rsh agent is given: a host, then words that a remote shell
    # joins and runs. Open MPI may pass options first (none for an agent
    # not named ssh or rsh); anything but one of the bed's addresses is refused.
    name=$2 host=$3
    shift 3
    [[ "$host" =~ ^${SUBNET//./\\.}\.([0-9]+)$ ]] || { echo "netns_bed.sh rsh: $host is not a host of $name" >&2; exit 255; }
    n=${BASH_REMATCH[1]}
    exec ip netns exec "${name}_h$n" unshare --uts /bin/sh -c "hostname host$n && $*"
    ;;
  *) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
