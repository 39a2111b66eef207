// The host implementation of tensor/stream.h: a thread per stream that runs
// its queue in order; events count Records (queued) and completions (run).
// It holds code to CUDA's contract for host functions, so that CI finds what
// a GPU would: the host functions of every stream run on one thread, in the
// order the streams reach them, each stream waiting for its own to return
// (so a host function that waits for other device work can deadlock, as
// under CUDA); and a host function that calls the device interface is an
// error: the call fails, and so does every later Synchronize of its stream.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "base/status.h"
#include "tensor/stream.h"

namespace braid {
namespace {

// How often a stream blocked on an event looks whether it is being destroyed.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);

// A stream's first failure: what its later Synchronize calls return.
class StickyFailure {
 public:
  void Set(const absl::Status& status) {
    MutexLock lock(&mu_);
    if (first_.ok()) first_ = status;
  }
  absl::Status Get() {
    MutexLock lock(&mu_);
    return first_;
  }

 private:
  absl::Mutex mu_;
  absl::Status first_ ABSL_GUARDED_BY(mu_);
};

// The stream whose host function this thread is running (the host-function
// thread, while it runs one), else null.
thread_local StickyFailure* t_host_function_of = nullptr;

// OK outside host functions; inside one, the error CUDA's contract makes of
// `call` (cudaErrorNotPermitted at best, a deadlock at worst), which also
// fails the host function's stream from then on.
absl::Status CheckNotInHostFunction(const char* call) {
  if (t_host_function_of == nullptr) return absl::OkStatus();
  const absl::Status error = absl::FailedPreconditionError(
      absl::StrCat("a host function called ", call, ": CUDA forbids device calls in host functions (host ",
                   "functions run on one thread for every stream; queue the work on a stream instead)"));
  t_host_function_of->Set(error);
  return error;
}

// CUDA's one thread for the host functions of every stream: Run() hands it a
// function and returns once it ran, so the calling stream waits for its own.
class HostFunctionThread {
 public:
  static HostFunctionThread& Get() {
    static HostFunctionThread* thread = new HostFunctionThread();  // lives as long as the process
    return *thread;
  }

  // Runs `fn` for the stream whose failures `owner` keeps.
  void Run(std::function<void()>& fn, StickyFailure* owner) {
    Call call{&fn, owner};
    MutexLock lock(&mu_);
    calls_.push_back(&call);
    changed_.SignalAll();
    while (!call.done) Wait(&changed_, &mu_);
  }

 private:
  struct Call {
    std::function<void()>* fn;
    StickyFailure* owner;
    bool done = false;
  };

  HostFunctionThread() : thread_([this] { Loop(); }) { thread_.detach(); }

  void Loop() {
    while (true) {
      Call* call = nullptr;
      {
        MutexLock lock(&mu_);
        while (calls_.empty()) Wait(&changed_, &mu_);
        call = calls_.front();
        calls_.pop_front();
      }
      t_host_function_of = call->owner;
      (*call->fn)();
      t_host_function_of = nullptr;
      MutexLock lock(&mu_);
      call->done = true;
      changed_.SignalAll();
    }
  }

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::deque<Call*> calls_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// An event's counters live apart from the Event object, shared with the ops
// queued on it, so that destroying an Event with work pending is safe (as
// cudaEventDestroy is).
struct EventState {
  absl::Mutex mu;
  absl::CondVar done;
  uint64_t recorded ABSL_GUARDED_BY(mu) = 0;
  uint64_t completed ABSL_GUARDED_BY(mu) = 0;

  uint64_t NextRecord() {
    MutexLock lock(&mu);
    return ++recorded;
  }
  uint64_t Latest() {
    MutexLock lock(&mu);
    return recorded;
  }
  void Complete(uint64_t generation) {
    MutexLock lock(&mu);
    completed = std::max(completed, generation);
    done.SignalAll();
  }
  // Whether `generation` completed before `deadline`.
  bool WaitFor(uint64_t generation, Deadline deadline) {
    MutexLock lock(&mu);
    while (completed < generation) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      WaitWithTimeout(&done, &mu, left);
    }
    return true;
  }
};

class HostEvent : public Event {
 public:
  const std::shared_ptr<EventState>& state() const { return state_; }

  absl::StatusOr<bool> Query() override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Event::Query"));
    MutexLock lock(&state_->mu);
    return state_->completed >= state_->recorded;
  }
  absl::Status Synchronize(Deadline deadline) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Event::Synchronize"));
    if (state_->WaitFor(state_->Latest(), deadline)) return absl::OkStatus();
    return absl::DeadlineExceededError("host event: its latest record has not completed by the deadline");
  }

 private:
  const std::shared_ptr<EventState> state_ = std::make_shared<EventState>();
};

class HostStream : public Stream {
 public:
  HostStream() : thread_([this] { Run(); }) {}
  ~HostStream() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;  // event waits give up; the queued work still runs
      changed_.SignalAll();
    }
    thread_.join();
  }

  absl::Status Record(Event& event) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::Record"));
    auto* host = dynamic_cast<HostEvent*>(&event);
    if (host == nullptr) return absl::InvalidArgumentError("a host stream can record only a host event");
    std::shared_ptr<EventState> state = host->state();
    const uint64_t generation = state->NextRecord();
    return Enqueue([state, generation] { state->Complete(generation); });
  }
  absl::Status WaitEvent(Event& event) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::WaitEvent"));
    auto* host = dynamic_cast<HostEvent*>(&event);
    if (host == nullptr) return absl::InvalidArgumentError("a host stream can wait only for a host event");
    std::shared_ptr<EventState> state = host->state();
    const uint64_t generation = state->Latest();
    if (generation == 0) return absl::OkStatus();
    return Enqueue([this, state, generation] {
      while (!state->WaitFor(generation, DeadlineIn(kWaitSlice))) {
        if (Stopping()) return;
      }
    });
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::Copy"));
    return Enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  absl::Status Zero(void* dst, size_t bytes) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::Zero"));
    return Enqueue([dst, bytes] { std::memset(dst, 0, bytes); });
  }
  absl::Status Reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::Reduce"));
    const size_t bytes = count * DTypeSize(dtype);
    return Enqueue([=] {
      HostReduce(dtype, op, absl::MakeSpan(static_cast<std::byte*>(dst), bytes),
                 absl::MakeConstSpan(static_cast<const std::byte*>(a), bytes),
                 absl::MakeConstSpan(static_cast<const std::byte*>(b), bytes));
    });
  }
  absl::Status Divide(DType dtype, void* data, size_t count, int64_t divisor) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::Divide"));
    const size_t bytes = count * DTypeSize(dtype);
    return Enqueue([=] { HostDivide(dtype, absl::MakeSpan(static_cast<std::byte*>(data), bytes), divisor); });
  }
  absl::Status Cast(DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t count) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::Cast"));
    // Checked now (a host op never fails later); the conversion runs in order.
    const auto out = absl::MakeSpan(static_cast<std::byte*>(dst), count * DTypeSize(dst_dtype));
    const auto in = absl::MakeConstSpan(static_cast<const std::byte*>(src), count * DTypeSize(src_dtype));
    BRAID_RETURN_IF_ERROR(HostCast(dst_dtype, {}, src_dtype, {}));  // the dtypes
    return Enqueue([=] { (void)HostCast(dst_dtype, out, src_dtype, in); });
  }
  absl::Status HostFunc(std::function<void()> fn) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::HostFunc"));
    return Enqueue([this, fn = std::move(fn)]() mutable { HostFunctionThread::Get().Run(fn, &failure_); });
  }
  absl::Status Synchronize(Deadline deadline) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("Stream::Synchronize"));
    MutexLock lock(&mu_);
    const uint64_t target = queued_;
    while (ran_ < target) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(
            absl::StrCat("host stream: ", target - ran_, " queued operations still pending at the deadline"));
      }
      WaitWithTimeout(&changed_, &mu_, left);
    }
    return failure_.Get();
  }
  void* native() override { return nullptr; }

 private:
  absl::Status Enqueue(std::function<void()> op) {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(op));
    ++queued_;
    changed_.SignalAll();
    return absl::OkStatus();
  }
  bool Stopping() {
    MutexLock lock(&mu_);
    return stopping_;
  }
  void Run() {
    while (true) {
      std::function<void()> op;
      {
        MutexLock lock(&mu_);
        while (queue_.empty() && !stopping_) Wait(&changed_, &mu_);
        if (queue_.empty()) return;  // stopping, and everything queued has run
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      op();
      MutexLock lock(&mu_);
      ++ran_;
      changed_.SignalAll();
    }
  }

  absl::Mutex mu_;
  absl::CondVar changed_;  // queued, ran or stopping
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ran_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  StickyFailure failure_;  // a host function of this stream that called the device interface
  std::thread thread_;     // last: starts once the rest is built
};

class HostRuntime : public DeviceRuntime {
 public:
  const char* name() const override { return "host"; }
  Device device() const override { return Device::Cpu(); }
  Stream& DefaultStream() override { return default_stream_; }
  absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void*) override {
    return absl::UnimplementedError("the host runtime has no native streams to wrap");
  }
  absl::StatusOr<std::unique_ptr<Stream>> NewStream() override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("DeviceRuntime::NewStream"));
    return std::unique_ptr<Stream>(new HostStream());
  }
  absl::StatusOr<std::unique_ptr<Event>> NewEvent() override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("DeviceRuntime::NewEvent"));
    return std::unique_ptr<Event>(new HostEvent());
  }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    BRAID_RETURN_IF_ERROR(CheckNotInHostFunction("DeviceRuntime::Allocate"));
    void* memory = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (memory == nullptr) return absl::ResourceExhaustedError(absl::StrCat("host runtime: ", bytes, " bytes"));
    return memory;
  }
  void Free(void* memory) override {
    (void)CheckNotInHostFunction("DeviceRuntime::Free");  // fails the host function's stream
    std::free(memory);
  }

 private:
  HostStream default_stream_;
};

}  // namespace

DeviceRuntime& DeviceRuntime::Host() {
  static HostRuntime* runtime = new HostRuntime();
  return *runtime;
}

absl::StatusOr<DeviceRuntime*> DeviceRuntime::For(Device device) {
  if (device.is_cpu()) return &Host();
  return CudaRuntime(device.index);
}

#ifndef BRAID_WITH_CUDA
absl::StatusOr<DeviceRuntime*> CudaRuntime(int device_index) {
  return absl::FailedPreconditionError(
      absl::StrCat("no CUDA runtime for cuda:", device_index, ": this binary was built without --config=cuda"));
}
#endif

}  // namespace braid
