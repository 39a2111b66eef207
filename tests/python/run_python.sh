#!/usr/bin/env bash
# Runs a Python test script under braidrun with the braid package assembled
# from Bazel's outputs (python_env.sh says which python):
#
#   run_python.sh BRAIDRUN NPROC SCRIPT [ARGS...]
#
# BRAIDRUN_ARGS adds launcher flags.
set -euo pipefail
braidrun=$1
nproc=$2
script=$3
shift 3
runfiles=$(pwd)
source "$runfiles/tests/python/python_env.sh"
pkg=${TEST_TMPDIR:-$(mktemp -d)}/pkg
"$runfiles/tests/python/assemble_package.sh" "$pkg"
export PYTHONPATH=$pkg:$runfiles/tests/python
exec timeout 300 "$braidrun" --standalone --nproc-per-node="$nproc" ${BRAIDRUN_ARGS:-} \
  "$python" "$runfiles/$script" "$@"
