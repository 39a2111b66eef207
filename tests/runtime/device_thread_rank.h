// One thread rank of the tests that run the reducer on a stream
// communicator: a ProcessGroup over tcp met at 127.0.0.1:port (for the
// reducer's own small collectives) and a Communicator over the rank's
// LocalDeviceTransport (for the buckets), with one deadline for both.
#ifndef BRAID_TESTS_RUNTIME_DEVICE_THREAD_RANK_H_
#define BRAID_TESTS_RUNTIME_DEVICE_THREAD_RANK_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "collectives/transport/local_device_link.h"
#include "runtime/process_group.h"

namespace braid::testing {

struct DeviceThreadRank {
  std::unique_ptr<ProcessGroup> group;
  std::unique_ptr<Communicator> device_comm;
};

absl::StatusOr<DeviceThreadRank> MakeDeviceThreadRank(LocalDeviceLinks& links, int rank, int world, uint16_t port,
                                                      absl::Duration timeout);

}  // namespace braid::testing

#endif  // BRAID_TESTS_RUNTIME_DEVICE_THREAD_RANK_H_
