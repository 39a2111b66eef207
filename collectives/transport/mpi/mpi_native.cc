// MpiTransport's NativeCollectives: Open MPI's own collectives, nonblocking
// and waited on under the collective's deadline (mpi_transport.h).
#include "collectives/transport/mpi/mpi_transport.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {
namespace {

// The ops MPI lacks or gets wrong run braid's kernels: inout = in op inout.
template <DType D, ReduceOp O>
void UserReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const size_t bytes = static_cast<size_t>(*len) * DTypeSize(D);
  absl::Span<std::byte> dst(static_cast<std::byte*>(inout), bytes);
  HostReduce(D, O, dst, dst, absl::Span<const std::byte>(static_cast<const std::byte*>(in), bytes));
}

template <DType D>
MPI_User_function* UserFunctionFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd: return &UserReduce<D, ReduceOp::kProd>;
    case ReduceOp::kMin: return &UserReduce<D, ReduceOp::kMin>;
    case ReduceOp::kMax: return &UserReduce<D, ReduceOp::kMax>;
    case ReduceOp::kSum:
    case ReduceOp::kAvg: break;
  }
  return &UserReduce<D, ReduceOp::kSum>;
}

// f16/bf16: MPI has no such type. i8/u8: Open MPI 4.1's AVX op saturates
// 8-bit sums where braid (and two's complement) wraps.
bool NeedsUserOp(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kI8 || dtype == DType::kU8;
}

MPI_User_function* UserFunction(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF16: return UserFunctionFor<DType::kF16>(op);
    case DType::kBF16: return UserFunctionFor<DType::kBF16>(op);
    case DType::kI8: return UserFunctionFor<DType::kI8>(op);
    case DType::kU8: return UserFunctionFor<DType::kU8>(op);
    default: return nullptr;
  }
}

constexpr ReduceOp kUserOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};

}  // namespace

absl::Status MpiTransport::CreateUserOps() {
  for (DType dtype : kAllDTypes) {
    if (!NeedsUserOp(dtype)) continue;
    for (ReduceOp op : kUserOps) {
      MPI_Op& slot = user_ops_[static_cast<size_t>(dtype)][static_cast<size_t>(op)];
      const int rc = MPI_Op_create(UserFunction(dtype, op), /*commute=*/1, &slot);
      if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat("MPI_Op_create: ", MpiErrorText(rc)));
    }
  }
  return absl::OkStatus();
}

std::string MpiTransport::NativeWhat(const CollectiveArgs& args) const {
  return absl::StrCat("rank ", rank(), ": mpi native ", DescribeCollective(args));
}

absl::StatusOr<MPI_Datatype> MpiTransport::NativeType(const CollectiveArgs& args) const {
  if (args.count > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(NativeWhat(args), ": native MPI collectives take at most ",
                                                   INT_MAX, " elements per rank"));
  }
  switch (args.dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kI8: return MPI_INT8_T;
    case DType::kU8: return MPI_UINT8_T;
    case DType::kF16:
    case DType::kBF16: return MPI_UINT16_T;  // bits only: reduced by braid's kernels through a user op
  }
  return absl::UnimplementedError(absl::StrCat(NativeWhat(args), ": no MPI datatype"));
}

absl::StatusOr<MPI_Op> MpiTransport::NativeOp(const CollectiveArgs& args) const {
  const ReduceOp op = args.op == ReduceOp::kAvg ? ReduceOp::kSum : args.op;
  if (NeedsUserOp(args.dtype)) return user_ops_[static_cast<size_t>(args.dtype)][static_cast<size_t>(op)];
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kProd: return MPI_PROD;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kAvg: break;
  }
  return absl::UnimplementedError(absl::StrCat(NativeWhat(args), ": no MPI op"));
}

absl::Status MpiTransport::WaitNative(MPI_Request* request, int rc, const CollectiveArgs& args, const char* call) {
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank(), ": mpi transport was aborted: ", aborted_.message()));
  }
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(NativeWhat(args), ": ", call, ": ", MpiErrorText(rc)));
  absl::Status status = MpiWaitRequest(request, args.deadline, call);
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(NativeWhat(args), ": ", status.message(),
                                   status.code() == absl::StatusCode::kDeadlineExceeded
                                       ? " (a rank has not joined it; MPI cannot cancel it)"
                                       : ""));
}

absl::Status MpiTransport::CheckUsable() const {
  if (aborted_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", rank(), ": mpi transport was aborted: ", aborted_.message()));
}

absl::Status MpiTransport::NativeGatherHeaders(const CollectiveArgs& args, const FrameHeader& mine,
                                               absl::Span<FrameHeader> all) {
  BRAID_RETURN_IF_ERROR(CheckUsable());
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, comm_, &request);
  return WaitNative(&request, rc, args, "MPI_Iallgather (agreement check)");
}

absl::Status MpiTransport::FinishAvg(const CollectiveArgs& args, absl::Span<std::byte> result) const {
  if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, result, size());
  return absl::OkStatus();
}

absl::Status MpiTransport::NativeAllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                           absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(MPI_Datatype type, NativeType(args));
  BRAID_ASSIGN_OR_RETURN(MPI_Op op, NativeOp(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const void* send = input.data() == output.data() ? MPI_IN_PLACE : input.data();
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce(send, output.data(), static_cast<int>(args.count), type, op, comm_, &request);
  BRAID_RETURN_IF_ERROR(WaitNative(&request, rc, args, "MPI_Iallreduce"));
  return FinishAvg(args, output);
}

absl::Status MpiTransport::NativeReduceScatter(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                               absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(MPI_Datatype type, NativeType(args));
  BRAID_ASSIGN_OR_RETURN(MPI_Op op, NativeOp(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ireduce_scatter_block(input.data(), output.data(), static_cast<int>(args.count), type, op, comm_,
                                           &request);
  BRAID_RETURN_IF_ERROR(WaitNative(&request, rc, args, "MPI_Ireduce_scatter_block"));
  return FinishAvg(args, output);
}

absl::Status MpiTransport::NativeAllGather(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                           absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(MPI_Datatype type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const size_t chunk = args.count * DTypeSize(args.dtype);
  const bool in_place = chunk > 0 && input.data() == output.data() + static_cast<size_t>(rank()) * chunk;
  MPI_Request request = MPI_REQUEST_NULL;
  const int count = static_cast<int>(args.count);
  const int rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : input.data(), count, type, output.data(), count, type,
                                comm_, &request);
  return WaitNative(&request, rc, args, "MPI_Iallgather");
}

absl::Status MpiTransport::NativeBroadcast(const CollectiveArgs& args, absl::Span<std::byte> buffer) {
  BRAID_ASSIGN_OR_RETURN(MPI_Datatype type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ibcast(buffer.data(), static_cast<int>(args.count), type, args.root, comm_, &request);
  return WaitNative(&request, rc, args, "MPI_Ibcast");
}

absl::Status MpiTransport::NativeReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                        absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(MPI_Datatype type, NativeType(args));
  BRAID_ASSIGN_OR_RETURN(MPI_Op op, NativeOp(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  const bool root = rank() == args.root;
  const void* send = root && input.data() == output.data() ? MPI_IN_PLACE : input.data();
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ireduce(send, root ? output.data() : nullptr, static_cast<int>(args.count), type, op, args.root,
                             comm_, &request);
  BRAID_RETURN_IF_ERROR(WaitNative(&request, rc, args, "MPI_Ireduce"));
  return root ? FinishAvg(args, output) : absl::OkStatus();
}

absl::Status MpiTransport::NativeBarrier(const CollectiveArgs& args) {
  BRAID_RETURN_IF_ERROR(CheckUsable());
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ibarrier(comm_, &request);
  return WaitNative(&request, rc, args, "MPI_Ibarrier");
}

absl::Status MpiTransport::NativeAllToAll(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                          absl::Span<std::byte> output) {
  BRAID_ASSIGN_OR_RETURN(MPI_Datatype type, NativeType(args));
  BRAID_RETURN_IF_ERROR(CheckUsable());
  MPI_Request request = MPI_REQUEST_NULL;
  const int count = static_cast<int>(args.count);
  const int rc = MPI_Ialltoall(input.data(), count, type, output.data(), count, type, comm_, &request);
  return WaitNative(&request, rc, args, "MPI_Ialltoall");
}


}  // namespace braid
