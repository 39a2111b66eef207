#include "collectives/transport/nccl/nccl_transport.h"

#include "tensor/stream.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kNcclAvgKnob, "BRAID_NCCL_AVG", "0",
               "1: native avg on the nccl transport is ncclAvg (one pass; floats may differ in the last bit from "
               "sum-then-divide when the group size is not a power of two). 0: ncclSum, then one division.");

// How long the destructor lets ncclCommFinalize flush before aborting.
constexpr absl::Duration kFinalizeBudget = absl::Seconds(10);
// Small device/pinned buffers: the barrier's element, the agreement check's
// headers (at least room for 64 ranks' FrameHeaders).
constexpr size_t kScratchBytes = 64 * sizeof(FrameHeader);
// Point-to-point header slots, one per op in a launch.
constexpr size_t kSlotBytes = 64;

// Waits that find nothing done: yield a few times (the GPU is often nearly
// there), then sleep, doubling up to 1 ms. Never a bare spin: ranks may
// outnumber cores.
class Backoff {
 public:
  void Idle() {
    if (rounds_++ < 32) {
      std::this_thread::yield();
      return;
    }
    absl::SleepFor(sleep_);
    sleep_ = std::min(sleep_ * 2, absl::Milliseconds(1));
  }

 private:
  int rounds_ = 0;
  absl::Duration sleep_ = absl::Microseconds(10);
};


absl::Status CudaError(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

}  // namespace

absl::StatusCode CodeOf(ncclResult_t result) {
  switch (result) {
    case ncclRemoteError:
    case ncclSystemError: return absl::StatusCode::kUnavailable;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return absl::StatusCode::kInvalidArgument;
    default: return absl::StatusCode::kInternal;
  }
}

absl::StatusOr<ncclDataType_t> NcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI8: return ncclInt8;
    case DType::kU8: return ncclUint8;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return absl::UnimplementedError(absl::StrCat("no NCCL datatype for ", DTypeName(dtype)));
}

struct NcclTransport::Launch {
  cudaEvent_t event = nullptr;
  void* device_headers = nullptr;
  void* host_headers = nullptr;  // pinned
  std::vector<OpId> ops;
  bool done = false;
  ~Launch() {
    // Only reached once the launch completed or the communicator was
    // aborted (its kernels stopped), so the memory is no longer in use.
    if (event != nullptr) cudaEventDestroy(event);
    if (device_headers != nullptr) cudaFree(device_headers);
    if (host_headers != nullptr) cudaFreeHost(host_headers);
  }
};

absl::StatusOr<std::unique_ptr<NcclTransport>> NcclTransport::Create(Bootstrap& bootstrap, int device,
                                                                     Deadline deadline, NcclTransportOptions options) {
  const std::string who = absl::StrCat("rank ", bootstrap.rank(), ": nccl transport on cuda:", device);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (device < 0 || device >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": this process sees ", devices, " CUDA device(s) (each rank needs its own GPU)"));
  }
  bool nccl_avg = false;
  if (options.nccl_avg.has_value()) {
    nccl_avg = *options.nccl_avg;
  } else {
    BRAID_ASSIGN_OR_RETURN(nccl_avg, kNcclAvgKnob.Bool());
  }
  // Rank 0 makes the id; the bootstrap carries it to everyone.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::string mine;
  if (bootstrap.rank() == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      return absl::Status(CodeOf(result), absl::StrCat(who, ": ncclGetUniqueId: ", ncclGetErrorString(result)));
    }
    mine.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> all, bootstrap.AllGather(mine, deadline));
  if (all.empty() || all[0].size() != sizeof(id)) {
    return absl::DataLossError(absl::StrCat(who, ": rank 0 published a ", all.empty() ? 0 : all[0].size(),
                                            "-byte NCCL id, expected ", sizeof(id)));
  }
  std::memcpy(&id, all[0].data(), sizeof(id));
  std::unique_ptr<NcclTransport> transport(
      new NcclTransport(bootstrap.rank(), bootstrap.size(), device, options, nccl_avg));
  BRAID_RETURN_IF_ERROR(Annotate(transport->Init(id, deadline), who));
  return transport;
}

NcclTransport::NcclTransport(int rank, int size, int device, NcclTransportOptions options, bool nccl_avg)
    : Transport(rank, size),
      device_(device),
      options_(options),
      nccl_avg_(nccl_avg),
      scratch_bytes_(std::max(kScratchBytes, static_cast<size_t>(size) * sizeof(FrameHeader))) {}

absl::Status NcclTransport::Prepare() {
  BRAID_RETURN_IF_ERROR(MakeCurrent());
  BRAID_ASSIGN_OR_RETURN(runtime_, CudaRuntime(device_));
  BRAID_RETURN_IF_ERROR(CudaError(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  BRAID_RETURN_IF_ERROR(CudaError(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"));
  BRAID_RETURN_IF_ERROR(CudaError(cudaMalloc(&device_scratch_, scratch_bytes_), "cudaMalloc"));
  return CudaError(cudaMallocHost(&host_scratch_, scratch_bytes_), "cudaMallocHost");
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Split(int color, int key, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(MakeCurrent());
  if (!aborted_.ok()) return absl::FailedPreconditionError(std::string(aborted_.message()));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t child = nullptr;
  ncclResult_t result = ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return absl::Status(CodeOf(result), absl::StrCat("rank ", rank(), ": ncclCommSplit: ", ncclGetErrorString(result)));
  }
  if (child == nullptr) return std::unique_ptr<Transport>();
  // The child's rank and size are known once the split completes.
  std::unique_ptr<NcclTransport> split(new NcclTransport(0, 1, device_, options_, nccl_avg_));
  split->comm_ = child;
  BRAID_RETURN_IF_ERROR(split->Issued(ncclInProgress, "ncclCommSplit", deadline));
  int rank = 0;
  int size = 1;
  ncclCommUserRank(child, &rank);
  ncclCommCount(child, &size);
  split->comm_ = nullptr;  // moved into a transport that knows its rank and size
  std::unique_ptr<NcclTransport> transport(new NcclTransport(rank, size, device_, options_, nccl_avg_));
  transport->comm_ = child;
  BRAID_RETURN_IF_ERROR(transport->Prepare());
  return std::unique_ptr<Transport>(std::move(transport));
}

absl::Status NcclTransport::Init(const ncclUniqueId& id, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(Prepare());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that init (and every later call) can honour a deadline
  const ncclResult_t result = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    absl::Status status(CodeOf(result),
                        absl::StrCat("ncclCommInitRankConfig: ", ncclGetErrorString(result),
                                     comm_ != nullptr ? absl::StrCat(" (", ncclGetLastError(comm_), ")") : ""));
    return Fail(std::move(status));
  }
  return Issued(ncclInProgress, absl::StrCat("ncclCommInitRankConfig (", size(), " ranks)"), deadline);
}

NcclTransport::~NcclTransport() {
  if (MakeCurrent().ok() && comm_ != nullptr) {
    bool clean = false;
    const ncclResult_t finalize = aborted_.ok() ? ncclCommFinalize(comm_) : ncclInvalidUsage;
    if (finalize == ncclSuccess || finalize == ncclInProgress) {
      // Non-blocking mode: the flush completes in the background; poll it.
      const Deadline until = DeadlineIn(kFinalizeBudget);
      Backoff backoff;
      while (true) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state == ncclSuccess) {
          clean = true;
          break;
        }
        if (state != ncclInProgress || Expired(until)) break;
        backoff.Idle();
      }
    }
    if (clean) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  ops_.Clear();  // the launches' memory, now that no kernel can use it
  if (event_ != nullptr) cudaEventDestroy(event_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (device_scratch_ != nullptr) cudaFree(device_scratch_);
  if (host_scratch_ != nullptr) cudaFreeHost(host_scratch_);
}

absl::Status NcclTransport::MakeCurrent() const {
  return CudaError(cudaSetDevice(device_), absl::StrCat("rank ", rank(), ": cudaSetDevice(", device_, ")"));
}

absl::Status NcclTransport::CheckUsable() const {
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank(), ": nccl transport was aborted: ", aborted_.message()));
  }
  return MakeCurrent();
}

void NcclTransport::AbortComm() {
  if (comm_ != nullptr) {
    // Stops this rank's NCCL kernels; never waits for the peers.
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

absl::Status NcclTransport::Fail(absl::Status status) {
  if (aborted_.ok()) aborted_ = status;
  AbortComm();
  for (auto& [id, op] : ops_) {
    if (!op.complete) {
      op.complete = true;
      op.status = absl::AbortedError(absl::StrCat("rank ", rank(), ": nccl transport failed: ", status.message()));
    }
  }
  unlaunched_.clear();
  return status;
}

absl::Status NcclTransport::Issued(ncclResult_t result, const std::string& what, Deadline deadline) {
  Backoff backoff;
  while (result == ncclInProgress) {
    if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) result = ncclInternalError;
    if (result != ncclInProgress) break;
    if (Expired(deadline)) {
      return Fail(absl::DeadlineExceededError(
          absl::StrCat("rank ", rank(), ": nccl: deadline exceeded in ", what, " (communicator aborted)")));
    }
    backoff.Idle();
  }
  if (result == ncclSuccess) return absl::OkStatus();
  return Fail(
      absl::Status(CodeOf(result), absl::StrCat("rank ", rank(), ": nccl: ", what, ": ", ncclGetErrorString(result),
                                                " (", ncclGetLastError(comm_), ")")));
}

absl::Status NcclTransport::PollEvent(cudaEvent_t event, const std::string& what, Deadline deadline) {
  Backoff backoff;
  while (true) {
    const cudaError_t query = cudaEventQuery(event);
    if (query == cudaSuccess) return absl::OkStatus();
    if (query != cudaErrorNotReady) {
      return Fail(absl::InternalError(
          absl::StrCat("rank ", rank(), ": nccl: ", what, ": cudaEventQuery: ", cudaGetErrorString(query))));
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
      return Fail(
          absl::Status(CodeOf(async), absl::StrCat("rank ", rank(), ": nccl: ", what, ": ", ncclGetErrorString(async),
                                                   " (", ncclGetLastError(comm_), ")")));
    }
    if (Expired(deadline)) {
      return Fail(absl::DeadlineExceededError(
          absl::StrCat("rank ", rank(), ": nccl: deadline exceeded waiting for ", what,
                       " (a rank has not joined it, or the GPU is stuck; communicator aborted)")));
    }
    backoff.Idle();
  }
}

absl::Status NcclTransport::Sync(const std::string& what, Deadline deadline) {
  const cudaError_t recorded = cudaEventRecord(event_, stream_);
  if (recorded != cudaSuccess) {
    return Fail(absl::InternalError(
        absl::StrCat("rank ", rank(), ": nccl: ", what, ": cudaEventRecord: ", cudaGetErrorString(recorded))));
  }
  return PollEvent(event_, what, deadline);
}

void NcclTransport::Abort(const absl::Status& cause) {
  if (!aborted_.ok()) return;
  MakeCurrent().IgnoreError();
  Fail(cause.ok() ? absl::CancelledError("aborted") : cause).IgnoreError();
}

// ---------------------------------------------------------------------------
// Point to point.

absl::StatusOr<OpId> NcclTransport::PostSend(int peer, FrameHeader header, absl::Span<const std::byte> payload) {
  BRAID_RETURN_IF_ERROR(CheckUsable());
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), ": no peer ", peer, " in a group of ", size()));
  }
  header.magic = FrameHeader::kMagic;
  header.bytes = payload.size();
  const OpId id = ops_.Add(/*is_send=*/true, peer, header, const_cast<std::byte*>(payload.data()), payload.size()).first;
  unlaunched_.push_back(id);
  return id;
}

absl::StatusOr<OpId> NcclTransport::PostRecv(int peer, FrameHeader expected, absl::Span<std::byte> payload) {
  BRAID_RETURN_IF_ERROR(CheckUsable());
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), ": no peer ", peer, " in a group of ", size()));
  }
  expected.magic = FrameHeader::kMagic;
  expected.bytes = payload.size();
  const OpId id = ops_.Add(/*is_send=*/false, peer, expected, payload.data(), payload.size()).first;
  unlaunched_.push_back(id);
  return id;
}

absl::Status NcclTransport::LaunchPending(Deadline deadline) {
  if (unlaunched_.empty()) return absl::OkStatus();
  auto launch = std::make_shared<Launch>();
  const size_t n = unlaunched_.size();
  BRAID_RETURN_IF_ERROR(CudaError(cudaMalloc(&launch->device_headers, n * kSlotBytes), "cudaMalloc (headers)"));
  BRAID_RETURN_IF_ERROR(CudaError(cudaMallocHost(&launch->host_headers, n * kSlotBytes), "cudaMallocHost (headers)"));
  BRAID_RETURN_IF_ERROR(CudaError(cudaEventCreateWithFlags(&launch->event, cudaEventDisableTiming), "cudaEventCreate"));
  auto* host = static_cast<std::byte*>(launch->host_headers);
  auto* dev = static_cast<std::byte*>(launch->device_headers);
  for (size_t i = 0; i < n; ++i) {
    Op& op = ops_.at(unlaunched_[i]);
    op.launch = launch;
    op.slot = i;
    launch->ops.push_back(unlaunched_[i]);
    if (op.is_send) std::memcpy(host + i * kSlotBytes, &op.header, sizeof(FrameHeader));
  }
  unlaunched_.clear();
  // The send headers reach the device before the group's kernels read them (same stream).
  BRAID_RETURN_IF_ERROR(CudaError(cudaMemcpyAsync(dev, host, n * kSlotBytes, cudaMemcpyHostToDevice, stream_),
                                  "cudaMemcpyAsync (headers)"));
  const std::string what = absl::StrCat("point-to-point group of ", n, " op(s)");
  BRAID_RETURN_IF_ERROR(Issued(ncclGroupStart(), "ncclGroupStart", deadline));
  ncclResult_t result = ncclSuccess;
  for (size_t i = 0; i < n && (result == ncclSuccess || result == ncclInProgress); ++i) {
    const Op& op = ops_.at(launch->ops[i]);
    void* slot = dev + i * kSlotBytes;
    if (op.is_send) {
      result = ncclSend(slot, sizeof(FrameHeader), ncclUint8, op.peer, comm_, stream_);
      if ((result == ncclSuccess || result == ncclInProgress) && op.bytes > 0) {
        result = ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm_, stream_);
      }
    } else {
      result = ncclRecv(slot, sizeof(FrameHeader), ncclUint8, op.peer, comm_, stream_);
      if ((result == ncclSuccess || result == ncclInProgress) && op.bytes > 0) {
        result = ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm_, stream_);
      }
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (result != ncclSuccess && result != ncclInProgress) {
    return Issued(result, absl::StrCat("ncclSend/ncclRecv in a ", what), deadline);
  }
  BRAID_RETURN_IF_ERROR(Issued(ended, absl::StrCat("ncclGroupEnd of a ", what), deadline));
  // The received headers come back to the host on the same stream, after the group.
  BRAID_RETURN_IF_ERROR(CudaError(cudaMemcpyAsync(host, dev, n * kSlotBytes, cudaMemcpyDeviceToHost, stream_),
                                  "cudaMemcpyAsync (headers)"));
  return CudaError(cudaEventRecord(launch->event, stream_), "cudaEventRecord");
}

void NcclTransport::CompleteLaunch(const std::shared_ptr<Launch>& launch, absl::Status status) {
  launch->done = true;
  const auto* host = static_cast<const std::byte*>(launch->host_headers);
  for (OpId id : launch->ops) {
    Op* found = ops_.Find(id);
    if (found == nullptr || found->complete) continue;
    Op& op = *found;
    op.complete = true;
    if (!status.ok() || op.is_send) {
      op.status = status;
    } else {
      FrameHeader got;
      std::memcpy(&got, host + op.slot * kSlotBytes, sizeof(FrameHeader));
      op.status = CheckFrame(op.header, got, rank(), op.peer);
    }
    op.launch = nullptr;
  }
}

absl::Status NcclTransport::Wait(absl::Span<const OpId> ids, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(ops_.CheckWaitable(ids, rank()));
  if (std::optional<absl::Status> outcome = ops_.Collect(ids)) return *outcome;
  absl::Status usable = CheckUsable();
  if (usable.ok()) usable = LaunchPending(deadline);
  if (!usable.ok()) {
    Fail(usable).IgnoreError();
    return *ops_.Collect(ids);
  }
  for (OpId id : ids) {
    Op& op = ops_.at(id);
    if (op.complete || op.launch == nullptr) continue;
    std::shared_ptr<Launch> launch = op.launch;
    const std::string what =
        absl::StrCat(op.is_send ? "send to peer " : "receive from peer ", op.peer, " of ", DescribeFrame(op.header));
    const absl::Status status = PollEvent(launch->event, what, deadline);
    if (!status.ok()) {
      // Fail() completed every op with kAborted; the waited one says why.
      op.status = status;
      return *ops_.Collect(ids);
    }
    CompleteLaunch(launch, absl::OkStatus());
  }
  return *ops_.Collect(ids);
}

}  // namespace braid
