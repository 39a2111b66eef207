#!/usr/bin/env bash
# Runs a short DDP job on backend braid (bench/python/ddp_step.py, tutorial
# model, a few steps, gloo's and braid's groups both made and torn down) RUNS
# times under braidrun, and counts the runs that did not exit 0 or printed a
# C++ termination at exit ("terminate called ...", "Aborted", a signal): the
# crash at interpreter exit that 2 of 15 runs showed before.
#
#   bazel build //launcher:braidrun //python:package && bench/ddp_exit_soak.sh [RUNS]   # default 200
#
# Prints "ddp exit soak: N runs, C crashed" last (and the output of each
# crashed run before it); exits 1 if any crashed.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
python=${BRAID_TEST_PYTHON:-.venv/bin/python}
pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
tests/python/assemble_package.sh "$pkg" bazel-bin
crashed=0
for ((i = 1; i <= runs; i++)); do
  out=$(cd /tmp && PYTHONPATH=$pkg timeout 300 "$OLDPWD/bazel-bin/launcher/braidrun" --standalone \
    --nproc-per-node=2 "$OLDPWD/$python" "$OLDPWD/bench/python/ddp_step.py" --models tutorial \
    --steps 3 --rounds 1 2>&1)
  rc=$?
  if [[ $rc -ne 0 ]] || grep -qE "terminate called|Aborted|Segmentation fault|core dumped" <<<"$out"; then
    crashed=$((crashed + 1))
    echo "run $i: exit $rc"
    echo "$out" | tail -20
  fi
done
echo "ddp exit soak: $runs runs, $crashed crashed"
[[ $crashed -eq 0 ]]
