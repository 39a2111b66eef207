// LocalDeviceLinks: a DeviceLink (device_link.h) for `size` ranks that are
// threads of one process sharing one DeviceRuntime: the host runtime in CI,
// or one GPU's CUDA runtime, where several ranks share the GPU (NCCL refuses
// that). A message is one copy on the receiver's stream, straight from the
// sender's buffer: the receiver's stream waits for the sender's "ready" event
// (recorded on the sender's stream at GroupEnd), copies, and records
// "copied", which the sender's stream waits for before its later work.
//
// GroupEnd in three phases, so that no rank's host waits on anything but its
// peers' host calls: publish every send; take each receive's message (waiting
// for the peer to publish it) and queue wait-copy-record; then wait for each
// send's "copied" to be recorded and queue the wait for it.
#ifndef BRAID_COLLECTIVES_TRANSPORT_LOCAL_DEVICE_LINK_H_
#define BRAID_COLLECTIVES_TRANSPORT_LOCAL_DEVICE_LINK_H_

#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "collectives/transport/device_link.h"
#include "tensor/stream.h"

namespace braid {

class LocalDeviceLinks {
 public:
  LocalDeviceLinks(DeviceRuntime& runtime, int size);
  ~LocalDeviceLinks();
  LocalDeviceLinks(const LocalDeviceLinks&) = delete;
  LocalDeviceLinks& operator=(const LocalDeviceLinks&) = delete;

  // Rank `rank`'s link; lives as long as this object.
  DeviceLink& link(int rank);
  // Every rank's waits fail with `cause` from now on (a rank that aborts
  // takes the others' pending exchanges with it, as a dead peer would).
  void Abort(int rank, const absl::Status& cause);

 private:
  class Link;
  struct Message;
  friend class Link;

  DeviceRuntime& runtime_;
  const int size_;
  std::vector<std::unique_ptr<Link>> links_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // a message published, or its "copied" recorded
  // [sender * size + receiver]: published messages not yet taken, in order.
  std::vector<std::deque<std::shared_ptr<Message>>> mailboxes_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_LOCAL_DEVICE_LINK_H_
