#include "tests/collectives/transport_factories.h"

#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/tcp_transport.h"

namespace braid::testing {
namespace {

// T::Create(bootstrap, deadline) with default options, as a Transport.
template <typename T>
TransportFactory FactoryOf() {
  return [](Bootstrap& bootstrap, Deadline deadline) -> absl::StatusOr<std::unique_ptr<Transport>> {
    auto transport = T::Create(bootstrap, deadline);
    if (!transport.ok()) return transport.status();
    return std::unique_ptr<Transport>(std::move(*transport));
  };
}

}  // namespace

std::vector<NamedTransport> AllTransports() {
  return {{"tcp", FactoryOf<TcpTransport>()}, {"shm", FactoryOf<ShmTransport>()}};
}

}  // namespace braid::testing
