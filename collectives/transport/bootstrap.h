// Bootstrap: how transports find each other. A tiny collective — every rank
// contributes a few bytes (an address, a segment name) and gets everyone's —
// that runtime/ implements over the rendezvous store (or over MPI under
// mpirun), and tests implement over their harness. Transports see only this,
// never the store.
#ifndef BRAID_COLLECTIVES_TRANSPORT_BOOTSTRAP_H_
#define BRAID_COLLECTIVES_TRANSPORT_BOOTSTRAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/deadline.h"

namespace braid {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: every rank calls it, in the same order. Blocks until every
  // rank's bytes have arrived, returned in rank order, or until `deadline`.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline deadline) = 0;
  // Whether the group being set up was called off (an elastic epoch revoked
  // because a member died): transports ask between the slices of the waits
  // they make after the exchange (connecting, accepting), and end the set-up
  // with this error rather than at the deadline. Never blocks long.
  virtual absl::Status CalledOff() { return absl::OkStatus(); }
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_BOOTSTRAP_H_
