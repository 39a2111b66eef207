#!/usr/bin/env bash
# Every GPU test and GPU benchmark in one go, on a machine with an NVIDIA GPU.
# Runs the binaries tools/make_gpu_bundle.sh put beside this script, writes
# full results to the folder given as argument, prints a short table last.
#
#   gpu_bundle/gpu_check.sh OUT_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: gpu_check.sh OUT_DIR}
mkdir -p "$out"
bin="$here/bin"

# NCCL is not shipped (about 220 MB): use the one PyTorch's wheel installed.
if [[ -z "${BRAID_NCCL_LIB:-}" ]]; then
  BRAID_NCCL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
fi
[[ -n "$BRAID_NCCL_LIB" ]] && export LD_LIBRARY_PATH="$BRAID_NCCL_LIB:${LD_LIBRARY_PATH:-}"

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "NCCL lib: ${BRAID_NCCL_LIB:-none found}"
} > "$out/machine.txt"

summary=()
run() {
  local name=$1
  shift
  local start=$SECONDS
  if timeout 300 "$@" > "$out/$name.txt" 2>&1; then
    summary+=("| $name | ok | $((SECONDS - start)) s |")
  else
    summary+=("| $name | FAILED (rc $?) | $((SECONDS - start)) s |")
  fi
}

run tensor_test "$bin/tensor_test"
run reduce_cuda_test "$bin/reduce_cuda_test" --success=false
run reduce_kernels_cuda_bench "$bin/reduce_kernels_cuda_bench"
# NCCL transport: every native collective at world size 1 (and 2 with two
# GPUs), deadlines and abort. "-s" lists every case, so a skip (WARN) shows.
run nccl_test "$bin/nccl_test" -s
if grep -q "SKIPPED\|not run" "$out/nccl_test.txt"; then
  summary+=("| nccl_test skips | $(grep -c "SKIPPED\|not run" "$out/nccl_test.txt") case(s) skipped, see nccl_test.txt | |")
fi

cat "$out/machine.txt"
echo
echo "| check | result | time |"
echo "|---|---|---|"
printf '%s\n' "${summary[@]}"
echo
echo "## reduce_kernels_cuda_bench"
cat "$out/reduce_kernels_cuda_bench.txt"
