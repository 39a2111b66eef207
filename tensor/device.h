// Where a tensor's memory lives: the host (CPU) or CUDA device n.
#ifndef BRAID_TENSOR_DEVICE_H_
#define BRAID_TENSOR_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace braid {

enum class DeviceType : uint8_t { kCpu = 0, kCuda = 1 };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static constexpr Device Cpu() { return Device{DeviceType::kCpu, 0}; }
  static constexpr Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }

  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// "cpu" or "cuda:N".
std::string ToString(Device device);
// Parses "cpu", "cuda" (= cuda:0) or "cuda:N".
absl::StatusOr<Device> ParseDevice(absl::string_view text);

// True when this binary was built with --config=cuda.
bool CudaCompiledIn();
// The number of usable CUDA devices; 0 when CUDA is not compiled in or the
// driver/GPU is missing (any CUDA error counts as "no GPU").
int CudaDeviceCount();

}  // namespace braid

#endif  // BRAID_TENSOR_DEVICE_H_
