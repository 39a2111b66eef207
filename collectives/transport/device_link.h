// DeviceLink: point-to-point messages between the ranks of a group, queued on
// streams (tensor/stream.h), with the semantics of NCCL's ncclSend/ncclRecv
// inside ncclGroupStart/ncclGroupEnd. The step every device algorithm of
// issue 16 is built from (braid's ring, tree and rhd on device memory).
//
//   link.GroupStart();
//   BRAID_RETURN_IF_ERROR(link.Send(right, chunk, bytes, stream));
//   BRAID_RETURN_IF_ERROR(link.Recv(left, scratch, bytes, stream));
//   BRAID_RETURN_IF_ERROR(link.GroupEnd(deadline));
//   BRAID_RETURN_IF_ERROR(stream.Reduce(...));   // after the receive, on the stream
//
// Between GroupStart and GroupEnd a rank lists its sends and receives; none
// of them blocks. GroupEnd queues the transfers on the streams given: a send
// reads its buffer after everything queued on its stream before the Send,
// and the stream's later work waits until the peer has copied it (so the
// buffer may be overwritten right after, on that stream); a receive's buffer
// holds the message for the stream's later work. The sends and receives of
// one group progress together (a ring step's send and receive cannot
// deadlock). Messages between two ranks match in order; sizes must match
// (kInvalidArgument naming both ranks). GroupEnd blocks the host only until
// the peers have listed their matching calls, never for the device, and at
// most until `deadline` (kDeadlineExceeded naming the peer that never came).
//
// Implementations: LocalDeviceLinks (local_device_link.h: thread ranks of one
// process on one runtime; CI's host runtime, or several ranks on one GPU,
// which NCCL refuses) and NcclDeviceLink (nccl/nccl_device_link.h: ncclSend
// and ncclRecv, and NCCL's own collectives on the stream as Native).
//
// Threads: each rank's link is used by one thread; Abort and AsyncError
// from any.
#ifndef BRAID_COLLECTIVES_TRANSPORT_DEVICE_LINK_H_
#define BRAID_COLLECTIVES_TRANSPORT_DEVICE_LINK_H_

#include <cstddef>

#include "absl/status/status.h"
#include "base/deadline.h"
#include "collectives/transport/frame.h"
#include "tensor/stream.h"

namespace braid {

class DeviceLink {
 public:
  virtual ~DeviceLink() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void GroupStart() = 0;
  virtual absl::Status Send(int peer, const void* data, size_t bytes, Stream& stream) = 0;
  virtual absl::Status Recv(int peer, void* data, size_t bytes, Stream& stream) = 0;
  virtual absl::Status GroupEnd(Deadline deadline) = 0;

  // The runtime whose streams and memory the link works on.
  virtual DeviceRuntime& runtime() = 0;
  // Makes this rank's pending and later calls fail with `cause` (NCCL:
  // ncclCommAbort, which also stops its kernels). Any thread.
  virtual void Abort(const absl::Status& cause) = 0;
  // An error the engine found on its own since the last call (NCCL's
  // ncclCommGetAsyncError: a peer gone); OK otherwise. Any thread.
  virtual absl::Status AsyncError() { return absl::OkStatus(); }

  // The engine's own collective (NCCL's), queued on `stream` with the
  // NativeCollectives contract (native_collectives.h): same buffers, sizes
  // and avg. kUnimplemented where the link has none.
  virtual bool has_native() const { return false; }
  virtual const char* native_name() const { return "none"; }
  virtual absl::Status Native(const CollectiveArgs& args, const void* input, void* output, Stream& stream) {
    return absl::UnimplementedError("this device link has no collectives of its own");
  }
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_DEVICE_LINK_H_
