#!/usr/bin/env bash
# The reducer's training-step bench: step time of examples/train_mlp, both
# models, 2 ranks on this host (one compute thread each), with gradient sync,
# without (every step in a NoSync scope: same work, no communication), and
# as a single process; the overhead ratio synced / unsynced. Prints a
# markdown table (the median of REPS runs per cell) for bench/RESULTS.md.
#
#   bazel build //examples:train_mlp && bench/reducer_bench.sh
#   bazel run //bench:reducer_bench
#
# Knobs: REPS (3), SMALL_STEPS (300), LARGE_STEPS (20), BATCH (256 per rank, issue 29),
# TRAIN_MLP (the binary). Each run has a deadline (timeout 600).
set -euo pipefail

REPS=${REPS:-3}
SMALL_STEPS=${SMALL_STEPS:-300}
LARGE_STEPS=${LARGE_STEPS:-20}
BATCH=${BATCH:-256}

if [[ -z "${TRAIN_MLP:-}" ]]; then
  for candidate in "${BASH_SOURCE[0]}.runfiles/braid/examples/train_mlp" "$(dirname "$0")/../bazel-bin/examples/train_mlp"; do
    [[ -x "$candidate" ]] && TRAIN_MLP=$candidate && break
  done
fi
[[ -x "${TRAIN_MLP:-}" ]] || { echo "reducer_bench: build //examples:train_mlp first (or set TRAIN_MLP)" >&2; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run NRANKS ARGS...: starts the ranks with the torchrun environment; prints rank 0's JSON line.
run() {
  local n=$1
  shift
  local port out pids=() rc=0
  port=$(free_port)
  out=$(mktemp)
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 600 "$TRAIN_MLP" "$@" > "$out.$r" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  [[ $rc -eq 0 ]] || { echo "reducer_bench: train_mlp $* failed (exit $rc)" >&2; exit 1; }
  grep '"step_ms"' "$out.0"
  rm -f "$out".*
}

field() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }

# median NRANKS ARGS...: the median step_ms (and that run's comm and hidden ms) over REPS runs.
median() {
  local lines=()
  for ((i = 0; i < REPS; i++)); do lines+=("$(run "$@")"); done
  printf '%s\n' "${lines[@]}" | python3 -c '
import json, sys
runs = sorted((json.loads(l) for l in sys.stdin if l.strip()), key=lambda r: r["step_ms"])
m = runs[len(runs) // 2]
print(m["step_ms"], m["comm_ms"], m["hidden_ms"], " ".join("%.2f" % r["step_ms"] for r in runs))'
}

echo "train_mlp step time, batch $BATCH per rank, median of $REPS runs ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores)"
echo
echo "| model | parameters | single process (ms) | 2 ranks, NoSync (ms) | 2 ranks, synced (ms) | synced / NoSync | target | comm per step (ms) | hidden under backward |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for model in small large; do
  if [[ $model == small ]]; then steps=$SMALL_STEPS target=1.05 params=517,642; else steps=$LARGE_STEPS target=1.08 params=25,086,986; fi
  common=(--model=$model --batch-size=$BATCH --bench-steps=$steps --samples=$((BATCH * 2 * 8)))
  read -r single _ _ single_all <<< "$(median 1 "${common[@]}")"
  read -r nosync _ _ nosync_all <<< "$(median 2 "${common[@]}" --no-sync)"
  read -r synced comm hidden synced_all <<< "$(median 2 "${common[@]}")"
  python3 - "$model" "$params" "$single" "$nosync" "$synced" "$target" "$comm" "$hidden" <<'EOF'
import sys
model, params, single, nosync, synced, target, comm, hidden = sys.argv[1:]
single, nosync, synced, comm, hidden = map(float, (single, nosync, synced, comm, hidden))
ratio = synced / nosync
share = hidden / comm if comm > 0 else 1.0
print(f"| {model} | {params} | {single:.2f} | {nosync:.2f} | {synced:.2f} | {ratio:.3f} | {target} | {comm:.2f} | {share:.0%} |")
EOF
  echo "  ($model runs, ms: single $single_all; NoSync $nosync_all; synced $synced_all)" >&2
done
