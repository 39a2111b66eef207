#!/usr/bin/env bash
# PyTorch's own distributed test-suite against gloo and braid in one run, test by test
# (tests/python/torch_conformance.py drives it as PyTorch's test_distributed_spawn.py does):
#
#   tools/torch_conformance.sh [WORLD_SIZE] [-k PATTERN ...]     # default 2, every test
#
# Writes bench/out/conformance/{gloo,braid}.log and prints a markdown table of every test whose
# outcome differs between the two, then "N passed on gloo, M of them passed on braid". The
# reasons for braid's differences are kept in tests/python/conformance/differences.md.
set -uo pipefail
cd "$(dirname "$0")/.."
world=2
if [[ ${1:-} =~ ^[0-9]+$ ]]; then world=$1; shift; fi
python=${BRAID_TEST_PYTHON:-.venv/bin/python}
out=bench/out/conformance
mkdir -p "$out"
bazel build //python:package >&2 || exit 1
pkg=$(mktemp -d)
tests/python/assemble_package.sh "$pkg" bazel-bin
for backend in gloo braid; do
  echo "torch_conformance: $backend at $world ranks" >&2
  (cd /tmp && BACKEND=$backend WORLD_SIZE=$world PYTHONPATH=$pkg BRAID_TIMEOUT_SEC=60 \
    timeout 7200 "$OLDPWD/$python" "$OLDPWD/tests/python/torch_conformance.py" -v "$@") >"$out/$backend.log" 2>&1
done
PYTHONPATH=tests/python "$python" - "$out/gloo.log" "$out/braid.log" <<'PYTHON'
import sys
from conformance_outcomes import outcomes

gloo, braid = outcomes(sys.argv[1]), outcomes(sys.argv[2])
print("| test | gloo | braid |")
print("|---|---|---|")
for name in sorted(set(gloo) | set(braid)):
    g, b = gloo.get(name, "(not run)"), braid.get(name, "(not run)")
    if g != b:
        print(f"| {name} | {g[:60]} | {b[:60]} |")
ok_gloo = [n for n, o in gloo.items() if o == "ok"]
ok_both = [n for n in ok_gloo if braid.get(n) == "ok"]
print(f"\n{len(gloo)} tests; {len(ok_gloo)} passed on gloo, {len(ok_both)} of them passed on braid; "
      f"{sum(o == 'ok' for o in braid.values())} passed on braid in all")
PYTHON
