#!/usr/bin/env bash
# braid over Open MPI, in one table per world size: braid_bench under mpirun
# over the mpi transport with -a ring,tree,rhd,native (native = MPI's own
# nonblocking collective, MPI_Iallreduce, polled under braid's deadline),
# beside the blocking MPI_Allreduce baseline (mpi_allreduce_bench) and,
# with SHM_TCP=1, braid's shm and tcp transports under the same mpirun (their
# bootstrap over MPI). f32 sum, exact check (-c 1) on every row.
#
#   bench/mpi_bench.sh                            # N = 2 3 4, 8 B .. 64 MiB
#   WORLD_SIZES=2 MAXBYTES=1M bench/mpi_bench.sh  # a quick look
#
# Knobs: WORLD_SIZES ("2 3 4"), MAXBYTES (64M), ITERS (20), WARMUP (5), STEP (4),
# SHM_TCP (0). Raw tables go to bench/out/mpi_bench_*; the summary (out-of-place
# time in us per algorithm, and #wrong summed over every row) to stdout and
# bench/out/mpi_bench_summary.md. Above 2 ranks the ranks share 2 cores.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=bench/out
WORLD_SIZES=${WORLD_SIZES:-"2 3 4"}
MAXBYTES=${MAXBYTES:-64M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
STEP=${STEP:-4}
SHM_TCP=${SHM_TCP:-0}
export BRAID_TIMEOUT_SEC=${BRAID_TIMEOUT_SEC:-120}
SWEEP=(-b 8 -e "$MAXBYTES" -f "$STEP" -n "$ITERS" -w "$WARMUP" -c 1 -d float -o sum)
if [[ $EUID -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
log() { echo "[mpi_bench] $*" >&2; }

log "building //bench:braid_bench //bench:mpi_allreduce_bench"
bazel build //bench:braid_bench //bench:mpi_allreduce_bench >&2
mkdir -p "$OUT/bin"
cp -f bazel-out/k8-opt/bin/bench/braid_bench bazel-out/k8-opt/bin/bench/mpi_allreduce_bench "$OUT/bin/"
BIN=$OUT/bin

# "<label> <size> <time>" for each row of a table, label = PREFIX followed
# by the section's algorithm when PREFIX ends in "/", else PREFIX alone;
# "<label> wrong <n>" per label.
rows() {
  awk -v prefix="$2" '
    /^# Algorithm:/ { algo = prefix ~ /\/$/ ? prefix $3 : prefix }
    /^#/ { next }
    NF >= 13 { if (algo == "") algo = prefix; print algo, $1, $6; wrong[algo] += $9 + $13 }
    END { for (a in wrong) print a, "wrong", wrong[a] }' "$1"
}

status=0
summary=$OUT/mpi_bench_summary.md
: > "$summary"
for n in $WORLD_SIZES; do
  table=$OUT/mpi_bench_n$n.rows
  : > "$table"
  name=mpi_bench_braid_mpi_n$n
  log "$name: mpirun -np $n braid_bench -t mpi -a ring,tree,rhd,native ${SWEEP[*]}"
  if mpirun --oversubscribe -np "$n" "$BIN/braid_bench" -t mpi -a ring,tree,rhd,native "${SWEEP[@]}" \
      > "$OUT/$name.txt" 2> "$OUT/$name.log"; then :; else log "$name FAILED (see $OUT/$name.log)"; status=1; fi
  rows "$OUT/$name.txt" "mpi/" >> "$table"
  if [[ $SHM_TCP == 1 ]]; then
    for transport in shm tcp; do
      name=mpi_bench_braid_${transport}_n$n
      log "$name: mpirun -np $n braid_bench -t $transport -a ring ${SWEEP[*]}"
      if mpirun --oversubscribe -np "$n" "$BIN/braid_bench" -t "$transport" -a ring "${SWEEP[@]}" \
          > "$OUT/$name.txt" 2> "$OUT/$name.log"; then :; else log "$name FAILED"; status=1; fi
      rows "$OUT/$name.txt" "$transport/" >> "$table"
    done
  fi
  name=mpi_bench_allreduce_n$n
  log "$name: mpirun -np $n mpi_allreduce_bench ${SWEEP[*]}"
  if mpirun --oversubscribe -np "$n" "$BIN/mpi_allreduce_bench" "${SWEEP[@]}" \
      > "$OUT/$name.txt" 2> "$OUT/$name.log"; then :; else log "$name FAILED"; status=1; fi
  rows "$OUT/$name.txt" "MPI_Allreduce" >> "$table"

  # One markdown table: rows = sizes, columns = labels in order of appearance.
  awk -v n="$n" '
    $2 == "wrong" { wrong[$1] = $3; next }
    { if (!($1 in seen)) { seen[$1] = 1; labels[++nl] = $1 }
      if (!($2 in seens)) { seens[$2] = 1; sizes[++ns] = $2 }
      t[$1, $2] = $3 }
    END {
      printf "\n### %d ranks: out-of-place time (us), f32 sum\n\n| bytes |", n
      for (i = 1; i <= nl; i++) printf " %s |", labels[i]
      printf "\n|---:|"; for (i = 1; i <= nl; i++) printf "---:|"; printf "\n"
      for (j = 1; j <= ns; j++) {
        printf "| %s |", sizes[j]
        for (i = 1; i <= nl; i++) printf " %s |", ((labels[i], sizes[j]) in t) ? t[labels[i], sizes[j]] : "-"
        printf "\n"
      }
      printf "| #wrong |"; for (i = 1; i <= nl; i++) printf " %s |", (labels[i] in wrong) ? wrong[labels[i]] : "-"
      printf "\n"
    }' "$table" | tee -a "$summary"
done
exit $status
