// NcclTransport's NativeCollectives: NCCL's own collectives on the
// transport's stream, each waited on under the collective's deadline
// (nccl_transport.h).
#include "collectives/transport/nccl/nccl_transport.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "tensor/cuda_kernels.h"
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

absl::Status NcclTransport::FinishAvg(const CollectiveArgs& args, void* data, size_t count) {
  if (args.op != ReduceOp::kAvg || nccl_avg_ || count == 0) return absl::OkStatus();
  absl::Status status = CudaDivide(args.dtype, data, count, size(), stream_, /*synchronize=*/false);
  if (!status.ok()) return Fail(Annotate(status, absl::StrCat("rank ", rank(), ": ", NativeWhat(args), ": avg")));
  return absl::OkStatus();
}

absl::Status NcclTransport::NativeAllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                            absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(ncclDataType_t type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const std::string what = NativeWhat(args);
  BRAID_RETURN_IF_ERROR(
      Issued(ncclAllReduce(input.data(), output.data(), args.count, type, NativeOp(args), comm_, stream_),
             absl::StrCat("ncclAllReduce in ", what), args.deadline));
  BRAID_RETURN_IF_ERROR(FinishAvg(args, output.data(), args.count));
  return Sync(what, args.deadline);
}

absl::Status NcclTransport::NativeReduceScatter(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                                absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(ncclDataType_t type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const std::string what = NativeWhat(args);
  BRAID_RETURN_IF_ERROR(
      Issued(ncclReduceScatter(input.data(), output.data(), args.count, type, NativeOp(args), comm_, stream_),
             absl::StrCat("ncclReduceScatter in ", what), args.deadline));
  BRAID_RETURN_IF_ERROR(FinishAvg(args, output.data(), args.count));
  return Sync(what, args.deadline);
}

absl::Status NcclTransport::NativeAllGather(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                            absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(ncclDataType_t type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const std::string what = NativeWhat(args);
  // In place when input is output's own block: NCCL's rule too.
  BRAID_RETURN_IF_ERROR(Issued(ncclAllGather(input.data(), output.data(), args.count, type, comm_, stream_),
                               absl::StrCat("ncclAllGather in ", what), args.deadline));
  return Sync(what, args.deadline);
}

absl::Status NcclTransport::NativeBroadcast(const CollectiveArgs& args, absl::Span<std::byte> buffer) {
  BRAID_ASSIGN_OR_RETURN(ncclDataType_t type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const std::string what = NativeWhat(args);
  BRAID_RETURN_IF_ERROR(Issued(ncclBroadcast(buffer.data(), buffer.data(), args.count, type, args.root, comm_, stream_),
                               absl::StrCat("ncclBroadcast in ", what), args.deadline));
  return Sync(what, args.deadline);
}

absl::Status NcclTransport::NativeReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                         absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(ncclDataType_t type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const std::string what = NativeWhat(args);
  const bool root = rank() == args.root;
  BRAID_RETURN_IF_ERROR(Issued(ncclReduce(input.data(), root ? output.data() : nullptr, args.count, type,
                                          NativeOp(args), args.root, comm_, stream_),
                               absl::StrCat("ncclReduce in ", what), args.deadline));
  if (root) BRAID_RETURN_IF_ERROR(FinishAvg(args, output.data(), args.count));
  return Sync(what, args.deadline);
}

absl::Status NcclTransport::NativeBarrier(const CollectiveArgs& args) {
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const std::string what = NativeWhat(args);
  // NCCL has no barrier: a one-element all-reduce completes on a rank only
  // once every rank has contributed.
  BRAID_RETURN_IF_ERROR(Issued(ncclAllReduce(device_scratch_, device_scratch_, 1, ncclInt32, ncclSum, comm_, stream_),
                               absl::StrCat("ncclAllReduce (barrier) in ", what), args.deadline));
  return Sync(what, args.deadline);
}

absl::Status NcclTransport::NativeAllToAll(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                           absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(ncclDataType_t type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const std::string what = NativeWhat(args);
  const size_t block = args.count * DTypeSize(args.dtype);
  BRAID_RETURN_IF_ERROR(Issued(ncclGroupStart(), absl::StrCat("ncclGroupStart in ", what), args.deadline));
  ncclResult_t result = ncclSuccess;
  for (int peer = 0; peer < size() && (result == ncclSuccess || result == ncclInProgress); ++peer) {
    result = ncclSend(input.data() + peer * block, args.count, type, peer, comm_, stream_);
    if (result == ncclSuccess || result == ncclInProgress) {
      result = ncclRecv(output.data() + peer * block, args.count, type, peer, comm_, stream_);
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (result != ncclSuccess && result != ncclInProgress) {
    return Issued(result, absl::StrCat("ncclSend/ncclRecv in ", what), args.deadline);
  }
  BRAID_RETURN_IF_ERROR(Issued(ended, absl::StrCat("ncclGroupEnd in ", what), args.deadline));
  return Sync(what, args.deadline);
}

}  // namespace braid
