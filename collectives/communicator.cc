#include "collectives/communicator.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/status.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kInlineKnob, "BRAID_INLINE_BYTES", "65536",
               "Collectives up to this size run on the calling thread when the communicator is idle.");
BRAID_ENV_KNOB(kDebugKnob, "BRAID_DEBUG", "",
               "detail: before every collective, all ranks exchange what they are about to run and fail, listing "
               "each rank's call, if they differ (one extra small all-gather per collective).");
BRAID_ENV_KNOB(kAlgoKnob, "BRAID_ALGO", "auto",
               "All-reduce algorithm: auto, ring, tree, rhd, direct or native (every collective as the transport's "
               "engine's own call: mpi).");

// A send or receive issued on one rank may wait for the other's matching
// call: running it inline could block a caller that issues both (send, then
// receive) in one thread. They always go to the progress thread.
constexpr size_t kNeverInline = SIZE_MAX;

// Below this, latency dominates: log2(n) steps (rhd) beat 2(n-1) (ring).
constexpr size_t kSmallAllReduceBytes = size_t{64} << 10;

// The all-reduce selection table measured by braid_bench --tune (bench/tune.sh),
// with the machine each group came from in its comments.
struct TunedRange {
  const char* transport;
  int world_size;
  uint64_t max_bytes;  // 0: no bound
  const char* algorithm;
};
constexpr TunedRange kTunedRanges[] = {
#include "collectives/allreduce_tuning.inc"
    {nullptr, 0, 0, nullptr},  // the end (and what keeps the array non-empty)
};

absl::Span<const std::byte> ConstBytes(const Tensor& t) {
  return absl::MakeConstSpan(static_cast<const std::byte*>(t.data()), t.nbytes());
}
absl::Span<std::byte> Bytes(const Tensor& t) { return absl::MakeSpan(static_cast<std::byte*>(t.data()), t.nbytes()); }

}  // namespace

void Work::Finish(absl::Status status) {
  MutexLock lock(&mu_);
  status_ = std::move(status);
  done_.store(true, std::memory_order_release);
}

void Work::FinishUnshared(absl::Status status) {
  status_ = std::move(status);
  done_.store(true, std::memory_order_release);
}

std::shared_ptr<Work> Work::Make(uint64_t seq) {
  struct Constructible : Work {
    explicit Constructible(uint64_t seq) : Work(seq) {}
  };
  return std::make_shared<Constructible>(seq);
}

absl::Status Work::Wait(Deadline deadline) {
  if (done_.load(std::memory_order_acquire)) return status_;
  MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_.load(std::memory_order_relaxed); };
  if (!AwaitWithDeadline(&mu_, absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("collective seq ", seq_, " still running at the wait's deadline"));
  }
  return status_;
}

bool Work::Test() { return done_.load(std::memory_order_acquire); }

absl::Status Work::status() {
  if (!done_.load(std::memory_order_acquire)) return absl::UnavailableError(absl::StrCat("collective seq ", seq_, " still running"));
  return status_;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(std::unique_ptr<Transport> transport,
                                                                   CommunicatorOptions options) {
  if (!transport) return absl::InvalidArgumentError("Communicator::Create without a transport");
  absl::Duration timeout;
  if (options.timeout.has_value()) {
    timeout = *options.timeout;
  } else {
    BRAID_ASSIGN_OR_RETURN(timeout, DefaultTimeout());
  }
  BRAID_ASSIGN_OR_RETURN(Algorithm env_algorithm, ParseAlgorithm(kAlgoKnob.String()));
  if (kInlineKnob.IsSet()) {
    BRAID_ASSIGN_OR_RETURN(int64_t inline_bytes, kInlineKnob.Int());
    options.inline_bytes = static_cast<size_t>(std::max<int64_t>(0, inline_bytes));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(transport), options, timeout, env_algorithm));
}

Communicator::Communicator(std::unique_ptr<Transport> transport, CommunicatorOptions options, absl::Duration timeout,
                           Algorithm env_algorithm)
    : transport_(std::move(transport)),
      native_(dynamic_cast<NativeCollectives*>(transport_.get())),
      rank_(transport_->rank()),
      size_(transport_->size()),
      transport_name_(transport_->name()),
      device_native_(transport_name_ == "nccl" && native_ != nullptr),
      options_(options),
      timeout_(timeout),
      env_algorithm_(env_algorithm),
      debug_detail_(kDebugKnob.String() == "detail"),
      flight_(rank_, size_, transport_name_),
      timeline_(Timeline::FromEnv(rank_, size_, transport_name_)) {
  for (const TunedRange& range : kTunedRanges) {
    if (range.transport == nullptr || transport_name_ != range.transport || size_ != range.world_size) continue;
    absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(range.algorithm);
    // A table naming an algorithm this build lacks is ignored, never half-used.
    if (!algorithm.ok() || *algorithm == Algorithm::kAuto || *algorithm == Algorithm::kNative) {
      tuned_.clear();
      break;
    }
    tuned_.emplace_back(range.max_bytes, *algorithm);
  }
  progress_ = std::thread([this] { ProgressLoop(); });
}

Communicator::~Communicator() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    progress_wakeup_.Signal();
  }
  progress_.join();
}

void Communicator::Abort(const absl::Status& cause) {
  std::deque<Task> dropped;
  bool abort_transport_here = false;
  absl::Status failure;
  {
    MutexLock lock(&mu_);
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
  if (abort_transport_here) {
    transport_->Abort(failure);  // tells the peers
    MutexLock lock(&mu_);
    busy_ = false;
    progress_wakeup_.Signal();
  }
}

Algorithm Communicator::Resolve(Algorithm requested) const {
  if (requested == Algorithm::kAuto) requested = options_.algorithm;
  if (requested == Algorithm::kAuto) requested = env_algorithm_;
  return requested;
}

absl::StatusOr<bool> Communicator::UseNative(const CallOptions& call, CollectiveKind kind) const {
  if (device_native_) return true;  // nccl: native only (see device_native_)
  if (Resolve(call.algorithm) != Algorithm::kNative) return false;
  if (native_ == nullptr) {
    return absl::UnimplementedError(absl::StrCat("rank ", rank_, ": native ", CollectiveKindName(kind),
                                                 " needs a transport with its own collectives (mpi); this "
                                                 "communicator runs over ",
                                                 transport_name_));
  }
  return true;
}

Algorithm Communicator::ChooseAllReduce(size_t bytes, Algorithm requested) const {
  requested = Resolve(requested);
  if (requested != Algorithm::kAuto) return requested;
  for (const auto& [max_bytes, algorithm] : tuned_) {
    if (max_bytes == 0 || bytes <= max_bytes) return algorithm;
  }
  // Ranks that share memory: direct through the windows won every size here.
  if (transport_->shared_windows() != nullptr) return Algorithm::kDirect;
  return bytes <= kSmallAllReduceBytes ? Algorithm::kRhd : Algorithm::kRing;
}

absl::Status Communicator::CheckTensor(const Tensor& tensor, const char* what) const {
  if (!tensor.defined()) return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": ", what, " is undefined"));
  if (device_native_ && !tensor.device().is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": ", what, " ", tensor.DebugString(),
                                                   ": the ", transport_name_, " communicator takes CUDA tensors"));
  }
  if (!device_native_ && tensor.device().is_cuda() && !CudaCompiledIn()) {
    return absl::UnimplementedError(absl::StrCat(
        "rank ", rank_, ": ", what, " ", tensor.DebugString(), ": CUDA tensors on the ", transport_name_,
        " transport are staged through pinned host memory, which needs a --config=cuda build of braid; this binary "
        "was built without it"));
  }
  if (!tensor.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": ", what, " ", tensor.DebugString(),
                                                   " is not contiguous"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkHandle> Communicator::Enqueue(CollectiveKind kind, DType dtype, ReduceOp op, int root,
                                                 size_t count, size_t bytes, const CallOptions& call,
                                                 const char* algorithm, const Tensor& in, const Tensor& out,
                                                 RunFn run) {
  Task task;
  {
    MutexLock lock(&mu_);
    if (!failure_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, ": communicator aborted by an earlier error: ", failure_.message()));
    }
    CollectiveArgs args;
    args.kind = kind;
    // Point to point is not collective: the other ranks do not count it.
    args.seq = kind == CollectiveKind::kSendRecv ? 0 : next_seq_++;
    args.dtype = dtype;
    args.op = op;
    args.root = root;
    args.count = count;
    args.deadline = CoarseNow() + call.timeout.value_or(timeout_);
    args.segment_bytes = options_.segment_bytes;
    task = Task{Work::Make(args.seq), args, Tensor(), Tensor(), std::move(run), bytes, algorithm,
                timeline_ ? absl::Now() : absl::Time()};
    task.inline_run = bytes <= options_.inline_bytes && !busy_ && queue_.empty();
    // An inline task is recorded as running at once (one record, not two).
    flight_.Queued(args, bytes, /*running=*/task.inline_run);
    if (!task.inline_run) {
      task.in = in;
      task.out = out;
      WorkHandle work = task.work;
      queue_.push_back(std::move(task));
      progress_wakeup_.Signal();
      return work;
    }
    busy_ = true;
  }
  RunTask(task, in, out);
  ReleaseTransport();
  return task.work;
}

absl::Status Communicator::CrossCheck(const CollectiveArgs& args) {
  // Every rank contributes the header its collective's frames will carry;
  // the exchange itself is framed as kCrossCheck with the same seq, so ranks
  // whose sequence numbers already differ fail in the frame check instead.
  const FrameHeader mine = CollectiveHeader(args);
  CollectiveArgs check = args;
  check.kind = CollectiveKind::kCrossCheck;
  check.dtype = DType::kU8;
  check.op = ReduceOp::kSum;
  check.root = -1;
  check.count = sizeof(FrameHeader);
  std::vector<FrameHeader> all(static_cast<size_t>(size_));
  BRAID_RETURN_IF_ERROR(RingAllGather(*transport_, check, AsBytes(mine),
                                      absl::MakeSpan(reinterpret_cast<std::byte*>(all.data()),
                                                     all.size() * sizeof(FrameHeader))));
  bool agree = true;
  for (const FrameHeader& other : all) {
    agree = agree && other.kind == mine.kind && other.dtype == mine.dtype && other.reduce_op == mine.reduce_op &&
            other.root == mine.root && other.count == mine.count && other.seq == mine.seq;
  }
  if (agree) return absl::OkStatus();
  std::string calls;
  for (size_t r = 0; r < all.size(); ++r) {
    FrameHeader h = all[r];
    h.tag = 0;
    h.bytes = 0;
    absl::StrAppend(&calls, r == 0 ? "" : "; ", "rank ", r, " issued ", DescribeFrame(h));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("rank ", rank_, ": BRAID_DEBUG=detail: the ranks issued different collectives: ", calls));
}

absl::Status Communicator::RunStaged(const Task& task, const Tensor& in, const Tensor& out) {
  const CollectiveArgs& args = task.args;
  auto on_gpu = [](const Tensor& t) { return t.defined() && t.device().is_cuda(); };
  const Device device = on_gpu(in) ? in.device() : out.device();
  auto fail = [&](const absl::Status& status) {
    // RunTask adds the collective and its sequence number.
    return Annotate(status, absl::StrCat("rank ", rank_, ": staging ", ToString(device),
                                         " tensors through host memory for ", transport_name_));
  };
  // Every CUDA call below runs on the tensor's GPU (no stray context on GPU 0).
  absl::StatusOr<CudaDeviceScope> scope = CudaDeviceScope::Enter(device);
  if (!scope.ok()) return fail(scope.status());
  // In place (one tensor read and written): one host copy serves both.
  const bool shared = on_gpu(in) && on_gpu(out) && in.data() == out.data() && in.nbytes() == out.nbytes();
  constexpr size_t kAlign = 256;
  auto padded = [](size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  const size_t out_bytes = on_gpu(out) ? padded(out.nbytes()) : 0;
  const size_t in_bytes = on_gpu(in) && !shared ? padded(in.nbytes()) : 0;
  if (staging_.nbytes() < out_bytes + in_bytes) {
    // Grow to a power of two (at least 1 MiB), so a sweep of sizes allocates
    // a few times, not once per size; free the old buffer first.
    size_t grown = size_t{1} << 20;
    while (grown < out_bytes + in_bytes) grown *= 2;
    staging_ = Tensor();
    absl::StatusOr<Tensor> pinned = Tensor::EmptyPinned({static_cast<int64_t>(grown)}, DType::kU8);
    if (!pinned.ok()) return fail(pinned.status());
    staging_ = *std::move(pinned);
  }
  std::byte* base = static_cast<std::byte*>(staging_.data());
  const Tensor host_out = on_gpu(out) ? Tensor::View(base, out.shape(), out.dtype()) : out;
  Tensor host_in = in;
  if (on_gpu(in)) {
    host_in = shared ? host_out : Tensor::View(base + out_bytes, in.shape(), in.dtype());
    if (absl::Status copied = host_in.CopyFrom(in); !copied.ok()) return fail(copied);
  }
  BRAID_RETURN_IF_ERROR(task.run(args, host_in, host_out));
  if (on_gpu(out)) {
    Tensor device_out = out;
    if (absl::Status copied = device_out.CopyFrom(host_out); !copied.ok()) return fail(copied);
  }
  return absl::OkStatus();
}

void Communicator::RunTask(Task& task, const Tensor& in, const Tensor& out) {
  if (!task.inline_run) flight_.Running(task.args.seq);
  const absl::Time started = timeline_ ? absl::Now() : absl::Time();
  // The cross-check runs braid's ring on host memory; nccl checks agreement itself (BRAID_NCCL_NATIVE_CHECK).
  absl::Status status =
      debug_detail_ && !device_native_ && task.args.seq > 0 ? CrossCheck(task.args) : absl::OkStatus();
  if (status.ok()) {
    const bool staged = !device_native_ && ((in.defined() && in.device().is_cuda()) ||
                                            (out.defined() && out.device().is_cuda()));
    status = staged ? RunStaged(task, in, out) : task.run(task.args, in, out);
  }
  if (timeline_) {
    const CollectiveArgs& a = task.args;
    timeline_->Span(absl::StrCat(CollectiveKindName(a.kind), " ", task.algorithm), Timeline::Track::kCollectives,
                    started, absl::Now(),
                    absl::StrCat("\"seq\": ", a.seq, ", \"bytes\": ",
                                 task.bytes == kNeverInline ? a.count * DTypeSize(a.dtype) : task.bytes,
                                 ", \"count\": ", a.count, ", \"dtype\": \"", DTypeName(a.dtype), "\", \"op\": \"",
                                 ReduceOpName(a.op), "\", \"root\": ", a.root, ", \"algorithm\": \"", task.algorithm,
                                 "\", \"queued_us\": ", absl::ToInt64Microseconds(started - task.queued),
                                 ", \"ok\": ", status.ok() ? "true" : "false"));
  }
  flight_.Finished(task.args.seq, status);
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
    MutexLock lock(&mu_);
    if (!failure_.ok() && !transport_aborted_) {
      transport_aborted_ = true;
      abort_transport = failure_;
    }
  }
  if (!abort_transport.ok()) transport_->Abort(abort_transport);
  if (task.inline_run) {
    task.work->FinishUnshared(std::move(status));
  } else {
    task.work->Finish(std::move(status));
  }
}

void Communicator::ProgressLoop() {
  while (true) {
    Task task;
    {
      MutexLock lock(&mu_);
      while ((queue_.empty() && !stopping_) || busy_) Wait(&progress_wakeup_, &mu_);
      if (queue_.empty()) break;  // stopping, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      if (!failure_.ok()) {
        flight_.Finished(task.args.seq, failure_);
        task.work->Finish(failure_);
        continue;
      }
      busy_ = true;
    }
    RunTask(task, task.in, task.out);
    ReleaseTransport();
  }
}

void Communicator::ReleaseTransport() {
  absl::Status abort_transport;
  {
    MutexLock lock(&mu_);
    if (failure_.ok() || transport_aborted_) {
      busy_ = false;
      if (!queue_.empty()) progress_wakeup_.Signal();
      return;
    }
    transport_aborted_ = true;
    abort_transport = failure_;
  }
  transport_->Abort(abort_transport);
  MutexLock lock(&mu_);
  busy_ = false;
  if (!queue_.empty()) progress_wakeup_.Signal();
}

absl::StatusOr<WorkHandle> Communicator::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op,
                                                   CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  if (input.dtype() != output.dtype() || input.numel() != output.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": allreduce input ", input.DebugString(),
                                                   " and output ", output.DebugString(), " differ"));
  }
  const Algorithm algorithm = ChooseAllReduce(input.nbytes(), call.algorithm);
  BRAID_ASSIGN_OR_RETURN(const bool native, UseNative(call, CollectiveKind::kAllReduce));
  if (native) {
    return Enqueue(CollectiveKind::kAllReduce, input.dtype(), op, -1, static_cast<size_t>(input.numel()),
                   input.nbytes(), call, "native",
                   input, output, [this](const CollectiveArgs& args, const Tensor& in, const Tensor& out) {
                     return native_->NativeAllReduce(args, ConstBytes(in), Bytes(out));
                   });
  }
  return Enqueue(CollectiveKind::kAllReduce, input.dtype(), op, -1, static_cast<size_t>(input.numel()),
                 input.nbytes(), call, AlgorithmName(algorithm),
                 input, output, [this, algorithm](const CollectiveArgs& args, const Tensor& in, const Tensor& out) {
                   switch (algorithm) {
                     case Algorithm::kTree:
                       return TreeAllReduce(*transport_, args, ConstBytes(in), Bytes(out), scratch_);
                     case Algorithm::kRhd:
                       return RhdAllReduce(*transport_, args, ConstBytes(in), Bytes(out), scratch_);
                     case Algorithm::kDirect:
                       return DirectAllReduce(*transport_, args, ConstBytes(in), Bytes(out), scratch_);
                     default:
                       return RingAllReduce(*transport_, args, ConstBytes(in), Bytes(out), scratch_);
                   }
                 });
}

absl::StatusOr<WorkHandle> Communicator::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                                       CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  if (input.dtype() != output.dtype() || input.numel() != output.numel() * size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": reducescatter input ", input.DebugString(),
                                                   " must have ", size_, " x the output's ", output.DebugString()));
  }
  BRAID_ASSIGN_OR_RETURN(const bool native, UseNative(call, CollectiveKind::kReduceScatter));
  const bool direct = !native && CanCopyDirect(*transport_, output.nbytes());
  return Enqueue(CollectiveKind::kReduceScatter, input.dtype(), op, -1, static_cast<size_t>(output.numel()),
                 input.nbytes(), call, native ? "native" : direct ? "direct" : "ring", input, output,
                 [this, native, direct](const CollectiveArgs& args, const Tensor& in, const Tensor& out) {
                   if (native) return native_->NativeReduceScatter(args, ConstBytes(in), Bytes(out));
                   if (direct) return DirectReduceScatter(*transport_, args, ConstBytes(in), Bytes(out), scratch_);
                   return RingReduceScatter(*transport_, args, ConstBytes(in), Bytes(out), scratch_);
                 });
}

absl::StatusOr<WorkHandle> Communicator::AllGather(const Tensor& input, const Tensor& output, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  if (input.dtype() != output.dtype() || output.numel() != input.numel() * size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": allgather output ", output.DebugString(),
                                                   " must have ", size_, " x the input's ", input.DebugString()));
  }
  BRAID_ASSIGN_OR_RETURN(const bool native, UseNative(call, CollectiveKind::kAllGather));
  const bool direct = !native && CanCopyDirect(*transport_, input.nbytes());
  return Enqueue(CollectiveKind::kAllGather, input.dtype(), ReduceOp::kSum, -1, static_cast<size_t>(input.numel()),
                 output.nbytes(), call, native ? "native" : direct ? "direct" : "ring", input, output,
                 [this, native, direct](const CollectiveArgs& args, const Tensor& in, const Tensor& out) {
                   if (native) return native_->NativeAllGather(args, ConstBytes(in), Bytes(out));
                   if (direct) return DirectAllGather(*transport_, args, ConstBytes(in), Bytes(out));
                   return RingAllGather(*transport_, args, ConstBytes(in), Bytes(out));
                 });
}

absl::StatusOr<WorkHandle> Communicator::Broadcast(const Tensor& tensor, int root, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(tensor, "tensor"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": broadcast root ", root, " not in [0, ", size_, ")"));
  }
  BRAID_ASSIGN_OR_RETURN(const bool native, UseNative(call, CollectiveKind::kBroadcast));
  return Enqueue(CollectiveKind::kBroadcast, tensor.dtype(), ReduceOp::kSum, root, static_cast<size_t>(tensor.numel()),
                 tensor.nbytes(), call, native ? "native" : "chain",
                 // Only the root's tensor is read: the others are written, never staged in.
                 rank_ == root ? tensor : Tensor(), tensor,
                 [this, native](const CollectiveArgs& args, const Tensor&, const Tensor& out) {
                   if (native) return native_->NativeBroadcast(args, Bytes(out));
                   return ChainBroadcast(*transport_, args, Bytes(out));
                 });
}

absl::StatusOr<WorkHandle> Communicator::Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root,
                                                CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": reduce root ", root, " not in [0, ", size_, ")"));
  }
  if (rank_ == root) {
    BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
    if (input.dtype() != output.dtype() || input.numel() != output.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": reduce input ", input.DebugString(),
                                                     " and output ", output.DebugString(), " differ"));
    }
  }
  BRAID_ASSIGN_OR_RETURN(const bool native, UseNative(call, CollectiveKind::kReduce));
  return Enqueue(CollectiveKind::kReduce, input.dtype(), op, root, static_cast<size_t>(input.numel()),
                 input.nbytes(), call, native ? "native" : "chain",
                 // The output is the root's only (undefined elsewhere: nothing to stage).
                 input, rank_ == root ? output : Tensor(),
                 [this, native](const CollectiveArgs& args, const Tensor& in, const Tensor& out) {
                   const absl::Span<std::byte> result = out.defined() ? Bytes(out) : absl::Span<std::byte>();
                   if (native) return native_->NativeReduce(args, ConstBytes(in), result);
                   return ChainReduce(*transport_, args, ConstBytes(in), result, scratch_);
                 });
}

absl::StatusOr<WorkHandle> Communicator::AllToAll(const Tensor& input, const Tensor& output, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  if (input.dtype() != output.dtype() || input.numel() != output.numel() || input.numel() % size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": alltoall input ", input.DebugString(),
                                                   " and output ", output.DebugString(),
                                                   " must match and split into ", size_, " blocks"));
  }
  BRAID_ASSIGN_OR_RETURN(const bool native, UseNative(call, CollectiveKind::kAllToAll));
  const bool direct = !native && CanCopyDirect(*transport_, input.nbytes() / static_cast<size_t>(size_));
  return Enqueue(CollectiveKind::kAllToAll, input.dtype(), ReduceOp::kSum, -1,
                 static_cast<size_t>(input.numel() / size_), input.nbytes(), call,
                 native ? "native" : direct ? "direct" : "pairwise", input, output,
                 [this, native, direct](const CollectiveArgs& args, const Tensor& in, const Tensor& out) {
                   if (native) return native_->NativeAllToAll(args, ConstBytes(in), Bytes(out));
                   if (direct) return DirectAllToAll(*transport_, args, ConstBytes(in), Bytes(out));
                   return PairwiseAllToAll(*transport_, args, ConstBytes(in), Bytes(out));
                 });
}

absl::StatusOr<WorkHandle> Communicator::Barrier(CallOptions call) {
  BRAID_ASSIGN_OR_RETURN(const bool native, UseNative(call, CollectiveKind::kBarrier));
  return Enqueue(CollectiveKind::kBarrier, DType::kU8, ReduceOp::kSum, -1, 0, 0, call,
                 native ? "native" : "dissemination",
                 Tensor(), Tensor(), [this, native](const CollectiveArgs& args, const Tensor&, const Tensor&) {
                   if (native) return native_->NativeBarrier(args);
                   return DisseminationBarrier(*transport_, args);
                 });
}

absl::StatusOr<WorkHandle> Communicator::Send(const Tensor& tensor, int peer, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(tensor, "tensor"));
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": send to peer ", peer, " in a group of ", size_));
  }
  return Enqueue(CollectiveKind::kSendRecv, tensor.dtype(), ReduceOp::kSum, -1, static_cast<size_t>(tensor.numel()),
                 kNeverInline, call, "p2p", tensor, Tensor(),
                 [this, peer](const CollectiveArgs& args, const Tensor& in, const Tensor&) {
                   return SendTo(*transport_, args, peer, ConstBytes(in));
                 });
}

absl::StatusOr<WorkHandle> Communicator::Recv(const Tensor& tensor, int peer, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(tensor, "tensor"));
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": receive from peer ", peer, " in a group of ", size_));
  }
  return Enqueue(CollectiveKind::kSendRecv, tensor.dtype(), ReduceOp::kSum, -1, static_cast<size_t>(tensor.numel()),
                 kNeverInline, call, "p2p", Tensor(), tensor,
                 [this, peer](const CollectiveArgs& args, const Tensor&, const Tensor& out) {
                   return RecvFrom(*transport_, args, peer, Bytes(out));
                 });
}

}  // namespace braid
