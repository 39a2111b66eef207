#!/usr/bin/env bash
# torch_training.py (DDP's options, torch's comm hooks, PowerSGD, FSDP2) on
# backend braid against gloo: under braidrun at 2 and 4 ranks, under torchrun
# at 2; braid's final parameters must equal gloo's within 1e-4.
set -uo pipefail
source tests/python/python_env.sh
run=tests/python/run_python.sh
dir=${TEST_TMPDIR:-$(mktemp -d)}
failed=0
train() {  # train LAUNCHER NPROC BACKEND OUT
  local out rc ok
  out=$($run "$1" "$2" tests/python/torch_training.py --backend "$3" --out "$4" 2>&1)
  rc=$?
  ok=$(grep -c "torch training ok: rank" <<<"$out")
  if [[ $rc -ne 0 || $ok -ne $2 || ! -s $4 ]]; then
    echo "FAIL: $3 at $2 ranks under $1: exit $rc, $ok of $2 ranks ok"; echo "$out"; failed=1
    return 1
  fi
}
launchers=(launcher/braidrun)
if [[ ${BRAID_SANITIZER:-} != tsan ]]; then  # torchrun's own process segfaults with libtsan preloaded
  launchers+=(tests/python/torch_torchrun.sh)
fi
for launcher in "${launchers[@]}"; do
  for nproc in 2 4; do
    [[ $launcher != launcher/braidrun && $nproc -ne 2 ]] && continue
    name=$(basename "$launcher" .sh)-$nproc
    if train "$launcher" "$nproc" gloo "$dir/$name-gloo.pt" && train "$launcher" "$nproc" braid "$dir/$name-braid.pt"; then
      if PYTHONPATH=$dir/pkg "$python" tests/python/torch_training_compare.py "$dir/$name-gloo.pt" "$dir/$name-braid.pt" 1e-4; then
        echo "ok: $name"
      else
        echo "FAIL: $name: braid's parameters differ from gloo's"; failed=1
      fi
    fi
  done
done
exit $failed
