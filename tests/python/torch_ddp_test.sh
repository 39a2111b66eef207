#!/usr/bin/env bash
# torch_ddp.py at 2 and 3 ranks under braidrun: DDP with backend gloo (the
# reference), backend braid, and gloo with braid.torch.allreduce_hook (on
# braid.init()'s group and on a dist.new_group(backend="braid")). Each run
# checks its ranks agree; rank 0's final parameters must equal gloo's within
# 1e-4 (torch_ddp_compare.py).
set -uo pipefail
source tests/python/python_env.sh
run=tests/python/run_python.sh
braidrun=launcher/braidrun
dir=${TEST_TMPDIR:-$(mktemp -d)}
failed=0
for nproc in 2 3; do
  for mode in gloo braid hook hook-pg; do
    params=$dir/params-$nproc-$mode.pt
    rm -f "$params"
    out=$($run $braidrun "$nproc" tests/python/torch_ddp.py --mode "$mode" --out "$params" 2>&1)
    rc=$?
    ok=$(grep -c "torch ddp ok: rank" <<<"$out")
    if [[ $rc -ne 0 || $ok -ne $nproc || ! -s $params ]]; then
      echo "FAIL: $mode, $nproc ranks: exit $rc, $ok of $nproc ranks ok"; echo "$out"; failed=1
      continue
    fi
    grep "torch ddp ok: rank 0" <<<"$out"
    if [[ $mode != gloo ]]; then
      if ! "$python" tests/python/torch_ddp_compare.py "$dir/params-$nproc-gloo.pt" "$params" 1e-4; then
        echo "FAIL: $mode, $nproc ranks: parameters differ from gloo's"; failed=1
      fi
    fi
  done
done
exit $failed
