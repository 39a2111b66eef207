#include "collectives/programs/program.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/programs/plan_builders.h"
#include "collectives/programs/shm_programs.h"
#include "collectives/programs/tree_programs.h"
#include "collectives/topology.h"

namespace braid {
namespace {

using namespace plan;  // NOLINT(build/namespaces): the Plans below are written in its words

// Lane `w` of block `b` (mod n) of blocks of `count` elements.
Range BlockLane(int b, int n, size_t count, const Range& w) {
  return Range{static_cast<size_t>(Mod(b, n)) * count + w.begin, w.length};
}

// Ring all-reduce: reduce-scatter, the final chunk divided for
// avg, then all-gather; lane j is segment j of every chunk.
Plan RingAllReduce(const PlanRequest& r) {
  const int n = r.size;
  const int me = r.rank;
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, n);
  const RingNeighbors ring = Ring(me, n);
  Plan plan;
  plan.scratch_elements = seg;
  const size_t lanes = SegmentCount(ChunkRange(count, n, 0).length, seg);
  for (size_t j = 0; j < lanes; ++j) {
    auto c = [&](int index) { return Lane(ChunkRange(count, n, Mod(index, n)), seg, j); };
    std::vector<Op> ops;
    ops.reserve(3 * static_cast<size_t>(n));
    for (int s = 0; s <= n - 2; ++s) {
      const Range sent = c(me - s);
      const Range got = c(me - s - 1);
      ops.push_back(Group({SendTo(ring.right, s == 0 ? In(sent) : Out(sent)), RecvFrom(ring.left, Scratch(0, got.length))}));
      ops.push_back(ReduceOp3(Out(got), In(got), Scratch(0, got.length)));
    }
    if (r.args.op == ReduceOp::kAvg) ops.push_back(DivideOp(Out(c(me + 1))));
    for (int t = 0; t <= n - 2; ++t) {
      ops.push_back(Group({SendTo(ring.right, Out(c(me + 1 - t))), RecvFrom(ring.left, Out(c(me - t)))}));
    }
    plan.lanes.push_back(std::move(ops));
  }
  return plan;
}

// Recursive halving-doubling, one lane: its chunks are fixed by
// the power of two, so segmenting would change the sums' order.
Plan RhdAllReduce(const PlanRequest& r) {
  const int n = r.size;
  const size_t count = r.args.count;
  const Range all{0, count};
  const RhdRole role = RhdPlan(r.rank, n);
  const int p = role.power_of_two;
  Plan plan;
  plan.scratch_elements = count;
  std::vector<Op> ops;
  ops.push_back(CopyOp(Out(all), In(all)));
  if (role.folded) {
    ops.push_back(Group({SendTo(role.partner, Out(all))}));
    ops.push_back(Group({RecvFrom(role.partner, Out(all))}));
    plan.lanes.push_back(std::move(ops));
    return plan;
  }
  if (role.partner >= 0) {
    ops.push_back(Group({RecvFrom(role.partner, Scratch(0, count))}));
    ops.push_back(ReduceOp3(Out(all), Out(all), Scratch(0, count)));
  }
  const int v = role.virtual_rank;
  auto span_of = [&](int lo, int hi) {
    const Range first = ChunkRange(count, p, lo);
    const Range last = ChunkRange(count, p, hi - 1);
    return Range{first.begin, last.end() - first.begin};
  };
  int lo = 0, hi = p;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner = RhdRealRank(v ^ mask, n);
    const int mid = (lo + hi) / 2;
    const bool keep_low = (v & mask) == 0;
    const Range keep = keep_low ? span_of(lo, mid) : span_of(mid, hi);
    const Range give = keep_low ? span_of(mid, hi) : span_of(lo, mid);
    ops.push_back(Group({SendTo(partner, Out(give)), RecvFrom(partner, Scratch(0, keep.length))}));
    ops.push_back(ReduceOp3(Out(keep), Out(keep), Scratch(0, keep.length)));
    if (keep_low) hi = mid; else lo = mid;
  }
  if (r.args.op == ReduceOp::kAvg) ops.push_back(DivideOp(Out(span_of(lo, hi))));
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner = RhdRealRank(v ^ mask, n);
    const int width = hi - lo;
    const bool low = (v & mask) == 0;
    const Range mine = span_of(lo, hi);
    const Range theirs = low ? span_of(hi, hi + width) : span_of(lo - width, lo);
    ops.push_back(Group({SendTo(partner, Out(mine)), RecvFrom(partner, Out(theirs))}));
    if (low) hi += width; else lo -= width;
  }
  if (role.partner >= 0) ops.push_back(Group({SendTo(role.partner, Out(all))}));
  plan.lanes.push_back(std::move(ops));
  return plan;
}

// Ring reduce-scatter: step s forwards the partial sum of block
// me - s - 1; the last step lands this rank's own block in the output. Two
// partial buffers alternate (a send's buffer is free once the next step's
// group is queued after it), the third takes what arrives.
Plan RingReduceScatter(const PlanRequest& r) {
  const int n = r.size;
  const int me = r.rank;
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, 1);
  const RingNeighbors ring = Ring(me, n);
  Plan plan;
  plan.scratch_elements = 3 * seg;
  for (size_t j = 0; j < SegmentCount(count, seg); ++j) {
    const Range w = Lane(Range{0, count}, seg, j);
    auto block = [&](int b) { return BlockLane(b, n, count, w); };
    auto partial = [&](int s) { return Scratch(static_cast<size_t>(s % 2) * seg, w.length); };
    const Region arrived = Scratch(2 * seg, w.length);
    std::vector<Op> ops;
    for (int s = 0; s <= n - 2; ++s) {
      ops.push_back(Group({SendTo(ring.right, s == 0 ? In(block(me - 1)) : partial(s - 1)), RecvFrom(ring.left, arrived)}));
      ops.push_back(ReduceOp3(s == n - 2 ? Out(w) : partial(s), In(block(me - s - 2)), arrived));
    }
    if (r.args.op == ReduceOp::kAvg) ops.push_back(DivideOp(Out(w)));
    plan.lanes.push_back(std::move(ops));
  }
  return plan;
}

// Ring all-gather: step t forwards block me - t to the right.
Plan RingAllGather(const PlanRequest& r) {
  const int n = r.size;
  const int me = r.rank;
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, 1);
  const RingNeighbors ring = Ring(me, n);
  Plan plan;
  for (size_t j = 0; j < SegmentCount(count, seg); ++j) {
    const Range w = Lane(Range{0, count}, seg, j);
    auto block = [&](int b) { return BlockLane(b, n, count, w); };
    std::vector<Op> ops;
    ops.push_back(CopyOp(Out(block(me)), In(w)));
    for (int t = 0; t <= n - 2; ++t) {
      ops.push_back(Group({SendTo(ring.right, Out(block(me - t))), RecvFrom(ring.left, Out(block(me - t - 1)))}));
    }
    plan.lanes.push_back(std::move(ops));
  }
  return plan;
}

// Chain broadcast and reduce: along the ranks from the root, or
// toward it.
Plan ChainBroadcast(const PlanRequest& r) {
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, 1);
  const ChainLinks chain = Chain(r.rank, r.size, r.args.root);
  Plan plan;
  for (size_t j = 0; j < SegmentCount(count, seg); ++j) {
    const Range range = Lane(Range{0, count}, seg, j);
    std::vector<Op> ops;
    if (chain.previous >= 0) ops.push_back(Group({RecvFrom(chain.previous, Out(range))}));
    if (chain.next >= 0) ops.push_back(Group({SendTo(chain.next, Out(range))}));
    plan.lanes.push_back(std::move(ops));
  }
  return plan;
}

Plan ChainReduce(const PlanRequest& r) {
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, 1);
  const ChainLinks chain = Chain(r.rank, r.size, r.args.root);
  const bool root = chain.previous < 0;
  Plan plan;
  plan.scratch_elements = 2 * seg;
  for (size_t j = 0; j < SegmentCount(count, seg); ++j) {
    const Range range = Lane(Range{0, count}, seg, j);
    std::vector<Op> ops;
    if (chain.next < 0) {
      ops.push_back(Group({SendTo(chain.previous, In(range))}));
    } else {
      const Region arrived = Scratch(seg, range.length);
      const Region target = root ? Out(range) : Scratch(0, range.length);
      ops.push_back(Group({RecvFrom(chain.next, arrived)}));
      ops.push_back(ReduceOp3(target, In(range), arrived));
      if (root && r.args.op == ReduceOp::kAvg) ops.push_back(DivideOp(target));
      if (!root) ops.push_back(Group({SendTo(chain.previous, target)}));
    }
    plan.lanes.push_back(std::move(ops));
  }
  return plan;
}

// One-shot all-reduce: every rank sends its input to every other rank and
// reduces all n inputs itself in rank order (so every rank rounds alike);
// scratch block r holds rank r's input (this rank's too, as the output
// may be the input). (n - 1)x the bytes of the others: for small messages.
Plan OneShotAllReduce(const PlanRequest& r) {
  const size_t count = r.args.count;
  const int n = r.size;
  auto slot = [&](int rank) { return Scratch(static_cast<size_t>(rank) * count, count); };
  const Range all{0, count};
  std::vector<Op> ops;
  ops.push_back(CopyOp(slot(r.rank), In(all)));
  std::vector<Transfer> transfers;
  for (int k = 1; k < n; ++k) {  // staggered, so no peer gets everyone's send at once
    transfers.push_back(RecvFrom(Mod(r.rank - k, n), slot(Mod(r.rank - k, n))));
    transfers.push_back(SendTo(Mod(r.rank + k, n), In(all)));
  }
  ops.push_back(Group(std::move(transfers)));
  ops.push_back(ReduceOp3(Out(all), slot(0), slot(1)));
  for (int rank = 2; rank < n; ++rank) ops.push_back(ReduceOp3(Out(all), Out(all), slot(rank)));
  if (r.args.op == ReduceOp::kAvg) ops.push_back(DivideOp(Out(all)));
  Plan plan;
  plan.scratch_elements = static_cast<size_t>(n) * count;
  plan.lanes.push_back(std::move(ops));
  return plan;
}

// All-to-all: every pair at once in one group, this rank's own block copied.
Plan PairwiseAllToAll(const PlanRequest& r) {
  const size_t count = r.args.count;
  std::vector<Op> ops;
  auto block = [&](int b) { return Range{static_cast<size_t>(b) * count, count}; };
  ops.push_back(CopyOp(Out(block(r.rank)), In(block(r.rank))));
  std::vector<Transfer> transfers;
  for (int d = 1; d < r.size; ++d) {  // staggered, so every rank starts with a different partner
    const int to = Mod(r.rank + d, r.size);
    const int from = Mod(r.rank - d, r.size);
    transfers.push_back(SendTo(to, In(block(to))));
    transfers.push_back(RecvFrom(from, Out(block(from))));
  }
  ops.push_back(Group(std::move(transfers)));
  Plan plan;
  plan.lanes.push_back(std::move(ops));
  return plan;
}

// Barrier: dissemination rounds of one byte of scratch.
Plan DisseminationBarrier(const PlanRequest& r) {
  Plan plan;
  plan.scratch_elements = 2;
  std::vector<Op> ops;
  for (int distance = 1; distance < r.size; distance *= 2) {
    ops.push_back(Group({SendTo(Mod(r.rank + distance, r.size), Scratch(0, 1)),
                         RecvFrom(Mod(r.rank - distance, r.size), Scratch(1, 1))}));
  }
  plan.lanes.push_back(std::move(ops));
  return plan;
}

// What a group of one does: the result is the input.
Plan Alone(const PlanRequest& r) {
  Plan plan;
  if (r.args.kind == CollectiveKind::kBroadcast || r.args.kind == CollectiveKind::kBarrier) return plan;
  const Range all{0, r.args.count};
  plan.lanes.push_back({CopyOp(Out(all), In(all))});
  return plan;
}

}  // namespace

bool HasProgram(Algorithm algorithm, CollectiveKind kind) {
  switch (algorithm) {
    case Algorithm::kRing:
      return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
             kind == CollectiveKind::kAllGather;
    case Algorithm::kTree:
    case Algorithm::kDoubleTree:
    case Algorithm::kRhd:
    case Algorithm::kOneShot: return kind == CollectiveKind::kAllReduce;
    case Algorithm::kChain: return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce;
    case Algorithm::kPairwise: return kind == CollectiveKind::kAllToAll;
    case Algorithm::kDissemination: return kind == CollectiveKind::kBarrier;
    case Algorithm::kWindow: return kind == CollectiveKind::kAllReduce;
    case Algorithm::kPeerAccess:
      return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
             kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllToAll;
    default: return false;
  }
}

absl::StatusOr<Plan> MakePlan(const PlanRequest& request) {
  const CollectiveKind kind = request.args.kind;
  if (!HasProgram(request.algorithm, kind)) {
    return absl::InvalidArgumentError(absl::StrCat("no ", AlgorithmName(request.algorithm), " program for ",
                                                   CollectiveKindName(kind)));
  }
  if (request.rank < 0 || request.rank >= request.size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank, " not in a group of ", request.size));
  }
  const bool needs_root = kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce;
  if (needs_root && (request.args.root < 0 || request.args.root >= request.size)) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(kind), " root ", request.args.root,
                                                   " not in [0, ", request.size, ")"));
  }
  if (kind != CollectiveKind::kBarrier && request.args.count == 0) return Plan{};
  if (request.size == 1) return Alone(request);
  switch (request.algorithm) {
    case Algorithm::kRing:
      if (kind == CollectiveKind::kReduceScatter) return RingReduceScatter(request);
      if (kind == CollectiveKind::kAllGather) return RingAllGather(request);
      return RingAllReduce(request);
    case Algorithm::kTree: return TreeAllReduce(request);
    case Algorithm::kDoubleTree: return DoubleTreeAllReduce(request);
    case Algorithm::kRhd: return RhdAllReduce(request);
    case Algorithm::kOneShot: return OneShotAllReduce(request);
    case Algorithm::kChain:
      return kind == CollectiveKind::kBroadcast ? ChainBroadcast(request) : ChainReduce(request);
    case Algorithm::kPairwise: return PairwiseAllToAll(request);
    case Algorithm::kWindow: return WindowAllReducePlan(request);
    case Algorithm::kPeerAccess:
      switch (kind) {
        case CollectiveKind::kReduceScatter: return PeerReduceScatterPlan(request);
        case CollectiveKind::kAllGather: return PeerAllGatherPlan(request);
        case CollectiveKind::kAllToAll: return PeerAllToAllPlan(request);
        default: return PeerAllReducePlan(request);
      }
    default: return DisseminationBarrier(request);
  }
}

absl::StatusOr<const Plan*> CachedPlan(const PlanRequest& request) {
  constexpr size_t kKept = 4;
  constexpr size_t kMostLanes = 256;
  struct Entry {
    bool valid = false;
    PlanRequest request;
    Plan plan;
  };
  thread_local Entry kept[kKept + 1];  // the last slot holds a plan too large to keep
  thread_local size_t next = 0;
  auto same = [&](const PlanRequest& a) {
    return a.algorithm == request.algorithm && a.rank == request.rank && a.size == request.size &&
           a.args.kind == request.args.kind && a.args.dtype == request.args.dtype && a.args.op == request.args.op &&
           a.args.root == request.args.root && a.args.count == request.args.count &&
           a.args.segment_bytes == request.args.segment_bytes && a.window_half_bytes == request.window_half_bytes &&
           a.window.whole_round_bytes == request.window.whole_round_bytes &&
           a.window.stream_output_bytes == request.window.stream_output_bytes && a.stream_out == request.stream_out &&
           a.peers_map == request.peers_map && a.window_vote == request.window_vote;
  };
  for (size_t i = 0; i < kKept; ++i) {
    if (kept[i].valid && same(kept[i].request)) return &kept[i].plan;
  }
  BRAID_ASSIGN_OR_RETURN(Plan plan, MakePlan(request));
  Entry& slot = plan.lanes.size() <= kMostLanes ? kept[next++ % kKept] : kept[kKept];
  slot.valid = plan.lanes.size() <= kMostLanes;
  slot.request = request;
  slot.plan = std::move(plan);
  return &slot.plan;
}

std::string DescribePlan(const Plan& plan) {
  auto region = [](const Region& r) {
    const char* names[] = {"in", "out", "scratch", "window", "payload", "peer_in", "peer_out"};
    const std::string whose = r.rank >= 0 ? absl::StrCat("@", r.rank) : "";
    return absl::StrCat(names[static_cast<int>(r.buffer)], whose, "[", r.begin, ",", r.begin + r.count, ")");
  };
  std::string out;
  for (size_t l = 0; l < plan.lanes.size(); ++l) {
    absl::StrAppend(&out, "lane ", l, ":");
    for (const Op& op : plan.lanes[l]) {
      if (op.when != Op::When::kAlways) {
        const char* whens[] = {"", " direct:", " windows:", " window:", " split:"};
        absl::StrAppend(&out, whens[static_cast<int>(op.when)]);
      }
      switch (op.kind) {
        case Op::Kind::kGroup:
          absl::StrAppend(&out, " group{");
          for (const Transfer& t : op.transfers) {
            absl::StrAppend(&out, t.send ? " send " : " recv ", t.peer, " ", region(t.region));
          }
          absl::StrAppend(&out, " }");
          break;
        case Op::Kind::kReduce:
          absl::StrAppend(&out, " ", region(op.dst), op.also.count > 0 ? "+" + region(op.also) : "", "=",
                          region(op.a), "op", region(op.b));
          break;
        case Op::Kind::kCopy:
        case Op::Kind::kReadPeer:
        case Op::Kind::kWritePeer: absl::StrAppend(&out, " ", region(op.dst), "=", region(op.a)); break;
        case Op::Kind::kDivide: absl::StrAppend(&out, " ", region(op.dst), "/=n"); break;
        case Op::Kind::kSync:
          absl::StrAppend(&out, " sync", op.publish ? "+publish" : "", op.a.count > 0 ? "+" + region(op.a) : "",
                          op.vote == Op::Vote::kNone ? "" : op.vote == Op::Vote::kWindow ? "+vote:window" : "+vote");
          break;
        case Op::Kind::kNextRound: absl::StrAppend(&out, " next_round"); break;
        case Op::Kind::kStep:
          absl::StrAppend(&out, " ", region(op.dst), "=", op.step.level == LevelStep::kIntraHost ? "intra:" : "inter:",
                          CollectiveKindName(op.step.kind), "(", region(op.a), ")");
          break;
        case Op::Kind::kZero: absl::StrAppend(&out, " ", region(op.dst), "=0"); break;
      }
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace braid
