#!/usr/bin/env bash
# dlpack_arrays.py: JAX, torch and NumPy arrays through braid's plain API at 2 and 3 ranks.
set -uo pipefail
run=tests/python/run_python.sh
failed=0
for nproc in 2 3; do
  out=$($run launcher/braidrun "$nproc" tests/python/dlpack_arrays.py 2>&1)
  rc=$?
  ok=$(grep -c "dlpack arrays ok: rank" <<<"$out")
  if [[ $rc -ne 0 || $ok -ne $nproc ]]; then
    echo "FAIL: $nproc ranks: exit $rc, $ok of $nproc ranks ok"; echo "$out"; failed=1
  else
    echo "ok: $nproc ranks"; grep "dlpack arrays ok: rank 0" <<<"$out"
  fi
done
exit $failed
