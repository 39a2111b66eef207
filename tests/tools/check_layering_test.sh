#!/usr/bin/env bash
# tools/check_layering.sh on small trees made here: a clean one passes; each
# planted forbidden include fails it, naming the floor and the file.
set -uo pipefail
check=$1
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
failures=0

make_clean_tree() {
  rm -rf "$tree"/*
  mkdir -p "$tree"/{base,tensor,store,runtime,launcher,collectives/transport/shm}
  echo '#include "base/status.h"' > "$tree/tensor/tensor.h"
  echo '#include "base/status.h"' > "$tree/store/store.h"
  printf '#include "tensor/tensor.h"\n#include "base/fd.h"\n' > "$tree/collectives/transport/frame.h"
  echo '#include "collectives/transport/frame.h"' > "$tree/collectives/transport/shm/shm_transport.cc"
  printf '#include "collectives/transport/frame.h"\n#include "collectives/timeline.h"\n' > "$tree/collectives/communicator.h"
  printf '#include "collectives/communicator.h"\n#include "store/store.h"\n' > "$tree/runtime/process_group.h"
  printf '#include "store/store.h"\n#include "base/fd.h"\n' > "$tree/launcher/agent.cc"
  echo '#include <vector>' > "$tree/base/status.h"
}

expect_ok() {
  local out
  if ! out=$("$check" --includes-only "$tree" 2>&1); then
    echo "FAIL: a clean tree was refused: $out"
    failures=$((failures + 1))
  fi
}

# plant FILE LINE EXPECTED: the check must fail and say EXPECTED.
plant() {
  make_clean_tree
  echo "$2" >> "$tree/$1"
  local out rc
  out=$("$check" --includes-only "$tree" 2>&1)
  rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "FAIL: $1 with '$2' passed the check"
    failures=$((failures + 1))
  elif ! grep -qF "$3" <<<"$out" || ! grep -qF "$1" <<<"$out"; then
    echo "FAIL: $1 with '$2': expected '$3' naming the file, got: $out"
    failures=$((failures + 1))
  else
    echo "ok: $1 with '$2' refused"
  fi
}

make_clean_tree
expect_ok
plant base/status.h '#include "collectives/communicator.h"' "base may not use collectives/"
plant tensor/tensor.h '#include "runtime/process_group.h"' "tensor may not use runtime/"
plant store/store.h '#include "tensor/tensor.h"' "store may not use tensor/"
plant collectives/transport/frame.h '#include "collectives/selection.h"' "collectives/transport may not use collectives/"
plant collectives/transport/shm/shm_transport.cc '#include "collectives/timeline.h"' "collectives/transport may not use collectives/"
plant collectives/transport/frame.h '#include "collectives/tree.h"' "collectives/transport may not use collectives/"
plant collectives/communicator.h '#include "runtime/reducer.h"' "collectives may not use runtime/"
plant collectives/communicator.h '#include "store/store.h"' "collectives may not use store/"
plant launcher/agent.cc '#include "collectives/communicator.h"' "launcher may not use collectives/"
plant launcher/agent.cc '  #  include "runtime/worker_env.h"' "launcher may not use runtime/"
make_clean_tree
expect_ok

if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "check_layering_test: every planted edge was refused"
