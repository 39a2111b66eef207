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

# CUDA tensors on the host transports (pinned-memory staging): the
# conformance suite with 1-3 thread ranks sharing GPU 0, shm and tcp.
run host_staging_test "$bin/host_staging_test" -s
# ProcessGroup::CommFor in forked ranks: NCCL when each rank has a GPU, else
# (two ranks, one GPU) the logged fallback to host staging.
run process_group_commfor "$bin/process_group_test" "ProcessGroup: CommFor*"

# braid_bench on CUDA buffers: NCCL's own all-reduce at world size 1 (one per
# GPU when there are more: WORLD_SIZE = GPUs, at most 8), exact check.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
(( gpus < 1 )) && gpus=1
(( gpus > 8 )) && gpus=8
run bench_nccl_allreduce "$bin/braidrun" --standalone --nproc-per-node="$gpus" \
  "$bin/braid_bench" -t nccl -a native -b 8 -e 256M -f 4 -n 20 -w 5 -c 1
# Two processes sharing one GPU, CUDA buffers staged through host memory over
# shm: ring and native-less braid algorithms, every collective checked.
run bench_staged_shm_allreduce env CUDA_VISIBLE_DEVICES=0 "$bin/braidrun" --standalone --nproc-per-node=2 \
  "$bin/braid_bench" --device cuda -t shm -a ring,tree,rhd,direct -b 8 -e 64M -f 4 -n 5 -w 2 -c 1
for coll in reducescatter allgather broadcast reduce alltoall sendrecv; do
  run "bench_staged_shm_$coll" env CUDA_VISIBLE_DEVICES=0 "$bin/braidrun" --standalone --nproc-per-node=2 \
    "$bin/braid_bench" --device cuda -t shm -C "$coll" -b 8 -e 16M -f 8 -n 3 -w 1 -c 1
done
# And with -t auto on one GPU: NCCL refuses two ranks there, so CommFor falls
# back to staging (the bench says which transport ran).
run bench_staged_auto env CUDA_VISIBLE_DEVICES=0 "$bin/braidrun" --standalone --nproc-per-node=2 \
  "$bin/braid_bench" --device cuda -b 8 -e 16M -f 8 -n 3 -w 1 -c 1

cat "$out/machine.txt"
echo
echo "| check | result | time |"
echo "|---|---|---|"
printf '%s\n' "${summary[@]}"
echo
echo "## reduce_kernels_cuda_bench"
cat "$out/reduce_kernels_cuda_bench.txt"
echo
echo "## braid_bench -t nccl (all-reduce, native)"
grep -v "^#  Rank" "$out/bench_nccl_allreduce.txt" | tail -30
echo
echo "## braid_bench --device cuda -t shm, 2 ranks on one GPU (staged)"
grep -E "Algorithm|Out of bounds|Avg bus" "$out/bench_staged_shm_allreduce.txt"
