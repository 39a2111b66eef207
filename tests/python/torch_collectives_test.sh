#!/usr/bin/env bash
# torch_collectives.py: every collective of the "braid" backend against gloo,
# under braidrun at 2, 3 and 4 ranks (shm), and at 3 ranks over tcp.
set -uo pipefail
run=tests/python/run_python.sh
braidrun=launcher/braidrun
failed=0
check() {  # check NAME NPROC [ENV...]: one launch; every rank must print its ok line
  local name=$1 nproc=$2
  shift 2
  local out rc ok
  out=$(env "$@" $run $braidrun "$nproc" tests/python/torch_collectives.py 2>&1)
  rc=$?
  ok=$(grep -c "torch collectives ok: rank" <<<"$out")
  if [[ $rc -ne 0 || $ok -ne $nproc ]]; then
    echo "FAIL: $name: exit $rc, $ok of $nproc ranks ok"; echo "$out"; failed=1
  else
    echo "ok: $name"; grep "torch collectives ok: rank 0" <<<"$out"
  fi
}
check "2 ranks" 2
check "3 ranks" 3
check "4 ranks" 4
check "3 ranks over tcp" 3 BRAID_TRANSPORT=tcp
exit $failed
