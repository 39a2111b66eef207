// Communicator: one rank's view of a group, running collectives on tensors.
//
// Calls return at once with a Work handle; the collectives run in issue order
// on the communicator's own progress thread (or, when small and the
// communicator is idle, on the caller's), over its transport, with the
// algorithm the selector (selection.h) picks per call from the size, the
// group and what the transport can do. Every rank must issue the same
// collectives in the same order; the sequence number that travels in every
// frame catches ranks that do not (a clear error on both sides, never mixed
// data), and the agreement check (agreement.h) does the same for the
// engines' own collectives.
//
// Options, one precedence everywhere: a call's CallOptions, then the
// CommunicatorOptions it was created with, then the environment
// (BRAID_ALGO, BRAID_INLINE_BYTES, BRAID_TIMEOUT_SEC), then the default.
//
// Errors: a collective that fails (a dead peer, a mismatch, its deadline)
// aborts the communicator: the peers are told, and this and every later call
// fails fast with that first cause. A bad argument is returned by the call
// itself and consumes no sequence number. Tensors must be contiguous and of a
// braid dtype. A transport of device memory takes only tensors on
// its device. A transport with a device link (nccl, or tests' local device
// transport) runs every collective on streams (device/device_collectives.h):
// ordered after the work already queued on the caller's stream
// (CallOptions::stream, else CommunicatorOptions::stream, else the device's
// default stream), its completion an event Work::WaitStream hands to another
// stream; braid's ring, tree, rhd and chain there, or the engine's own
// (native). A host transport
// takes CPU tensors and, in a --config=cuda build, CUDA tensors staged
// through pinned host memory (host_staging.h); without --config=cuda they
// are kUnimplemented saying so.
//
// Threads: all methods are thread-safe; calls from different threads are
// ordered by when they enter. Tensors handed to a call must stay alive and
// untouched until its Work completes. On device memory, after a failure
// (an abort, a deadline), work already queued on the device may still run
// until the communicator is destroyed, which drains it (bounded): keep the
// failed collective's tensors until then.
#ifndef BRAID_COLLECTIVES_COMMUNICATOR_H_
#define BRAID_COLLECTIVES_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "collectives/agreement.h"
#include "collectives/device/device_collectives.h"
#include "collectives/flight_recorder.h"
#include "collectives/group_layout.h"
#include "collectives/hierarchical.h"
#include "collectives/host_staging.h"
#include "collectives/scratch.h"
#include "collectives/selection.h"
#include "collectives/straggler.h"
#include "collectives/timeline.h"
#include "collectives/transport/native_collectives.h"
#include "collectives/transport/transport.h"
#include "collectives/work.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace braid {

struct CommunicatorOptions {
  // Deadline of each collective, from when it is issued. Default: BRAID_TIMEOUT_SEC.
  absl::optional<absl::Duration> timeout;
  // kAuto: BRAID_ALGO, else the selector's choice per call.
  Algorithm algorithm = Algorithm::kAuto;
  size_t segment_bytes = size_t{256} << 10;
  // Collectives of at most this many bytes run on the caller's thread when
  // the communicator is idle. Default: BRAID_INLINE_BYTES, else 64 KiB.
  absl::optional<size_t> inline_bytes;
  // Where one algorithm starts to beat another (tests shrink them).
  SelectionThresholds thresholds;
  // The group's name in logs, the flight recorder and the timeline
  // (empty: "world"; Split names its subgroups).
  std::string name;
  // How subgroups get their transports (Split, NewGroup and the
  // hierarchical collectives' levels); a process group passes the
  // registry's. Null: no subgroups, no hierarchical.
  SubgroupTransportFactory subgroup_transport;
  // Straggler reports every this many collectives (0: off). Default:
  // BRAID_STRAGGLER_WINDOW, else 1000.
  absl::optional<int> straggler_window;
  // This rank's host, as the host layout sees it (empty: gethostname).
  // Tests name "hosts" on one machine.
  std::string host_name;
  // Collectives on device memory are ordered after this stream's work
  // (null: the device's default stream). Must outlive the communicator.
  Stream* stream = nullptr;
};

// Per-call overrides.
struct CallOptions {
  absl::optional<absl::Duration> timeout;
  Algorithm algorithm = Algorithm::kAuto;
  // Device memory: the stream whose work the collective follows.
  Stream* stream = nullptr;
  // Never on the caller's thread, whatever its size (torch's async_op: the
  // caller overlaps its own work with the collective).
  bool async = false;
  // On the caller's thread whatever its size, when nothing is queued ahead
  // (async wins over it): for a caller that would only wait for it (the
  // reducer's last bucket), this saves the hand-off to the progress thread
  // and back.
  bool caller_thread = false;
};

// How peer access reaches the buffers a collective reads and writes (either
// may be null or undefined): Selector::WantsWindow's `memory`.
PeerMemory PeerMemoryOf(const Tensor* in, const Tensor* out);

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
  // Whether its ranks reach each other's memory (shm's peer access): then
  // collectives over HostMemory::kMappable buffers read and write the
  // peers' buffers in place.
  bool peers_reachable() const { return selector_.caps().peer_access; }

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
  // peer kAnySource: the first peer whose next message to this rank is a
  // send (the Work's source_rank() names it); shm, tcp and mpi.
  absl::StatusOr<WorkHandle> Recv(const Tensor& tensor, int peer, CallOptions call = {});
  static constexpr int kAnySource = -1;

  // Subgroups (communicator_groups.cc). COLLECTIVE over this communicator, ordered with
  // its other collectives: every rank calls it; blocks until the subgroup is
  // up or the deadline. The ranks of one `color` form a communicator ordered
  // by (key, rank), as MPI_Comm_split; a negative color joins none and gets
  // a communicator whose every call fails kFailedPrecondition. The subgroup
  // has its own sequence numbers, deadlines, flight recorder and timeline,
  // named `name` (empty: "<parent>.<color>"). Its transport comes from the
  // engine's own split (mpi, nccl) or, over this communicator's transport,
  // from CommunicatorOptions::subgroup_transport; a subgroup of ranks on one
  // host takes shared memory where the factory offers it.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, std::string name = "",
                                                      CallOptions call = {});
  // The subgroup of `ranks` (this communicator's, in the new order), as
  // torch's new_group: every rank calls it with the same list (a clear error
  // otherwise); ranks outside it get a communicator that refuses every call,
  // naming the group.
  absl::StatusOr<std::unique_ptr<Communicator>> NewGroup(std::vector<int> ranks, std::string name = "",
                                                         CallOptions call = {});
  // The group's name ("world" for a process group's own).
  const std::string& name() const { return name_; }
  // Whether this rank belongs to the group (false: NewGroup's outsiders).
  bool member() const { return rank_ >= 0; }
  // Where the group's ranks run (from every rank's host name, at Create).
  const HostLayout& host_layout() const { return layout_; }

  // Fails everything queued and later with `cause` and tells the peers (at
  // once when idle; else as soon as the running collective ends). Any thread.
  void Abort(const absl::Status& cause);

  // What a `kind` collective of `count` elements of `dtype` would run under
  // `call` (count as CollectiveArgs has it): the selector's answer after the
  // precedence above, where every rank's buffers are `memory` (the window
  // where a peer all-reduce's vote would take it). For tests and benchmarks.
  absl::StatusOr<Algorithm> AlgorithmFor(CollectiveKind kind, size_t count, DType dtype, PeerMemory memory,
                                         const CallOptions& call = {}) const;
  // Whether the transport has its own collectives (Algorithm::kNative), and their engine ("MPI").
  bool has_native() const { return native_ != nullptr || (device_ && device_->link().has_native()); }
  const char* native_name() const {
    if (native_ != nullptr) return native_->native_name();
    return device_ ? device_->link().native_name() : "none";
  }
  // Whether collectives run on streams (a device link: nccl).
  bool on_streams() const { return device_ != nullptr; }
  // The device's runtime, when on_streams().
  DeviceRuntime* device_runtime() const { return device_ ? &device_->runtime() : nullptr; }
  // The last straggler report (every BRAID_STRAGGLER_WINDOW collectives; the
  // same on every rank), or one with window 0 before the first. Thread-safe.
  StragglerReport straggler_report();
  // This communicator's BRAID_TIMELINE trace, or null when it is off. Layers
  // above mark their own events on it (the reducer's buckets). Thread-safe.
  Timeline* timeline() const { return timeline_.get(); }

 private:
  // A split as it travels to the progress thread and back.
  struct SplitJob {
    SplitRequest request;
    SplitPlan plan;                       // filled by the progress thread
    std::unique_ptr<Transport> transport;  // the subgroup's, when this rank has one
  };
  // One collective as a public call describes it, before it is queued.
  struct Request {
    CollectiveKind kind = CollectiveKind::kNone;
    DType dtype = DType::kU8;
    ReduceOp op = ReduceOp::kSum;
    int root = -1;  // the root, or the peer of a send or receive
    size_t count = 0;
    // Bytes per rank: the inline rule, the flight recorder and the timeline.
    size_t bytes = 0;
    // Send and receive may wait for the other side's call: never inline.
    bool may_inline = true;
    // What it reads and writes; either may be undefined (a receive reads
    // nothing, a send writes nothing).
    const Tensor* in = nullptr;
    const Tensor* out = nullptr;
    std::shared_ptr<SplitJob> split;  // kSplit only
  };
  // What the selector chose (Algorithm::kAuto: nothing yet), and whether
  // this rank votes for the window in a peer all-reduce (Selector::WantsWindow).
  struct Selection {
    Algorithm algorithm = Algorithm::kAuto;
    bool window_vote = false;
  };
  absl::StatusOr<Selection> Select(CollectiveKind kind, size_t count, DType dtype, Algorithm requested,
                                   PeerMemory memory) const;

  struct Task {
    WorkHandle work;
    CollectiveArgs args;
    Algorithm algorithm = Algorithm::kAuto;
    // A peer all-reduce where this rank's memory wants the window (Selector::WantsWindow).
    bool window_vote = false;
    int peer = -1;  // send / recv
    // Kept alive while queued; an inline task uses the caller's own.
    Tensor in;
    Tensor out;
    size_t bytes = 0;
    absl::Time queued;
    bool inline_run = false;  // runs on the caller's thread, recorded running when queued
    std::shared_ptr<SplitJob> split;  // kSplit only
    // Device memory: recorded on the caller's stream when issued.
    std::shared_ptr<Event> ready;
  };

  Communicator(std::unique_ptr<Transport> transport, CommunicatorOptions options, absl::Duration timeout,
               Algorithm env_algorithm, size_t inline_bytes, AgreementChecks checks, HostLayout layout);
  // Every rank's host over `transport` (collective): the layout.
  static absl::StatusOr<HostLayout> GatherLayout(Transport& transport, const CommunicatorOptions& options,
                                                 Deadline deadline);
  // The selector's view: the transport's capabilities, the layout, subgroups.
  static TransportCaps CapsFor(Transport& transport, const HostLayout& layout, const CommunicatorOptions& options);
  // Queues `job` as a kSplit collective and waits for it.
  absl::StatusOr<std::unique_ptr<Communicator>> RunSplitJob(std::shared_ptr<SplitJob> job, std::string name,
                                                            const CallOptions& call);
  // The progress thread's half of a split: the colors' all-gather, then the
  // subgroup's transport.
  absl::Status DispatchSplit(const Task& task);
  absl::Status DispatchHierarchical(const Task& task, absl::Span<const std::byte> in, absl::Span<std::byte> out);
  // Aborts the transport and, once built, the hierarchical levels (by the
  // thread that holds busy_).
  void AbortTransports(const absl::Status& cause);
  // Every rank's waits over the window that `task` completed: the report
  // (logged by rank 0 when a rank stands out).
  absl::Status ExchangeStragglerWindow(const Task& task);
  // Picks the algorithm, then queues the collective, or runs it at once on
  // the calling thread when it is small and nothing else is queued or
  // running: a hand-off to the progress thread costs more than a small
  // collective.
  absl::StatusOr<WorkHandle> Enqueue(const Request& request, const CallOptions& call);
  absl::Status CheckTensor(const Tensor& tensor, const char* what) const;
  // The call's algorithm after the communicator's and BRAID_ALGO's defaults.
  Algorithm Resolve(Algorithm requested) const;
  // The agreement check for `task`, when BRAID_DEBUG asks for one.
  absl::Status Agree(const Task& task);
  // Every rank's `mine` into `all`, by rank: an all-gather framed as `kind`
  // under `task`'s seq (the agreement check, a split's colors, straggler waits).
  absl::Status GatherBytes(const Task& task, CollectiveKind kind, absl::Span<const std::byte> mine,
                           absl::Span<std::byte> all);
  // Runs `task`'s algorithm on `in` and `out` (host memory, or the
  // transport's device memory).
  absl::Status Dispatch(const Task& task, const Tensor& in, const Tensor& out);
  absl::Status DispatchNative(const Task& task, const Tensor& in, const Tensor& out);
  // Queues `task` on the device; its Work finishes when the device is done.
  absl::Status DispatchDevice(const Task& task, const Tensor& in, const Tensor& out);
  // The thread that ran a task is done with the transport: clears busy_,
  // after telling the peers of an Abort that came too late for RunTask.
  // `succeeded`: an inline task whose success RunTask left to record here.
  void ReleaseTransport(const Task* succeeded = nullptr);
  // Runs one task on the transport (busy_ held by the caller) and finishes
  // its Work. An inline task's success is recorded by ReleaseTransport
  // (under mu_, which it takes anyway): true then.
  bool RunTask(Task& task, const Tensor& in, const Tensor& out);
  void ProgressLoop();

  std::unique_ptr<Transport> transport_;  // used only by the progress thread (and Abort after it stops)
  // Collectives on streams, when the transport has a device link.
  std::unique_ptr<DeviceCollectives> device_;
  NativeCollectives* const native_;       // the transport's own collectives, or null
  const int rank_;
  const int size_;
  const std::string transport_name_;
  const std::string name_;
  const HostLayout layout_;
  // Payloads are device memory and only native collectives run (nccl).
  const bool device_memory_only_;
  const CommunicatorOptions options_;
  const absl::Duration timeout_;
  const Algorithm env_algorithm_;
  const size_t inline_bytes_;
  const AgreementChecks checks_;
  // "native MPI": how the agreement check before a native collective names itself.
  const std::string native_check_;
  const Selector selector_;
  Scratch scratch_;  // the running task only
  // The hierarchical collectives' intra- and inter-host transports, built by
  // the first one (the running task only).
  std::unique_ptr<HostLevels> levels_;
  HostStaging staging_;  // the running task only
  StragglerMonitor stragglers_;  // the running task only

  // Guards the flight recorder too: a collective takes it twice, and its
  // records ride along (see base/mutex.h for why a LightMutex).
  LightMutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // first error: the communicator is aborted
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // A thread (the progress thread, or a caller running a small collective
  // inline) is using the transport.
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool transport_aborted_ ABSL_GUARDED_BY(mu_) = false;  // the peers have been told
  StragglerReport straggler_report_ ABSL_GUARDED_BY(mu_);
  // The selector's last answer: a training loop asks the same question every
  // step, and a small collective's call costs little more than the question.
  struct LastSelection {
    CollectiveKind kind = CollectiveKind::kNone;
    size_t count = 0;
    DType dtype = DType::kU8;
    Algorithm requested = Algorithm::kAuto;
    PeerMemory memory = PeerMemory::kSlow;
    Selection chosen;
  };
  LastSelection last_selection_ ABSL_GUARDED_BY(mu_);
  WorkHandle spare_works_[4] ABSL_GUARDED_BY(mu_);  // Work::Reuse's
  // Signalled when the progress thread may have work: a task queued, busy_
  // cleared, or stopping_ set. (A condition variable, not an Await: every
  // unlock of mu_ would evaluate the waiter's condition.)
  LightCondVar progress_wakeup_;
  // Set (with failure_) by an Abort: the thread that finishes the running
  // task must look at failure_. Lets a task end without taking mu_ otherwise.
  std::atomic<bool> failed_{false};
  FlightRecorder flight_;
  const std::unique_ptr<Timeline> timeline_;  // null unless BRAID_TIMELINE is set
  std::thread progress_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_COMMUNICATOR_H_
