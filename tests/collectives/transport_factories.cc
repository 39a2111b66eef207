#include "tests/collectives/transport_factories.h"

#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/tcp_transport.h"

namespace braid::testing {

std::vector<NamedTransport> AllTransports() {
  return {
      {"tcp",
       [](Bootstrap& bootstrap, Deadline deadline) -> absl::StatusOr<std::unique_ptr<Transport>> {
         auto transport = TcpTransport::Create(bootstrap, deadline);
         if (!transport.ok()) return transport.status();
         return std::unique_ptr<Transport>(std::move(*transport));
       }},
      {"shm",
       [](Bootstrap& bootstrap, Deadline deadline) -> absl::StatusOr<std::unique_ptr<Transport>> {
         auto transport = ShmTransport::Create(bootstrap, deadline);
         if (!transport.ok()) return transport.status();
         return std::unique_ptr<Transport>(std::move(*transport));
       }},
  };
}

}  // namespace braid::testing
