#!/usr/bin/env bash
# numpy_api.py under braidrun: 2 and 3 ranks; then a mismatched shape, which
# must give braid.Error on every rank within the deadline.
set -uo pipefail
run=tests/python/run_python.sh
braidrun=launcher/braidrun
failed=0
for nproc in 2 3; do
  out=$($run $braidrun "$nproc" tests/python/numpy_api.py 2>&1)
  rc=$?
  ok=$(grep -c "numpy api ok: rank" <<<"$out")
  if [[ $rc -ne 0 || $ok -ne $nproc ]]; then
    echo "FAIL: $nproc ranks: exit $rc, $ok ok"; echo "$out"; failed=1
  else
    echo "ok: $nproc ranks"; grep "numpy api ok: rank 0" <<<"$out"
  fi
done
start=$(date +%s)
out=$($run $braidrun 2 tests/python/numpy_api.py --mismatch 2>&1)
rc=$?
took=$(($(date +%s) - start))
errors=$(grep -c "mismatch error on rank" <<<"$out")
if [[ $rc -ne 0 || $errors -ne 2 || $took -gt 30 ]]; then
  echo "FAIL: mismatch: exit $rc, $errors of 2 ranks raised, ${took}s"; echo "$out"; failed=1
else
  echo "ok: a mismatched shape raised on both ranks in ${took}s"; grep "mismatch error" <<<"$out"
fi
exit $failed
