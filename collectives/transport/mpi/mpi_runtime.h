// The process-wide Open MPI runtime, as braid uses it: starting it once under
// mpirun, the bootstrap over it, and the polite polling every MPI wait in
// braid goes through.
//
// braid never calls a blocking MPI function that could wait on a peer: every
// wait is a nonblocking call (MPI_Isend, MPI_Iallgather, MPI_Comm_idup, ...)
// completed with MPI_Test under a deadline, because Open MPI 4.1 offers no
// other way to give up on a peer that never answers. MPI_Test is also what
// drives Open MPI's progress, so the poll loop keeps calling it, yielding the
// core between calls and then sleeping (up to MpiPoller's cap) once nothing
// has moved for a while: with more ranks than cores a pure busy-wait would
// starve the peer it waits for.
//
// Threads: MPI is started at MPI_THREAD_SERIALIZED. Callers guarantee that
// one thread at a time is inside MPI (the communicator's progress thread and
// the inline caller are serialized by the communicator; setup runs before).
#ifndef BRAID_COLLECTIVES_TRANSPORT_MPI_MPI_RUNTIME_H_
#define BRAID_COLLECTIVES_TRANSPORT_MPI_MPI_RUNTIME_H_

// The C API only: Open MPI's deprecated C++ bindings do not compile cleanly under -Werror.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "collectives/transport/bootstrap.h"

namespace braid {

// True when this process was started by Open MPI's mpirun (its
// OMPI_COMM_WORLD_SIZE is set), whatever else the environment says.
bool UnderMpirun();

// Starts MPI (MPI_Init_thread at MPI_THREAD_SERIALIZED) unless it already
// runs, and arranges MPI_Finalize at exit for a runtime braid started. Outside
// mpirun: kFailedPrecondition saying so (braid does not use Open MPI's
// singleton mode). kFailedPrecondition too when MPI was already finalized or
// started by the caller below MPI_THREAD_SERIALIZED. Blocks (MPI_Init
// contacts mpirun's daemon); call it from one thread at a time.
absl::Status EnsureMpiInitialized();

// MPI_COMM_WORLD's rank and size (MPI must be initialized).
int MpiWorldRank();
int MpiWorldSize();

// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string MpiErrorText(int code);

// A duplicate of MPI_COMM_WORLD (MPI_Comm_idup, polled under `deadline`),
// with MPI_ERRORS_RETURN so that errors come back as codes. Collective over
// every rank. The caller frees it with MPI_Comm_free.
absl::StatusOr<MPI_Comm> DuplicateWorld(Deadline deadline, absl::string_view what);

// Keeps `memory` alive until the process exits: buffers of a nonblocking MPI
// collective that passed its deadline, which MPI can neither cancel nor free
// and may still write if the missing ranks join later. Any thread.
void KeepAlive(std::shared_ptr<void> memory);
template <typename T>
void KeepAlive(std::vector<T> memory) {
  KeepAlive(std::static_pointer_cast<void>(std::make_shared<std::vector<T>>(std::move(memory))));
}

// Polls until done; see the header comment. Not thread-safe; one per wait.
class MpiPoller {
 public:
  // Call after each poll that found nothing new; yields, or sleeps with a
  // growing pause (capped) once `spin` passed without progress.
  void Idle();
  // Call after each poll that completed something.
  void Progressed();

 private:
  static constexpr absl::Duration kSpin = absl::Microseconds(200);
  static constexpr absl::Duration kMaxSleep = absl::Microseconds(100);
  absl::Time spin_until_ = absl::InfinitePast();
  absl::Duration sleep_ = absl::ZeroDuration();
};

// Completes `request` by MPI_Test until done or `deadline`. On the deadline
// the request is left active (the caller cancels or frees it) and the result
// is kDeadlineExceeded with `what`. An MPI error is kInternal with its text.
absl::Status MpiWaitRequest(MPI_Request* request, Deadline deadline, absl::string_view what,
                            MPI_Status* status = MPI_STATUS_IGNORE);

// Bootstrap over MPI_COMM_WORLD (its own duplicate): AllGather is
// MPI_Iallgather of the lengths, then MPI_Iallgatherv of the bytes, each
// polled under the deadline. Create after EnsureMpiInitialized; every rank
// creates it, then calls AllGather in the same order. One thread at a time.
class MpiBootstrap final : public Bootstrap {
 public:
  static absl::StatusOr<std::unique_ptr<MpiBootstrap>> Create(Deadline deadline);
  ~MpiBootstrap() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline deadline) override;

 private:
  MpiBootstrap(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  MPI_Comm comm_;
  int rank_;
  int size_;
  int round_ = 0;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_MPI_MPI_RUNTIME_H_
