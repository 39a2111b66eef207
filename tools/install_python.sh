#!/usr/bin/env bash
# Installs braid's Python package (braid, braid.torch) as a user would:
#
#   tools/install_python.sh [PYTHON]     # default: the project's virtualenv, .venv/bin/python
#
# runs `PYTHON -m pip install --no-build-isolation .` (pyproject.toml, setup.py): libbraid.so
# from Bazel, braid._braid, and braid._torch built by torch.utils.cpp_extension against the torch
# PYTHON has. PYTHON must be a virtualenv's (Debian's own python3 refuses pip installs, PEP 668).
# The last line printed is the python to use.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
fail() {
  echo "install_python.sh: $*" >&2
  exit 1
}
[[ -x $python ]] || fail "no python at $python (tools/setup.sh makes .venv)"
python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
"$python" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)' ||
  fail "$python is not a virtualenv's python (make one: python3 -m venv VENV; VENV/bin/pip install torch)"
"$python" -m pip install --quiet --no-build-isolation --no-deps --force-reinstall . >&2 ||
  fail "pip install . failed"
(cd /tmp && "$python" -c 'import braid; print("install_python.sh: braid", braid.version(), "from", braid.__file__)') >&2
echo "$python"
