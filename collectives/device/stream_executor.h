// StreamExecutor: runs a Plan (program.h) over a DeviceLink, queued on
// streams: the host only lists each step's sends and receives and queues
// its reductions; it never waits for the device.
//
// Lanes run on the executor's own streams (kStreams of them, created once),
// kStreams lanes at a time, their ops interleaved by index, so one lane's
// reduction overlaps another's transfer. The lanes start after the work
// queued on the caller's `stream` before Run (an event recorded there), and
// `stream`'s later work waits for all of them (one event per lane stream).
// A plan of one lane runs on `stream` itself. Scratch is allocated from the
// link's runtime once per executor (kStreams slots), grown when a larger
// plan comes (after the streams drain), never freed per call.
//
// Threads: one Run at a time (the communicator's running task).
#ifndef BRAID_COLLECTIVES_DEVICE_STREAM_EXECUTOR_H_
#define BRAID_COLLECTIVES_DEVICE_STREAM_EXECUTOR_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/programs/program.h"
#include "collectives/transport/device_link.h"
#include "collectives/transport/frame.h"
#include "tensor/stream.h"

namespace braid {

class StreamExecutor {
 public:
  static constexpr int kStreams = 4;

  static absl::StatusOr<std::unique_ptr<StreamExecutor>> Create(DeviceLink& link);
  // Waits for the streams' work (bounded), then frees the scratch.
  ~StreamExecutor();

  // Queues `plan` for `args` (dtype, op, deadline of the host-side waits for
  // the peers) on `stream`; input and output are memory of the link's
  // runtime (either may be null where the plan does not touch it).
  absl::Status Run(const Plan& plan, const CollectiveArgs& args, const void* input, void* output, Stream& stream);

 private:
  explicit StreamExecutor(DeviceLink& link) : link_(link), runtime_(link.runtime()) {}
  absl::Status Grow(size_t slot_bytes, Deadline deadline);
  absl::Status RunOp(const Op& op, const CollectiveArgs& args, const void* input, void* output, std::byte* scratch,
                     Stream& stream);

  DeviceLink& link_;
  DeviceRuntime& runtime_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unique_ptr<Event> fork_;
  std::vector<std::unique_ptr<Event>> joins_;
  void* scratch_ = nullptr;
  size_t slot_bytes_ = 0;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_DEVICE_STREAM_EXECUTOR_H_
