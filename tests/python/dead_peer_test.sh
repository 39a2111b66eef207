#!/usr/bin/env bash
# dead_peer.py: two processes started here (RANK, WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT, as torchrun's contract), rank 1 exits; rank 0 must raise
# braid.Error naming it within seconds and exit 0. Over shm and over tcp.
set -uo pipefail
source tests/python/python_env.sh
tests/python/assemble_package.sh "$TEST_TMPDIR/pkg"
export PYTHONPATH=$TEST_TMPDIR/pkg
failed=0
for transport in shm tcp; do
  port=$((20000 + RANDOM % 20000))
  common="WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port BRAID_TRANSPORT=$transport"
  env $common RANK=1 LOCAL_RANK=1 timeout 60 "$python" tests/python/dead_peer.py >"$TEST_TMPDIR/r1" 2>&1 &
  survivor=$(env $common RANK=0 LOCAL_RANK=0 timeout 60 "$python" tests/python/dead_peer.py 2>&1)
  rc=$?
  wait
  if [[ $rc -ne 0 ]] || ! grep -q "dead peer: rank 0 raised" <<<"$survivor"; then
    echo "FAIL over $transport: exit $rc"; echo "$survivor"; cat "$TEST_TMPDIR/r1"; failed=1
  else
    echo "ok over $transport: $(grep 'dead peer' <<<"$survivor")"
  fi
done
exit $failed
