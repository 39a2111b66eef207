#!/usr/bin/env bash
# braid's torch backend against another torch than the pinned one, installed as a user
# installs it (pip install . into a virtualenv that has that torch):
#
#   tools/torch_version_check.sh 2.11.0      # the GPU machine's torch
#
# Makes (once) a virtualenv of Debian's python3 with torch==VERSION at
# ~/.cache/braid/venv-torch-VERSION, installs braid there (tools/install_python.sh), then under
# braidrun: tests/python/torch_collectives.py at 2 and 3 ranks (every collective against gloo)
# and tests/python/torch_training.py at 2 ranks (DDP's options, the hooks, PowerSGD, FSDP2),
# braid's parameters against gloo's. Prints "torch VERSION: N passed, M failed" last.
set -uo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: tools/torch_version_check.sh TORCH_VERSION}
venv=${XDG_CACHE_HOME:-$HOME/.cache}/braid/venv-torch-$version
if ! "$venv/bin/python" -c "import torch, numpy, pybind11" 2>/dev/null; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --upgrade pip &&
    "$venv/bin/pip" install --quiet "torch==$version" numpy pybind11 ninja setuptools wheel ||
    { echo "torch $version: 0 passed, 1 failed (no virtualenv with torch $version)"; exit 1; }
fi
bazel build //launcher:braidrun //capi:libbraid.so >/dev/null 2>&1 || { echo "torch $version: 0 passed, 1 failed (build)"; exit 1; }
python=$(tools/install_python.sh "$venv/bin/python") || { echo "torch $version: 0 passed, 1 failed (pip install .)"; exit 1; }
braidrun=$PWD/bazel-bin/launcher/braidrun
tests=$PWD/tests/python
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT
passed=0
failed=0
verdict() {  # verdict OK NAME [OUTPUT]
  if [[ $1 == 1 ]]; then
    passed=$((passed + 1)); echo "ok: $2"
  else
    failed=$((failed + 1)); echo "FAIL: $2"; echo "${3:-}" | tail -30
  fi
}
cd /tmp || exit 1
for n in 2 3; do
  out=$(BRAID_TIMEOUT_SEC=60 timeout 300 "$braidrun" --standalone --nproc-per-node=$n "$python" "$tests/torch_collectives.py" 2>&1)
  verdict "$([[ $(grep -c "torch collectives ok" <<<"$out") -eq $n ]] && echo 1)" "collectives at $n ranks" "$out"
done
ok=1
for backend in gloo braid; do
  out=$(BRAID_TIMEOUT_SEC=120 timeout 600 "$braidrun" --standalone --nproc-per-node=2 "$python" \
    "$tests/torch_training.py" --backend $backend --out "$out_dir/$backend.pt" 2>&1)
  [[ $(grep -c "torch training ok" <<<"$out") -eq 2 ]] || { ok=0; echo "$out" | tail -30; }
done
out=$([[ $ok == 1 ]] && PYTHONPATH=$tests "$python" "$tests/torch_training_compare.py" "$out_dir/gloo.pt" "$out_dir/braid.pt" 1e-4 2>&1) || ok=0
echo "$out"
verdict "$ok" "training at 2 ranks, braid's parameters against gloo's"
echo "torch $version: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
