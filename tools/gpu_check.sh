#!/usr/bin/env bash
# Every GPU test and GPU benchmark in one go, on a machine with an NVIDIA GPU,
# within a fixed budget (BRAID_GPU_CHECK_BUDGET seconds, default 420). Runs
# the binaries tools/make_gpu_bundle.sh put beside this script.
#
#   gpu_bundle/gpu_check.sh OUT_DIR      (the device tool: gpu_bundle/gpu_check.sh "$OUT")
#
# OUT_DIR gets summary.md, appended after every step (a run cut short still
# says how far it got), and results.tar.gz with every step's full output,
# rewritten after every step. BRAID_REQUIRE_GPU=1 is set: a CUDA error or a
# missing GPU fails a step instead of skipping its tests.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: gpu_check.sh OUT_DIR}
mkdir -p "$out/results"
bin="$here/bin"
if [[ ! -d $bin && -f $here/bin.tar.xz ]]; then
  # make_gpu_bundle.sh ships the binaries compressed (the carry limit).
  unpacked=$(mktemp -d)
  tar xJf "$here/bin.tar.xz" -C "$unpacked" || { echo "gpu_check: cannot unpack bin.tar.xz" >&2; exit 1; }
  bin="$unpacked/bin"
fi
summary="$out/summary.md"
budget_end=$((SECONDS + ${BRAID_GPU_CHECK_BUDGET:-420}))
export BRAID_REQUIRE_GPU=1 BRAID_TIMEOUT_SEC=60

# NCCL is not shipped (about 220 MB): use the one PyTorch's wheel installed.
if [[ -z "${BRAID_NCCL_LIB:-}" ]]; then
  BRAID_NCCL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
fi
[[ -n "$BRAID_NCCL_LIB" ]] && export LD_LIBRARY_PATH="$BRAID_NCCL_LIB:${LD_LIBRARY_PATH:-}"

pack() { tar czf "$out/results.tar.gz.tmp" -C "$out" results && mv "$out/results.tar.gz.tmp" "$out/results.tar.gz"; }

# step NAME TIMEOUT COMMAND...: runs under min(TIMEOUT, what is left of the budget).
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget_end - SECONDS)) start=$SECONDS rc=0 result
  if ((left < 15)); then
    echo "| $name | skipped: the budget is spent | 0 s |" >>"$summary"
    return
  fi
  ((limit > left)) && limit=$left
  timeout -k 5 "$limit" "$@" >"$out/results/$name.txt" 2>&1 || rc=$?
  if ((rc == 0)); then
    result=ok
  elif ((rc == 124 || rc == 137)); then
    result="TIMEOUT after ${limit} s"
  else
    result="FAILED (rc $rc): $(grep -m1 -iE 'BRAID_REQUIRE_GPU|FAILED|error' "$out/results/$name.txt" | cut -c1-160)"
  fi
  echo "| $name | $result | $((SECONDS - start)) s |" >>"$summary"
  pack
}

{
  echo "# gpu_check $(date -u +"%Y-%m-%d %H:%M UTC")"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "NCCL lib: ${BRAID_NCCL_LIB:-none found}"
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -1
  for b in "$bin"/*; do
    missing=$(ldd "$b" 2>&1 | grep "not found" | awk '{print $1}' | tr '\n' ' ')
    [[ -n $missing ]] && echo "$(basename "$b") cannot load: $missing"
  done
  echo '```'
  echo
  echo "| check | result | time |"
  echo "|---|---|---|"
} >"$summary"
cp "$summary" "$out/results/preflight.md"
pack

step tensor_test 60 "$bin/tensor_test"
# Catch2 v2: no "--opt=value" (it reads the value as a test name and runs nothing).
step reduce_cuda_test 120 "$bin/reduce_cuda_test"
# Streams and events on a real GPU: the same checks as on the host runtime
# (a slow producer never read stale; the control without the wait reads it stale).
step stream_test 60 "$bin/stream_test"
# Point-to-point on streams between 2-4 thread ranks sharing GPU 0 (what
# braid's device algorithms run on where NCCL refuses ranks on one GPU).
step device_link_test 60 "$bin/device_link_test"
# braid's ring/tree/rhd/chain programs on GPU 0 with braid's kernels at 2-5
# thread ranks, bit for bit against the host algorithms over tcp.
step program_test 120 "$bin/program_test"
# The communicator on device streams (local device transport on GPU 0): every
# collective, the stale-input check on a real stream, deadlines, abort.
step device_communicator_test 120 "$bin/device_communicator_test"
# The reducer with CUDA gradients on a stream communicator: a bucket never
# reused before its done event; the bf16 hook's casts on the stream.
step reducer_device_test 90 "$bin/reducer_device_test"
# Correctness before the benchmarks, should the budget run short.
# The GPU trainer's loop on GPU 0 with 2-3 thread ranks over LocalDeviceLinks,
# against the CPU arithmetic (tolerance 1e-4).
step device_mlp_test 120 "$bin/device_mlp_test"
# The README's main job on the GPU: one rank on NCCL (world size 1), then two
# ranks sharing GPU 0 (NCCL refuses that: the reducer falls back to host
# staging over shm, logged), each with --check against one process on the CPU.
step train_mlp_cuda_check 90 "$bin/braidrun" --standalone --nproc-per-node=1 \
  "$bin/train_mlp" --device=cuda --check
step train_mlp_cuda_check_2ranks 90 env CUDA_VISIBLE_DEVICES=0 "$bin/braidrun" --standalone --nproc-per-node=2 \
  "$bin/train_mlp" --device=cuda --check
step train_mlp_cuda_epochs 90 "$bin/braidrun" --standalone --nproc-per-node=1 \
  "$bin/train_mlp" --device=cuda --epochs=3
# NCCL transport: every native collective at world size 1, deadlines and abort.
step nccl_test 90 "$bin/nccl_test"
# CUDA tensors on the host transports (pinned-memory staging), thread ranks on GPU 0.
step host_staging_test 120 "$bin/host_staging_test"
# ProcessGroup::CommFor in forked ranks: NCCL with a GPU each, else the logged fallback.
step process_group_commfor 60 "$bin/process_group_test" "ProcessGroup: CommFor*"
# The benchmarks.
step reduce_kernels_cuda_bench 90 "$bin/reduce_kernels_cuda_bench"
# torch on the same GPU: torch.add and D2D copy bandwidth, torch.distributed
# all_reduce (NCCL, world size 1), and the kernel bandwidth plot.
step torch_baselines 120 python3 "$here/gpu_torch_check.py" "$out/results"
# braid_bench on CUDA buffers: NCCL's own all-reduce at world size 1, exact check.
step bench_nccl_allreduce 90 "$bin/braidrun" --standalone --nproc-per-node=1 \
  "$bin/braid_bench" -t nccl -a native -b 8 -e 256M -f 4 -n 20 -w 5 -c 1
# Two processes sharing one GPU, CUDA buffers staged through host memory over shm.
step bench_staged_shm_allreduce 90 env CUDA_VISIBLE_DEVICES=0 "$bin/braidrun" --standalone --nproc-per-node=2 \
  "$bin/braid_bench" --device cuda -t shm -a ring,tree,rhd -b 8 -e 64M -f 4 -n 5 -w 2 -c 1
step bench_staged_auto 60 env CUDA_VISIBLE_DEVICES=0 "$bin/braidrun" --standalone --nproc-per-node=2 \
  "$bin/braid_bench" --device cuda -b 8 -e 16M -f 8 -n 3 -w 1 -c 1
# braid's own programs over NCCL point to point at world size 1 (a copy), beside native.
step bench_nccl_programs 90 "$bin/braidrun" --standalone --nproc-per-node=1 \
  "$bin/braid_bench" -t nccl -a ring,tree,rhd,native -b 8 -e 64M -f 8 -n 10 -w 3 -c 1
# The torch backend: built there against that torch, then CUDA tensors through
# init_process_group("braid") at 1 and 2 processes on GPU 0.
site=$(mktemp -d)
step torch_backend_build 240 env BRAID_LIBBRAID="$bin/libbraid.so" MAX_JOBS=16 \
  python3 -m pip install --no-build-isolation --no-deps --target "$site" "$here/src"
step torch_backend_cuda_1rank 90 env PYTHONPATH="$site" python3 "$here/gpu_torch_backend_check.py" 1
step torch_backend_cuda_2ranks 90 env PYTHONPATH="$site" python3 "$here/gpu_torch_backend_check.py" 2
{
  echo
  echo "## torch backend on CUDA"
  grep -h "braid backend" "$out/results/torch_backend_cuda_1rank.txt" "$out/results/torch_backend_cuda_2ranks.txt" 2>/dev/null
  echo
  echo "## reduce_kernels_cuda_bench"
  cat "$out/results/reduce_kernels_cuda_bench.txt" 2>/dev/null
  echo
  echo "## torch baselines"
  cat "$out/results/torch_baselines.txt" 2>/dev/null
  echo
  echo "## braid_bench -t nccl (all-reduce, native)"
  grep -v "^#  Rank" "$out/results/bench_nccl_allreduce.txt" 2>/dev/null | tail -30
} >>"$summary"
pack
cat "$summary"
