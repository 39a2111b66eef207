#include "collectives/device/stream_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status.h"

namespace braid {
namespace {

constexpr absl::Duration kDrain = absl::Seconds(30);

}  // namespace

absl::StatusOr<std::unique_ptr<StreamExecutor>> StreamExecutor::Create(DeviceLink& link) {
  std::unique_ptr<StreamExecutor> executor(new StreamExecutor(link));
  DeviceRuntime& rt = link.runtime();
  BRAID_ASSIGN_OR_RETURN(executor->fork_, rt.NewEvent());
  for (int i = 0; i < kStreams; ++i) {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, rt.NewStream());
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Event> join, rt.NewEvent());
    executor->streams_.push_back(std::move(stream));
    executor->joins_.push_back(std::move(join));
  }
  return executor;
}

StreamExecutor::~StreamExecutor() {
  for (auto& stream : streams_) (void)stream->Synchronize(DeadlineIn(kDrain));
  streams_.clear();
  runtime_.Free(scratch_);
}

absl::Status StreamExecutor::Grow(size_t slot_bytes, Deadline deadline) {
  if (slot_bytes <= slot_bytes_) return absl::OkStatus();
  // Earlier plans may still read the old scratch on the lane streams, and a
  // one-lane plan on whichever stream its caller gave: the old memory goes
  // once every lane stream has drained (the communicator's own stream is
  // ordered before them by the last fork).
  for (auto& stream : streams_) BRAID_RETURN_IF_ERROR(stream->Synchronize(deadline));
  runtime_.Free(scratch_);
  scratch_ = nullptr;
  slot_bytes_ = 0;
  const size_t bytes = (slot_bytes + 255) / 256 * 256;
  BRAID_ASSIGN_OR_RETURN(scratch_, runtime_.Allocate(bytes * kStreams));
  slot_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status StreamExecutor::RunOp(const Op& op, const CollectiveArgs& args, const void* input, void* output,
                                   std::byte* scratch, Stream& stream) {
  const size_t es = DTypeSize(args.dtype);
  auto at = [&](const Region& r) -> std::byte* {
    switch (r.buffer) {
      case Buffer::kInput: return const_cast<std::byte*>(static_cast<const std::byte*>(input)) + r.begin * es;
      case Buffer::kOutput: return static_cast<std::byte*>(output) + r.begin * es;
      default: return scratch + r.begin * es;
    }
  };
  switch (op.kind) {
    case Op::Kind::kGroup: {
      bool any = false;
      for (const Transfer& t : op.transfers) any = any || t.region.count > 0;
      if (!any) return absl::OkStatus();
      link_.GroupStart();
      for (const Transfer& t : op.transfers) {
        if (t.region.count == 0) continue;
        const size_t bytes = t.region.count * es;
        BRAID_RETURN_IF_ERROR(t.send ? link_.Send(t.peer, at(t.region), bytes, stream)
                                     : link_.Recv(t.peer, at(t.region), bytes, stream));
      }
      return link_.GroupEnd(args.deadline);
    }
    case Op::Kind::kReduce:
      if (op.dst.count == 0) return absl::OkStatus();
      return stream.Reduce(args.dtype, args.op, at(op.dst), at(op.a), at(op.b), op.dst.count);
    case Op::Kind::kCopy:
      if (op.dst.count == 0 || at(op.dst) == at(op.a)) return absl::OkStatus();
      return stream.Copy(at(op.dst), at(op.a), op.dst.count * es);
    case Op::Kind::kDivide:
      if (op.dst.count == 0) return absl::OkStatus();
      return stream.Divide(args.dtype, at(op.dst), op.dst.count, link_.size());
    case Op::Kind::kSync:
    case Op::Kind::kNextRound:
    case Op::Kind::kReadPeer:
    case Op::Kind::kWritePeer:
    case Op::Kind::kStep:
    case Op::Kind::kZero: break;  // Run refuses shared-window and hierarchical plans
  }
  return absl::InternalError("unknown program op");
}

absl::Status StreamExecutor::Run(const Plan& plan, const CollectiveArgs& args, const void* input, void* output,
                                 Stream& stream) {
  if (plan.lanes.empty()) return absl::OkStatus();
  if (plan.shared_windows || plan.levels) {
    return absl::InvalidArgumentError("shared-memory and hierarchical plans run on the host executor only, not on streams");
  }
  const size_t slot_bytes = plan.scratch_elements * DTypeSize(args.dtype);
  BRAID_RETURN_IF_ERROR(Grow(slot_bytes, args.deadline));
  auto slot = [&](size_t i) { return static_cast<std::byte*>(scratch_) + i * slot_bytes_; };
  const size_t ops = plan.lanes.front().size();
  for (const auto& lane : plan.lanes) {
    if (lane.size() != ops) return absl::InternalError("a plan's lanes differ in shape");
  }
  if (plan.lanes.size() == 1) {
    // The caller's stream itself; its slot is the first lane stream's, so
    // order it after that stream's earlier use of the slot.
    BRAID_RETURN_IF_ERROR(streams_[0]->Record(*joins_[0]));
    BRAID_RETURN_IF_ERROR(stream.WaitEvent(*joins_[0]));
    for (const Op& op : plan.lanes.front()) BRAID_RETURN_IF_ERROR(RunOp(op, args, input, output, slot(0), stream));
    // ... and that stream's later use after this one.
    BRAID_RETURN_IF_ERROR(stream.Record(*fork_));
    return streams_[0]->WaitEvent(*fork_);
  }
  const size_t used = std::min<size_t>(plan.lanes.size(), kStreams);
  BRAID_RETURN_IF_ERROR(stream.Record(*fork_));
  for (size_t s = 0; s < used; ++s) BRAID_RETURN_IF_ERROR(streams_[s]->WaitEvent(*fork_));
  for (size_t wave = 0; wave < plan.lanes.size(); wave += kStreams) {
    const size_t end = std::min(plan.lanes.size(), wave + kStreams);
    for (size_t k = 0; k < ops; ++k) {
      for (size_t lane = wave; lane < end; ++lane) {
        const size_t s = lane - wave;
        BRAID_RETURN_IF_ERROR(RunOp(plan.lanes[lane][k], args, input, output, slot(s), *streams_[s]));
      }
    }
  }
  for (size_t s = 0; s < used; ++s) {
    BRAID_RETURN_IF_ERROR(streams_[s]->Record(*joins_[s]));
    BRAID_RETURN_IF_ERROR(stream.WaitEvent(*joins_[s]));
  }
  return absl::OkStatus();
}

}  // namespace braid
