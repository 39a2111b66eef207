// The communicator's public collectives: each checks its tensors and
// arguments on the calling thread (kInvalidArgument naming the rank), then
// hands one Request to Enqueue (communicator.cc).
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/communicator.h"
#include "tensor/device.h"

namespace braid {

absl::Status Communicator::CheckTensor(const Tensor& tensor, const char* what) const {
  if (!tensor.defined()) return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": ", what, " is undefined"));
  if (device_ && tensor.device() != device_->device()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": ", what, " ", tensor.DebugString(),
                                                   ": the ", transport_name_, " communicator takes tensors on ",
                                                   ToString(device_->device())));
  }
  if (!device_ && device_memory_only_ && !tensor.device().is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": ", what, " ", tensor.DebugString(),
                                                   ": the ", transport_name_, " communicator takes CUDA tensors"));
  }
  if (!device_memory_only_ && tensor.device().is_cuda() && !CudaCompiledIn()) {
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

absl::StatusOr<WorkHandle> Communicator::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op,
                                                   CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  const int64_t numel = input.numel();
  if (input.dtype() != output.dtype() || numel != output.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": allreduce input ", input.DebugString(),
                                                   " and output ", output.DebugString(), " differ"));
  }
  return Enqueue({CollectiveKind::kAllReduce, input.dtype(), op, -1, static_cast<size_t>(numel),
                  static_cast<size_t>(numel) * DTypeSize(input.dtype()), true, &input, &output},
                 call);
}

absl::StatusOr<WorkHandle> Communicator::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                                       CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  if (input.dtype() != output.dtype() || input.numel() != output.numel() * size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": reducescatter input ", input.DebugString(),
                                                   " must have ", size_, " x the output's ", output.DebugString()));
  }
  return Enqueue({CollectiveKind::kReduceScatter, input.dtype(), op, -1, static_cast<size_t>(output.numel()),
                  input.nbytes(), true, &input, &output},
                 call);
}

absl::StatusOr<WorkHandle> Communicator::AllGather(const Tensor& input, const Tensor& output, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  if (input.dtype() != output.dtype() || output.numel() != input.numel() * size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": allgather output ", output.DebugString(),
                                                   " must have ", size_, " x the input's ", input.DebugString()));
  }
  return Enqueue({CollectiveKind::kAllGather, input.dtype(), ReduceOp::kSum, -1, static_cast<size_t>(input.numel()),
                  output.nbytes(), true, &input, &output},
                 call);
}

absl::StatusOr<WorkHandle> Communicator::Broadcast(const Tensor& tensor, int root, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(tensor, "tensor"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": broadcast root ", root, " not in [0, ", size_, ")"));
  }
  // Only the root's tensor is read: the others are written, never staged in.
  return Enqueue({CollectiveKind::kBroadcast, tensor.dtype(), ReduceOp::kSum, root,
                  static_cast<size_t>(tensor.numel()), tensor.nbytes(), true, rank_ == root ? &tensor : nullptr,
                  &tensor},
                 call);
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
  // The output is the root's only (undefined elsewhere: nothing to stage).
  return Enqueue({CollectiveKind::kReduce, input.dtype(), op, root, static_cast<size_t>(input.numel()),
                  input.nbytes(), true, &input, rank_ == root ? &output : nullptr},
                 call);
}

absl::StatusOr<WorkHandle> Communicator::AllToAll(const Tensor& input, const Tensor& output, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(input, "input"));
  BRAID_RETURN_IF_ERROR(CheckTensor(output, "output"));
  if (input.dtype() != output.dtype() || input.numel() != output.numel() || input.numel() % size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": alltoall input ", input.DebugString(),
                                                   " and output ", output.DebugString(),
                                                   " must match and split into ", size_, " blocks"));
  }
  return Enqueue({CollectiveKind::kAllToAll, input.dtype(), ReduceOp::kSum, -1,
                  static_cast<size_t>(input.numel() / size_), input.nbytes(), true, &input, &output},
                 call);
}

absl::StatusOr<WorkHandle> Communicator::Barrier(CallOptions call) {
  return Enqueue({CollectiveKind::kBarrier, DType::kU8, ReduceOp::kSum, -1, 0, 0, true, nullptr, nullptr}, call);
}

absl::StatusOr<WorkHandle> Communicator::Send(const Tensor& tensor, int peer, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(tensor, "tensor"));
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": send to peer ", peer, " in a group of ", size_));
  }
  return Enqueue({CollectiveKind::kSendRecv, tensor.dtype(), ReduceOp::kSum, peer,
                  static_cast<size_t>(tensor.numel()), tensor.nbytes(), false, &tensor, nullptr},
                 call);
}

absl::StatusOr<WorkHandle> Communicator::Recv(const Tensor& tensor, int peer, CallOptions call) {
  BRAID_RETURN_IF_ERROR(CheckTensor(tensor, "tensor"));
  if (peer == kAnySource) {
    if (device_memory_only_) {
      return absl::UnimplementedError(absl::StrCat("rank ", rank_, ": a receive from any source over ",
                                                   transport_name_, " (name the peer)"));
    }
  } else if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": receive from peer ", peer, " in a group of ", size_));
  }
  return Enqueue({CollectiveKind::kSendRecv, tensor.dtype(), ReduceOp::kSum, peer,
                  static_cast<size_t>(tensor.numel()), tensor.nbytes(), false, nullptr, &tensor},
                 call);
}

}  // namespace braid
