#include "collectives/tree.h"

#include <vector>

#include "collectives/algorithm_util.h"
#include "tensor/reduce.h"

namespace braid {

// Pipelined binary-tree all-reduce: segments flow up the tree, reduced at
// every inner rank, and the root's results flow back down. Latency grows with
// log2(size) rather than size.
absl::Status TreeAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllReduce, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  const TreeLinks links = BinaryTree(me, n);
  const Range all{0, args.count};
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);

  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> slots, scratch.Get(links.children.size() * kSlots * seg * es));
  std::vector<SlottedReceiver> from_children;
  for (size_t c = 0; c < links.children.size(); ++c) {
    std::vector<SlottedReceiver::Item> items;
    for (size_t j = 0; j < segments; ++j) items.push_back({StepTag(0, j), SegmentRange(all, seg, j).length * es});
    from_children.emplace_back(transport, args, links.children[c], std::move(items),
                               slots.subspan(c * kSlots * seg * es, kSlots * seg * es), seg * es);
    BRAID_RETURN_IF_ERROR(from_children.back().Start());
  }

  std::vector<OpId> up_sends, down_sends;
  for (size_t j = 0; j < segments; ++j) {
    const Range range = SegmentRange(all, seg, j);
    absl::Span<const std::byte> mine = Slice(input, range, es);
    absl::Span<std::byte> dst = Slice(output, range, es);
    for (size_t c = 0; c < from_children.size(); ++c) {
      BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, from_children[c].Wait(j));
      HostReduce(args.dtype, args.op, dst, c == 0 ? mine : absl::Span<const std::byte>(dst), arrived);
      BRAID_RETURN_IF_ERROR(from_children[c].Release(j));
    }
    absl::Span<const std::byte> result = from_children.empty() ? mine : absl::Span<const std::byte>(dst);
    if (links.parent >= 0) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(links.parent, CollectiveHeader(args, StepTag(0, j)), result));
      up_sends.push_back(id);
      continue;
    }
    // The root: results are final; start them down at once.
    CopyIfDistinct(dst, result);
    if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
    for (int child : links.children) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(child, CollectiveHeader(args, StepTag(1, j)), dst));
      down_sends.push_back(id);
    }
  }
  if (links.parent >= 0) {
    // The up sends read `output` (or an in-place input), which the results overwrite.
    BRAID_RETURN_IF_ERROR(transport.Wait(up_sends, args.deadline));
    std::vector<OpId> recvs;
    for (size_t j = 0; j < segments; ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostRecv(links.parent, CollectiveHeader(args, StepTag(1, j)),
                                                         Slice(output, SegmentRange(all, seg, j), es)));
      recvs.push_back(id);
    }
    for (size_t j = 0; j < segments; ++j) {
      BRAID_RETURN_IF_ERROR(transport.Wait({recvs[j]}, args.deadline));
      for (int child : links.children) {
        BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(child, CollectiveHeader(args, StepTag(1, j)),
                                                           Slice(output, SegmentRange(all, seg, j), es)));
        down_sends.push_back(id);
      }
    }
  }
  return transport.Wait(down_sends, args.deadline);
}

}  // namespace braid
