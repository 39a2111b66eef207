#include "collectives/chain.h"

#include <vector>

#include "collectives/algorithm_util.h"
#include "tensor/reduce.h"

namespace braid {

// Pipelined chain from the root: each rank forwards a segment to the next as
// soon as it arrives.
absl::Status ChainBroadcast(Transport& transport, const CollectiveArgs& args, absl::Span<std::byte> buffer) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kBroadcast, args, buffer, buffer));
  if (done) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  const int position = (me - args.root + n) % n;
  const int next = position < n - 1 ? (me + 1) % n : -1;
  const int previous = (me + n - 1) % n;
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const Range all{0, args.count};
  std::vector<OpId> recvs, sends;
  if (position > 0) {
    for (size_t j = 0; j < segments; ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(previous, CollectiveHeader(args, StepTag(0, j)),
                                                         Slice(buffer, SegmentRange(all, seg, j), es)));
      recvs.push_back(id);
    }
  }
  for (size_t j = 0; j < segments; ++j) {
    if (position > 0) BRAID_RETURN_IF_ERROR(transport.Wait({recvs[j]}, args.deadline));
    if (next < 0) continue;
    BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(next, CollectiveHeader(args, StepTag(0, j)),
                                                       Slice(buffer, SegmentRange(all, seg, j), es)));
    sends.push_back(id);
  }
  return transport.Wait(sends, args.deadline);
}

// Pipelined chain toward the root: the rank farthest from the root sends its
// input; each rank adds its own and passes it on.
absl::Status ChainReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                         absl::Span<std::byte> output, Scratch& scratch) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kReduce, args, input, output));
  if (done) return absl::OkStatus();
  const bool root = me == args.root;
  const size_t es = DTypeSize(args.dtype);
  const int position = (me - args.root + n) % n;
  const int from = position < n - 1 ? (me + 1) % n : -1;
  const int to = (me + n - 1) % n;
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const Range all{0, args.count};
  std::vector<OpId> sends;
  if (from < 0) {
    for (size_t j = 0; j < segments; ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(to, CollectiveHeader(args, StepTag(0, j)),
                                                         Slice(input, SegmentRange(all, seg, j), es)));
      sends.push_back(id);
    }
    return transport.Wait(sends, args.deadline);
  }
  const size_t partial_bytes = root ? 0 : args.count * es;
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> memory, scratch.Get(partial_bytes + kSlots * seg * es));
  absl::Span<std::byte> target = root ? output : memory.subspan(0, partial_bytes);
  std::vector<SlottedReceiver::Item> items;
  for (size_t j = 0; j < segments; ++j) items.push_back({StepTag(0, j), SegmentRange(all, seg, j).length * es});
  SlottedReceiver receiver(transport, args, from, std::move(items), memory.subspan(partial_bytes), seg * es);
  BRAID_RETURN_IF_ERROR(receiver.Start());
  for (size_t j = 0; j < segments; ++j) {
    const Range range = SegmentRange(all, seg, j);
    BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, receiver.Wait(j));
    absl::Span<std::byte> dst = Slice(target, range, es);
    HostReduce(args.dtype, args.op, dst, Slice(input, range, es), arrived);
    BRAID_RETURN_IF_ERROR(receiver.Release(j));
    if (root) {
      if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
      continue;
    }
    BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(to, CollectiveHeader(args, StepTag(0, j)), dst));
    sends.push_back(id);
  }
  return transport.Wait(sends, args.deadline);
}

}  // namespace braid
