#!/usr/bin/env bash
# capi_worker (plain C over libbraid.so) under braidrun: 1, 2 and 3 ranks over
# the default transport, 2 ranks over tcp; every rank must print its "capi ok".
set -uo pipefail
braidrun=$1
worker=$2
failed=0
run() {
  local nproc=$1 transport=$2 out
  out=$(BRAID_TRANSPORT=$transport BRAID_TIMEOUT_SEC=60 timeout 120 "$braidrun" --standalone \
    --nproc-per-node="$nproc" "$worker" 2>&1)
  local rc=$? ok
  ok=$(grep -c "capi ok: rank" <<<"$out")
  if [[ $rc -ne 0 || $ok -ne $nproc ]]; then
    echo "FAIL: $nproc ranks over $transport: exit $rc, $ok of $nproc ranks ok"
    echo "$out"
    failed=1
  else
    echo "ok: $nproc ranks over $transport"
    grep "capi ok: rank 0" <<<"$out"
  fi
}
run 1 auto
run 2 auto
run 3 auto
run 2 tcp
exit $failed
