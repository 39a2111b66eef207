#!/usr/bin/env bash
# Interleaved before/after (BEFORE_BIN, AFTER_BIN: two builds' braid_bench, braidrun and
# mpi_allreduce_bench): braid_bench auto over shm, 8 B latency (20000 iterations)
# and 64 KiB to 64 MiB by 4 (-n 40), 3 rounds at 2 and 4 ranks; MPI (vader, no free) once a round.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BEFORE_BIN:?set BEFORE_BIN and AFTER_BIN to two folders of binaries}" "${AFTER_BIN:?}"
export BRAID_TIMEOUT_SEC=120 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=bench/out/interleave
rm -rf $out; mkdir -p $out
for n in 2 4; do
  for round in 1 2 3; do
    for side in before after; do
      bin=${side^^}_BIN; bin=${!bin}
      $bin/braidrun --standalone --nproc-per-node=$n --local-ranks-filter=0 $bin/braid_bench -t shm -a auto \
        -b 8 -e 8 -n 20000 -w 500 -c 0 -d float -o sum --json $out/lat_${side}_n${n}_r${round}.json > /dev/null 2>&1
      $bin/braidrun --standalone --nproc-per-node=$n --local-ranks-filter=0 $bin/braid_bench -t shm -a auto \
        -b 64K -e 64M -f 4 -n 40 -w 5 -c 0 -d float -o sum --json $out/bw_${side}_n${n}_r${round}.json > /dev/null 2>&1
    done
    mpirun --oversubscribe -np $n $AFTER_BIN/mpi_allreduce_bench -b 8 -e 8 -n 20000 -w 500 -c 0 -d float -o sum \
      --json $out/lat_mpi_n${n}_r${round}.json > /dev/null 2>&1
    mpirun --oversubscribe -np $n -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736 $AFTER_BIN/mpi_allreduce_bench \
      -b 64K -e 64M -f 4 -n 40 -w 5 -c 0 -d float -o sum --json $out/bw_mpi_n${n}_r${round}.json > /dev/null 2>&1
    echo "n=$n round $round done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
# The table: medians of the 3 rounds, braid/MPI as ratios (8 B: MPI's time / braid's).
python3 - "$out" <<'PYTHON'
import json,statistics,os,sys
d=sys.argv[1]
def rows(path):
    try: return json.load(open(path))['rows']
    except Exception: return None
res={}
for n in (2,4):
  for side in ('before','after','mpi'):
    for r in (1,2,3):
      lat=rows(f'{d}/lat_{side}_n{n}_r{r}.json'); bw=rows(f'{d}/bw_{side}_n{n}_r{r}.json')
      if lat: res.setdefault((n,side,8),[]).append(lat[0]['out_of_place']['time_us'])
      if bw:
        for row in bw: res.setdefault((n,side,row['size']),[]).append(row['out_of_place']['busbw_gbps'])
def label(size):
    return {8:'8 B (time, us)',65536:'64 KiB',262144:'256 KiB',1048576:'1 MiB',4194304:'4 MiB',16777216:'16 MiB',67108864:'64 MiB'}[size]
print('| ranks | size | braid before, 3 rounds | braid after, 3 rounds | MPI, 3 rounds | braid/MPI before (median) | braid/MPI after (median) |')
print('|---|---|---|---|---|---|---|')
for n in (2,4):
  for size in (8,65536,262144,1048576,4194304,16777216,67108864):
    b=res[(n,'before',size)]; a=res[(n,'after',size)]; m=res[(n,'mpi',size)]
    f=lambda xs: ' / '.join('%.2f'%x for x in xs)
    mb,ma,mm=statistics.median(b),statistics.median(a),statistics.median(m)
    rb,ra=(mm/mb, mm/ma) if size==8 else (mb/mm, ma/mm)
    print(f'| {n} | {label(size)} | {f(b)} | {f(a)} | {f(m)} | {rb:.2f} | {ra:.2f} |')
PYTHON
