#!/usr/bin/env bash
# All-reduce across "hosts" on this one machine: the test bed of
# tests/netns/ (network namespaces behind one bridge, links shaped to RATE
# both ways, each host its own host name), H hosts x 2 ranks, one braidrun
# agent per host (c10d rendezvous on host 1) running braid_bench with the
# transport on auto (tcp between hosts), beside Open MPI's MPI_Allreduce
# (mpi_allreduce_bench) started by mpirun in host 1's namespace, its rsh
# agent entering the other hosts' namespaces (netns_bed.sh rsh), and beside
# the bytes-on-the-link lower bound: in an all-reduce of S bytes where every
# rank holds S, each host must send at least 2(H-1)/H * S bytes through its
# link (it must send out what the other hosts need of its data and receive
# theirs), so time >= 2(H-1)/H * S / RATE. f32 sum, exact check (-c 1).
#
#   tools/netns_bench.sh                     # -a ring, H = 2 3, 8 B .. 64 MiB
#   tools/netns_bench.sh ring,hierarchical   # the algorithms, as braid_bench -a takes them
#   HOSTS=2 MAXBYTES=1M tools/netns_bench.sh # a quick look
#
# Knobs: HOSTS ("2 3"), RATE (1gbit: tc's units, 10^9 bit/s), DELAY (100us;
# left out with a warning on kernels without netem), MAXBYTES (64M), STEP (2),
# ITERS (10), WARMUP (3), MPI (1: also Open MPI), MPI_BTL (tcp,self),
# BUILD (1: bazel build first; 0: use bench/out/bin as it is). Needs root.
# Raw tables go to bench/out/netns_*; the summary (markdown) to stdout and
# bench/out/netns_bench_summary.md. Run it with nothing else on the machine:
# 2 H ranks share 2 cores.
set -uo pipefail

cd "$(dirname "$0")/.."
ALGOS=${1:-ring}
HOSTS=${HOSTS:-"2 3"}
RATE=${RATE:-1gbit}
DELAY=${DELAY:-100us}
MAXBYTES=${MAXBYTES:-64M}
STEP=${STEP:-2}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
MPI=${MPI:-1}
MPI_BTL=${MPI_BTL:-tcp,self}
BUILD=${BUILD:-1}
OUT=bench/out
BED=$PWD/tests/netns/netns_bed.sh
RANKS_PER_HOST=2
SWEEP=(-b 8 -e "$MAXBYTES" -f "$STEP" -n "$ITERS" -w "$WARMUP" -c 1 -d float -o sum)
# No run may hang: each job is bounded (64 MiB at 1 Gbit/s is ~1 s a call).
JOB_TIMEOUT=${JOB_TIMEOUT:-900}
export BRAID_TIMEOUT_SEC=${BRAID_TIMEOUT_SEC:-120}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "[netns_bench] $*" >&2; }

[[ $EUID -eq 0 ]] || { log "needs root (ip netns, tc)"; exit 2; }
command -v ip >/dev/null && command -v tc >/dev/null || { log "needs iproute2"; exit 2; }
# bits per second from tc's units (k, m, g: powers of ten, as tc reads them).
rate_bps=$(awk -v r="$RATE" 'BEGIN {
  n = r + 0; u = tolower(substr(r, length(n "") + 1))
  m = u ~ /^k/ ? 1e3 : u ~ /^m/ ? 1e6 : u ~ /^g/ ? 1e9 : 1
  if (u ~ /bps$/) m *= 8  # tc: "bps" is bytes per second
  print n * m }')

if [[ $BUILD == 1 ]]; then
  log "building //bench:braid_bench //bench:mpi_allreduce_bench //launcher:braidrun"
  bazel build //bench:braid_bench //bench:mpi_allreduce_bench //launcher:braidrun >&2 || exit 1
  mkdir -p "$OUT/bin"
  cp -f bazel-bin/bench/braid_bench bazel-bin/bench/mpi_allreduce_bench bazel-bin/launcher/braidrun "$OUT/bin/"
fi
BIN=$PWD/$OUT/bin
mkdir -p "$OUT"

name=bn$$x0  # netns_bed.sh reap removes it if this script is SIGKILLed
trap '"$BED" down "$name"' EXIT
trap 'exit 130' INT TERM

# braid_bench on every host, one agent each; rank 0's table (on whichever
# host rendezvous made node 0) to $1.
run_braid() {
  local h=$1 table=$2 n pids=()
  for ((n = 1; n <= h; n++)); do
    timeout "$JOB_TIMEOUT" "$BED" exec "$name" "$n" env -u BRAID_TRANSPORT -u BRAID_ALGO \
      BRAID_JOB_SECRET=netns-bench "$BIN/braidrun" --nnodes="$h" --nproc-per-node=$RANKS_PER_HOST \
      --rdzv-backend=c10d --rdzv-endpoint=10.78.0.1:29400 --rdzv-id="bench$h" --local-addr=10.78.0.$n \
      "$BIN/braid_bench" -a "$ALGOS" "${SWEEP[@]}" > "$table.host$n" 2> "$table.host$n.log" &
    pids+=($!)
  done
  local status=0
  for n in "${pids[@]}"; do wait "$n" || status=1; done
  grep -h '^\[rank 0\]: ' "$table".host* | sed 's/^\[rank 0\]: //' > "$table"
  return $status
}

# mpirun in host 1's namespace; the rsh agent starts orted on the others.
# mpi_yield_when_idle: Open MPI's ranks busy-poll, and with every core busy
# a message through the bed's veth pairs and bridge waits for the next timer
# tick (4 ms here) before it arrives; yielding, 14-55 us (bench/RESULTS.md,
# "Open MPI in the namespace bed"). Real hosts have NICs and spare cores.
run_mpi() {
  local h=$1 table=$2 hosts="" n
  for ((n = 1; n <= h; n++)); do hosts+="${hosts:+,}10.78.0.$n:$RANKS_PER_HOST"; done
  timeout "$JOB_TIMEOUT" "$BED" exec "$name" 1 mpirun --oversubscribe -np $((h * RANKS_PER_HOST)) --host "$hosts" \
    --mca plm_rsh_agent "$BED rsh $name" --mca btl "$MPI_BTL" --mca btl_tcp_if_include 10.78.0.0/24 \
    --mca oob_tcp_if_include 10.78.0.0/24 --mca mpi_yield_when_idle 1 \
    "$BIN/mpi_allreduce_bench" "${SWEEP[@]}" > "$table" 2> "$table.log"
}

# "<label> <size> <time us> <wrong>" for each row of a table; label = PREFIX
# followed by the section's algorithm when PREFIX ends in "/".
rows() {
  awk -v prefix="$2" '
    /^# Algorithm:/ { algo = prefix ~ /\/$/ ? prefix $3 : prefix }
    /^#/ { next }
    NF >= 13 { if (algo == "") algo = prefix; print algo, $1, $6, $9 + $13 }' "$1"
}

status=0
summary=$OUT/netns_bench_summary.md
{
  echo "## All-reduce across hosts (network namespaces), $RANKS_PER_HOST ranks per host, links $RATE"
  echo
  echo "tools/netns_bench.sh $ALGOS; f32 sum, out-of-place time, -n $ITERS -w $WARMUP; $(uname -r), $(nproc) cores."
  echo "bound = 2(H-1)/H * size / link rate (the bytes each host must send through its link); tbf counts"
  echo "whole frames, so TCP/IP/Ethernet headers put ~1.05 x bound out of reach (1448 payload bytes a 1514-byte frame)."
  echo "Columns \"x bound\": time / bound (1.00 = at the link's limit); \"vs MPI\": MPI's time / this time (> 1: faster than MPI)."
} > "$summary"
for h in $HOSTS; do
  rowfile=$OUT/netns_bench_h$h.rows
  : > "$rowfile"
  "$BED" down "$name"
  warnings=$("$BED" up "$name" "$h" "$RATE" "$DELAY" | grep '^warn:') || true
  [[ -n "$warnings" ]] && log "$warnings"
  if ! ip netns list | grep -q "^${name}_h$h"; then log "the bed did not come up"; exit 1; fi
  log "H=$h: braid_bench -a $ALGOS ${SWEEP[*]} under $h braidrun agents"
  table=$OUT/netns_bench_braid_h$h.txt
  if ! run_braid "$h" "$table"; then log "braid H=$h FAILED (see $table.host*.log)"; status=1; fi
  transports=$(grep -ho 'transport [a-z]*' "$table" | sort -u | tr '\n' ' ')
  log "braid ran: ${transports:-transport unknown}"
  rows "$table" "braid/" >> "$rowfile"
  if [[ $MPI == 1 ]]; then
    log "H=$h: mpirun -np $((h * RANKS_PER_HOST)) mpi_allreduce_bench (btl $MPI_BTL) in the namespaces"
    table=$OUT/netns_bench_mpi_h$h.txt
    if ! run_mpi "$h" "$table"; then log "MPI H=$h FAILED (see $table.log)"; status=1; fi
    rows "$table" "MPI" >> "$rowfile"
  fi
  awk -v h="$h" -v bps="$rate_bps" -v warn="$warnings" '
    { if (!($1 in seen)) { seen[$1] = 1; labels[++nl] = $1 }
      if (!($2 in seens)) { seens[$2] = 1; sizes[++ns] = $2 }
      t[$1, $2] = $3; wrong[$1] += $4 }
    function f(x) { return x >= 100 ? sprintf("%.0f", x) : sprintf("%.1f", x) }
    END {
      printf "\n### %d hosts x 2 ranks%s\n\n| bytes | bound (us) |", h, warn == "" ? "" : " (" substr(warn, 7) ")"
      for (i = 1; i <= nl; i++) printf " %s (us) | x bound |%s", labels[i], labels[i] == "MPI" ? "" : (("MPI", sizes[1]) in t ? " vs MPI |" : "")
      printf "\n|---:|---:|"
      for (i = 1; i <= nl; i++) printf "---:|---:|%s", labels[i] == "MPI" || !(("MPI", sizes[1]) in t) ? "" : "---:|"
      printf "\n"
      for (j = 1; j <= ns; j++) {
        s = sizes[j]; bound = 2 * (h - 1) / h * s * 8 / bps * 1e6
        printf "| %s | %s |", s, f(bound)
        for (i = 1; i <= nl; i++) {
          l = labels[i]
          if (!((l, s) in t)) { printf " - | - |"; continue }
          printf " %s | %.2f |", f(t[l, s]), t[l, s] / bound
          if (l != "MPI" && ("MPI", sizes[1]) in t) printf " %s |", (("MPI", s) in t) ? sprintf("%.2f", t["MPI", s] / t[l, s]) : "-"
        }
        printf "\n"
      }
      printf "\n#wrong:"; for (i = 1; i <= nl; i++) printf " %s %d;", labels[i], wrong[labels[i]]; printf "\n"
    }' "$rowfile" >> "$summary"
done
cat "$summary"
exit $status
