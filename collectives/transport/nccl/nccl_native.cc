// NcclTransport's device link (device_link.h): ncclSend/ncclRecv in NCCL
// groups, and NCCL's own collectives, queued on the stream the caller gives;
// nothing here waits for the device.
#include "collectives/transport/nccl/nccl_transport.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/mutex.h"
#include "collectives/transport/device_link.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {

std::string NcclTransport::NativeWhat(const CollectiveArgs& args) const {
  return absl::StrCat("nccl native ", DescribeCollective(args));
}

absl::StatusOr<ncclDataType_t> NcclTransport::NativeType(const CollectiveArgs& args) const {
  absl::StatusOr<ncclDataType_t> type = NcclDataType(args.dtype);
  if (!type.ok()) return Annotate(type.status(), absl::StrCat("rank ", rank(), ": ", NativeWhat(args)));
  return type;
}

ncclRedOp_t NcclTransport::NativeOp(const CollectiveArgs& args) const {
  switch (args.op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return nccl_avg_ ? ncclAvg : ncclSum;
  }
  return ncclSum;
}


// The device link over this transport's communicator.
class NcclTransport::Link : public DeviceLink {
 public:
  explicit Link(NcclTransport& t) : t_(t) {}
  int rank() const override { return t_.rank(); }
  int size() const override { return t_.size(); }
  DeviceRuntime& runtime() override { return *t_.runtime_; }
  const char* native_name() const override { return "NCCL"; }
  bool has_native() const override { return true; }

  void GroupStart() override { pending_.clear(); }
  absl::Status Send(int peer, const void* data, size_t bytes, Stream& stream) override {
    pending_.push_back({true, peer, const_cast<void*>(data), bytes, Native(stream)});
    return CheckPeer(peer);
  }
  absl::Status Recv(int peer, void* data, size_t bytes, Stream& stream) override {
    pending_.push_back({false, peer, data, bytes, Native(stream)});
    return CheckPeer(peer);
  }
  absl::Status GroupEnd(Deadline deadline) override {
    BRAID_RETURN_IF_ERROR(t_.CheckUsable());
    BRAID_RETURN_IF_ERROR(t_.Issued(ncclGroupStart(), "ncclGroupStart", deadline));
    ncclResult_t result = ncclSuccess;
    for (const P2p& op : pending_) {
      if (result != ncclSuccess && result != ncclInProgress) break;
      result = op.send ? ncclSend(op.data, op.bytes, ncclUint8, op.peer, t_.comm_, op.stream)
                       : ncclRecv(op.data, op.bytes, ncclUint8, op.peer, t_.comm_, op.stream);
    }
    const ncclResult_t ended = ncclGroupEnd();
    pending_.clear();
    if (result != ncclSuccess && result != ncclInProgress) return t_.Issued(result, "ncclSend/ncclRecv", deadline);
    return t_.Issued(ended, "ncclGroupEnd (point to point)", deadline);
  }
  void Abort(const absl::Status& cause) override {
    MutexLock lock(&mu_);
    t_.Abort(cause);
  }
  absl::Status AsyncError() override {
    MutexLock lock(&mu_);
    if (!t_.aborted_.ok() || t_.comm_ == nullptr) return absl::OkStatus();
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(t_.comm_, &async) != ncclSuccess || async == ncclSuccess || async == ncclInProgress) {
      return absl::OkStatus();
    }
    return absl::Status(CodeOf(async), absl::StrCat("rank ", t_.rank(), ": nccl: ", ncclGetErrorString(async), " (",
                                                    ncclGetLastError(t_.comm_), ")"));
  }
  absl::Status Native(const CollectiveArgs& args, const void* input, void* output, Stream& stream) override {
    BRAID_RETURN_IF_ERROR(t_.CheckUsable());
    return t_.NativeOnStream(args, input, output, Native(stream), stream);
  }

 private:
  struct P2p {
    bool send;
    int peer;
    void* data;
    size_t bytes;
    cudaStream_t stream;
  };
  static cudaStream_t Native(Stream& stream) { return static_cast<cudaStream_t>(stream.native()); }
  absl::Status CheckPeer(int peer) const {
    if (peer >= 0 && peer < t_.size() && peer != t_.rank()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("rank ", t_.rank(), ": nccl: no peer ", peer, " in a group of ", t_.size()));
  }

  NcclTransport& t_;
  absl::Mutex mu_;  // Abort and AsyncError come from the watchdog's thread
  std::vector<P2p> pending_;
};

DeviceLink* NcclTransport::device_link() {
  if (!link_) link_ = std::make_unique<Link>(*this);
  return link_.get();
}

absl::Status NcclTransport::NativeOnStream(const CollectiveArgs& args, const void* input, void* output,
                                           cudaStream_t stream, Stream& braid_stream) {
  const std::string what = NativeWhat(args);
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  if (args.kind == CollectiveKind::kBarrier) {
    // NCCL has no barrier: a one-element all-reduce completes on a rank only
    // once every rank has contributed.
    return Issued(ncclAllReduce(device_scratch_, device_scratch_, 1, ncclInt32, ncclSum, comm_, stream),
                  absl::StrCat("ncclAllReduce (barrier) in ", what), args.deadline);
  }
  BRAID_ASSIGN_OR_RETURN(ncclDataType_t type, NativeType(args));
  const ncclRedOp_t op = NativeOp(args);
  const bool divide = args.op == ReduceOp::kAvg && !nccl_avg_;
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
      BRAID_RETURN_IF_ERROR(Issued(ncclAllReduce(in, out, args.count, type, op, comm_, stream),
                                   absl::StrCat("ncclAllReduce in ", what), args.deadline));
      break;
    case CollectiveKind::kReduceScatter:
      BRAID_RETURN_IF_ERROR(Issued(ncclReduceScatter(in, out, args.count, type, op, comm_, stream),
                                   absl::StrCat("ncclReduceScatter in ", what), args.deadline));
      break;
    case CollectiveKind::kAllGather:
      // In place when input is output's own block: NCCL's rule too.
      return Issued(ncclAllGather(in, out, args.count, type, comm_, stream), absl::StrCat("ncclAllGather in ", what),
                    args.deadline);
    case CollectiveKind::kBroadcast:
      return Issued(ncclBroadcast(out, out, args.count, type, args.root, comm_, stream),
                    absl::StrCat("ncclBroadcast in ", what), args.deadline);
    case CollectiveKind::kReduce:
      BRAID_RETURN_IF_ERROR(Issued(ncclReduce(in, rank() == args.root ? out : nullptr, args.count, type, op,
                                              args.root, comm_, stream),
                                   absl::StrCat("ncclReduce in ", what), args.deadline));
      if (rank() != args.root) return absl::OkStatus();
      break;
    case CollectiveKind::kAllToAll: {
      const size_t block = args.count * DTypeSize(args.dtype);
      BRAID_RETURN_IF_ERROR(Issued(ncclGroupStart(), absl::StrCat("ncclGroupStart in ", what), args.deadline));
      ncclResult_t result = ncclSuccess;
      for (int peer = 0; peer < size() && (result == ncclSuccess || result == ncclInProgress); ++peer) {
        result = ncclSend(in + peer * block, args.count, type, peer, comm_, stream);
        if (result == ncclSuccess || result == ncclInProgress) {
          result = ncclRecv(out + peer * block, args.count, type, peer, comm_, stream);
        }
      }
      const ncclResult_t ended = ncclGroupEnd();
      if (result != ncclSuccess && result != ncclInProgress) {
        return Issued(result, absl::StrCat("ncclSend/ncclRecv in ", what), args.deadline);
      }
      return Issued(ended, absl::StrCat("ncclGroupEnd in ", what), args.deadline);
    }
    default: return absl::InternalError(absl::StrCat("no native ", what));
  }
  // avg as the NativeCollectives contract has it: sum, then one division.
  if (!divide || args.count == 0) return absl::OkStatus();
  return braid_stream.Divide(args.dtype, out, args.count, size());
}

}  // namespace braid
