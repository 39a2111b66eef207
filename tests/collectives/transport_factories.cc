#include "tests/collectives/transport_factories.h"

#include "collectives/transport/registry.h"

namespace braid::testing {
namespace {

// The registry's entry `name` with `settings`, as the suites create it.
TransportFactory FromRegistry(const char* name, TransportSettings settings) {
  const TransportEntry* entry = FindTransport(name);
  return [entry, settings](Bootstrap& bootstrap, Deadline deadline) {
    return entry->create(bootstrap, deadline, settings);
  };
}

// Shared windows of one page: the window all-reduce runs several rounds at
// the suite's sizes; or, where the machine allows cross-memory copies, the
// peer-access paths run.
TransportSettings SmallWindows(bool peer_access) {
  TransportSettings settings;
  settings.shm.emplace();
  settings.shm->window_half_bytes = 4096;
  settings.shm->peer_access = peer_access;
  return settings;
}

TransportSettings PlainTcp() {
  TransportSettings settings;
  settings.tcp.emplace();
  return settings;
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
  return {{"tcp", FromRegistry("tcp", PlainTcp()), {}},
          {"shm", FromRegistry("shm", SmallWindows(/*peer_access=*/true)), SmallThresholds()},
          {"shm (windows copied in)", FromRegistry("shm", SmallWindows(/*peer_access=*/false)), SmallThresholds()}};
}

}  // namespace braid::testing
