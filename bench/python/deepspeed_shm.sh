#!/usr/bin/env bash
# DeepSpeed's shared-memory all-reduce beside braid and gloo (bench/python/deepspeed_shm.py) at
# 2 and 4 ranks: fetches DeepSpeed's sdist from PyPI into bench/out/deepspeed (once), builds its
# op with torch's cpp_extension, runs under braidrun. Prints rank 0's tables.
#
#   bench/python/deepspeed_shm.sh            # WORLD_SIZES="2 4" ROUNDS=5 DEEPSPEED=0.19.8
set -euo pipefail
cd "$(dirname "$0")/../.."
WORLD_SIZES=${WORLD_SIZES:-"2 4"}
ROUNDS=${ROUNDS:-5}
DEEPSPEED=${DEEPSPEED:-0.19.8}
PYTHON=${PYTHON:-.venv/bin/python}
out=bench/out/deepspeed
mkdir -p "$out"
if [[ ! -d $out/deepspeed-$DEEPSPEED ]]; then
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "deepspeed==$DEEPSPEED" -d "$out" >&2
  tar xzf "$out/deepspeed-$DEEPSPEED.tar.gz" -C "$out"
fi
bazel build //python:package //launcher:braidrun >&2
pkg=$out/pkg
rm -rf "$pkg"
tests/python/assemble_package.sh "$pkg" bazel-bin >&2
for n in $WORLD_SIZES; do
  PYTHONPATH=$pkg bazel-bin/launcher/braidrun --standalone --nproc-per-node="$n" --local-ranks-filter=0 \
    "$PYTHON" bench/python/deepspeed_shm.py --source "$out/deepspeed-$DEEPSPEED" --rounds "$ROUNDS" \
    --build "$out/build" 2>&1 | sed -n 's/^\[rank 0\]: //p'
done
