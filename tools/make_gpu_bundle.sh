#!/usr/bin/env bash
# Builds the GPU test and bench binaries here (Bazel, --config=gpu_bundle:
# CUDA on, Abseil/libstdc++/cudart static) and copies them with
# tools/gpu_check.sh into gpu_bundle/, the folder carried to a GPU machine.
#
#   tools/make_gpu_bundle.sh && <on the GPU machine> gpu_bundle/gpu_check.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(
  //tests/tensor:reduce_cuda_test
  //tests/tensor:tensor_test
  //bench:reduce_kernels_cuda_bench
  //tests/collectives/transport/nccl:nccl_test
  //tests/collectives:host_staging_test
  //tests/runtime:process_group_test
  //bench:braid_bench
  //launcher:braidrun
)
bazel build --config=gpu_bundle "${TARGETS[@]}"
rm -rf gpu_bundle
mkdir -p gpu_bundle/bin
for target in "${TARGETS[@]}"; do
  path=${target#//}
  cp "bazel-bin/${path/://}" gpu_bundle/bin/
done
cp tools/gpu_check.sh gpu_bundle/
chmod -R u+w gpu_bundle
echo "gpu_bundle/: $(ls gpu_bundle/bin | tr '\n' ' ')($(du -sh gpu_bundle | cut -f1))"
