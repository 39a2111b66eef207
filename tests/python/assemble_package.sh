#!/usr/bin/env bash
# Lays out the braid package from Bazel's outputs in DEST/braid, as
# `pip install .` installs it, for the tests to put DEST on PYTHONPATH:
#
#   assemble_package.sh DEST [BIN]   # from the runfiles root; BIN: where the .so files are
#                                    # (from the workspace root: bazel-bin)
set -euo pipefail
dest=$1/braid
bin=${2:-.}
mkdir -p "$dest/torch"
cp -f python/braid/*.py python/braid/*.pyi python/braid/py.typed "$dest/"
cp -f python/braid/torch/*.py "$dest/torch/"
for so in capi/libbraid.so python/_braid.so python/_torch.so; do
  if [[ -e $bin/$so ]]; then cp -f "$bin/$so" "$dest/"; fi
done
