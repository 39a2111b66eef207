#include "collectives/device/host_executor.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "tensor/reduce.h"

namespace braid {

absl::Status RunPlanOnTransport(const Plan& plan, Transport& transport, const CollectiveArgs& args,
                                absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch) {
  const size_t es = DTypeSize(args.dtype);
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> lane_scratch, scratch.Get(plan.scratch_elements * es));
  auto span = [&](const Region& r) -> absl::StatusOr<absl::Span<std::byte>> {
    absl::Span<std::byte> base;
    switch (r.buffer) {
      case Buffer::kInput: base = absl::MakeSpan(const_cast<std::byte*>(input.data()), input.size()); break;
      case Buffer::kOutput: base = output; break;
      default: base = lane_scratch; break;
    }
    if ((r.begin + r.count) * es > base.size()) {
      return absl::InternalError(absl::StrCat("program region [", r.begin, ", ", r.begin + r.count,
                                              ") outside a buffer of ", base.size() / es, " elements"));
    }
    return base.subspan(r.begin * es, r.count * es);
  };
  // Lane by lane: every rank runs the same order, so messages match. A
  // frame's tag counts the messages between the two ranks so far, which is
  // how a DeviceLink matches them (in order), whatever the step.
  std::vector<uint32_t> sent(static_cast<size_t>(transport.size())), received(sent.size());
  for (size_t lane = 0; lane < plan.lanes.size(); ++lane) {
    const std::vector<Op>& ops = plan.lanes[lane];
    for (size_t k = 0; k < ops.size(); ++k) {
      const Op& op = ops[k];
      switch (op.kind) {
        case Op::Kind::kGroup: {
          std::vector<OpId> posted;
          for (const Transfer& t : op.transfers) {
            if (t.region.count == 0) continue;
            if (t.peer < 0 || t.peer >= transport.size()) return absl::InternalError("program names a bad peer");
            BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes, span(t.region));
            uint32_t& counter = t.send ? sent[static_cast<size_t>(t.peer)] : received[static_cast<size_t>(t.peer)];
            const FrameHeader header = CollectiveHeader(args, counter++);
            BRAID_ASSIGN_OR_RETURN(OpId id, t.send ? transport.PostSend(t.peer, header, bytes)
                                                   : transport.PostRecv(t.peer, header, bytes));
            posted.push_back(id);
          }
          if (!posted.empty()) BRAID_RETURN_IF_ERROR(transport.Wait(posted, args.deadline));
          break;
        }
        case Op::Kind::kReduce: {
          if (op.dst.count == 0) break;
          BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> dst, span(op.dst));
          BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> a, span(op.a));
          BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> b, span(op.b));
          HostReduce(args.dtype, args.op, dst, a, b);
          break;
        }
        case Op::Kind::kCopy: {
          if (op.dst.count == 0) break;
          BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> dst, span(op.dst));
          BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> src, span(op.a));
          if (dst.data() != src.data()) std::memmove(dst.data(), src.data(), dst.size());
          break;
        }
        case Op::Kind::kDivide: {
          if (op.dst.count == 0) break;
          BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> dst, span(op.dst));
          HostDivide(args.dtype, dst, transport.size());
          break;
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace braid
