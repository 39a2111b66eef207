// The job's store and secret, as one agent sets them up before the
// rendezvous: the store hosted by this agent (a private one on a free port
// for a single node, or on the endpoint when this agent is the host) or
// reached at the endpoint; the secret from BRAID_JOB_SECRET(_FILE), or made
// up for a single-node job. Called once, from the agent's thread, before any
// other thread starts (SetUpSecret exports what it makes).
#ifndef BRAID_LAUNCHER_JOB_STORE_H_
#define BRAID_LAUNCHER_JOB_STORE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/auth.h"
#include "base/deadline.h"
#include "base/socket.h"
#include "launcher/options.h"
#include "store/tcp_store.h"

namespace braid {

struct JobStore {
  std::unique_ptr<StoreServer> server;  // null when another agent hosts it
  std::shared_ptr<Store> client;
  HostPort address;  // what workers and other agents connect to
};

// The job's secret: BRAID_JOB_SECRET(_FILE) when given (every node of a
// multi-node job needs the same one), else a fresh one for a single-node job,
// exported (setenv) so the workers inherit it. A multi-node job without one
// runs unauthenticated; `*warning` then says so (else it is left empty).
absl::StatusOr<JobSecret> SetUpSecret(const LaunchOptions& o, std::string* warning);

// Hosts the store where `o` says this agent may, then connects to it; blocks
// until `deadline` for a store another agent hosts. kUnavailable naming the
// address (and why hosting it here failed, if it did) when it cannot be
// reached; kCancelled when `interrupted` (asked every second or so) says so.
absl::StatusOr<JobStore> OpenStore(const LaunchOptions& o, const JobSecret& secret, Deadline deadline,
                                   const std::function<bool()>& interrupted);

}  // namespace braid

#endif  // BRAID_LAUNCHER_JOB_STORE_H_
