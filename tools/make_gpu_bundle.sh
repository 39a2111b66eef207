#!/usr/bin/env bash
# Builds the GPU test and bench binaries here (Bazel, --config=gpu_bundle:
# CUDA on, Open MPI left out, Abseil/libcrypto/libstdc++/cudart static),
# strips them and copies them with tools/gpu_check.sh and tools/gpu_torch_check.py
# into gpu_bundle/, the folder carried to a GPU machine (listed in
# .git/info/exclude; the carry limit is 64 MiB).
#
# Fails when a binary needs a library the GPU machine may lack: every NEEDED
# entry must be the driver (libcuda), NCCL (libnccl) or glibc's.
#
#   tools/make_gpu_bundle.sh && <on the GPU machine> gpu_bundle/gpu_check.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(
  //tests/tensor:reduce_cuda_test
  //tests/tensor:tensor_test
  //tests/tensor:stream_test
  //tests/collectives/transport:device_link_test
  //tests/collectives/device:program_test
  //tests/collectives/device:device_communicator_test
  //tests/runtime:reducer_device_test
  //tests/examples:device_mlp_test
  //examples:train_mlp
  //bench:reduce_kernels_cuda_bench
  //tests/collectives/transport/nccl:nccl_test
  //tests/collectives:host_staging_test
  //tests/runtime:process_group_test
  //bench:braid_bench
  //launcher:braidrun
  //capi:libbraid.so
)
# glibc's libraries, the driver and NCCL: what a GPU machine has.
ALLOWED='^(libc|libm|libdl|librt|libpthread|libresolv|ld-linux-x86-64|libcuda|libnccl)\.so'

bazel build --config=gpu_bundle "${TARGETS[@]}"
rm -rf gpu_bundle
mkdir -p gpu_bundle/bin
bad=0
for target in "${TARGETS[@]}"; do
  path=${target#//}
  file="gpu_bundle/bin/$(basename "${path/://}")"
  cp "bazel-bin/${path/://}" "$file"
  chmod u+w "$file"
  strip --strip-unneeded "$file"
  while read -r lib; do
    if [[ ! $lib =~ $ALLOWED ]]; then
      echo "make_gpu_bundle: $(basename "$file") needs $lib, which a GPU machine may not have" >&2
      bad=1
    fi
  done < <(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
cp tools/gpu_check.sh tools/gpu_torch_check.py tools/gpu_torch_backend_check.py gpu_bundle/
# The Python package's sources: gpu_check.sh pip-installs them there against that machine's
# torch (torch.utils.cpp_extension), with the bundle's libbraid.so.
mkdir -p gpu_bundle/src/capi
cp -r python pyproject.toml setup.py README.md gpu_bundle/src/
cp capi/braid.h capi/braid.cc gpu_bundle/src/capi/
find gpu_bundle/src -name BUILD.bazel -delete
names=$(ls gpu_bundle/bin | tr '\n' ' ')
# Static binaries compress about 5x: the device tool carries at most 64 MiB,
# and gpu_check.sh unpacks them there.
tar cJf gpu_bundle/bin.tar.xz -C gpu_bundle bin && rm -rf gpu_bundle/bin
chmod -R u+w gpu_bundle
size=$(du -sm gpu_bundle | cut -f1)
echo "gpu_bundle/: ${names}(bin.tar.xz, ${size} MiB)"
if ((size > 60)); then
  echo "make_gpu_bundle: ${size} MiB is too close to the 64 MiB carry limit" >&2
  bad=1
fi
exit $bad
