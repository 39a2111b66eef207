#!/usr/bin/env bash
# Launcher start-up bench: braidrun against torchrun (the virtualenv's torch, tools/setup.sh),
# the same C++ worker (tests/launcher/probe_worker) under both, in one run.
#
#   start:   launcher start -> every worker past its first barrier (InitFromEnv
#            + Barrier), for 1, 2, 4, 8 workers on one node;
#   restart: a worker's death (rank 1 exits 1 after its barrier) -> every
#            restarted worker past its first barrier.
#
# Times are wall clock (CLOCK_REALTIME, ns) written by the workers; the median
# of REPS runs. Flags in the underscore spelling, which both launchers take.
# Prints a Markdown table. Usage: bench/launcher_bench.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
bazel build -c opt //launcher:braidrun //tests/launcher:probe_worker >/dev/null 2>&1
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
braidrun="$bin/launcher/braidrun"
probe="$bin/tests/launcher/probe_worker"
torchrun=()
if .venv/bin/python -c "import torch.distributed.run" 2>/dev/null; then
  torchrun=("$(pwd)/.venv/bin/python" -m torch.distributed.run)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT BRAID_STORE_ADDR BRAID_STORE_PREFIX

now_ns() { date +%s%N; }

# max over files matching $1, minus $2, in ms
elapsed_ms() {
  local max=0 t
  for f in $1; do t=$(cat "$f"); (( t > max )) && max=$t; done
  echo $(( (max - $2) / 1000 ))
}

median() { sort -n | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%.1f", m/1000}'; }

# run_start LAUNCHER... : prints microseconds from launch to the last first barrier
run_start() {
  local n=$1; shift
  rm -rf "$work/t"; mkdir "$work/t"
  local t0; t0=$(now_ns)
  "$@" --nproc_per_node="$n" "$probe" --allreduce --barrier-times="$work/t" >/dev/null 2>&1
  elapsed_ms "$work/t/0.*" "$t0"
}

run_restart() {
  local n=$1; shift
  rm -rf "$work/t"; mkdir "$work/t"
  "$@" --nproc_per_node="$n" --max_restarts=1 "$probe" --allreduce --fail-rank=1 --exit-code=1 \
    --barrier-times="$work/t" >/dev/null 2>&1 || true
  elapsed_ms "$work/t/1.*" "$(cat "$work/t/died.1")"
}

# Both write stdout to files and copy stderr (-r 1 -t 2).
braid_cmd=("$braidrun" --standalone -r 1 -t 2 --log_dir="$work/logs")
torch_cmd=("${torchrun[@]}" --standalone --no_python --monitor_interval=0.1 -r 1 -t 2 --log_dir="$work/logs")

echo "| workers | braidrun start (ms) | torchrun start (ms) | torchrun / braidrun | braidrun restart (ms) | torchrun restart (ms) |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in 1 2 4 8; do
  bs=$(for _ in $(seq "$reps"); do run_start "$n" "${braid_cmd[@]}"; done | median)
  br=$(if (( n >= 2 )); then for _ in $(seq "$reps"); do run_restart "$n" "${braid_cmd[@]}"; done | median; else echo "-"; fi)
  ts="-"; tr="-"; ratio="-"
  if [[ ${#torchrun[@]} -gt 0 ]]; then
    ts=$(for _ in $(seq "$reps"); do run_start "$n" "${torch_cmd[@]}"; done | median)
    ratio=$(awk -v a="$ts" -v b="$bs" 'BEGIN {printf "%.0fx", a / b}')
    if (( n >= 2 )); then tr=$(for _ in $(seq "$reps"); do run_restart "$n" "${torch_cmd[@]}"; done | median); fi
  fi
  echo "| $n | $bs | $ts | $ratio | $br | $tr |"
done
