// The CUDA implementation of tensor/stream.h (--config=cuda): every call makes
// the runtime's device current for its duration (CudaDeviceScope) and
// restores the caller's.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
#include "base/status.h"
#include "tensor/cuda_kernels.h"
#include "tensor/stream.h"

namespace braid {
namespace {

// How often a host wait polls an event or stream: the host never sleeps on
// a collective's critical path (it waits on events on the GPU's side), only
// in Synchronize, which callers use off it.
constexpr absl::Duration kPoll = absl::Microseconds(50);

absl::Status CudaError(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, " failed: ", cudaGetErrorString(error)));
}

class CudaEvent : public Event {
 public:
  CudaEvent(int device, cudaEvent_t event) : device_(device), event_(event) {}
  ~CudaEvent() override {
    absl::StatusOr<CudaDeviceScope> scope = CudaDeviceScope::Enter(Device::Cuda(device_));
    cudaEventDestroy(event_);
  }
  cudaEvent_t get() { return event_; }

  absl::StatusOr<bool> Query() override {
    const cudaError_t state = cudaEventQuery(event_);
    if (state == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    BRAID_RETURN_IF_ERROR(CudaError(state, "cudaEventQuery"));
    return true;
  }
  absl::Status Synchronize(Deadline deadline) override {
    while (true) {
      BRAID_ASSIGN_OR_RETURN(const bool done, Query());
      if (done) return absl::OkStatus();
      if (Expired(deadline)) return absl::DeadlineExceededError("CUDA event not complete at the deadline");
      absl::SleepFor(kPoll);
    }
  }

 private:
  const int device_;
  cudaEvent_t event_;
};

class CudaStream : public Stream {
 public:
  // `owned`: destroyed with this object (else a caller's or the legacy stream).
  CudaStream(int device, cudaStream_t stream, bool owned = true) : device_(device), stream_(stream), owned_(owned) {}
  ~CudaStream() override {
    if (!owned_) return;
    absl::StatusOr<CudaDeviceScope> scope = CudaDeviceScope::Enter(Device::Cuda(device_));
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  absl::Status Record(Event& event) override {
    auto* cuda = dynamic_cast<CudaEvent*>(&event);
    if (cuda == nullptr) return absl::InvalidArgumentError("a CUDA stream can record only a CUDA event");
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    return Checked(cudaEventRecord(cuda->get(), stream_), "cudaEventRecord");
  }
  absl::Status WaitEvent(Event& event) override {
    auto* cuda = dynamic_cast<CudaEvent*>(&event);
    if (cuda == nullptr) return absl::InvalidArgumentError("a CUDA stream can wait only for a CUDA event");
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    return Checked(cudaStreamWaitEvent(stream_, cuda->get(), 0), "cudaStreamWaitEvent");
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    return Checked(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
  }
  absl::Status Zero(void* dst, size_t bytes) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    return Checked(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync");
  }
  absl::Status Reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    return Sticky(CudaReduce(dtype, op, dst, a, b, count, stream_, /*synchronize=*/false));
  }
  absl::Status Divide(DType dtype, void* data, size_t count, int64_t divisor) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    return Sticky(CudaDivide(dtype, data, count, divisor, stream_, /*synchronize=*/false));
  }
  absl::Status Cast(DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t count) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    return Sticky(CudaCast(dst_dtype, dst, src_dtype, src, count, stream_, /*synchronize=*/false));
  }
  absl::Status HostFunc(std::function<void()> fn) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    auto* owned = new std::function<void()>(std::move(fn));
    const cudaError_t error = cudaLaunchHostFunc(
        stream_,
        [](void* data) {
          std::unique_ptr<std::function<void()>> call(static_cast<std::function<void()>*>(data));
          (*call)();
        },
        owned);
    if (error != cudaSuccess) delete owned;
    return Checked(error, "cudaLaunchHostFunc");
  }
  absl::Status Synchronize(Deadline deadline) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, Enter());
    while (true) {
      const cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady) return Checked(state, "cudaStreamQuery");
      cudaGetLastError();
      if (Expired(deadline)) return absl::DeadlineExceededError("CUDA stream: work still pending at the deadline");
      absl::SleepFor(kPoll);
    }
    MutexLock lock(&mu_);
    return failure_;
  }
  void* native() override { return stream_; }

 private:
  absl::StatusOr<CudaDeviceScope> Enter() {
    {
      MutexLock lock(&mu_);
      if (!failure_.ok()) return failure_;
    }
    return CudaDeviceScope::Enter(Device::Cuda(device_));
  }
  absl::Status Checked(cudaError_t error, const char* what) { return Sticky(CudaError(error, what)); }
  absl::Status Sticky(absl::Status status) {
    if (status.ok()) return status;
    MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
    return failure_;
  }

  const int device_;
  cudaStream_t stream_;
  const bool owned_;
  absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

class CudaDeviceRuntime : public DeviceRuntime {
 public:
  explicit CudaDeviceRuntime(int device)
      : device_(device), name_(absl::StrCat("cuda:", device)), legacy_(device, cudaStreamLegacy, /*owned=*/false) {}
  const char* name() const override { return name_.c_str(); }
  Device device() const override { return Device::Cuda(device_); }
  Stream& DefaultStream() override { return legacy_; }
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native) override {
    return std::unique_ptr<Stream>(new CudaStream(device_, static_cast<cudaStream_t>(native), /*owned=*/false));
  }
  absl::StatusOr<std::unique_ptr<Stream>> NewStream() override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, CudaDeviceScope::Enter(Device::Cuda(device_)));
    cudaStream_t stream = nullptr;
    BRAID_RETURN_IF_ERROR(CudaError(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    return std::unique_ptr<Stream>(new CudaStream(device_, stream));
  }
  absl::StatusOr<std::unique_ptr<Event>> NewEvent() override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, CudaDeviceScope::Enter(Device::Cuda(device_)));
    cudaEvent_t event = nullptr;
    BRAID_RETURN_IF_ERROR(CudaError(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
    return std::unique_ptr<Event>(new CudaEvent(device_, event));
  }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, CudaDeviceScope::Enter(Device::Cuda(device_)));
    void* memory = nullptr;
    BRAID_RETURN_IF_ERROR(CudaError(cudaMalloc(&memory, std::max<size_t>(bytes, 1)), "cudaMalloc"));
    return memory;
  }
  void Free(void* memory) override {
    if (memory == nullptr) return;
    absl::StatusOr<CudaDeviceScope> scope = CudaDeviceScope::Enter(Device::Cuda(device_));
    cudaFree(memory);
  }

 private:
  const int device_;
  const std::string name_;
  CudaStream legacy_;
};

}  // namespace

absl::StatusOr<DeviceRuntime*> CudaRuntime(int device_index) {
  if (device_index < 0 || device_index >= CudaDeviceCount()) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA runtime for cuda:", device_index, ": ",
                                                      CudaDeviceCount(), " GPU(s) visible"));
  }
  static absl::Mutex mu(absl::kConstInit);
  static auto* runtimes = new std::map<int, std::unique_ptr<CudaDeviceRuntime>>();
  MutexLock lock(&mu);
  std::unique_ptr<CudaDeviceRuntime>& runtime = (*runtimes)[device_index];
  if (!runtime) runtime = std::make_unique<CudaDeviceRuntime>(device_index);
  return runtime.get();
}

}  // namespace braid
