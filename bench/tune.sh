#!/usr/bin/env bash
# Regenerates braid's all-reduce selection table, tuning/allreduce.txt (data),
# on this machine: braid_bench --tune over shm and tcp at every world size in
# WORLD_SIZES (under braidrun) and over mpi (under mpirun), each measuring
# ring, tree, rhd and direct at every size and keeping the fastest. Rebuild
# afterwards: the selector compiles the table in (//collectives:allreduce_tuning_inc).
#
#   bench/tune.sh                         # shm, tcp, mpi at 2 and 4 ranks
#   WORLD_SIZES=2 TRANSPORTS=shm bench/tune.sh
#
# Knobs: WORLD_SIZES ("2 4"), TRANSPORTS ("shm tcp mpi"), MAXBYTES (16M),
# ITERS (10), WARMUP (3), TABLE (tuning/allreduce.txt).
set -euo pipefail

cd "$(dirname "$0")/.."
WORLD_SIZES=${WORLD_SIZES:-"2 4"}
TRANSPORTS=${TRANSPORTS:-"shm tcp mpi"}
MAXBYTES=${MAXBYTES:-16M}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
TABLE=${TABLE:-tuning/allreduce.txt}
export BRAID_TIMEOUT_SEC=${BRAID_TIMEOUT_SEC:-120}
if [[ $EUID -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if [[ -z "${BIN:-}" ]]; then
  bazel build //bench:braid_bench //launcher:braidrun >&2
  BIN=$(mktemp -d)
  cp -f bazel-out/k8-opt/bin/bench/braid_bench bazel-out/k8-opt/bin/launcher/braidrun "$BIN/"
fi
SWEEP=(-b 8 -e "$MAXBYTES" -f 4 -n "$ITERS" -w "$WARMUP" -c 0 -d float -o sum)
for n in $WORLD_SIZES; do
  for transport in $TRANSPORTS; do
    echo "[tune] $transport n=$n" >&2
    if [[ $transport == mpi ]]; then
      mpirun --oversubscribe -np "$n" "$BIN/braid_bench" -t mpi "${SWEEP[@]}" --tune "$TABLE" > /dev/null
    else
      "$BIN/braidrun" --standalone --nproc-per-node="$n" --local-ranks-filter=0 \
        "$BIN/braid_bench" -t "$transport" "${SWEEP[@]}" --tune "$TABLE" > /dev/null
    fi
  done
done
cat "$TABLE"
