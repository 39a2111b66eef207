// A test-only Transport for thread ranks whose memory is one DeviceRuntime's
// (the host runtime in CI, one GPU where there is one): its only path is the
// LocalDeviceLinks' device link, so a Communicator over it runs every
// collective on streams (collectives/device/device_collectives.h), through
// the same code as over NCCL with only the link swapped. It has no host
// messages (the communicator needs none on device memory).
#ifndef BRAID_TESTS_COLLECTIVES_DEVICE_LOCAL_DEVICE_TRANSPORT_H_
#define BRAID_TESTS_COLLECTIVES_DEVICE_LOCAL_DEVICE_TRANSPORT_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "collectives/transport/device_link.h"
#include "collectives/transport/local_device_link.h"
#include "collectives/transport/transport.h"
#include "tensor/device.h"
#include "tensor/stream.h"

namespace braid::testing {

// The runtimes the device tests run on: the host one always, and GPU 0's
// where there is one (tools/gpu_check.sh runs them there).
inline std::vector<DeviceRuntime*> TestRuntimes() {
  std::vector<DeviceRuntime*> runtimes = {&DeviceRuntime::Host()};
  if (CudaDeviceCount() > 0) runtimes.push_back(DeviceRuntime::For(Device::Cuda(0)).value());
  return runtimes;
}

// Runs body(rank) on `n` threads (the ranks of one LocalDeviceLinks) and
// returns each one's status, in rank order.
template <typename Body>
std::vector<absl::Status> OnThreads(int n, Body body) {
  std::vector<absl::Status> statuses(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { statuses[static_cast<size_t>(r)] = body(r); });
  for (std::thread& t : threads) t.join();
  return statuses;
}

class LocalDeviceTransport final : public Transport {
 public:
  // `links` must outlive the transport.
  LocalDeviceTransport(LocalDeviceLinks& links, int rank, int size)
      : Transport(rank, size), link_(links.link(rank)) {}
  const char* name() const override { return "local-device"; }
  absl::StatusOr<OpId> PostSend(int, FrameHeader, absl::Span<const std::byte>) override { return Refuse(); }
  absl::StatusOr<OpId> PostRecv(int, FrameHeader, absl::Span<std::byte>) override { return Refuse(); }
  absl::Status Wait(absl::Span<const OpId>, Deadline) override { return Refuse(); }
  void Abort(const absl::Status& cause) override { link_.Abort(cause); }
  bool device_memory_only() const override { return true; }
  DeviceLink* device_link() override { return &link_; }

 private:
  static absl::Status Refuse() { return absl::UnimplementedError("local-device: no host messages"); }
  DeviceLink& link_;
};

}  // namespace braid::testing

#endif  // BRAID_TESTS_COLLECTIVES_DEVICE_LOCAL_DEVICE_TRANSPORT_H_
