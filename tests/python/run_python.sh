#!/usr/bin/env bash
# Runs a Python test script under braidrun with the braid package assembled
# from Bazel's outputs (as tools/install_python.sh would install it):
#
#   run_python.sh BRAIDRUN NPROC SCRIPT [ARGS...]
#
# Python is Debian's /usr/bin/python3 (torch 1.13, numpy) unless
# BRAID_TEST_PYTHON says otherwise. BRAIDRUN_ARGS adds launcher flags.
set -euo pipefail
braidrun=$1
nproc=$2
script=$3
shift 3
runfiles=$(pwd)
pkg=${TEST_TMPDIR:-$(mktemp -d)}/pkg
mkdir -p "$pkg/braid"
for f in python/braid/*.py capi/libbraid.so python/_braid.so python/_torch.so; do
  [[ -e $f ]] && cp -f "$f" "$pkg/braid/"
done
if [[ -d python/braid/torch ]]; then
  mkdir -p "$pkg/braid/torch"
  cp -f python/braid/torch/*.py "$pkg/braid/torch/"
fi
source "$runfiles/tests/python/sanitizer_env.sh"
export PYTHONPATH=$pkg:$runfiles/tests/python
export PYTHONDONTWRITEBYTECODE=1
exec timeout 300 "$braidrun" --standalone --nproc-per-node="$nproc" ${BRAIDRUN_ARGS:-} \
  "${BRAID_TEST_PYTHON:-/usr/bin/python3}" "$runfiles/$script" "$@"
