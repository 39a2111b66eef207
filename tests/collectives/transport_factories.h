// Every transport compiled in, by name, for the conformance suites.
#ifndef BRAID_TESTS_COLLECTIVES_TRANSPORT_FACTORIES_H_
#define BRAID_TESTS_COLLECTIVES_TRANSPORT_FACTORIES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/transport.h"

namespace braid::testing {

using TransportFactory = std::function<absl::StatusOr<std::unique_ptr<Transport>>(Bootstrap&, Deadline)>;

struct NamedTransport {
  std::string name;
  TransportFactory create;
  // What a communicator over it takes in the suites: thresholds that force
  // every path (window rounds, slices, peer access) at the suites' sizes.
  CommunicatorOptions communicator;
};

std::vector<NamedTransport> AllTransports();

}  // namespace braid::testing

#endif  // BRAID_TESTS_COLLECTIVES_TRANSPORT_FACTORIES_H_
