#include "tensor/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/logging.h"

#ifdef BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid {
namespace {

BRAID_ENV_KNOB(kRequireGpuKnob, "BRAID_REQUIRE_GPU", "0",
               "1: finding no GPU (or any CUDA error while looking) aborts with the error, instead of counting as "
               "\"no GPU\" and skipping the GPU tests (tools/gpu_check.sh sets it on a GPU machine).");

// Under BRAID_REQUIRE_GPU=1, "no GPU" is a failure: why there is none.
void RequireGpu(const std::string& why) {
  absl::StatusOr<bool> require = kRequireGpuKnob.Bool();
  if (require.ok() && !*require) return;
  BRAID_LOG(FATAL) << "BRAID_REQUIRE_GPU=1, but " << why;
}

}  // namespace

std::string ToString(Device device) {
  return device.is_cpu() ? std::string("cpu") : absl::StrCat("cuda:", device.index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  if (absl::StartsWith(text, "cuda:")) {
    int index = 0;
    if (absl::SimpleAtoi(text.substr(5), &index) && index >= 0) return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device \"", text, "\" (expected cpu or cuda:N)"));
}

bool CudaCompiledIn() {
#ifdef BRAID_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() {
#ifdef BRAID_WITH_CUDA
  int count = 0;
  // Without a driver this is an error, not zero: any error means no GPU.
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    RequireGpu(absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorString(error)));
    return 0;
  }
  if (count == 0) RequireGpu("cudaGetDeviceCount found no GPU");
  return count;
#else
  RequireGpu("this binary was built without --config=cuda");
  return 0;
#endif
}

namespace {

#ifndef BRAID_WITH_CUDA
absl::Status NoCuda(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": braid was built without --config=cuda"));
}
#else
absl::Status CudaError(cudaError_t error, absl::string_view call) {
  cudaGetLastError();  // clear a sticky error, so the next call reports its own
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(error)));
}
#endif

}  // namespace

absl::StatusOr<CudaDeviceScope> CudaDeviceScope::Enter(Device device) {
  if (device.is_cpu()) return CudaDeviceScope(-1);
#ifdef BRAID_WITH_CUDA
  int previous = 0;
  if (cudaError_t error = cudaGetDevice(&previous); error != cudaSuccess) return CudaError(error, "cudaGetDevice");
  if (previous == device.index) return CudaDeviceScope(-1);
  if (cudaError_t error = cudaSetDevice(device.index); error != cudaSuccess) {
    return CudaError(error, absl::StrCat("cudaSetDevice(", device.index, ")"));
  }
  return CudaDeviceScope(previous);
#else
  return NoCuda(absl::StrCat("making ", ToString(device), " current"));
#endif
}

CudaDeviceScope::~CudaDeviceScope() {
#ifdef BRAID_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

absl::StatusOr<std::string> CudaDeviceBusId(int index) {
#ifdef BRAID_WITH_CUDA
  char id[32] = {};
  if (cudaError_t error = cudaDeviceGetPCIBusId(id, sizeof(id), index); error != cudaSuccess) {
    return CudaError(error, absl::StrCat("cudaDeviceGetPCIBusId(", index, ")"));
  }
  return std::string(id);
#else
  return NoCuda(absl::StrCat("the PCI bus id of cuda:", index));
#endif
}

}  // namespace braid
