#!/usr/bin/env bash
# braid against its anchors in interleaved pairs (issue 29): in each pair
# braid runs, then its anchor, back to back, so the VM's drift (2-3x between
# hours) hits both alike; PAIRS pairs; every ratio is taken inside a pair and
# reported as the median and range over the pairs. The memory bound
# (bench/memory_bound.cc) is measured in every pair too.
#
# Cells, at each world size in WORLD_SIZES (above 2 the ranks share 2 cores):
#   - 8-byte all-reduce latency: braid over shm (auto) against MPI_Allreduce (vader);
#   - all-reduce busbw, 64 KiB .. MAXBYTES by x4, in and out of place: braid
#     over shm against MPI_Allreduce (vader); at 2 ranks, against the memory
#     bound at 64 MiB and up;
#   - at 2 ranks over tcp (loopback): 8 B and 64 MiB against Open MPI's tcp btl;
#   - at 2 ranks, bf16 and fp16 all-reduce at 64 MiB against the memory bound
#     (the same bytes move; Open MPI has no 16-bit float sum to anchor them).
#
#   bench/pairs.sh                          # 5 pairs, 2 and 4 ranks (about 25 minutes)
#   PAIRS=3 WORLD_SIZES=2 MAXBYTES=64M bench/pairs.sh
#
# Knobs: PAIRS (5), WORLD_SIZES ("2 4"), MAXBYTES (256M), ITERS (20),
# LAT_ITERS (20000), TCP (1), BIN_DIR (binaries built elsewhere), OUT
# (bench/out/pairs), UPDATE_RESULTS (1: the table replaces bench/RESULTS.md's
# part between "<!-- pairs:begin -->" and "<!-- pairs:end -->").
# The table goes to stdout and $OUT/summary.md, its chart to bench/plots/pairs.png
# (with UPDATE_RESULTS=0, to $OUT/pairs.png).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-5}
WORLD_SIZES=${WORLD_SIZES:-"2 4"}
MAXBYTES=${MAXBYTES:-256M}
ITERS=${ITERS:-20}
LAT_ITERS=${LAT_ITERS:-20000}
TCP=${TCP:-1}
OUT=${OUT:-bench/out/pairs}
export BRAID_TIMEOUT_SEC=${BRAID_TIMEOUT_SEC:-300}
if [[ $EUID -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
log() { echo "[pairs] $*" >&2; }

if [[ -n "${BIN_DIR:-}" ]]; then
  BIN=$BIN_DIR
else
  log "building //bench:braid_bench //bench:mpi_allreduce_bench //bench:memory_bound //launcher:braidrun"
  bazel build //bench:braid_bench //bench:mpi_allreduce_bench //bench:memory_bound //launcher:braidrun >&2
  BIN=$OUT/bin
  mkdir -p "$BIN"
  cp -f bazel-out/k8-opt/bin/bench/{braid_bench,mpi_allreduce_bench,memory_bound} bazel-out/k8-opt/bin/launcher/braidrun "$BIN/"
fi
BOUND=$BIN/memory_bound
if [[ ! -x $BOUND ]]; then  # BIN_DIR from an older commit
  bazel build //bench:memory_bound >&2
  BOUND=bazel-out/k8-opt/bin/bench/memory_bound
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.log "$OUT"/*.txt
LAT=(-b 8 -e 8 -n "$LAT_ITERS" -w 500 -c 0 -d float -o sum)
SWEEP=(-b 64K -e "$MAXBYTES" -f 4 -n "$ITERS" -w 3 -c 0 -d float -o sum)
TCP_SIZES=(-b 64M -e 64M -n "$ITERS" -w 3 -c 0 -d float -o sum)
HALF=(-b 64M -e 64M -n "$ITERS" -w 3 -c 0 -o sum)

braid() {  # name n transport args...
  local name=$1 n=$2 transport=$3
  shift 3
  "$BIN/braidrun" --standalone --nproc-per-node="$n" --local-ranks-filter=0 "$BIN/braid_bench" -t "$transport" \
    -a auto "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log" || log "$name FAILED (see $OUT/$name.log)"
}
mpi() {  # name n btl args...
  local name=$1 n=$2 btl=$3
  shift 3
  mpirun --oversubscribe -np "$n" --mca btl "$btl" "$BIN/mpi_allreduce_bench" "$@" \
    --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log" || log "$name FAILED (see $OUT/$name.log)"
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%MZ)
bound_sizes=$((64 << 20)),$((256 << 20))
for p in $(seq "$PAIRS"); do
  for n in $WORLD_SIZES; do
    log "pair $p, $n ranks"
    braid "braid_lat_n${n}_p$p" "$n" shm "${LAT[@]}"
    mpi "mpi_lat_n${n}_p$p" "$n" vader,self "${LAT[@]}"
    braid "braid_sweep_n${n}_p$p" "$n" shm "${SWEEP[@]}"
    mpi "mpi_sweep_n${n}_p$p" "$n" vader,self "${SWEEP[@]}"
    if [[ $n == 2 ]]; then
      "$BOUND" --threads=2 --sizes="$bound_sizes" > "$OUT/bound_n${n}_p$p.txt"
      braid "braid_bf16_n${n}_p$p" "$n" shm "${HALF[@]}" -d bfloat16
      braid "braid_fp16_n${n}_p$p" "$n" shm "${HALF[@]}" -d half
    fi
    if [[ $TCP == 1 && $n == 2 ]]; then
      braid "braid_tcplat_n${n}_p$p" "$n" tcp "${LAT[@]}"
      mpi "mpi_tcplat_n${n}_p$p" "$n" tcp,self "${LAT[@]}"
      braid "braid_tcp_n${n}_p$p" "$n" tcp "${TCP_SIZES[@]}"
      mpi "mpi_tcp_n${n}_p$p" "$n" tcp,self "${TCP_SIZES[@]}"
    fi
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# The chart goes next to run_all's (bench/plots/) when RESULTS.md is updated.
PLOT=$OUT/pairs.png
[[ ${UPDATE_RESULTS:-1} == 1 ]] && mkdir -p bench/plots && PLOT=bench/plots/pairs.png
/usr/bin/python3 bench/pairs_table.py "$OUT" "$PAIRS" "$WORLD_SIZES" "$started" "$load_start" "$load_end" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$PLOT" | tee "$OUT/summary.md"

if [[ ${UPDATE_RESULTS:-1} == 1 ]]; then
  python3 - "$OUT/summary.md" bench/RESULTS.md <<'PYTHON'
import sys
summary, results = sys.argv[1], sys.argv[2]
text = open(results).read()
begin, end = "<!-- pairs:begin -->", "<!-- pairs:end -->"
if begin not in text or end not in text:
    sys.exit(f"{results} has no {begin} ... {end} markers")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(results, "w").write(head + begin + "\n" + open(summary).read() + end + tail)
PYTHON
  log "bench/RESULTS.md updated"
fi
