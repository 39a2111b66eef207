#include "collectives/transport/mpi/mpi_runtime.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/launch_env.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/status.h"

namespace braid {
namespace {

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

void KeepAlive(std::shared_ptr<void> memory) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* kept = new std::vector<std::shared_ptr<void>>();
  MutexLock lock(&mu);
  kept->push_back(std::move(memory));
}

bool UnderMpirun() { return std::getenv(launch_env::kOmpiSize) != nullptr; }

absl::Status EnsureMpiInitialized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return absl::FailedPreconditionError("MPI was already finalized in this process");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_SERIALIZED) {
      return absl::FailedPreconditionError(
          "MPI was initialized below MPI_THREAD_SERIALIZED; braid calls MPI from its progress thread: "
          "initialize it with MPI_Init_thread(..., MPI_THREAD_SERIALIZED or higher, ...)");
    }
    return absl::OkStatus();
  }
  if (!UnderMpirun()) {
    return absl::FailedPreconditionError(
        "the mpi transport needs a job started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE is not set): "
        "run it as `mpirun -np N program`, or choose another transport (BRAID_TRANSPORT=auto, shm or tcp)");
  }
  int provided = MPI_THREAD_SINGLE;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat("MPI_Init_thread failed: ", MpiErrorText(rc)));
  std::atexit(FinalizeAtExit);
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(
        absl::StrCat("Open MPI provides thread level ", provided, " only; braid needs MPI_THREAD_SERIALIZED"));
  }
  return absl::OkStatus();
}

int MpiWorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int MpiWorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return absl::StrCat("MPI error ", code, ": ", absl::string_view(text, static_cast<size_t>(length)));
}

void MpiPoller::Progressed() {
  spin_until_ = absl::Now() + kSpin;
  sleep_ = absl::ZeroDuration();
}

void MpiPoller::Idle() {
  if (spin_until_ == absl::InfinitePast()) spin_until_ = absl::Now() + kSpin;
  if (absl::Now() < spin_until_) {
    // Polling, but giving the core away: the peer may need it.
    sched_yield();
    return;
  }
  sleep_ = std::min(kMaxSleep, sleep_ == absl::ZeroDuration() ? absl::Microseconds(10) : sleep_ * 2);
  absl::SleepFor(sleep_);
}

absl::Status MpiWaitRequest(MPI_Request* request, Deadline deadline, absl::string_view what, MPI_Status* status) {
  MpiPoller poller;
  while (true) {
    int done = 0;
    const int rc = MPI_Test(request, &done, status);
    if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(what, ": ", MpiErrorText(rc)));
    if (done) return absl::OkStatus();
    if (Expired(deadline)) return absl::DeadlineExceededError(absl::StrCat("deadline exceeded waiting for ", what));
    poller.Idle();
  }
}

absl::StatusOr<MPI_Comm> DuplicateWorld(Deadline deadline, absl::string_view what) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(what, ": MPI_Comm_idup: ", MpiErrorText(rc)));
  absl::Status waited = MpiWaitRequest(&request, deadline, absl::StrCat(what, ": MPI_Comm_idup (every rank must join)"));
  // An unfinished duplication can be neither cancelled nor freed (MPI-3
  // 5.12: erroneous for nonblocking collectives); it is left to MPI_Finalize.
  if (!waited.ok()) return waited;
  rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return absl::InternalError(absl::StrCat(what, ": MPI_Comm_set_errhandler: ", MpiErrorText(rc)));
  }
  return comm;
}

absl::StatusOr<std::unique_ptr<MpiBootstrap>> MpiBootstrap::Create(Deadline deadline) {
  BRAID_RETURN_IF_ERROR(EnsureMpiInitialized());
  BRAID_ASSIGN_OR_RETURN(MPI_Comm comm, DuplicateWorld(deadline, absl::StrCat("rank ", MpiWorldRank(),
                                                                              ": MPI bootstrap")));
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::unique_ptr<MpiBootstrap>(new MpiBootstrap(comm, rank, size));
}

MpiBootstrap::~MpiBootstrap() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

absl::StatusOr<std::vector<std::string>> MpiBootstrap::AllGather(absl::string_view mine, Deadline deadline) {
  const std::string what = absl::StrCat("rank ", rank_, ": MPI bootstrap round ", round_++);
  std::vector<int> lengths(static_cast<size_t>(size_));
  int my_length = static_cast<int>(mine.size());
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Iallgather(&my_length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(what, ": MPI_Iallgather: ", MpiErrorText(rc)));
  // A round that times out cannot be cancelled: MPI may still write its
  // buffers if the missing ranks join later, so they are kept alive.
  absl::Status waited = MpiWaitRequest(&request, deadline, absl::StrCat(what, " (lengths; every rank must join)"));
  if (!waited.ok()) {
    KeepAlive(std::move(lengths));
    return waited;
  }
  std::vector<int> offsets(static_cast<size_t>(size_));
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += lengths[static_cast<size_t>(r)];
  }
  auto all = std::make_shared<std::string>(static_cast<size_t>(total), '\0');
  auto sent = std::make_shared<std::string>(mine);
  rc = MPI_Iallgatherv(sent->data(), my_length, MPI_CHAR, all->data(), lengths.data(), offsets.data(), MPI_CHAR,
                       comm_, &request);
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(what, ": MPI_Iallgatherv: ", MpiErrorText(rc)));
  waited = MpiWaitRequest(&request, deadline, absl::StrCat(what, " (bytes)"));
  if (!waited.ok()) {
    KeepAlive(std::move(lengths));
    KeepAlive(std::move(offsets));
    KeepAlive(all);
    KeepAlive(sent);
    return waited;
  }
  std::vector<std::string> result;
  result.reserve(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    result.push_back(all->substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                static_cast<size_t>(lengths[static_cast<size_t>(r)])));
  }
  return result;
}

}  // namespace braid
