#!/usr/bin/env bash
# Recovery bench: kill -9 of one of 4 train_mlp ranks mid-training, in one run:
#   in-place: braidrun --restart-policy=replace, train_mlp --recovery=in-place
#   restart:  braidrun --restart-policy=all (the default), train_mlp restarting
#             from its newest checkpoint (one per epoch, --checkpoint-dir)
# For each: the time from the kill to the first step finished after it (not
# counting the tail of a step that was already under way), the time to the
# first step nobody had finished before the kill, and how many finished steps
# were done again. Times come from the
# workers' --step-log files (CLOCK_REALTIME, ns) and the kill's own stamp; the
# median of REPS runs. Prints a Markdown table.
# Usage: bench/recovery_bench.sh [REPS] [KILL_AFTER_STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
kill_after=${2:-48}
bazel build -c opt //launcher:braidrun //examples:train_mlp >/dev/null 2>&1
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT BRAID_STORE_ADDR BRAID_STORE_PREFIX
export BRAID_TIMEOUT_SEC=10

# run MODE DIR: one job; the kill's time goes to DIR/killed
run() {
  local mode=$1 dir=$2 policy train
  mkdir -p "$dir/steps"
  if [[ $mode == in-place ]]; then
    policy=(--restart-policy=replace)
    train=(--recovery=in-place)
  else
    policy=(--restart-policy=all)
    train=(--checkpoint-dir="$dir/ckpt")
  fi
  "$bin/launcher/braidrun" --standalone --nproc-per-node=4 --max-restarts=1 "${policy[@]}" \
    "$bin/examples/train_mlp" "${train[@]}" --epochs=3 --samples=4096 --batch-size=32 \
    --step-log="$dir/steps" >"$dir/out" 2>&1 &
  local job=$!
  local victim=""
  for _ in $(seq 1 3000); do
    for f in "$dir"/steps/2.*.steps; do
      [[ -f $f ]] || continue
      if (( $(wc -l <"$f") >= kill_after )); then victim=$(basename "$f" | cut -d. -f2); fi
    done
    [[ -n $victim ]] && break
    sleep 0.005
  done
  [[ -n $victim ]] || { echo "rank 2 never reached step $kill_after" >&2; kill "$job"; return 1; }
  date +%s%N >"$dir/killed"
  kill -9 "$victim"
  wait "$job" || { echo "the $mode job failed:" >&2; tail -20 "$dir/out" >&2; return 1; }
}

for ((i = 0; i < reps; ++i)); do
  for mode in in-place restart; do run "$mode" "$work/$mode.$i"; done
done

python3 - "$work" "$reps" <<'EOF'
import glob, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
def measure(dir):
    killed = int(open(f"{dir}/killed").read())
    files = []
    for path in glob.glob(f"{dir}/steps/*.steps"):
        lines = [tuple(int(x) for x in l.split()) for l in open(path) if l.strip()]
        if lines: files.append([(s, t) for s, w, t in lines])
    done_before = max(s for f in files for s, t in f if t <= killed)
    resumed, new_step, redone = [], [], set()
    for f in files:
        fresh = f[0][1] > killed  # a process started after the kill
        seen = set()
        for s, t in f:
            if s in seen or (fresh and s <= done_before): redone.add(s)
            seen.add(s)
            if t <= killed: continue
            if fresh or s > done_before: resumed.append(t)  # not the tail of a step already under way
            if s > done_before: new_step.append(t)
    return (min(resumed) - killed) / 1e6, (min(new_step) - killed) / 1e6, len(redone)
rows = []
for mode in ("in-place", "restart"):
    resumed, new, lost = zip(*(measure(f"{work}/{mode}.{i}") for i in range(reps)))
    rows.append((mode, statistics.median(resumed), min(resumed), max(resumed), statistics.median(new),
                 statistics.median(lost)))
print("| recovery | kill -> first step finished after it, ms (median) | min-max | kill -> first step not done before, ms | finished steps done again (median) |")
print("|---|---:|---:|---:|---:|")
for mode, med, lo, hi, new, lost in rows:
    print(f"| {mode} | {med:.0f} | {lo:.0f}-{hi:.0f} | {new:.0f} | {lost:.0f} |")
print(f"\nrestart / in-place, time to the first step not done before: {rows[1][4] / rows[0][4]:.1f}x")
EOF
