#!/usr/bin/env bash
# Does placement explain braid's 8-byte latency against Open MPI's (issue 29,
# item 0)? 2 ranks on this host, interleaved rounds of: braid over shm
# unpinned, braid with each rank pinned to core LOCAL_RANK (taskset), Open
# MPI (vader) with its default binding (cores) and with --bind-to none.
# Prints one line per round: the 8 B time per all-reduce (us) of each.
#
#   bazel build //bench:braid_bench //bench:mpi_allreduce_bench //launcher:braidrun
#   bench/placement_latency.sh        # ROUNDS=5 ITERS=20000
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-20000}
B=bazel-bin/bench/braid_bench
M=bazel-bin/bench/mpi_allreduce_bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sweep=(-b 8 -e 8 -n "$ITERS" -w 2000 -c 0)
lat() { sed 's/^\[rank 0\]: //' | grep -v "#" | awk 'NF > 8 && $1 == 8 {print $6; exit}'; }
for ((r = 1; r <= ROUNDS; r++)); do
  a=$(timeout 300 bazel-bin/launcher/braidrun --standalone --nproc-per-node=2 "$B" -t shm "${sweep[@]}" 2>&1 | lat)
  b=$(timeout 300 bazel-bin/launcher/braidrun --standalone --nproc-per-node=2 /bin/sh -c \
    'exec taskset -c "$LOCAL_RANK" "$@"' sh "$B" -t shm "${sweep[@]}" 2>&1 | lat)
  c=$(timeout 300 mpirun --oversubscribe -np 2 "$M" "${sweep[@]}" 2>&1 | lat)
  d=$(timeout 300 mpirun --oversubscribe --bind-to none -np 2 "$M" "${sweep[@]}" 2>&1 | lat)
  echo "round $r: braid unpinned $a, pinned $b | MPI bound to cores $c, unbound $d"
done
