#!/usr/bin/env bash
# Two builds side by side in one run (BEFORE_BIN, AFTER_BIN: folders holding
# each build's braid_bench, braidrun and mpi_allreduce_bench), rounds
# interleaved so the VM's drift hits both alike; prints a markdown table of
# the medians and after/before time ratios (below 1: after is faster).
#
#   BEFORE_BIN=/tmp/before AFTER_BIN=/tmp/after bench/before_after.sh
#
# Knobs (environment): WORLD_SIZES ("2 4"), TRANSPORTS ("shm tcp"), ROUNDS (3),
# ALGOS (ring,tree,rhd,auto: the all-reduce's), MAXBYTES (64M), ITERS (20),
# OTHERS ("reducescatter allgather broadcast reduce alltoall": braid_bench -C,
# auto, up to OTHER_MAXBYTES 16M, OTHER_ITERS 20 calls), LAT (1: 8 B latency of auto, 5000
# iterations), MPI (1: MPI_Allreduce over vader once a round, the anchor).
# Raw JSON in bench/out/before_after/.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BEFORE_BIN:?set BEFORE_BIN and AFTER_BIN to two folders of binaries}" "${AFTER_BIN:?}"
WORLD_SIZES=${WORLD_SIZES:-"2 4"}
TRANSPORTS=${TRANSPORTS:-"shm tcp"}
ROUNDS=${ROUNDS:-3}
ALGOS=${ALGOS:-ring,tree,rhd,auto}
MAXBYTES=${MAXBYTES:-64M}
ITERS=${ITERS:-20}
OTHERS=${OTHERS-"reducescatter allgather broadcast reduce alltoall"}
OTHER_MAXBYTES=${OTHER_MAXBYTES:-16M}
OTHER_ITERS=${OTHER_ITERS:-20}
LAT=${LAT:-1}
MPI=${MPI:-1}
export BRAID_TIMEOUT_SEC=120 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=bench/out/before_after
rm -rf $out
mkdir -p $out

bench() {  # side n name args...
  local side=$1 n=$2 name=$3
  shift 3
  local bin=${side^^}_BIN
  bin=${!bin}
  $bin/braidrun --standalone --nproc-per-node="$n" --local-ranks-filter=0 $bin/braid_bench "$@" -c 0 -d float -o sum \
    --json "$out/${side}__n${n}__${name}__r${round}.json" > /dev/null 2> "$out/${side}__n${n}__${name}__r${round}.log" ||
    echo "FAILED: $side n=$n $name round $round (see $out)" >&2
}

echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $WORLD_SIZES; do
  for round in $(seq "$ROUNDS"); do
    for t in $TRANSPORTS; do
      for side in before after; do
        bench $side "$n" "allreduce_$t" -t "$t" -a "$ALGOS" -b 8 -e "$MAXBYTES" -f 4 -n "$ITERS" -w 3
        [[ $LAT == 1 ]] && bench $side "$n" "lat_$t" -t "$t" -a auto -b 8 -e 8 -n 5000 -w 200
        for coll in $OTHERS; do
          bench $side "$n" "${coll}_$t" -C "$coll" -t "$t" -b 8 -e "$OTHER_MAXBYTES" -f 4 -n "$OTHER_ITERS" -w 2
        done
      done
    done
    if [[ $MPI == 1 ]]; then
      mpirun --oversubscribe -np "$n" "$AFTER_BIN/mpi_allreduce_bench" -b 8 -e "$MAXBYTES" -f 4 -n "$ITERS" -w 3 -c 0 \
        -d float -o sum --json "$out/mpi__n${n}__allreduce_vader__r${round}.json" > /dev/null 2>&1
    fi
    echo "n=$n round $round done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done

python3 - "$out" <<'PYTHON'
import collections, glob, json, os, statistics, sys
times = collections.defaultdict(list)  # (n, name, algorithm, size, side) -> [us]
for path in glob.glob(os.path.join(sys.argv[1], '*.json')):
    side, n, name, _ = os.path.basename(path)[:-5].split('__')
    try:
        rows = json.load(open(path))['rows']
    except Exception:
        continue
    for row in rows:
        times[(int(n[1:]), name, row.get('algorithm', 'mpi'), row['size'], side)].append(row['out_of_place']['time_us'])
def size_label(b):
    for unit, scale in (('MiB', 1 << 20), ('KiB', 1 << 10)):
        if b >= scale and b % scale == 0: return f'{b // scale} {unit}'
    return f'{b} B'
print('| ranks | benchmark | algorithm | size | before us (median) | after us (median) | after/before |')
print('|---|---|---|---|---|---|---|')
ratios = []
for key in sorted({k[:4] for k in times}):
    n, name, algo, size = key
    if name.startswith('allreduce_vader'): continue
    before, after = times.get(key + ('before',)), times.get(key + ('after',))
    if not before or not after: continue
    mb, ma = statistics.median(before), statistics.median(after)
    ratios.append(ma / mb)
    print(f'| {n} | {name} | {algo} | {size_label(size)} | {mb:.1f} | {ma:.1f} | {ma / mb:.2f} |')
if ratios:
    print(f'\n{len(ratios)} cells; after/before: median {statistics.median(ratios):.2f}, '
          f'min {min(ratios):.2f}, max {max(ratios):.2f}; geometric mean '
          f'{statistics.geometric_mean(ratios):.3f}')
mpi = {(k[0], k[3]): statistics.median(v) for k, v in times.items() if k[1] == 'allreduce_vader'}
if mpi:
    print('\n| ranks | transport | size | MPI_Allreduce (vader) us | braid auto before / MPI | after / MPI |')
    print('|---|---|---|---|---|---|')
    for key in sorted(k for k in times if k[2] == 'auto' and k[1].startswith('allreduce_') and k[4] == 'after'):
        n, name, _, size, _ = key
        if (n, size) not in mpi: continue
        before = statistics.median(times.get(key[:4] + ('before',), [float('nan')]))
        after = statistics.median(times[key])
        print(f'| {n} | {name[len("allreduce_"):]} | {size_label(size)} | {mpi[(n, size)]:.1f} | '
              f'{before / mpi[(n, size)]:.2f} | {after / mpi[(n, size)]:.2f} |')
PYTHON
