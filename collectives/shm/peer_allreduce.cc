#include "collectives/shm/shm_collectives.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/status.h"
#include "collectives/algorithm_util.h"
#include "collectives/shm/rounds.h"
#include "collectives/topology.h"
#include "tensor/reduce.h"

namespace braid {

// Direct all-reduce through the peers' own buffers (cross-memory copies):
// each rank reduces one slice of the whole vector, a piece at a time, reading
// the peers' inputs into cached scratch, and writes the result into every
// peer's output. Each input byte is read once and each output byte written
// once, with no window in between and no rounds. Safe in place too: only the
// slice's owner reads or writes a slice of anyone's buffers, and it reads
// each piece before it writes it. The first Sync publishes the buffers (and
// its header check means every peer's hold args.count elements, so no copy
// can land outside them); the last keeps them published until every rank is
// done.
//
// Where any rank has a large output of its own (WindowPlan::stream_output_bytes,
// out of place), the results go through the windows instead, in rounds: each rank
// reduces its slice of the round from the peers' inputs into its window,
// and after a Sync every rank copies every slice out, around the cache. A
// round needs one Sync: the inputs stay published, and a window half is
// refilled only after the next round's Sync, when every peer has copied it.
absl::Status PeerAllReduce(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                           absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                           const WindowPlan& plan) {
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllReduce, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> piece_buffer, scratch.Get(kPeerPieceBytes));
  const bool stream_out = output.data() != input.data() && output.size() >= plan.stream_output_bytes;
  const std::byte wants_windows{stream_out ? uint8_t{1} : uint8_t{0}};
  BRAID_RETURN_IF_ERROR(windows.Sync(CollectiveHeader(args, StepTag(0, 0)), args.deadline,
                                     {input.data(), output.data()}, absl::MakeConstSpan(&wants_windows, 1)));
  std::vector<PeerBuffers> peers(static_cast<size_t>(n));
  bool through_windows = false;
  for (int rank = 0; rank < n; ++rank) {
    if (rank != me) peers[static_cast<size_t>(rank)] = windows.Published(rank);
    through_windows = through_windows || *windows.SyncPayload(rank) != std::byte{0};
  }
  const size_t piece_elems = kPeerPieceBytes / es;
  // Reduces `slice` (elements of the whole vector) into `sum`, a piece at a time.
  auto reduce = [&](const Range& slice, absl::Span<std::byte> sum) -> absl::Status {
    for (size_t at = 0; at < slice.length; at += piece_elems) {
      const Range piece{slice.begin + at, std::min(piece_elems, slice.length - at)};
      absl::Span<std::byte> into = sum.subspan(at * es, piece.length * es);
      absl::Span<std::byte> theirs = piece_buffer.subspan(0, into.size());
      for (int k = 1; k < n; ++k) {
        const int peer = (me + k) % n;
        BRAID_RETURN_IF_ERROR(windows.ReadPeer(peer, peers[static_cast<size_t>(peer)].input + piece.begin * es, theirs));
        HostReduce(args.dtype, args.op, into, k == 1 ? Slice(input, piece, es) : into, theirs);
      }
      if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, into, n);
      if (through_windows) continue;
      for (int k = 1; k < n; ++k) {
        const int peer = (me + k) % n;
        BRAID_RETURN_IF_ERROR(windows.WritePeer(peer, into, peers[static_cast<size_t>(peer)].output + piece.begin * es));
      }
    }
    return absl::OkStatus();
  };
  if (!through_windows) {
    const Range mine = ChunkRange(args.count, n, me);
    BRAID_RETURN_IF_ERROR(reduce(mine, Slice(output, mine, es)));
    return windows.Sync(CollectiveHeader(args, StepTag(1, 0)), args.deadline);
  }
  const size_t round_elems = windows.half_bytes() / es;
  for (size_t begin = 0, round = 0; begin < args.count; begin += round_elems, ++round) {
    const Range part{begin, std::min(round_elems, args.count - begin)};
    const std::vector<std::byte*>& half = windows.NextRound();
    auto window = [&](int rank, const Range& range) {  // range within the round
      return absl::Span<std::byte>(half[static_cast<size_t>(rank)] + range.begin * es, range.length * es);
    };
    const Range mine = ChunkRange(part.length, n, me);
    BRAID_RETURN_IF_ERROR(reduce(Range{part.begin + mine.begin, mine.length}, window(me, mine)));
    BRAID_RETURN_IF_ERROR(windows.Sync(CollectiveHeader(args, StepTag(1, round)), args.deadline));
    CopyRoundOut(half, n, me, es, Slice(output, part, es), stream_out);
  }
  // The inputs stay published until every rank has read its last slice.
  return windows.Sync(CollectiveHeader(args, StepTag(2, 0)), args.deadline);
}

}  // namespace braid
