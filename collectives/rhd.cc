#include "collectives/rhd.h"

#include "collectives/algorithm_util.h"
#include "tensor/reduce.h"

namespace braid {

// Recursive halving (reduce-scatter) then doubling (all-gather) among the
// largest power of two of ranks; the others fold into a partner first and
// get the result back at the end. log2(size) steps: good for small and
// medium messages.
absl::Status RhdAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                          absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllReduce, args, input, output));
  if (done) return absl::OkStatus();
  const int n = transport.size();
  const int me = transport.rank();
  CopyIfDistinct(output, input);  // the steps below work in place
  const size_t es = DTypeSize(args.dtype);
  const RhdRole role = RhdPlan(me, n);
  const int p = role.power_of_two;
  uint32_t step = 0;
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> incoming, scratch.Get(args.count * es));

  if (role.folded) {
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(role.partner, CollectiveHeader(args, StepTag(0, 0)), output));
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(role.partner, CollectiveHeader(args, StepTag(1000, 0)), output));
    return transport.Wait({s, r}, args.deadline);
  }
  if (role.partner >= 0) {
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(role.partner, CollectiveHeader(args, StepTag(0, 0)), incoming));
    BRAID_RETURN_IF_ERROR(transport.Wait({r}, args.deadline));
    HostReduce(args.dtype, args.op, output, output, incoming);
  }
  ++step;
  const int v = role.virtual_rank;
  // Chunk ranges in units of the p chunks; [lo, hi) is what this rank still reduces.
  auto span_of = [&](int lo, int hi) {
    const Range first = ChunkRange(args.count, p, lo);
    const Range last = ChunkRange(args.count, p, hi - 1);
    return Range{first.begin, last.end() - first.begin};
  };
  int lo = 0, hi = p;
  for (int mask = p / 2; mask >= 1; mask /= 2, ++step) {
    const int partner = RhdRealRank(v ^ mask, n);
    const int mid = (lo + hi) / 2;
    const bool keep_low = (v & mask) == 0;
    const Range keep = keep_low ? span_of(lo, mid) : span_of(mid, hi);
    const Range give = keep_low ? span_of(mid, hi) : span_of(lo, mid);
    BRAID_ASSIGN_OR_RETURN(
        OpId s, transport.PostSend(partner, CollectiveHeader(args, StepTag(step, 0)), Slice(output, give, es)));
    BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(partner, CollectiveHeader(args, StepTag(step, 0)),
                                                      incoming.subspan(0, keep.length * es)));
    BRAID_RETURN_IF_ERROR(transport.Wait({s, r}, args.deadline));
    absl::Span<std::byte> dst = Slice(output, keep, es);
    HostReduce(args.dtype, args.op, dst, dst, incoming.subspan(0, keep.length * es));
    if (keep_low) hi = mid; else lo = mid;
  }
  if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, Slice(output, span_of(lo, hi), es), n);
  for (int mask = 1; mask < p; mask *= 2, ++step) {
    const int partner = RhdRealRank(v ^ mask, n);
    const int width = hi - lo;
    const bool low = (v & mask) == 0;
    const Range mine = span_of(lo, hi);
    const Range theirs = low ? span_of(hi, hi + width) : span_of(lo - width, lo);
    BRAID_ASSIGN_OR_RETURN(
        OpId s, transport.PostSend(partner, CollectiveHeader(args, StepTag(step, 0)), Slice(output, mine, es)));
    BRAID_ASSIGN_OR_RETURN(
        OpId r, transport.PostRecv(partner, CollectiveHeader(args, StepTag(step, 0)), Slice(output, theirs, es)));
    BRAID_RETURN_IF_ERROR(transport.Wait({s, r}, args.deadline));
    if (low) hi += width; else lo -= width;
  }
  if (role.partner >= 0) {
    BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(role.partner, CollectiveHeader(args, StepTag(1000, 0)), output));
    BRAID_RETURN_IF_ERROR(transport.Wait({s}, args.deadline));
  }
  return absl::OkStatus();
}

}  // namespace braid
