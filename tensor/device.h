// Where a tensor's memory lives: the host (CPU) or CUDA device n.
#ifndef BRAID_TENSOR_DEVICE_H_
#define BRAID_TENSOR_DEVICE_H_

#include <string>

#include "absl/status/status.h"
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

// Makes a CUDA device current on the calling thread for the scope's life and
// the previous one current again when it ends, so that work done for a tensor
// (copies, pinned allocations) lands on the tensor's GPU and leaves the
// caller's current device as it was. A CPU device changes nothing. Fails,
// naming the CUDA call, when CUDA is not compiled in (kFailedPrecondition) or
// the device cannot be made current (kInternal: no driver, no such GPU).
// Move-only; use on one thread.
class CudaDeviceScope {
 public:
  static absl::StatusOr<CudaDeviceScope> Enter(Device device);
  CudaDeviceScope(CudaDeviceScope&& other) noexcept : previous_(other.previous_) { other.previous_ = -1; }
  CudaDeviceScope& operator=(CudaDeviceScope&&) = delete;
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  ~CudaDeviceScope();

 private:
  explicit CudaDeviceScope(int previous) : previous_(previous) {}
  int previous_;  // the device to restore; -1: nothing to restore
};

// The PCI bus id of CUDA device `index` ("0000:3b:00.0"): the same GPU has the
// same id in every process of a host, whatever CUDA_VISIBLE_DEVICES numbers it.
// kFailedPrecondition without --config=cuda; kInternal naming the CUDA call on
// a CUDA error.
absl::StatusOr<std::string> CudaDeviceBusId(int index);

}  // namespace braid

#endif  // BRAID_TENSOR_DEVICE_H_
