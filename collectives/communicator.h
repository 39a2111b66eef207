// Communicator: one rank's view of a group, running collectives on tensors.
//
// Calls return at once with a Work handle; the collectives run in issue order
// on the communicator's own progress thread, over its transport, with the
// algorithm chosen per call (size, group size, transport; BRAID_ALGO or the
// call's options override; `native` runs every collective as the transport's
// engine's own call, e.g. MPI_Allreduce, where the transport has one). Every rank must issue the same collectives in the
// same order; the sequence number that travels in every frame catches ranks
// that do not (a clear error on both sides, never mixed data).
//
// Errors: a collective that fails (a dead peer, a mismatch, its deadline)
// aborts the communicator: the peers are told, and this and every later call
// fails fast with that first cause. Tensors must be contiguous and of a
// braid dtype. An "nccl" transport (built with --config=cuda) takes only CUDA
// tensors on its device and runs every collective natively (NCCL's own),
// whatever the algorithm asked for. A host transport (tcp, shm, mpi) takes
// CPU tensors and, in a --config=cuda build, CUDA tensors too, staged
// through pinned host memory: the thread running the collective copies each
// CUDA input to a pinned host buffer (cudaMemcpy, with the tensor's GPU
// current and the thread's own current device restored after), runs the same
// algorithm on host memory, and copies the result back into the CUDA output
// before the Work completes. The buffer is allocated on first use, grown when
// a larger call comes, and kept for the communicator's life (never per
// call). A CUDA input must be ready when the call is issued (its kernels
// finished, or queued on a stream that synchronizes with the legacy default
// stream, which the copies use). A CUDA error there fails the collective (and so aborts the
// communicator, as any failure) naming the rank, the collective and the CUDA
// call. Without --config=cuda, CUDA tensors on a host transport are
// kUnimplemented saying so. A bad argument is returned by the call itself and
// consumes no sequence number.
//
// Threads: all methods are thread-safe; calls from different threads are
// ordered by when they enter. Tensors handed to a call must stay alive and
// untouched until its Work completes.
#ifndef BRAID_COLLECTIVES_COMMUNICATOR_H_
#define BRAID_COLLECTIVES_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectives/algorithms.h"
#include "collectives/flight_recorder.h"
#include "collectives/timeline.h"
#include "collectives/transport/transport.h"
#include "tensor/tensor.h"

namespace braid {

// The handle of one issued collective.
class Work {
 public:
  // Blocks until the collective finished or `deadline`; returns its status
  // (kDeadlineExceeded if still running at the deadline: it keeps running
  // and ends by its own deadline).
  absl::Status Wait(Deadline deadline = absl::InfiniteFuture());
  // Non-blocking: true once finished.
  bool Test();
  // The result once finished; kUnavailable ("still running") before.
  absl::Status status();
  uint64_t seq() const { return seq_; }

 private:
  friend class Communicator;
  explicit Work(uint64_t seq) : seq_(seq) {}
  // One allocation for the Work and its shared count (make_shared needs a
  // public constructor).
  static std::shared_ptr<Work> Make(uint64_t seq);
  void Finish(absl::Status status);
  // Finish for a Work no other thread can see yet (a collective run on the
  // caller's thread, before its handle is returned): no waiter to wake.
  void FinishUnshared(absl::Status status);

  const uint64_t seq_;
  absl::Mutex mu_;
  // Set once, after status_ (release): a finished Work is read without mu_.
  std::atomic<bool> done_{false};
  absl::Status status_;
};
using WorkHandle = std::shared_ptr<Work>;

struct CommunicatorOptions {
  // Deadline of each collective, from when it is issued. Default: BRAID_TIMEOUT_SEC.
  absl::optional<absl::Duration> timeout;
  // kAuto: chosen per call (BRAID_ALGO overrides when set).
  Algorithm algorithm = Algorithm::kAuto;
  size_t segment_bytes = size_t{256} << 10;
  // Collectives of at most this many bytes run on the caller's thread when
  // the communicator is idle (BRAID_INLINE_BYTES overrides).
  size_t inline_bytes = size_t{64} << 10;
};

// Per-call overrides.
struct CallOptions {
  absl::optional<absl::Duration> timeout;
  Algorithm algorithm = Algorithm::kAuto;
};

class Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(std::unique_ptr<Transport> transport,
                                                              CommunicatorOptions options = {});
  // Finishes the queued collectives (each bounded by its deadline), then
  // stops the progress thread.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const char* transport_name() const { return transport_name_.c_str(); }

  // output = op over every rank's input (numel equal). input may be output.
  absl::StatusOr<WorkHandle> AllReduce(const Tensor& input, const Tensor& output, ReduceOp op,
                                       CallOptions call = {});
  absl::StatusOr<WorkHandle> AllReduce(const Tensor& tensor, ReduceOp op, CallOptions call = {}) {
    return AllReduce(tensor, tensor, op, call);
  }
  // input has size() * output.numel() elements; rank r gets block r reduced.
  absl::StatusOr<WorkHandle> ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                           CallOptions call = {});
  // output has size() * input.numel() elements, block r from rank r.
  absl::StatusOr<WorkHandle> AllGather(const Tensor& input, const Tensor& output, CallOptions call = {});
  // root's tensor to every rank's tensor.
  absl::StatusOr<WorkHandle> Broadcast(const Tensor& tensor, int root, CallOptions call = {});
  // op over every rank's input into root's output (output is ignored elsewhere).
  absl::StatusOr<WorkHandle> Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root,
                                    CallOptions call = {});
  // input and output have size() blocks; block p of input goes to rank p,
  // block p of output comes from rank p. Not in place.
  absl::StatusOr<WorkHandle> AllToAll(const Tensor& input, const Tensor& output, CallOptions call = {});
  absl::StatusOr<WorkHandle> Barrier(CallOptions call = {});
  // Point to point; both sides issue them in the same relative order.
  absl::StatusOr<WorkHandle> Send(const Tensor& tensor, int peer, CallOptions call = {});
  absl::StatusOr<WorkHandle> Recv(const Tensor& tensor, int peer, CallOptions call = {});

  // Fails everything queued and later with `cause` and tells the peers (at
  // once when idle; else as soon as the running collective ends). Any thread.
  void Abort(const absl::Status& cause);

  // The algorithm `call` would use for an all-reduce of `bytes` (for tests and
  // benchmarks): the call's, the communicator's or BRAID_ALGO's choice; else
  // the measured table (allreduce_tuning.inc, from braid_bench --tune) for
  // this transport and world size; else direct over shared windows (shm),
  // otherwise rhd up to 64 KiB and ring above.
  Algorithm ChooseAllReduce(size_t bytes, Algorithm requested) const;
  // Whether the transport has its own collectives (Algorithm::kNative), and their engine ("MPI").
  bool has_native() const { return native_ != nullptr; }
  const char* native_name() const { return native_ != nullptr ? native_->native_name() : "none"; }
  // This communicator's BRAID_TIMELINE trace, or null when it is off. Layers
  // above mark their own events on it (the reducer's buckets). Thread-safe.
  Timeline* timeline() const { return timeline_.get(); }

 private:
  // Runs the collective on `in` (what it reads) and `out` (what it writes):
  // the caller's tensors, or their host copies when staged. Either may be
  // undefined (a receive reads nothing, a send writes nothing).
  using RunFn = std::function<absl::Status(const CollectiveArgs&, const Tensor& in, const Tensor& out)>;
  struct Task {
    WorkHandle work;
    CollectiveArgs args;
    // Kept alive while queued; an inline task uses the caller's own.
    Tensor in;
    Tensor out;
    RunFn run;
    // For the timeline: bytes per rank, the algorithm's name, when it was issued.
    size_t bytes = 0;
    const char* algorithm = "";
    absl::Time queued;
    bool inline_run = false;  // runs on the caller's thread, recorded running when queued
  };

  Communicator(std::unique_ptr<Transport> transport, CommunicatorOptions options, absl::Duration timeout,
               Algorithm env_algorithm);
  // Queues a collective of `bytes` bytes (per rank), or runs it at once on the
  // calling thread when it is small and nothing else is queued or running:
  // a hand-off to the progress thread costs more than a small collective.
  absl::StatusOr<WorkHandle> Enqueue(CollectiveKind kind, DType dtype, ReduceOp op, int root, size_t count,
                                     size_t bytes, const CallOptions& call, const char* algorithm,
                                     const Tensor& in, const Tensor& out, RunFn run);
  absl::Status CheckTensor(const Tensor& tensor, const char* what) const;
  // BRAID_DEBUG=detail: all ranks agree on `args` before it runs.
  absl::Status CrossCheck(const CollectiveArgs& args);
  // The call's algorithm after the communicator's and BRAID_ALGO's defaults.
  Algorithm Resolve(Algorithm requested) const;
  // Whether a `kind` collective runs natively: true for kNative, which needs a
  // transport with native collectives (kUnimplemented otherwise).
  absl::StatusOr<bool> UseNative(const CallOptions& call, CollectiveKind kind) const;
  // Runs `task` with its CUDA tensors copied to and from staging_ (see the top).
  absl::Status RunStaged(const Task& task, const Tensor& in, const Tensor& out);
  // The thread that ran a task is done with the transport: clears busy_,
  // after telling the peers of an Abort that came too late for RunTask.
  void ReleaseTransport();
  // Runs one task on the transport (busy_ held by the caller) and finishes its Work.
  void RunTask(Task& task, const Tensor& in, const Tensor& out);
  void ProgressLoop();

  std::unique_ptr<Transport> transport_;  // used only by the progress thread (and Abort after it stops)
  NativeCollectives* const native_;       // the transport's own collectives, or null
  const int rank_;
  const int size_;
  const std::string transport_name_;
  // The transport works on CUDA device memory and has only native collectives
  // (nccl): braid's algorithms reduce on the host and cannot run over it.
  const bool device_native_;
  const CommunicatorOptions options_;
  const absl::Duration timeout_;
  const Algorithm env_algorithm_;
  const bool debug_detail_;  // BRAID_DEBUG=detail
  // The tuned table's ranges for this transport and world size: up to
  // max_bytes (0: no bound) bytes, the algorithm. Empty: the built-in rule.
  std::vector<std::pair<uint64_t, Algorithm>> tuned_;
  Scratch scratch_;  // progress thread only
  // Pinned host memory for staging CUDA tensors (RunStaged); grown, never
  // shrunk. Only the thread running a task (busy_) uses it.
  Tensor staging_;

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // first error: the communicator is aborted
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // A thread (the progress thread, or a caller running a small collective
  // inline) is using the transport.
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool transport_aborted_ ABSL_GUARDED_BY(mu_) = false;  // the peers have been told
  // Signalled when the progress thread may have work: a task queued, busy_
  // cleared, or stopping_ set. (A condition variable, not an Await: every
  // unlock of mu_ would evaluate the waiter's condition.)
  absl::CondVar progress_wakeup_;
  // Set (with failure_) by an Abort: the thread that finishes the running
  // task must look at failure_. Lets a task end without taking mu_ otherwise.
  std::atomic<bool> failed_{false};
  FlightRecorder flight_;
  const std::unique_ptr<Timeline> timeline_;  // null unless BRAID_TIMELINE is set
  std::thread progress_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_COMMUNICATOR_H_
