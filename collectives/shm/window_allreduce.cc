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

// Direct all-reduce through the shared windows, in rounds of up to one window
// half of the vector: every rank copies its part into its half; after a
// barrier, each reduces one slice reading every rank's data (writing the
// result into its own half); after a second barrier, each copies every slice
// out. Every byte is copied in once and out once, with no stream in between,
// and every phase keeps all ranks busy, which matters most when they
// outnumber the cores. Inputs of up to kSyncPayloadBytes ride with one Sync;
// other small rounds skip the slicing: every rank reduces the whole round
// itself, in rank order, after the first barrier.
absl::Status WindowAllReduce(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                             absl::Span<const std::byte> input, absl::Span<std::byte> output, const WindowPlan& plan) {
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllReduce, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  const size_t es = DTypeSize(args.dtype);
  const size_t round_elems = windows.half_bytes() / es;
  // A large output of its own is not in the cache (the input was read, not
  // it): write it around the cache rather than read each line first.
  const bool stream_out = output.data() != input.data() && output.size() >= plan.stream_output_bytes;
  if (input.size() <= SharedWindows::kSyncPayloadBytes) {
    // The inputs ride with the Sync, in the cache line each rank polls.
    BRAID_RETURN_IF_ERROR(windows.Sync(CollectiveHeader(args, StepTag(0, 0)), args.deadline, {}, input));
    auto input_of = [&](int rank) { return absl::MakeConstSpan(windows.SyncPayload(rank), input.size()); };
    HostReduce(args.dtype, args.op, output, input_of(0), input_of(1));
    for (int r = 2; r < n; ++r) HostReduce(args.dtype, args.op, output, output, input_of(r));
    if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, output, n);
    return absl::OkStatus();
  }
  for (size_t begin = 0, round = 0; begin < args.count; begin += round_elems, ++round) {
    const Range part{begin, std::min(round_elems, args.count - begin)};
    const std::vector<std::byte*>& half = windows.NextRound();
    auto window = [&](int rank, const Range& range) {
      return absl::Span<std::byte>(half[static_cast<size_t>(rank)] + range.begin * es, range.length * es);
    };
    const Range all{0, part.length};
    absl::Span<const std::byte> in = Slice(input, part, es);
    absl::Span<std::byte> out = Slice(output, part, es);
    if (part.length * es <= plan.whole_round_bytes) {
      std::memcpy(window(me, all).data(), in.data(), in.size());
      BRAID_RETURN_IF_ERROR(windows.Sync(CollectiveHeader(args, StepTag(0, round)), args.deadline));
      HostReduce(args.dtype, args.op, out, window(0, all), window(1, all));
      for (int r = 2; r < n; ++r) HostReduce(args.dtype, args.op, out, out, window(r, all));
      if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, out, n);
      continue;
    }
    // This rank's own slice is read from its input, so it is not copied in.
    const Range mine = ChunkRange(part.length, n, me);
    for (const Range& other : {Range{0, mine.begin}, Range{mine.end(), part.length - mine.end()}}) {
      std::memcpy(window(me, other).data(), Slice(in, other, es).data(), other.length * es);
    }
    BRAID_RETURN_IF_ERROR(windows.Sync(CollectiveHeader(args, StepTag(0, round)), args.deadline));
    absl::Span<std::byte> sum = window(me, mine);
    HostReduce(args.dtype, args.op, sum, Slice(in, mine, es), window((me + 1) % n, mine));
    for (int k = 2; k < n; ++k) HostReduce(args.dtype, args.op, sum, sum, window((me + k) % n, mine));
    if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, sum, n);
    BRAID_RETURN_IF_ERROR(windows.Sync(CollectiveHeader(args, StepTag(1, round)), args.deadline));
    CopyRoundOut(half, n, me, es, out, stream_out);
  }
  return absl::OkStatus();
}

}  // namespace braid
