// Streams and events: the device interface that braid's stream-ordered code
// is written against (issue 16: CUDA collectives ordered on the caller's
// stream, braid's algorithms on device memory, the reducer's event graph).
//
//   BRAID_ASSIGN_OR_RETURN(DeviceRuntime* rt, DeviceRuntime::For(device));
//   BRAID_ASSIGN_OR_RETURN(auto comm_stream, rt->NewStream());
//   BRAID_ASSIGN_OR_RETURN(auto ready, rt->NewEvent());
//   BRAID_RETURN_IF_ERROR(producer.Record(*ready));        // after what the producer queued
//   BRAID_RETURN_IF_ERROR(comm_stream->WaitEvent(*ready));  // the collective's work waits for it
//
// Semantics (CUDA's): a Stream runs what is queued on it in order,
// asynchronously to the host. Record(e) makes e complete once everything
// queued on the stream before it has run; WaitEvent(e) makes everything
// queued on the stream after it wait for the Record of e that was the latest
// when WaitEvent was called (an event never recorded is complete). Nothing
// queued ever blocks the calling host thread; Synchronize and
// Event::Synchronize block it, up to a deadline.
//
// Two implementations of this one interface, so that the code above it is the
// same on a GPU and in CI without one:
//  - cuda (stream_cuda.cc, --config=cuda): cudaStream_t, cudaEvent_t
//    (timing off), cudaMemcpyAsync (cudaMemcpyDefault: any memory the
//    device can address), braid's reduction kernels, cudaLaunchHostFunc;
//  - host (stream_host.cc): one thread per stream running its queue in
//    order, events as generation counters, "device memory" is host memory,
//    the host reduction kernels.
// Both run the host functions of every stream on one thread (CUDA's driver
// thread; the host runtime's own), in the order the streams reach them, the
// stream waiting for its own; a host function that calls into any Stream,
// Event or DeviceRuntime is an error (the host runtime fails that call and
// every later Synchronize of the host function's stream). Where they differ: a host stream's queue is
// unbounded; CUDA's ops run on the GPU. A failed op (a CUDA error; a host op never
// fails) makes the stream's later calls and Synchronize return it.
//
// Threads: a Stream may be used from several threads (calls are ordered by
// when they enter); an Event likewise.
#ifndef BRAID_TENSOR_STREAM_H_
#define BRAID_TENSOR_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/deadline.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {

class Event {
 public:
  // May be destroyed with Records or waits still queued (as cudaEventDestroy).
  virtual ~Event() = default;
  // Whether the latest Record has completed (true when never recorded).
  virtual absl::StatusOr<bool> Query() = 0;
  // Blocks the calling thread until the latest Record (as of this call) has
  // completed; kDeadlineExceeded at `deadline`.
  virtual absl::Status Synchronize(Deadline deadline) = 0;
};

class Stream {
 public:
  // Waits for the work already queued to finish.
  virtual ~Stream() = default;
  virtual absl::Status Record(Event& event) = 0;
  virtual absl::Status WaitEvent(Event& event) = 0;
  // bytes from src to dst (any memory the runtime's device can address).
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // bytes of zeros at dst.
  virtual absl::Status Zero(void* dst, size_t bytes) = 0;
  // dst[i] = a[i] op b[i], `count` elements; dst may equal a or b.
  virtual absl::Status Reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) = 0;
  // data[i] /= divisor (avg).
  virtual absl::Status Divide(DType dtype, void* data, size_t count, int64_t divisor) = 0;
  // dst[i] = src[i] converted (between f32, f64, f16 and bf16; round to
  // nearest even), `count` elements; no overlap.
  virtual absl::Status Cast(DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t count) = 0;
  // Runs `fn` on the host when the stream reaches it, on the one thread that
  // runs every stream's host functions; later work on this stream waits for
  // it. `fn` must not call into any Stream, Event or DeviceRuntime, nor wait
  // for other device work (CUDA forbids both in host functions).
  virtual absl::Status HostFunc(std::function<void()> fn) = 0;
  // Blocks until everything queued so far has run; the first failure of an
  // op, or kDeadlineExceeded at `deadline`.
  virtual absl::Status Synchronize(Deadline deadline) = 0;
  // The cudaStream_t, or null for a host stream.
  virtual void* native() = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // The host runtime (always there) or the CUDA runtime of `device`
  // (kFailedPrecondition without --config=cuda or without that GPU).
  static absl::StatusOr<DeviceRuntime*> For(Device device);
  static DeviceRuntime& Host();

  virtual const char* name() const = 0;  // "host", "cuda:0"
  // Where its memory lives: Device::Cpu() for the host runtime.
  virtual Device device() const = 0;
  // The stream work goes on when a caller names none: CUDA's legacy default
  // stream (as torch's current stream by default), or one host stream of
  // the process. Lives as long as the runtime.
  virtual Stream& DefaultStream() = 0;
  // A Stream over a caller's native stream (a cudaStream_t), not owned: it
  // must outlive the wrapper. kUnimplemented for the host runtime.
  virtual absl::StatusOr<std::unique_ptr<Stream>> WrapStream(void* native) = 0;
  virtual absl::StatusOr<std::unique_ptr<Stream>> NewStream() = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> NewEvent() = 0;
  // Memory the runtime's streams work on: device memory (cudaMalloc), or
  // host memory for the host runtime. Free(nullptr) does nothing.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* memory) = 0;
};

// The CUDA runtime of `device_index` (stream_cuda.cc; --config=cuda only).
absl::StatusOr<DeviceRuntime*> CudaRuntime(int device_index);

}  // namespace braid

#endif  // BRAID_TENSOR_STREAM_H_
