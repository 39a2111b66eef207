#include "collectives/ring.h"

#include <vector>

#include "collectives/algorithm_util.h"
#include "tensor/reduce.h"

namespace braid {

// Ring all-reduce: reduce-scatter then all-gather around the ring, every
// chunk split into segments so that a segment is forwarded as soon as it is
// reduced (transfer overlaps reduction). Out of place needs no copy: the
// reduce-scatter combines the input with what arrives straight into output.
absl::Status RingAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllReduce, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  const RingNeighbors ring = Ring(me, n);
  const size_t seg = SegmentElements(args.count, n, es, args.segment_bytes);
  auto chunk = [&](int c) { return ChunkRange(args.count, n, ((c % n) + n) % n); };
  const uint32_t last_rs_step = static_cast<uint32_t>(n - 2);

  // Reduce-scatter receives: step s brings chunk me - s - 1.
  struct Piece {
    uint32_t step;
    Range range;
    size_t segment;
  };
  std::vector<Piece> pieces;
  std::vector<SlottedReceiver::Item> items;
  for (uint32_t s = 0; s <= last_rs_step; ++s) {
    const Range c = chunk(me - static_cast<int>(s) - 1);
    for (size_t j = 0; j < SegmentCount(c.length, seg); ++j) {
      pieces.push_back({s, SegmentRange(c, seg, j), j});
      items.push_back({StepTag(s, j), pieces.back().range.length * es});
    }
  }
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> slots, scratch.Get(kSlots * seg * es));
  SlottedReceiver receiver(transport, args, ring.left, std::move(items), slots, seg * es);
  BRAID_RETURN_IF_ERROR(receiver.Start());

  std::vector<OpId> rs_sends, ag_sends;
  {
    const Range own = chunk(me);
    for (size_t j = 0; j < SegmentCount(own.length, seg); ++j) {
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, CollectiveHeader(args, StepTag(0, j)),
                                                         Slice(input, SegmentRange(own, seg, j), es)));
      rs_sends.push_back(id);
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, receiver.Wait(i));
    absl::Span<std::byte> dst = Slice(output, piece.range, es);
    HostReduce(args.dtype, args.op, dst, Slice(input, piece.range, es), arrived);
    BRAID_RETURN_IF_ERROR(receiver.Release(i));
    const bool final_chunk = piece.step == last_rs_step;
    if (final_chunk && args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
    // Forward at once: the next reduce-scatter step, or all-gather step 0.
    BRAID_ASSIGN_OR_RETURN(
        OpId id, transport.PostSend(ring.right, CollectiveHeader(args, StepTag(piece.step + 1, piece.segment)), dst));
    (final_chunk ? ag_sends : rs_sends).push_back(id);
  }
  // Those sends read chunks the all-gather overwrites.
  BRAID_RETURN_IF_ERROR(transport.Wait(rs_sends, args.deadline));

  // All-gather: step t brings chunk me - t, forwarded at step t + 1.
  std::vector<Piece> gathered;
  std::vector<OpId> recvs;
  for (uint32_t t = 0; t <= last_rs_step; ++t) {
    const Range c = chunk(me - static_cast<int>(t));
    for (size_t j = 0; j < SegmentCount(c.length, seg); ++j) {
      const Range range = SegmentRange(c, seg, j);
      BRAID_ASSIGN_OR_RETURN(OpId id,
                             transport.PostRecv(ring.left, CollectiveHeader(args, StepTag(last_rs_step + 1 + t, j)),
                                                Slice(output, range, es)));
      gathered.push_back({t, range, j});
      recvs.push_back(id);
    }
  }
  for (size_t i = 0; i < gathered.size(); ++i) {
    BRAID_RETURN_IF_ERROR(transport.Wait({recvs[i]}, args.deadline));
    const Piece& piece = gathered[i];
    if (piece.step < last_rs_step) {
      BRAID_ASSIGN_OR_RETURN(
          OpId id,
          transport.PostSend(ring.right, CollectiveHeader(args, StepTag(last_rs_step + 2 + piece.step, piece.segment)),
                             Slice(output, piece.range, es)));
      ag_sends.push_back(id);
    }
  }
  return transport.Wait(ag_sends, args.deadline);
}


// Ring reduce-scatter: step s sends chunk me - s - 1 (its partial sum) and
// receives chunk me - s - 2, so the last step delivers this rank's own chunk.
absl::Status RingReduceScatter(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output, Scratch& scratch) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kReduceScatter, args, input, output));
  if (done) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  auto chunk = [&](int c) { return Range{static_cast<size_t>(((c % n) + n) % n) * args.count, args.count}; };
  const RingNeighbors ring = Ring(me, n);
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const uint32_t last_step = static_cast<uint32_t>(n - 2);
  // Partial sums of steps 0 .. n-3 live in scratch until forwarded.
  const size_t partial_bytes = static_cast<size_t>(n - 2) * args.count * es;
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> memory, scratch.Get(partial_bytes + kSlots * seg * es));
  absl::Span<std::byte> partials = memory.subspan(0, partial_bytes);

  std::vector<SlottedReceiver::Item> items;
  for (uint32_t s = 0; s <= last_step; ++s) {
    for (size_t j = 0; j < segments; ++j) items.push_back({StepTag(s, j), SegmentRange({0, args.count}, seg, j).length * es});
  }
  SlottedReceiver receiver(transport, args, ring.left, std::move(items), memory.subspan(partial_bytes), seg * es);
  BRAID_RETURN_IF_ERROR(receiver.Start());
  std::vector<OpId> sends;
  for (size_t j = 0; j < segments; ++j) {
    const Range range = SegmentRange(chunk(me - 1), seg, j);
    BRAID_ASSIGN_OR_RETURN(
        OpId id, transport.PostSend(ring.right, CollectiveHeader(args, StepTag(0, j)), Slice(input, range, es)));
    sends.push_back(id);
  }
  size_t index = 0;
  for (uint32_t s = 0; s <= last_step; ++s) {
    const Range c = chunk(me - static_cast<int>(s) - 2);
    for (size_t j = 0; j < segments; ++j, ++index) {
      const Range in_chunk = SegmentRange({0, args.count}, seg, j);
      BRAID_ASSIGN_OR_RETURN(absl::Span<const std::byte> arrived, receiver.Wait(index));
      absl::Span<std::byte> dst = s == last_step ? Slice(output, in_chunk, es)
                                                 : Slice(partials.subspan(s * args.count * es, args.count * es), in_chunk, es);
      HostReduce(args.dtype, args.op, dst, Slice(input, SegmentRange(c, seg, j), es), arrived);
      BRAID_RETURN_IF_ERROR(receiver.Release(index));
      if (s == last_step) {
        if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, dst, n);
        continue;
      }
      BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, CollectiveHeader(args, StepTag(s + 1, j)), dst));
      sends.push_back(id);
    }
  }
  return transport.Wait(sends, args.deadline);
}


// Ring all-gather: step t forwards chunk me - t to the right.
absl::Status RingAllGather(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllGather, args, input, output));
  if (done) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  auto chunk = [&](int c) { return Range{static_cast<size_t>(((c % n) + n) % n) * args.count, args.count}; };
  const RingNeighbors ring = Ring(me, n);
  const size_t seg = SegmentElements(args.count, 1, es, args.segment_bytes);
  const size_t segments = SegmentCount(args.count, seg);
  const uint32_t last_step = static_cast<uint32_t>(n - 2);
  std::vector<OpId> recvs, sends;
  for (uint32_t t = 0; t <= last_step; ++t) {
    for (size_t j = 0; j < segments; ++j) {
      const Range range = SegmentRange(chunk(me - static_cast<int>(t) - 1), seg, j);
      BRAID_ASSIGN_OR_RETURN(
          OpId id, transport.PostRecv(ring.left, CollectiveHeader(args, StepTag(t, j)), Slice(output, range, es)));
      recvs.push_back(id);
    }
  }
  for (size_t j = 0; j < segments; ++j) {
    BRAID_ASSIGN_OR_RETURN(OpId id, transport.PostSend(ring.right, CollectiveHeader(args, StepTag(0, j)),
                                                       Slice(output, SegmentRange(chunk(me), seg, j), es)));
    sends.push_back(id);
  }
  size_t index = 0;
  for (uint32_t t = 0; t <= last_step; ++t) {
    for (size_t j = 0; j < segments; ++j, ++index) {
      BRAID_RETURN_IF_ERROR(transport.Wait({recvs[index]}, args.deadline));
      if (t == last_step) continue;
      const Range range = SegmentRange(chunk(me - static_cast<int>(t) - 1), seg, j);
      BRAID_ASSIGN_OR_RETURN(
          OpId id, transport.PostSend(ring.right, CollectiveHeader(args, StepTag(t + 1, j)), Slice(output, range, es)));
      sends.push_back(id);
    }
  }
  return transport.Wait(sends, args.deadline);
}

}  // namespace braid
