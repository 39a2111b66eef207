#!/usr/bin/env bash
# Builds braid's Python package (braid, braid.torch) as a wheel and
# pip-installs it:
#
#   tools/install_python.sh [PYTHON]     # default /usr/bin/python3 (Debian's, with torch 1.13)
#
# A virtualenv's python gets the wheel directly. A system interpreter (which
# refuses pip installs, PEP 668) gets a virtualenv at .venv in the checkout,
# made with --system-site-packages so it still sees Debian's torch and numpy;
# the last line printed says which python to run. The extensions are built
# by Bazel (python/BUILD.bazel) against Debian's Python 3.11, pybind11 and
# libtorch 1.13: PYTHON must be a 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-/usr/bin/python3}
fail() {
  echo "install_python.sh: $*" >&2
  exit 1
}
"$python" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' ||
  fail "$python is Python $("$python" -c 'import sys; print(sys.version.split()[0])'); braid's extensions are built for Debian's 3.11"

bazel build //python:package >&2 || fail "bazel build //python:package failed"
version=$(sed -n 's/^constexpr char kVersion\[\] = "\(.*\)";/\1/p' capi/braid.cc)
stage=build/python
rm -rf "$stage"
mkdir -p "$stage/braid" "$stage/dist"
cp python/braid/*.py "$stage/braid/"
if [[ -d python/braid/torch ]]; then
  mkdir -p "$stage/braid/torch"
  cp python/braid/torch/*.py "$stage/braid/torch/"
fi
for so in bazel-bin/capi/libbraid.so bazel-bin/python/_braid.so bazel-bin/python/_torch.so; do
  [[ -f $so ]] && install -m 0755 "$so" "$stage/braid/"
done
cat >"$stage/setup.py" <<SETUP
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # the wheel carries compiled modules: tag it for this platform


setup(
    name="braid",
    version="$version",
    description="braid's collectives from Python: NumPy, torch and JAX arrays through DLPack, and a torch.distributed backend",
    packages=["braid"] + (["braid.torch"] if "$([[ -d python/braid/torch ]] && echo yes)" else []),
    package_data={"braid": ["*.so"]},
    python_requires="==3.11.*",
    distclass=BinaryDistribution,
    zip_safe=False,
)
SETUP

target=$python
if ! "$python" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)'; then
  [[ -x .venv/bin/python ]] || "$python" -m venv --system-site-packages .venv ||
    fail "could not make a virtualenv with $python -m venv (python3-venv)"
  target=$(pwd)/.venv/bin/python
fi
(cd "$stage" && "$target" -m pip wheel --quiet --no-deps --no-build-isolation -w dist .) >&2 ||
  fail "pip wheel failed"
wheel=$(ls "$stage"/dist/braid-*.whl)
"$target" -m pip install --quiet --force-reinstall --no-deps "$wheel" >&2 || fail "pip install $wheel failed"
"$target" -c 'import braid; print("install_python.sh: braid", braid.version(), "from", braid.__file__)' >&2
echo "$target"
