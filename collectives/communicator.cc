#include "collectives/communicator.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/bytes.h"
#include "base/cpu.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/status.h"
#include "collectives/algorithms.h"
#include "collectives/point_to_point.h"
#include "collectives/run_algorithm.h"

namespace braid {
namespace {


BRAID_ENV_KNOB(kInlineKnob, "BRAID_INLINE_BYTES", "65536",
               "Collectives up to this size run on the calling thread when the communicator is idle (a "
               "communicator's own inline_bytes option wins).");
BRAID_ENV_KNOB(kStragglerKnob, "BRAID_STRAGGLER_WINDOW", "1000",
               "Every this many timed collectives the ranks compare how long each waited and name a rank that "
               "persistently arrives last (rank 0 logs it; 0: off). Windows shorter than 10 ms time every "
               "second, fourth, ... collective.");
BRAID_ENV_KNOB(kAlgoKnob, "BRAID_ALGO", "auto",
               "All-reduce algorithm: auto, ring, tree, double-tree, rhd, one-shot, window (shm), peer-access (shm), "
               "direct (the "
               "best of the last three for the transport), native (every collective as the transport's engine's "
               "own call: mpi) or hierarchical (within each host, then across hosts; also reduce-scatter, "
               "all-gather and broadcast). A communicator's or a call's own choice wins.");

constexpr size_t kDefaultInlineBytes = size_t{64} << 10;

absl::Span<const std::byte> ConstBytes(const Tensor& t) {
  if (!t.defined()) return {};
  return absl::MakeConstSpan(static_cast<const std::byte*>(t.data()), t.nbytes());
}
absl::Span<std::byte> Bytes(const Tensor& t) {
  if (!t.defined()) return {};
  return absl::MakeSpan(static_cast<std::byte*>(t.data()), t.nbytes());
}

}  // namespace

PeerMemory PeerMemoryOf(const Tensor* in, const Tensor* out) {
  bool mapped = true;
  for (const Tensor* t : {in, out}) {
    if (t == nullptr || !t->defined()) continue;
    if (!t->storage()->peer_fast()) return PeerMemory::kSlow;
    mapped = mapped && t->storage()->mappable();
  }
  return mapped ? PeerMemory::kMapped : PeerMemory::kFast;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(std::unique_ptr<Transport> transport,
                                                                   CommunicatorOptions options) {
  if (!transport) return absl::InvalidArgumentError("Communicator::Create without a transport");
  BRAID_ASSIGN_OR_RETURN(const absl::Duration timeout, ResolveTimeout(options.timeout));
  BRAID_ASSIGN_OR_RETURN(Algorithm env_algorithm, ParseAlgorithm(kAlgoKnob.String()));
  size_t inline_bytes = kDefaultInlineBytes;
  if (options.inline_bytes.has_value()) {
    inline_bytes = *options.inline_bytes;
  } else if (kInlineKnob.IsSet()) {
    BRAID_ASSIGN_OR_RETURN(int64_t bytes, kInlineKnob.Int());
    inline_bytes = static_cast<size_t>(std::max<int64_t>(0, bytes));
  }
  BRAID_ASSIGN_OR_RETURN(AgreementChecks checks, AgreementChecksFromEnv());
  BRAID_ASSIGN_OR_RETURN(HostLayout layout, GatherLayout(*transport, options, DeadlineIn(timeout)));
  DeviceLink* link = transport->device_link();
  std::unique_ptr<Communicator> comm(
      new Communicator(std::move(transport), options, timeout, env_algorithm, inline_bytes, checks, std::move(layout)));
  if (link != nullptr) {
    Communicator* self = comm.get();
    BRAID_ASSIGN_OR_RETURN(comm->device_,
                           DeviceCollectives::Create(*link, [self](const absl::Status& cause) { self->Abort(cause); }));
  }
  return comm;
}

Communicator::Communicator(std::unique_ptr<Transport> transport, CommunicatorOptions options, absl::Duration timeout,
                           Algorithm env_algorithm, size_t inline_bytes, AgreementChecks checks, HostLayout layout)
    : transport_(std::move(transport)),
      native_(transport_->native_collectives()),
      rank_(transport_->rank()),
      size_(transport_->size()),
      transport_name_(transport_->name()),
      name_(options.name.empty() ? "world" : options.name),
      layout_(std::move(layout)),
      device_memory_only_(transport_->device_memory_only()),
      options_(options),
      timeout_(timeout),
      env_algorithm_(env_algorithm),
      inline_bytes_(inline_bytes),
      checks_(checks),
      native_check_(native_ != nullptr ? absl::StrCat("native ", native_->native_name()) : ""),
      selector_(CapsFor(*transport_, layout_, options), options.thresholds),
      staging_(rank_, transport_name_),
      stragglers_(device_memory_only_ || rank_ < 0 ? 1 : size_,
                  options.straggler_window.value_or(static_cast<int>(kStragglerKnob.Int().value_or(1000)))),
      flight_(rank_, size_, transport_name_, 0, name_, &mu_),
      timeline_(Timeline::FromEnv(rank_, size_,
                                  name_ == "world" ? transport_name_ : absl::StrCat(transport_name_, ", group ", name_))) {
  progress_ = std::thread([this] { ProgressLoop(); });
}

Communicator::~Communicator() {
  {
    LightMutexLock lock(&mu_);
    stopping_ = true;
    progress_wakeup_.Signal();
  }
  progress_.join();
  device_.reset();  // drains the device; its callbacks use the members below
}

void Communicator::Abort(const absl::Status& cause) {
  std::deque<Task> dropped;
  bool abort_transport_here = false;
  absl::Status failure;
  {
    LightMutexLock lock(&mu_);
    if (failure_.ok()) failure_ = cause.ok() ? absl::CancelledError("communicator aborted") : cause;
    failed_.store(true);
    failure = failure_;
    dropped.swap(queue_);
    // The transport is not thread-safe: abort it here only when no collective
    // is using it; otherwise the thread running one does, right after it.
    if (!transport_aborted_ && !busy_) {
      transport_aborted_ = true;
      busy_ = true;
      abort_transport_here = true;
    }
  }
  for (Task& task : dropped) {
    flight_.Finished(task.args.seq, failure);
    task.work->Finish(failure);
  }
  if (device_) device_->Abort(failure);  // what is queued on the device fails now
  if (abort_transport_here) {
    AbortTransports(failure);  // tells the peers
    LightMutexLock lock(&mu_);
    busy_ = false;
    progress_wakeup_.Signal();
  }
}

Algorithm Communicator::Resolve(Algorithm requested) const {
  if (requested == Algorithm::kAuto) requested = options_.algorithm;
  if (requested == Algorithm::kAuto) requested = env_algorithm_;
  return requested;
}

absl::StatusOr<Algorithm> Communicator::AlgorithmFor(CollectiveKind kind, size_t count, DType dtype, PeerMemory memory,
                                                     const CallOptions& call) const {
  BRAID_ASSIGN_OR_RETURN(const Selection selection, Select(kind, count, dtype, Resolve(call.algorithm), memory));
  return selection.window_vote ? Algorithm::kWindow : selection.algorithm;
}

absl::StatusOr<Communicator::Selection> Communicator::Select(CollectiveKind kind, size_t count, DType dtype,
                                                             Algorithm requested, PeerMemory memory) const {
  absl::StatusOr<Algorithm> algorithm = selector_.Select(kind, count, DTypeSize(dtype), requested);
  if (!algorithm.ok()) return Annotate(algorithm.status(), absl::StrCat("rank ", rank_));
  const bool window_vote = *algorithm == Algorithm::kPeerAccess && kind == CollectiveKind::kAllReduce &&
                           selector_.WantsWindow(count, DTypeSize(dtype), requested, memory);
  return Selection{*algorithm, window_vote};
}

absl::StatusOr<WorkHandle> Communicator::Enqueue(const Request& request, const CallOptions& call) {
  if (rank_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(CollectiveKindName(request.kind), " on group '", name_,
                                                      "': this rank is not a member of it"));
  }
  const PeerMemory memory = PeerMemoryOf(request.in, request.out);
  const Algorithm requested = Resolve(call.algorithm);
  Task task;
  if (device_ && request.kind != CollectiveKind::kSplit) {
    // Now, in the caller's order: the collective follows what its stream has queued.
    BRAID_ASSIGN_OR_RETURN(task.ready, device_->Ready(call.stream != nullptr ? call.stream : options_.stream));
  }
  {
    LightMutexLock lock(&mu_);
    if (!failure_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, ": communicator aborted by an earlier error: ", failure_.message()));
    }
    LastSelection& last = last_selection_;
    if (last.chosen.algorithm == Algorithm::kAuto || last.kind != request.kind || last.count != request.count ||
        last.dtype != request.dtype || last.requested != requested || last.memory != memory) {
      BRAID_ASSIGN_OR_RETURN(const Selection chosen, Select(request.kind, request.count, request.dtype, requested, memory));
      last = {request.kind, request.count, request.dtype, requested, memory, chosen};
    }
    const Algorithm algorithm = last.chosen.algorithm;
    task.window_vote = last.chosen.window_vote;
    CollectiveArgs& args = task.args;
    args.kind = request.kind;
    // Point to point is not collective: the other ranks do not count it.
    args.seq = request.kind == CollectiveKind::kSendRecv ? 0 : next_seq_++;
    args.dtype = request.dtype;
    args.op = request.op;
    args.root = request.kind == CollectiveKind::kSendRecv ? -1 : request.root;
    args.count = request.count;
    const absl::Time now = CoarseNow();
    args.deadline = now + call.timeout.value_or(timeout_);
    args.segment_bytes = options_.segment_bytes;
    task.work = Work::Reuse(absl::MakeSpan(spare_works_), args.seq);
    task.algorithm = algorithm;
    task.peer = request.kind == CollectiveKind::kSendRecv ? request.root : -1;
    task.bytes = request.bytes;
    task.split = request.split;
    task.queued = timeline_ ? absl::Now() : absl::Time();
    // A device collective only queues work: inline at any size.
    task.inline_run = request.may_inline && !call.async &&
                      (request.bytes <= inline_bytes_ || task.ready != nullptr || call.caller_thread) && !busy_ &&
                      queue_.empty();
    // An inline task is recorded as running at once (one record, not two).
    flight_.QueuedHeld(args, request.bytes, AlgorithmName(algorithm), /*running=*/task.inline_run, now);
    if (!task.inline_run) {
      if (request.in != nullptr) task.in = *request.in;
      if (request.out != nullptr) task.out = *request.out;
      WorkHandle work = task.work;
      queue_.push_back(std::move(task));
      progress_wakeup_.Signal();
      return work;
    }
    busy_ = true;
  }
  static const Tensor kNone;
  const bool succeeded =
      RunTask(task, request.in != nullptr ? *request.in : kNone, request.out != nullptr ? *request.out : kNone);
  ReleaseTransport(succeeded ? &task : nullptr);
  return std::move(task.work);
}

absl::Status Communicator::Agree(const Task& task) {
  if (task.args.seq == 0 || size_ == 1 || checks_ == AgreementChecks::kOff) return absl::OkStatus();
  if (task.ready != nullptr) {
    // On the device it costs a host wait for the device: only when asked.
    if (checks_ != AgreementChecks::kEvery) return absl::OkStatus();
    return CheckAgreement(rank_, size_, task.args, "BRAID_DEBUG=detail",
                          [&](const FrameHeader& mine, absl::Span<FrameHeader> all) {
                            return device_->GatherBytes(task.args, AsBytes(mine),
                                                        absl::MakeSpan(reinterpret_cast<std::byte*>(all.data()),
                                                                       all.size() * sizeof(FrameHeader)));
                          });
  }
  if (task.algorithm == Algorithm::kNative) {
    // The engine's messages carry no frame headers: check by default.
    return CheckAgreement(rank_, size_, task.args, native_check_.c_str(),
                          [&](const FrameHeader& mine, absl::Span<FrameHeader> all) {
                            return native_->NativeGatherHeaders(task.args, mine, all);
                          });
  }
  if (checks_ != AgreementChecks::kEvery) return absl::OkStatus();
  // Over braid's ring; the exchange is framed as kCrossCheck with the same
  // seq, so ranks whose sequence numbers already differ fail in the frame
  // check instead.
  return CheckAgreement(rank_, size_, task.args, "BRAID_DEBUG=detail",
                        [&](const FrameHeader& mine, absl::Span<FrameHeader> all) {
                          return GatherBytes(task, CollectiveKind::kCrossCheck, AsBytes(mine),
                                             absl::MakeSpan(reinterpret_cast<std::byte*>(all.data()),
                                                            all.size() * sizeof(FrameHeader)));
                        });
}

absl::Status Communicator::GatherBytes(const Task& task, CollectiveKind kind, absl::Span<const std::byte> mine,
                                       absl::Span<std::byte> all) {
  CollectiveArgs args = task.args;
  args.kind = kind;
  args.dtype = DType::kU8;
  args.op = ReduceOp::kSum;
  args.root = -1;
  args.count = mine.size();
  return GatherFromAll(*transport_, args, mine, all, scratch_);
}

absl::Status Communicator::DispatchNative(const Task& task, const Tensor& in, const Tensor& out) {
  const CollectiveArgs& args = task.args;
  switch (args.kind) {
    case CollectiveKind::kAllReduce: return native_->NativeAllReduce(args, ConstBytes(in), Bytes(out));
    case CollectiveKind::kReduceScatter: return native_->NativeReduceScatter(args, ConstBytes(in), Bytes(out));
    case CollectiveKind::kAllGather: return native_->NativeAllGather(args, ConstBytes(in), Bytes(out));
    case CollectiveKind::kBroadcast: return native_->NativeBroadcast(args, Bytes(out));
    case CollectiveKind::kReduce: return native_->NativeReduce(args, ConstBytes(in), Bytes(out));
    case CollectiveKind::kBarrier: return native_->NativeBarrier(args);
    case CollectiveKind::kAllToAll: return native_->NativeAllToAll(args, ConstBytes(in), Bytes(out));
    default: break;
  }
  return absl::InternalError(absl::StrCat("no native ", CollectiveKindName(args.kind)));
}

absl::Status Communicator::DispatchDevice(const Task& task, const Tensor& in, const Tensor& out) {
  const absl::Time started = timeline_ ? absl::Now() : absl::Time();
  WorkHandle work = task.work;
  const CollectiveArgs args = task.args;
  const Algorithm algorithm = task.algorithm;
  const size_t bytes = task.bytes;
  const absl::Time queued = task.queued;
  // Runs on the stream's callback thread (or the aborting one): no device calls.
  auto done = [this, work, args, algorithm, bytes, queued, started](absl::Status status) {
    if (timeline_) timeline_->Collective(args, AlgorithmName(algorithm), bytes, queued, started, absl::Now(), status.ok());
    flight_.Finished(args.seq, status);
    work->Finish(status.ok() ? std::move(status)
                             : Annotate(status, absl::StrCat(CollectiveKindName(args.kind), " seq ", args.seq)));
  };
  BRAID_ASSIGN_OR_RETURN(std::shared_ptr<Event> finished,
                         device_->Run(algorithm, args, task.peer, in.defined() ? in.data() : nullptr,
                                      out.defined() ? out.data() : nullptr, *task.ready, std::move(done)));
  work->Queued(std::move(finished));
  return absl::OkStatus();
}

absl::Status Communicator::Dispatch(const Task& task, const Tensor& in, const Tensor& out) {
  if (task.args.kind == CollectiveKind::kSplit) return DispatchSplit(task);
  if (task.ready != nullptr) return DispatchDevice(task, in, out);
  if (task.algorithm == Algorithm::kNative) return DispatchNative(task, in, out);
  if (task.algorithm == Algorithm::kHierarchical) return DispatchHierarchical(task, ConstBytes(in), Bytes(out));
  if (task.algorithm == Algorithm::kP2p) {
    if (in.defined()) return SendTo(*transport_, task.args, task.peer, ConstBytes(in));
    if (task.peer != kAnySource) {
      task.work->source_rank_ = task.peer;
      return RecvFrom(*transport_, task.args, task.peer, Bytes(out));
    }
    BRAID_ASSIGN_OR_RETURN(task.work->source_rank_, RecvFromAny(*transport_, task.args, Bytes(out)));
    return absl::OkStatus();
  }
  return RunAlgorithm(*transport_, task.algorithm, task.args, ConstBytes(in), Bytes(out), scratch_,
                      selector_.window_plan(), task.window_vote);
}

bool Communicator::RunTask(Task& task, const Tensor& in, const Tensor& out) {
  const absl::Time started = timeline_ ? absl::Now() : absl::Time();
  const bool timed = stragglers_.Times(task.args.seq);
  const uint64_t stamp = timed ? StragglerMonitor::Stamp() : 0;
  absl::Status status = Agree(task);
  if (status.ok()) {
    if (!device_memory_only_ && HostStaging::Needed(in, out)) {
      status = staging_.Run(in, out, [&](const Tensor& host_in, const Tensor& host_out) {
        return Dispatch(task, host_in, host_out);
      });
    } else {
      status = Dispatch(task, in, out);
    }
  }
  // Collectives only (point to point is not every rank's): each rank reaches
  // the window's end at the same one.
  if (status.ok() && timed && stragglers_.Record(stamp, StragglerMonitor::Stamp())) {
    status = ExchangeStragglerWindow(task);
  }
  // A device collective queued: its callback finishes the Work and the records.
  const bool on_device = status.ok() && task.ready != nullptr;
  const char* algorithm = AlgorithmName(task.algorithm);
  if (timeline_ && !on_device) {
    timeline_->Collective(task.args, algorithm, task.bytes, task.queued, started, absl::Now(), status.ok());
  }
  const bool succeeded_inline = status.ok() && task.inline_run && !on_device;
  if (!on_device && !succeeded_inline) flight_.Finished(task.args.seq, status);
  if (!status.ok()) {
    status = Annotate(status, absl::StrCat(CollectiveKindName(task.args.kind), " seq ", task.args.seq));
    absl::StatusOr<std::string> dump = flight_.Dump(std::string(status.message()));
    BRAID_LOG(ERROR) << status << " (flight recorder: "
                     << (dump.ok() ? *dump : std::string(dump.status().message())) << ")";
    Abort(status);
  }
  // This collective's error, or an Abort() that came while it ran: the peers
  // are told now that the transport is free.
  absl::Status abort_transport;
  if (failed_.load()) {
    LightMutexLock lock(&mu_);
    if (!failure_.ok() && !transport_aborted_) {
      transport_aborted_ = true;
      abort_transport = failure_;
    }
  }
  if (!abort_transport.ok()) AbortTransports(abort_transport);
  if (on_device) return false;
  if (task.inline_run && task.ready == nullptr) {
    task.work->FinishUnshared(std::move(status));
  } else {
    task.work->Finish(std::move(status));
  }
  return succeeded_inline;
}

void Communicator::ProgressLoop() {
  RunAsBackgroundThread();  // an issue returns before the collective takes the caller's core
  while (true) {
    Task task;
    {
      LightMutexLock lock(&mu_);
      while ((queue_.empty() && !stopping_) || busy_) progress_wakeup_.Wait(&mu_);
      if (queue_.empty()) break;  // stopping, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      if (!failure_.ok()) {
        flight_.FinishedHeld(task.args.seq, failure_);
        task.work->Finish(failure_);
        continue;
      }
      flight_.RunningHeld(task.args.seq);
      busy_ = true;
    }
    RunTask(task, task.in, task.out);
    ReleaseTransport();
  }
}

void Communicator::AbortTransports(const absl::Status& cause) {
  transport_->Abort(cause);
  if (levels_) levels_->Abort(cause);
}

void Communicator::ReleaseTransport(const Task* succeeded) {
  absl::Status abort_transport;
  {
    LightMutexLock lock(&mu_);
    if (succeeded != nullptr) flight_.FinishedHeld(succeeded->args.seq, absl::OkStatus());
    if (failure_.ok() || transport_aborted_) {
      busy_ = false;
      if (!queue_.empty()) progress_wakeup_.Signal();
      return;
    }
    transport_aborted_ = true;
    abort_transport = failure_;
  }
  AbortTransports(abort_transport);
  LightMutexLock lock(&mu_);
  busy_ = false;
  if (!queue_.empty()) progress_wakeup_.Signal();
}

}  // namespace braid
