#!/usr/bin/env bash
# A slice of PyTorch's own distributed test-suite against braid at 2 ranks
# (conformance/ci_slice.txt): every listed test must pass. The whole suite,
# beside gloo: tools/torch_conformance.sh.
set -uo pipefail
source tests/python/python_env.sh
pkg=$TEST_TMPDIR/pkg
tests/python/assemble_package.sh "$pkg"
mapfile -t tests < <(grep -v '^#' tests/python/conformance/ci_slice.txt | grep .)
args=()
for t in "${tests[@]}"; do args+=(-k "*.$t"); done  # the exact test, not every name it begins
log=$TEST_TMPDIR/conformance.log
(cd "$TEST_TMPDIR" && BACKEND=braid WORLD_SIZE=2 PYTHONPATH=$pkg BRAID_TIMEOUT_SEC=60 \
  timeout 900 "$python" "$OLDPWD/tests/python/torch_conformance.py" -v "${args[@]}") >"$log" 2>&1
rc=$?
failed=0
outcomes=$("$python" tests/python/conformance_outcomes.py "$log")
for t in "${tests[@]}"; do
  status=$(awk -v t="$t" '$1 == t {$1 = ""; print substr($0, 2); exit}' <<<"$outcomes")
  if [[ $status == ok ]]; then
    echo "ok: $t"
  else
    echo "FAIL: $t: ${status:-no result}"; failed=1
  fi
done
if [[ $failed -ne 0 || $rc -ne 0 ]]; then
  echo "exit $rc"; tail -80 "$log"
  exit 1
fi
