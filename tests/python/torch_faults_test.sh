#!/usr/bin/env bash
# torch_faults.py under braidrun with BRAID_TIMEOUT_SEC=10: a rank passing a
# different shape, and a rank that dies (before a collective, or in DDP
# training over the braid backend or through braid's comm hook), or one that
# calls a collective past its group's deadline, must give
# every other rank a RuntimeError with braid's message within seconds (the
# script bounds each at 8 s), later collectives must fail at once, and
# nothing may hang (the whole launch, torch's start-up included, within 60 s).
set -uo pipefail
run=tests/python/run_python.sh
braidrun=launcher/braidrun
failed=0
while read -r fault nproc transport; do
  # Every rank raises on a mismatch; when one dies, the others do.
  want=$nproc
  [[ $fault == *die ]] && want=$((nproc - 1))
  name="$fault, $nproc ranks over $transport"
  start=$(date +%s)
  out=$(BRAID_TIMEOUT_SEC=10 BRAID_TRANSPORT=$transport timeout 120 \
        $run $braidrun "$nproc" tests/python/torch_faults.py "$fault" 2>&1)
  rc=$?
  took=$(($(date +%s) - start))
  errors=$(grep -c "fault error on rank" <<<"$out")
  named=$(grep "fault error on rank" <<<"$out" | grep -c "allreduce seq")
  later=$(grep -c "later collective failed" <<<"$out")
  destroyed=$(grep -c ": destroyed" <<<"$out")
  if [[ $rc -ne 0 || $errors -ne $want || $named -ne $want || $later -ne $want || $destroyed -ne $want ||
        $took -gt 60 ]]; then
    echo "FAIL: $name: exit $rc, $errors of $want ranks raised ($named naming the collective)," \
         "$later failed later, $destroyed destroyed, ${took}s"
    echo "$out"; failed=1
  else
    echo "ok: $name: $errors ranks raised, launch ${took}s"
    grep "fault error on rank 0" <<<"$out"
  fi
done <<'CASES'
mismatch 2 shm
mismatch 3 tcp
die 2 shm
die 3 shm
die 3 tcp
ddp-die 3 shm
hook-die 2 shm
late 2 shm
late 2 tcp
late 3 tcp
CASES
exit $failed
