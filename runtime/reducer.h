// Reducer: data-parallel gradient averaging for a C++ trainer (DDP's Reducer
// without PyTorch).
//
// The trainer hands the reducer views of its gradient tensors (any mix of
// dtypes and devices, in parameter order) and, every iteration, calls
//
//   BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
//   ... backward: as each gradient i is written, reducer->MarkReady(i) ...
//   BRAID_RETURN_IF_ERROR(reducer->Finalize());   // grads now hold the average
//   ... optimizer step ...
//
// Gradients are packed into buckets: one dtype and device each, filled in
// reverse parameter order (backward produces the last layer first), the first
// bucket capped at `first_bucket_mb`, the others at `bucket_cap_mb` (a bucket
// closes once it reaches its cap, so one large tensor makes a bucket of its
// own). The moment a bucket's last gradient is marked, its all-reduce is
// issued asynchronously, so communication overlaps the rest of backward;
// buckets are always issued in the same order on every rank (a bucket that
// fills early waits for the ones before it). A completion thread finishes
// each bucket as its all-reduce ends (the hook's decompression, the copy of
// the average back into the trainer's gradients), also during backward. The
// last bucket has nothing left to overlap: when the communicator is idle it
// is reduced on the thread whose MarkReady completes it, and Finalize
// finishes it, with no hand-off to braid's progress and completion threads.
// After the first synchronized iteration the buckets are rebuilt once in the
// order gradients really arrived on rank 0 (broadcast to everyone).
//
// Averaging divides by the world size (also while some ranks have joined,
// as DDP does). The default all-reduce gives bit-identical results on every
// rank (each element's sum is reduced and divided once, by its owner).
//
// Threads: MarkReady may be called from any number of threads at once (each
// gradient once per iteration); the other methods from one thread at a time.
// The trainer must not touch a gradient between MarkReady and Finalize: the
// reducer reads it, and writes the average back into it, in the background.
//
// Collective calls (every rank calls them, in the same order): Create,
// PrepareForBackward (with uneven_inputs), Finalize, Join, BroadcastParameters.
// Every wait has a deadline (options.timeout, default the group's timeout).
#ifndef BRAID_RUNTIME_REDUCER_H_
#define BRAID_RUNTIME_REDUCER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "runtime/comm_hooks.h"
#include "runtime/process_group.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace braid {

struct ReducerOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  // Buckets own the gradient memory and gradient(i) returns the view into
  // it: the trainer writes its gradients there (no copy in, no copy out).
  // The initial values of the gradients given to Create are copied in.
  // The views move once, when the buckets are rebuilt after the first
  // synchronized iteration: read gradient(i) again after each Finalize().
  bool gradient_as_bucket_view = false;
  // Parameters may go unmarked in an iteration: Finalize counts them as zero
  // gradients on this rank, and all ranks agree (one small all-reduce) which
  // were unused everywhere; those keep their gradients untouched (zero with
  // gradient_as_bucket_view) and are listed by unused_parameters().
  bool find_unused_parameters = false;
  // The set of used parameters is the same every iteration: it is found in
  // the first synchronized iteration (as find_unused_parameters), and later
  // iterations treat the same parameters as unused without the all-reduce,
  // marking them ready up front so no bucket waits for them.
  bool static_graph = false;
  // Ranks may run out of data at different times: every synchronized
  // PrepareForBackward all-reduces a small "still training" flag, so a rank
  // that called Join() can shadow the others' collectives.
  bool uneven_inputs = false;
  // null: AllReduceHook().
  std::shared_ptr<CommHook> comm_hook;
  // Names for messages ("fc1.weight"); empty, or one per gradient.
  std::vector<std::string> parameter_names;
  // Deadline of every wait; default the group's (ProcessGroup::timeout()).
  absl::optional<absl::Duration> timeout;
  // Buckets on devices, as DDP on GPUs: a bucket whose device is this
  // communicator's (which must run on streams) is reduced there; else a
  // CUDA bucket goes to the group's CommFor(device) (NCCL, or host staging
  // where there is none). Null: the group's.
  Communicator* device_comm = nullptr;
  // Data-parallel over a subgroup of the group's communicator (its Split or
  // NewGroup: the replicas of one shard of a sharded model): the buckets'
  // all-reduces, the averaging (by the subgroup's size) and the check that
  // ranks agree run there. Must outlive the reducer. Null: the group's own.
  // A CUDA bucket on a subgroup needs a device_comm of that subgroup; a
  // reducer on a subgroup does not Recover.
  Communicator* comm = nullptr;
  // The stream backward writes the gradients on (torch's current stream);
  // null: the device's default stream. On a stream communicator MarkReady
  // copies a gradient into its bucket on it, the bucket's all-reduce waits
  // for it (an event), and Finalize makes it wait for the buckets and
  // copies the averages back on it: the host never waits for the device.
  Stream* compute_stream = nullptr;
};

// One synchronized iteration, as measured by the reducer.
struct ReducerStats {
  int64_t iteration = 0;          // synchronized iterations finished, this one included
  absl::Duration backward;        // PrepareForBackward -> Finalize
  absl::Duration communication;   // time some bucket's reduction was in flight
  absl::Duration exposed;         // of that, the time the trainer waited (Finalize, inline launches)
  absl::Duration hidden;          // communication - exposed: overlapped with backward
  double overlap = 0;             // hidden / communication (1 = fully hidden)
  int buckets = 0;
  size_t bytes = 0;               // gradient bytes reduced
};

class Reducer {
 public:
  // Collective. Checks that every rank registered the same number, shapes
  // and dtypes of gradients and the same options (kInvalidArgument naming
  // the first parameter that differs and the ranks), and builds the buckets.
  // `group` must outlive the reducer. Gradients must be contiguous.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(ProcessGroup& group, std::vector<Tensor> gradients,
                                                         ReducerOptions options = {});
  // After an in-place recovery (runtime/elastic.h): a new reducer over
  // `group`, the regrouped ranks' process group, with this one's gradients
  // and options. Collective over `group`. The iteration this one had in
  // flight is dropped (its reductions failed with the old communicator);
  // destroy this one after (it still refers to its own group).
  absl::StatusOr<std::unique_ptr<Reducer>> Recover(ProcessGroup& group) const;
  // Waits (bounded by the deadline) for reductions still in flight.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Starts an iteration; synchronized unless a NoSync scope is open. Fails
  // (kFailedPrecondition, naming the parameters never marked and saying what
  // to do) if the previous iteration marked gradients but never finished.
  // With uneven_inputs, a synchronized call is collective.
  absl::Status PrepareForBackward();
  // Gradient `index` is final for this iteration. Thread-safe, cheap (a copy
  // into the bucket, and maybe an asynchronous launch), except for the call
  // that completes the last bucket, which may reduce it. Errors: index out
  // of range (kOutOfRange), marked twice or outside an iteration
  // (kFailedPrecondition); the iteration goes on.
  absl::Status MarkReady(int index);
  // Collective in synchronized iterations. Blocks until every bucket is
  // reduced and the average is in the trainer's gradients (or the bucket
  // views). Without find_unused_parameters, gradients never marked are an
  // error naming them (the others are still reduced, so peers do not hang).
  // In a NoSync iteration it only ends the iteration.
  absl::Status Finalize();

  // While one is alive, iterations are not synchronized: the trainer keeps
  // accumulating into its gradients, and the next synchronized iteration
  // reduces the accumulated sums (gradients marked during NoSync
  // iterations count as used then, even if not marked again).
  class NoSyncScope {
   public:
    NoSyncScope(NoSyncScope&& other) noexcept : reducer_(other.reducer_) { other.reducer_ = nullptr; }
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;
    NoSyncScope& operator=(NoSyncScope&&) = delete;
    ~NoSyncScope();

   private:
    friend class Reducer;
    explicit NoSyncScope(Reducer* reducer) : reducer_(reducer) {}
    Reducer* reducer_;
  };
  NoSyncScope NoSync();

  // For a rank that ran out of data (needs uneven_inputs): shadows the other
  // ranks' synchronized iterations with zero gradients (the trainer's
  // gradients are not touched) until every rank has called Join. Collective;
  // every rank calls it once, after its last iteration.
  absl::Status Join();

  // The gradient as the reducer holds it: the trainer's own tensor, or the
  // bucket view with gradient_as_bucket_view.
  const Tensor& gradient(int index) const;
  int num_parameters() const { return static_cast<int>(vars_.size()); }
  // The parameter indices of each bucket, in launch order.
  std::vector<std::vector<int>> BucketAssignment() const;
  // Parameters unused on every rank in the last synchronized iteration.
  std::vector<int> unused_parameters() const;
  ReducerStats last_stats() const;
  // How long any of its waits may take (ReducerOptions::timeout, else the group's).
  absl::Duration timeout() const { return timeout_; }

  // Root's tensors to every rank's (matching shapes and dtypes on every
  // rank; packed into one message per dtype). Collective, blocking; at most
  // `timeout`, default the group's.
  static absl::Status BroadcastParameters(ProcessGroup& group, absl::Span<const Tensor> parameters, int root,
                                          absl::optional<absl::Duration> timeout = absl::nullopt);

 private:
  struct Variable {
    Tensor grad;      // the trainer's
    Tensor slot;      // its place in its bucket's buffer
    int bucket = -1;
    std::string label;  // "parameter 3 (fc2.weight, float32[10, 512])"
  };
  struct Bucket {
    GradBucket grad;  // buffer, parameters, index
    int pending = 0;  // parameters not yet ready this iteration
    bool launched = false;
    WorkHandle work;
    Communicator* comm = nullptr;  // where it is reduced
    absl::Time launch_time;
    absl::Time done_time;
  };
  struct Pending {
    int bucket;
    absl::StatusOr<WorkHandle> work;
  };

  Reducer(ProcessGroup& group, std::vector<Tensor> gradients, ReducerOptions options, absl::Duration timeout);
  absl::Status CheckRanksAgree();
  absl::Status DescribeMismatch(const std::vector<int64_t>& gathered);
  // Buckets for `order` (parameter indices, first = first to be reduced).
  std::vector<std::vector<int>> ComputeBuckets(const std::vector<int>& order) const;
  absl::Status BuildBuckets(const std::vector<std::vector<int>>& assignment);
  absl::Status RebuildBuckets();

  absl::Status StartIteration(bool shadow);
  absl::Status FinishIteration();
  // Finalize's last steps (reducer_finish.cc): which parameters no rank used
  // (`used` as agreed; copies back the average of those this rank left
  // zero), the iteration's statistics and timeline spans, and the error for
  // gradients never marked ready here (`missing`) or elsewhere.
  absl::Status ApplyUnused(const Tensor& used, bool detect, bool shadow) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordIterationStats(absl::Time entry, absl::Time waited, bool shadow) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UnmarkedGradients(int64_t iteration, const std::vector<int>& missing,
                                 const std::vector<std::string>& missed_elsewhere) const;
  // Marks `index` ready in a synchronized iteration; `fill` says how to put
  // its value into the bucket (copy the trainer's gradient, zero, nothing).
  enum class Fill { kCopy, kZero, kNone };
  // A device bucket's fill is queued on its stream and may fail.
  absl::Status FillSlot(int index, Fill fill);
  // The first failed fill of the iteration, for Finalize to return.
  void NoteFillError(int index, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (host, bounded) for the device buckets' compute streams.
  void DrainStreams();
  // The average back into gradient `index` (on its bucket's stream, if any).
  absl::Status CopyBack(int index);
  // Where a bucket of `device` is reduced (ReducerOptions::device_comm).
  absl::StatusOr<Communicator*> CommForDevice(Device device);
  void LaunchReadyBuckets() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompletionLoop();
  void FinishBucket(Pending pending);
  absl::Status WaitForBuckets(Deadline deadline);
  std::string Labels(const std::vector<int>& indices) const;
  void EndNoSync();
  absl::Status AllReduceSmall(Tensor& t, ReduceOp op);

  ProcessGroup& group_;
  Communicator& comm_;
  const int rank_;
  const int size_;
  const ReducerOptions options_;
  const absl::Duration timeout_;
  std::shared_ptr<CommHook> hook_;
  std::vector<Variable> vars_;
  std::vector<Bucket> buckets_;  // rebuilt only between iterations (no reduction in flight)

  // Iteration state. The per-iteration vectors are written under mu_ and
  // read without it only by the single thread that owns the iteration
  // (PrepareForBackward/Finalize), between iterations.
  mutable absl::Mutex mu_;
  bool in_iteration_ ABSL_GUARDED_BY(mu_) = false;
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;
  bool shadow_ ABSL_GUARDED_BY(mu_) = false;  // a joined rank shadowing the others
  int no_sync_depth_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t iteration_ ABSL_GUARDED_BY(mu_) = 0;  // synchronized iterations started
  std::vector<char> marked_ ABSL_GUARDED_BY(mu_);
  std::vector<char> locally_used_ ABSL_GUARDED_BY(mu_);      // marked this synchronized iteration (with data)
  std::vector<char> accumulated_used_ ABSL_GUARDED_BY(mu_);  // marked in NoSync iterations since the last sync
  int marked_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> arrival_ ABSL_GUARDED_BY(mu_);  // marking order in the first synchronized iteration
  size_t next_launch_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> completion_queue_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> reduced_here_ ABSL_GUARDED_BY(mu_);  // the last bucket, if reduced as it launched
  size_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status iteration_error_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // sticky: the reducer cannot go on
  absl::Duration launch_blocked_ ABSL_GUARDED_BY(mu_);  // time spent inside hook launches
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool rebuilt_ ABSL_GUARDED_BY(mu_) = false;
  bool static_known_ ABSL_GUARDED_BY(mu_) = false;  // static_graph: unused set found
  std::vector<char> static_unused_ ABSL_GUARDED_BY(mu_);
  std::vector<int> unused_ ABSL_GUARDED_BY(mu_);
  absl::Time prepare_time_ ABSL_GUARDED_BY(mu_);
  ReducerStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread completion_;
};

}  // namespace braid

#endif  // BRAID_RUNTIME_REDUCER_H_
