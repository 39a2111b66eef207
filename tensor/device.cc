#include "tensor/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#ifdef BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid {

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
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

}  // namespace braid
