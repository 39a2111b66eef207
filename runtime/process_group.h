// ProcessGroup: what a worker process uses to join its job.
//
//   BRAID_ASSIGN_OR_RETURN(auto group, braid::InitFromEnv());
//   BRAID_ASSIGN_OR_RETURN(auto work, group->comm().AllReduce(grads, braid::ReduceOp::kAvg));
//   BRAID_RETURN_IF_ERROR(work->Wait());
//
// Create connects to the rendezvous store (the launcher's, BRAID_STORE_ADDR,
// or one that rank 0 hosts on MASTER_ADDR:MASTER_PORT; under mpirun without
// a launcher's store, one rank 0 hosts on any port and announces over MPI),
// picks the transport (the registry's ChooseTransport,
// collectives/transport/registry.h: BRAID_TRANSPORT, auto by default),
// connects it through a bootstrap (over MPI under mpirun, else over the
// store), and wraps it in a Communicator. It is collective: every rank calls it; it blocks until the
// group is up or the timeout (BRAID_TIMEOUT_SEC) passes, naming the ranks
// that never arrived.
//
// Tensors on two devices, as torch's ProcessGroup dispatches per tensor
// device (cpu -> gloo, cuda -> nccl): CommFor(tensor.device()) gives the
// communicator for a tensor. comm() is the one Create set up (mpi, shm or
// tcp; or nccl when BRAID_TRANSPORT=nccl) and takes CPU tensors. With the
// transport left to auto in a --config=cuda build, the first CommFor of a
// CUDA device creates, collectively, an NCCL communicator on that GPU (over
// the same store, bounded by the timeout) and CUDA tensors go to it from then
// on; when NCCL cannot be had there (two ranks share a GPU, which NCCL
// refuses; a rank has no such GPU; NCCL's init fails on any rank), every rank
// logs one line and CUDA tensors go to comm(), which stages them through
// pinned host memory (communicator.h). With BRAID_TRANSPORT set to mpi, shm
// or tcp, CUDA tensors always take that transport, staged; in a build without
// --config=cuda, comm() refuses CUDA tensors with a message saying so.
#ifndef BRAID_RUNTIME_PROCESS_GROUP_H_
#define BRAID_RUNTIME_PROCESS_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "base/auth.h"
#include "collectives/communicator.h"
#include "collectives/transport/bootstrap.h"
#include "store/store.h"
#include "store/tcp_store.h"
#include "runtime/worker_env.h"
#include "tensor/device.h"

namespace braid {

struct ProcessGroupOptions {
  // Rendezvous and per-collective deadline; default BRAID_TIMEOUT_SEC.
  absl::optional<absl::Duration> timeout;
  // "auto", "mpi", "shm", "tcp" or "nccl" (--config=cuda); empty = BRAID_TRANSPORT (default auto).
  std::string transport;
  CommunicatorOptions communicator;
  // A store of the caller's to meet over (the torch backend passes torch's
  // c10d store): no store is hosted or connected, and MPI does not bootstrap.
  std::shared_ptr<Store> store;
  // Polled while the transport connects (Bootstrap::CalledOff): an error ends
  // the set-up with it. ElasticGroup's: the epoch being built was revoked.
  std::function<absl::Status()> called_off;
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
  // The group's timeout (ResolveTimeout of its options): what its
  // communicators and reducers wait at most, unless given their own.
  absl::Duration timeout() const { return timeout_; }
  Communicator& comm() { return *comm_; }
  // The communicator for tensors on `device` (see the top): comm() for the
  // CPU; for a CUDA device, the NCCL communicator when there is one, else
  // comm() (host staging). The first call for a CUDA device with the
  // transport on auto (--config=cuda) is COLLECTIVE: every rank must make it,
  // at the same point of its sequence of collectives, as torch creates its
  // NCCL communicator at the first CUDA collective; it blocks until NCCL is up
  // or given up on, at most the timeout. kInvalidArgument for a CUDA device
  // other than the one the NCCL communicator was created on (one GPU per
  // process, as torch's NCCL backend). Thread-safe.
  absl::StatusOr<Communicator*> CommFor(Device device);
  // Whether CUDA tensors go to an NCCL communicator (false before the first
  // CommFor of a CUDA device, and after a fallback to host staging).
  bool has_device_comm();
  // Subgroups of comm() (Communicator::Split and NewGroup; collective):
  // over shared memory for ranks of one host when the transport was auto's
  // choice, else over the group's own transport (mpi: MPI_Comm_split).
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, std::string name = "") {
    return comm_->Split(color, key, std::move(name));
  }
  absl::StatusOr<std::unique_ptr<Communicator>> NewGroup(std::vector<int> ranks, std::string name = "") {
    return comm_->NewGroup(std::move(ranks), std::move(name));
  }
  // This job's namespace in the store, for the caller's own keys.
  Store& store() { return *store_; }

 private:
  ProcessGroup() = default;
  absl::Status SetUp(ProcessGroupOptions options);
  // Rank 0 hosts the job's store on MASTER_PORT (server_); `hint` ends the error.
  absl::Status HostStore(const JobSecret& secret, absl::string_view hint);
  // Creates device_comm_ on `device`, or leaves it null (a fallback, logged)
  // when NCCL cannot be had; an error only when the ranks cannot agree (one
  // never arrives before the deadline).
  absl::Status CreateDeviceComm(Device device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(device_mu_);

  WorkerEnv env_;
  absl::Duration timeout_;
  std::unique_ptr<StoreServer> server_;  // rank 0 without a launcher store
  std::shared_ptr<Store> store_;
  std::unique_ptr<Communicator> comm_;
  CommunicatorOptions comm_options_;
  // BRAID_TRANSPORT (or the options) left the choice to auto.
  bool auto_transport_ = false;

  absl::Mutex device_mu_;
  // Decided at the first CommFor of a CUDA device: the NCCL communicator on
  // device_ (null after a fallback to host staging).
  bool device_decided_ ABSL_GUARDED_BY(device_mu_) = false;
  Device device_ ABSL_GUARDED_BY(device_mu_);
  std::unique_ptr<Communicator> device_comm_ ABSL_GUARDED_BY(device_mu_);
  // This rank took part in the device bootstrap (its store keys): rank 0,
  // hosting the store, waits for the others to be done with them.
  bool device_bootstrapped_ ABSL_GUARDED_BY(device_mu_) = false;
};

// ReadWorkerEnv() + ProcessGroup::Create.
absl::StatusOr<std::unique_ptr<ProcessGroup>> InitFromEnv(ProcessGroupOptions options = {});

}  // namespace braid

#endif  // BRAID_RUNTIME_PROCESS_GROUP_H_
