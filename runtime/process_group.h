// ProcessGroup: what a worker process uses to join its job.
//
//   BRAID_ASSIGN_OR_RETURN(auto group, braid::InitFromEnv());
//   BRAID_ASSIGN_OR_RETURN(auto work, group->comm().AllReduce(grads, braid::ReduceOp::kAvg));
//   BRAID_RETURN_IF_ERROR(work->Wait());
//
// Create connects to the rendezvous store (the launcher's, BRAID_STORE_ADDR,
// or one that rank 0 hosts on MASTER_ADDR:MASTER_PORT), picks the transport
// (BRAID_TRANSPORT=auto|shm|tcp; auto = shm when every rank is on this host,
// else tcp), connects it through a store bootstrap, and wraps it in a
// Communicator. It is collective: every rank calls it; it blocks until the
// group is up or the timeout (BRAID_TIMEOUT_SEC) passes, naming the ranks
// that never arrived.
#ifndef BRAID_RUNTIME_PROCESS_GROUP_H_
#define BRAID_RUNTIME_PROCESS_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "collectives/communicator.h"
#include "runtime/store/store.h"
#include "runtime/store/tcp_store.h"
#include "runtime/worker_env.h"

namespace braid {

struct ProcessGroupOptions {
  // Rendezvous and per-collective deadline; default BRAID_TIMEOUT_SEC.
  absl::optional<absl::Duration> timeout;
  // "auto", "shm" or "tcp"; empty = BRAID_TRANSPORT (default auto).
  std::string transport;
  CommunicatorOptions communicator;
};

class ProcessGroup {
 public:
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(const WorkerEnv& env, ProcessGroupOptions options = {});
  // Stops the communicator. Rank 0, when it hosts the store, first waits
  // briefly (at most 10 s) for the others to be done with it.
  ~ProcessGroup();

  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  const WorkerEnv& env() const { return env_; }
  Communicator& comm() { return *comm_; }
  // This job's namespace in the store, for the caller's own keys.
  Store& store() { return *store_; }

 private:
  ProcessGroup() = default;
  absl::Status SetUp(ProcessGroupOptions options);

  WorkerEnv env_;
  absl::Duration timeout_;
  std::unique_ptr<StoreServer> server_;  // rank 0 without a launcher store
  std::shared_ptr<Store> store_;
  std::unique_ptr<Communicator> comm_;
};

// ReadWorkerEnv() + ProcessGroup::Create.
absl::StatusOr<std::unique_ptr<ProcessGroup>> InitFromEnv(ProcessGroupOptions options = {});

}  // namespace braid

#endif  // BRAID_RUNTIME_PROCESS_GROUP_H_
