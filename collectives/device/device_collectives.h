// DeviceCollectives: a communicator's collectives on device memory, queued
// on streams over a DeviceLink (issue 16's stream-ordered collectives). The
// communicator hands a collective here instead of running it on the host.
//
// Ordering, as torch's ProcessGroupNCCL: Ready() records an event on the
// caller's stream when the call is issued (so the collective reads what
// that stream's earlier work wrote, never a stale input); Run() makes the
// communication stream wait for it, queues the collective there (the
// engine's own, or braid's program by StreamExecutor), records the done
// event that Work::WaitStream hands to a consumer stream. braid's own
// completer thread waits for those events in order and completes each Work:
// no host function on any stream (CUDA runs every stream's host functions
// on one thread, where a user's blocking one would hold braid back). The
// calling thread never waits for the device on this path.
//
// Deadlines and errors: a watchdog thread looks every 100 ms at the link's
// AsyncError (NCCL's ncclCommGetAsyncError) and at every queued
// collective's deadline; the first failure goes to `on_failure` (the
// communicator's Abort, which calls Abort here: the link is aborted, which
// for NCCL is ncclCommAbort, and every queued collective fails with the
// cause naming it).
//
// Threads: Ready from any thread; Run and GatherBytes from the thread that
// runs the communicator's tasks, one at a time; Abort from any.
#ifndef BRAID_COLLECTIVES_DEVICE_DEVICE_COLLECTIVES_H_
#define BRAID_COLLECTIVES_DEVICE_DEVICE_COLLECTIVES_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/device/stream_executor.h"
#include "collectives/selection.h"
#include "collectives/transport/device_link.h"
#include "collectives/transport/frame.h"
#include "tensor/device.h"
#include "tensor/stream.h"

namespace braid {

class DeviceCollectives {
 public:
  using OnFailure = std::function<void(const absl::Status&)>;
  using OnDone = std::function<void(absl::Status)>;

  static absl::StatusOr<std::unique_ptr<DeviceCollectives>> Create(DeviceLink& link, OnFailure on_failure);
  // Waits (bounded) for what is queued, then stops the watchdog.
  ~DeviceCollectives();

  Device device() const { return link_.runtime().device(); }
  DeviceRuntime& runtime() const { return link_.runtime(); }
  DeviceLink& link() const { return link_; }

  // An event recorded now on `stream` (null: the runtime's default stream).
  absl::StatusOr<std::shared_ptr<Event>> Ready(Stream* stream);
  // Queues the collective `args` with `algorithm` (a program's, kNative, or
  // kP2p with `peer`) after `ready`. `done` is called once: OK when the
  // device finished it, or the failure (its deadline, an abort). Returns the
  // event recorded after it on the communication stream.
  absl::StatusOr<std::shared_ptr<Event>> Run(Algorithm algorithm, const CollectiveArgs& args, int peer,
                                             const void* input, void* output, Event& ready, OnDone done);
  // Every rank's `mine` into `all` (host memory, rank order), blocking until
  // the device is done: the agreement check's exchange.
  absl::Status GatherBytes(const CollectiveArgs& args, absl::Span<const std::byte> mine, absl::Span<std::byte> all);
  void Abort(const absl::Status& cause);

 private:
  struct State;
  DeviceCollectives(DeviceLink& link, OnFailure on_failure);
  void Watch();
  void CompleteInOrder();

  DeviceLink& link_;
  const OnFailure on_failure_;
  std::unique_ptr<Stream> stream_;  // the communication stream
  std::unique_ptr<StreamExecutor> executor_;
  // Small device buffers of the agreement check.
  void* gather_ = nullptr;
  size_t gather_bytes_ = 0;
  std::shared_ptr<State> state_;
  std::thread watchdog_;
  std::thread completer_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_DEVICE_DEVICE_COLLECTIVES_H_
