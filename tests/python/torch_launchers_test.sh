#!/usr/bin/env bash
# The "braid" backend without braidrun. Under torchrun (the virtualenv's torch)
# at 2 ranks: the collectives against gloo, braid.init() and the backend on
# one braid group in either order, and DDP with backend braid against gloo.
# braid.init() and the backend on one group, both orders, under braidrun and
# torchrun. Then with no launcher: torch.multiprocessing.spawn at 3 ranks, file:// init.
set -uo pipefail
source tests/python/python_env.sh
run=tests/python/run_python.sh
torchrun=tests/python/torch_torchrun.sh  # torchrun behind braidrun's flags
dir=$TEST_TMPDIR
failed=0
if [[ ${BRAID_SANITIZER:-} == tsan ]]; then
  # Not ours to fix: torchrun's own process dies of SIGSEGV with the TSan
  # runtime preloaded before it starts a worker, even for a script that only prints.
  echo "skipped under TSan: torchrun (it segfaults with libtsan preloaded)"
else
  out=$($run $torchrun 2 tests/python/torch_collectives.py 2>&1)
  rc=$?
  ok=$(grep -c "torch collectives ok: rank" <<<"$out")
  if [[ $rc -ne 0 || $ok -ne 2 ]]; then
    echo "FAIL: collectives under torchrun: exit $rc, $ok of 2 ranks ok"; echo "$out"; failed=1
  else
    echo "ok: collectives under torchrun"; grep "torch collectives ok: rank 0" <<<"$out"
  fi
  for mode in gloo braid; do
    params=$dir/torchrun-$mode.pt
    rm -f "$params"
    out=$($run $torchrun 2 tests/python/torch_ddp.py --mode "$mode" --out "$params" 2>&1)
    rc=$?
    ok=$(grep -c "torch ddp ok: rank" <<<"$out")
    if [[ $rc -ne 0 || $ok -ne 2 || ! -s $params ]]; then
      echo "FAIL: DDP $mode under torchrun: exit $rc, $ok of 2 ranks ok"; echo "$out"; failed=1
    else
      grep "torch ddp ok: rank 0" <<<"$out"
    fi
  done
  if [[ $failed -eq 0 ]] &&
     ! "$python" tests/python/torch_ddp_compare.py "$dir/torchrun-gloo.pt" "$dir/torchrun-braid.pt" 1e-4; then
    echo "FAIL: DDP under torchrun: braid's parameters differ from gloo's"; failed=1
  fi
  # A C++ worker under torchrun: its agent holds MASTER_PORT with torch's
  # store (TORCHELASTIC_USE_AGENT_STORE=True), so braid's goes one above.
  out=$($torchrun --standalone --nproc-per-node=2 examples/train_mlp --check 2>&1)
  rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q "check: PASSED" <<<"$out"; then
    echo "FAIL: train_mlp --check under torchrun: exit $rc"; echo "$out"; failed=1
  else
    echo "ok: train_mlp --check under torchrun"
  fi
fi
# One runtime: braid.init() and init_process_group("braid") on one braid group,
# in either order, under braidrun (and torchrun above).
launchers="launcher/braidrun"
[[ ${BRAID_SANITIZER:-} == tsan ]] || launchers+=" $torchrun"
for launcher in $launchers; do
  for order in braid-first torch-first; do
    out=$($run $launcher 2 tests/python/torch_one_runtime.py "$order" 2>&1)
    rc=$?
    ok=$(grep -c "torch one runtime ok: rank" <<<"$out")
    if [[ $rc -ne 0 || $ok -ne 2 ]]; then
      echo "FAIL: one runtime, $order, under ${launcher##*/}: exit $rc, $ok of 2 ranks ok"; echo "$out"; failed=1
    else
      echo "ok: one runtime, $order, under ${launcher##*/}"
    fi
  done
done
# No launcher: the package assembled here, as dead_peer_test.sh does.
tests/python/assemble_package.sh "$dir/spawn"
out=$(PYTHONPATH=$dir/spawn timeout 120 "$python" tests/python/torch_spawn.py 3 2>&1)
rc=$?
ok=$(grep -c "torch spawn ok: rank" <<<"$out")
if [[ $rc -ne 0 || $ok -ne 3 ]]; then
  echo "FAIL: mp.spawn: exit $rc, $ok of 3 ranks ok"; echo "$out"; failed=1
else
  echo "ok: mp.spawn"; grep "torch spawn ok: rank 0" <<<"$out"
fi
exit $failed
