#include "tests/collectives/transport_factories.h"

#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/tcp_transport.h"

namespace braid::testing {
namespace {

// T::Create(bootstrap, deadline, options), as a Transport.
template <typename T, typename Options>
TransportFactory FactoryOf(Options options) {
  return [options](Bootstrap& bootstrap, Deadline deadline) -> absl::StatusOr<std::unique_ptr<Transport>> {
    auto transport = T::Create(bootstrap, deadline, options);
    if (!transport.ok()) return transport.status();
    return std::unique_ptr<Transport>(std::move(*transport));
  };
}

// Shared windows of one page: the window all-reduce runs several rounds at
// the suite's sizes; or, where the machine allows cross-memory copies, the
// peer-access paths run.
ShmTransportOptions SmallWindows(bool peer_access) {
  ShmTransportOptions options;
  options.window_half_bytes = 4096;
  options.peer_access = peer_access;
  return options;
}

// Rounds above 1 KiB split in slices, and peer access at every size.
CommunicatorOptions SmallThresholds() {
  CommunicatorOptions options;
  options.thresholds.window_whole_round_bytes = 1024;
  options.thresholds.peer_access_min_slice_bytes = 0;
  return options;
}

}  // namespace

std::vector<NamedTransport> AllTransports() {
  return {{"tcp", FactoryOf<TcpTransport>(TcpTransportOptions{}), {}},
          {"shm", FactoryOf<ShmTransport>(SmallWindows(/*peer_access=*/true)), SmallThresholds()},
          {"shm (windows copied in)", FactoryOf<ShmTransport>(SmallWindows(/*peer_access=*/false)), SmallThresholds()}};
}

}  // namespace braid::testing
