// ProcessGroup: what a worker process uses to join its job.
//
//   BRAID_ASSIGN_OR_RETURN(auto group, braid::InitFromEnv());
//   BRAID_ASSIGN_OR_RETURN(auto work, group->comm().AllReduce(grads, braid::ReduceOp::kAvg));
//   BRAID_RETURN_IF_ERROR(work->Wait());
//
// Create connects to the rendezvous store (the launcher's, BRAID_STORE_ADDR,
// or one that rank 0 hosts on MASTER_ADDR:MASTER_PORT; under mpirun without
// a launcher's store, one rank 0 hosts on any port and announces over MPI),
// picks the transport (ChooseTransport: BRAID_TRANSPORT, auto by default),
// connects it through a bootstrap (over MPI under mpirun, else over the
// store), and wraps it in a Communicator. It is collective: every rank calls it; it blocks until the
// group is up or the timeout (BRAID_TIMEOUT_SEC) passes, naming the ranks
// that never arrived.
#ifndef BRAID_RUNTIME_PROCESS_GROUP_H_
#define BRAID_RUNTIME_PROCESS_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "collectives/bootstrap.h"
#include "collectives/communicator.h"
#include "runtime/store/store.h"
#include "runtime/store/tcp_store.h"
#include "runtime/worker_env.h"

namespace braid {

struct ProcessGroupOptions {
  // Rendezvous and per-collective deadline; default BRAID_TIMEOUT_SEC.
  absl::optional<absl::Duration> timeout;
  // "auto", "mpi", "shm", "tcp" or "nccl" (--config=cuda); empty = BRAID_TRANSPORT (default auto).
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

// The transport a group uses for `requested` (BRAID_TRANSPORT's value, any
// case): auto = mpi under mpirun (OMPI_COMM_WORLD_SIZE set), else shm when
// every rank's host name is the same (a collective AllGather over
// `bootstrap`), else tcp. Asking for mpi outside mpirun is
// kFailedPrecondition saying so; nccl (CUDA tensors, on GPU LOCAL_RANK) only
// when asked for, and kUnimplemented in a build without --config=cuda; auto
// never picks nccl, since an nccl communicator takes only CUDA tensors. An
// unknown name is kInvalidArgument.
absl::StatusOr<std::string> ChooseTransport(absl::string_view requested, Bootstrap& bootstrap, Deadline deadline);

// ReadWorkerEnv() + ProcessGroup::Create.
absl::StatusOr<std::unique_ptr<ProcessGroup>> InitFromEnv(ProcessGroupOptions options = {});

}  // namespace braid

#endif  // BRAID_RUNTIME_PROCESS_GROUP_H_
