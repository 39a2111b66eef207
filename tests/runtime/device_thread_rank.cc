#include "tests/runtime/device_thread_rank.h"

#include <utility>

#include "base/status.h"
#include "runtime/worker_env.h"
#include "tests/collectives/device/local_device_transport.h"

namespace braid::testing {

absl::StatusOr<DeviceThreadRank> MakeDeviceThreadRank(LocalDeviceLinks& links, int rank, int world, uint16_t port,
                                                      absl::Duration timeout) {
  WorkerEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  ProcessGroupOptions pg;
  pg.transport = "tcp";
  pg.timeout = timeout;
  DeviceThreadRank out;
  BRAID_ASSIGN_OR_RETURN(out.group, ProcessGroup::Create(env, pg));
  CommunicatorOptions copts;
  copts.timeout = timeout;
  BRAID_ASSIGN_OR_RETURN(out.device_comm,
                         Communicator::Create(std::make_unique<LocalDeviceTransport>(links, rank, world), copts));
  return out;
}

}  // namespace braid::testing
