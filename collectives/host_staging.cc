#include "collectives/host_staging.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "tensor/device.h"

namespace braid {
namespace {

bool OnGpu(const Tensor& t) { return t.defined() && t.device().is_cuda(); }

}  // namespace

bool HostStaging::Needed(const Tensor& in, const Tensor& out) { return OnGpu(in) || OnGpu(out); }

absl::Status HostStaging::Run(const Tensor& in, const Tensor& out, RunOnHost run) {
  const Device device = OnGpu(in) ? in.device() : out.device();
  auto fail = [&](const absl::Status& status) {
    // The communicator adds the collective and its sequence number.
    return Annotate(status, absl::StrCat("rank ", rank_, ": staging ", ToString(device),
                                         " tensors through host memory for ", transport_));
  };
  // Every CUDA call below runs on the tensor's GPU (no stray context on GPU 0).
  absl::StatusOr<CudaDeviceScope> scope = CudaDeviceScope::Enter(device);
  if (!scope.ok()) return fail(scope.status());
  // In place (one tensor read and written): one host copy serves both.
  const bool shared = OnGpu(in) && OnGpu(out) && in.data() == out.data() && in.nbytes() == out.nbytes();
  constexpr size_t kAlign = 256;
  auto padded = [](size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  const size_t out_bytes = OnGpu(out) ? padded(out.nbytes()) : 0;
  const size_t in_bytes = OnGpu(in) && !shared ? padded(in.nbytes()) : 0;
  if (staging_.nbytes() < out_bytes + in_bytes) {
    // Grow to a power of two (at least 1 MiB), so a sweep of sizes allocates
    // a few times, not once per size; free the old buffer first.
    size_t grown = size_t{1} << 20;
    while (grown < out_bytes + in_bytes) grown *= 2;
    staging_ = Tensor();
    absl::StatusOr<Tensor> pinned = Tensor::EmptyPinned({static_cast<int64_t>(grown)}, DType::kU8);
    if (!pinned.ok()) return fail(pinned.status());
    staging_ = *std::move(pinned);
  }
  std::byte* base = static_cast<std::byte*>(staging_.data());
  const Tensor host_out = OnGpu(out) ? Tensor::View(base, out.shape(), out.dtype()) : out;
  Tensor host_in = in;
  if (OnGpu(in)) {
    host_in = shared ? host_out : Tensor::View(base + out_bytes, in.shape(), in.dtype());
    if (absl::Status copied = host_in.CopyFrom(in); !copied.ok()) return fail(copied);
  }
  BRAID_RETURN_IF_ERROR(run(host_in, host_out));
  if (OnGpu(out)) {
    Tensor device_out = out;
    if (absl::Status copied = device_out.CopyFrom(host_out); !copied.ok()) return fail(copied);
  }
  return absl::OkStatus();
}

}  // namespace braid
