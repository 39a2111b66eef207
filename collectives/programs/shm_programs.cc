#include "collectives/programs/shm_programs.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/programs/plan_builders.h"
#include "collectives/topology.h"
#include "collectives/transport/transport.h"

namespace braid {
namespace {

using namespace plan;  // NOLINT(build/namespaces): the Plans below are written in its words

// A peer's slice is reduced in pieces of this size, each while cached (see
// bench/RESULTS.md, "Where the thresholds come from").
constexpr size_t kPeerPieceBytes = size_t{256} << 10;

Op Sync(uint32_t step, size_t round, Op::When when = Op::When::kAlways) {
  Op op;
  op.kind = Op::Kind::kSync;
  op.tag = StepTag(step, round);
  op.when = when;
  return op;
}

Op NextRound() {
  Op op;
  op.kind = Op::Kind::kNextRound;
  return op;
}

Op When(Op op, Op::When when) {
  op.when = when;
  return op;
}

// Reduces the group's n operands into `dst`: `first`, then operand(k) for
// k = 1..n-1, then avg's division.
template <typename Operand>
void ReduceAll(std::vector<Op>& ops, const PlanRequest& r, Region dst, Region first, Operand operand) {
  ops.push_back(ReduceOp3(dst, first, operand(1)));
  for (int k = 2; k < r.size; ++k) ops.push_back(ReduceOp3(dst, dst, operand(k)));
  if (r.args.op == ReduceOp::kAvg) ops.push_back(DivideOp(dst));
}

// Every rank's reduced slice of a window round out of that rank's half into
// `part` of the output.
void CopyRoundOut(std::vector<Op>& ops, const PlanRequest& r, const Range& part, Op::When when) {
  for (int k = 0; k < r.size; ++k) {
    const int rank = (r.rank + k) % r.size;
    const Range slice = ChunkRange(part.length, r.size, rank);
    Op copy = CopyOp(Out(Range{part.begin + slice.begin, slice.length}), Window(rank, slice));
    copy.stream = r.stream_out;
    ops.push_back(When(std::move(copy), when));
  }
}

// The rounds of a vector of `count` elements through window halves.
template <typename Body>
void Rounds(const PlanRequest& r, Body body) {
  const size_t round_elems = r.window_half_bytes / DTypeSize(r.args.dtype);
  for (size_t begin = 0, round = 0; begin < r.args.count; begin += round_elems, ++round) {
    body(Range{begin, std::min(round_elems, r.args.count - begin)}, round);
  }
}

// The window all-reduce of more than a Sync's payload, in rounds of up to
// one window half, each op `when`; `first_sync` appends round 0's Sync(s)
// after its copy-in (the peer all-reduce's vote). Every rank copies its part
// into its half; after a Sync, each reduces one slice reading every rank's
// data into its own half; after a second Sync, each copies every slice out.
// Small rounds are reduced whole by every rank, after one Sync.
template <typename FirstSync>
void WindowRounds(std::vector<Op>& ops, const PlanRequest& r, Op::When when, FirstSync first_sync) {
  const int n = r.size;
  const int me = r.rank;
  const size_t es = DTypeSize(r.args.dtype);
  auto add = [&](Op op) { ops.push_back(When(std::move(op), when)); };
  Rounds(r, [&](const Range& part, size_t round) {
    add(NextRound());
    const Range whole{0, part.length};
    auto in = [&](const Range& x) { return In(Range{part.begin + x.begin, x.length}); };
    auto sync = [&] {
      if (round == 0) {
        first_sync(ops);
      } else {
        add(Sync(0, round));
      }
    };
    auto reduce_all = [&](Region dst, Region first, auto operand) {
      const size_t from = ops.size();
      ReduceAll(ops, r, dst, first, operand);
      for (size_t i = from; i < ops.size(); ++i) ops[i].when = when;
    };
    if (part.length * es <= r.window.whole_round_bytes) {
      add(CopyOp(Window(me, whole), In(part)));
      sync();
      reduce_all(Out(part), Window(0, whole), [&](int k) { return Window(k, whole); });
      return;
    }
    // This rank's own slice is read from its input, so it is not copied in.
    const Range mine = ChunkRange(part.length, n, me);
    add(CopyOp(Window(me, Range{0, mine.begin}), in(Range{0, mine.begin})));
    add(CopyOp(Window(me, Range{mine.end(), part.length - mine.end()}), in(Range{mine.end(), part.length - mine.end()})));
    sync();
    reduce_all(Window(me, mine), in(mine), [&](int k) { return Window((me + k) % n, mine); });
    add(Sync(1, round));
    CopyRoundOut(ops, r, part, when);
  });
}

// Whether the whole input rides with a Sync (the window all-reduce's smallest case).
bool RidesWithSync(const PlanRequest& r) {
  return r.args.count * DTypeSize(r.args.dtype) <= SharedWindows::kSyncPayloadBytes;
}

absl::Status CheckWindow(const PlanRequest& r) {
  if (r.window_half_bytes < DTypeSize(r.args.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(AlgorithmName(r.algorithm), ": no shared window to work in"));
  }
  return absl::OkStatus();
}

Plan OneLane(std::vector<Op> ops, size_t scratch_elements = 0) {
  Plan plan;
  plan.scratch_elements = scratch_elements;
  plan.shared_windows = true;
  plan.lanes.push_back(std::move(ops));
  return plan;
}

// Where any rank votes for the window, every rank runs the window
// all-reduce; its voters copy their first round in before the vote, the
// others after it, and then every rank Syncs once more. (Not at a Sync's
// payload or less, where peer access costs no more on any memory.)
void CatchUp(std::vector<Op>& ops) { ops.push_back(Sync(3, 0, Op::When::kIfWindowSplit)); }

Plan WindowVoterPlan(const PlanRequest& r) {
  std::vector<Op> ops;
  WindowRounds(ops, r, Op::When::kAlways, [&](std::vector<Op>& round_ops) {
    Op vote = Sync(0, 0);  // its outcome is the window: nothing to publish
    vote.vote = Op::Vote::kWindow;
    round_ops.push_back(vote);
    CatchUp(round_ops);
  });
  return OneLane(std::move(ops));
}

// Peer copies: the first Sync publishes every rank's buffers (and, as its
// header must match, that they hold as much as this rank's); the last keeps
// them published until every rank is done.
Op Publish() {
  Op op = Sync(0, 0);
  op.publish = true;
  return op;
}

}  // namespace

// Direct all-reduce through the windows (WindowRounds). Every byte is
// copied in once and out once, and every phase keeps all ranks busy, which
// matters most when they outnumber the cores. Inputs of up to
// kSyncPayloadBytes ride with the Sync.
absl::StatusOr<Plan> WindowAllReducePlan(const PlanRequest& r) {
  BRAID_RETURN_IF_ERROR(CheckWindow(r));
  const int me = r.rank;
  const Range all{0, r.args.count};
  std::vector<Op> ops;
  if (RidesWithSync(r)) {
    Op sync = Sync(0, 0);
    sync.a = In(all);
    ops.push_back(sync);
    // Every rank sums in rank order. Its own term is read from its input,
    // not its slot: the peers' reads take the slot's line away (a miss of
    // a quarter of the call at 2 ranks). In place, the input is intact only
    // until the first reduction writes the output: ranks 0 and 1 only.
    auto term = [&](int k) { return k == me && me <= 1 ? In(all) : Payload(k, all); };
    ReduceAll(ops, r, Out(all), term(0), term);
    return OneLane(std::move(ops));
  }
  WindowRounds(ops, r, Op::When::kAlways, [&](std::vector<Op>& round_ops) { round_ops.push_back(Sync(0, 0)); });
  return OneLane(std::move(ops));
}

// Direct all-reduce through the peers' own buffers (cross-memory copies):
// each rank reduces one slice of the whole vector, a piece at a time,
// reading the peers' inputs into scratch, and writes the result into every
// peer's output. Each input byte is read once and each output byte written
// once, with no window in between. Safe in place too: only the slice's owner
// reads or writes a slice of anyone's buffers, and it reads each piece
// before it writes it.
//
// Where the peers map this rank's buffers (peers_map), it reads the peers'
// inputs where they lie; a large output of its own (stream_out) is then
// summed a piece at a time in scratch and streamed into every output. Otherwise (a rank votes
// so at the first Sync) the results go through the windows, in rounds: each
// rank reduces its slice of the round into its window, and after a Sync
// every rank copies every slice out, around the cache. A round needs one
// Sync: the inputs stay published, and a half is refilled only after the
// next round's Sync, when every peer has copied it. And where a rank's memory
// wants no peer access (window_vote), every rank runs the window all-reduce.
absl::StatusOr<Plan> PeerAllReducePlan(const PlanRequest& r) {
  BRAID_RETURN_IF_ERROR(CheckWindow(r));
  const int n = r.size;
  const int me = r.rank;
  const size_t piece_elems = std::max<size_t>(1, kPeerPieceBytes / DTypeSize(r.args.dtype));
  const size_t scratch_piece = std::min(piece_elems, r.args.count);
  const bool stream_direct = r.stream_out && r.peers_map;
  using W = Op::When;
  // Reduces `slice` (of the whole vector) into `sum` (`slice` of `at`), a piece at a time.
  auto reduce = [&](std::vector<Op>& ops, const Range& slice, auto at, W when) {
    for (size_t done = 0; done < slice.length; done += piece_elems) {
      const Range piece{slice.begin + done, std::min(piece_elems, slice.length - done)};
      const Region out = at(Range{done, piece.length});
      // (Through the windows, the window is where the sum goes, whatever this rank's output.)
      const Region sum = stream_direct && when == W::kIfDirect ? Scratch(0, piece.length) : out;
      // The last reduction writes the sum into the next rank's output too,
      // in the same pass, where the sum is final and goes there unstreamed.
      const bool fused = r.peers_map && !stream_direct && r.args.op != ReduceOp::kAvg && when == W::kIfDirect;
      for (int k = 1; k < n; ++k) {
        const int peer = (me + k) % n;
        const Region first = k == 1 ? In(piece) : sum;
        if (r.peers_map) {  // read where it lies
          Op reduce = ReduceOp3(sum, first, PeerIn(peer, piece));
          if (fused && k == n - 1) reduce.also = PeerOut((me + 1) % n, piece);
          ops.push_back(When(std::move(reduce), when));
          continue;
        }
        const Region theirs = Scratch(0, piece.length);
        ops.push_back(When(Local(Op::Kind::kReadPeer, theirs, PeerIn(peer, piece)), when));
        ops.push_back(When(ReduceOp3(sum, first, theirs), when));
      }
      if (r.args.op == ReduceOp::kAvg) ops.push_back(When(DivideOp(sum), when));
      if (when == W::kIfThroughWindows) continue;
      if (stream_direct) {
        Op copy = CopyOp(out, sum);
        copy.stream = true;
        ops.push_back(When(std::move(copy), when));
      }
      for (int k = fused ? 2 : 1; k < n; ++k) {
        const int peer = (me + k) % n;
        Op write = Local(Op::Kind::kWritePeer, PeerOut(peer, piece), sum);
        write.stream = stream_direct;
        ops.push_back(When(std::move(write), when));
      }
    }
  };
  if (r.window_vote && !RidesWithSync(r)) return WindowVoterPlan(r);
  std::vector<Op> ops;
  Op publish = Publish();
  publish.vote = r.stream_out && !r.peers_map ? Op::Vote::kThroughWindows : Op::Vote::kDirect;
  ops.push_back(publish);
  WindowRounds(ops, r, W::kIfWindow, CatchUp);
  const Range mine = ChunkRange(r.args.count, n, me);
  reduce(ops, mine, [&](const Range& x) { return Out(Range{mine.begin + x.begin, x.length}); }, W::kIfDirect);
  ops.push_back(Sync(1, 0, W::kIfDirect));
  Rounds(r, [&](const Range& part, size_t round) {
    ops.push_back(When(NextRound(), W::kIfThroughWindows));
    const Range slice = ChunkRange(part.length, n, me);
    reduce(ops, Range{part.begin + slice.begin, slice.length},
           [&](const Range& x) { return Window(me, Range{slice.begin + x.begin, x.length}); }, W::kIfThroughWindows);
    ops.push_back(Sync(1, round, W::kIfThroughWindows));
    CopyRoundOut(ops, r, part, W::kIfThroughWindows);
  });
  // The inputs stay published until every rank has read its last slice.
  ops.push_back(Sync(2, 0, W::kIfThroughWindows));
  return OneLane(std::move(ops), r.peers_map && !stream_direct ? 0 : scratch_piece);
}

Plan PeerReduceScatterPlan(const PlanRequest& r) {
  const int n = r.size;
  const int me = r.rank;
  const size_t count = r.args.count;
  const size_t offset = static_cast<size_t>(me) * count;  // of this rank's chunk in every input
  const size_t piece_elems = std::max<size_t>(1, kPeerPieceBytes / DTypeSize(r.args.dtype));
  std::vector<Op> ops{Publish()};
  for (size_t at = 0; at < count; at += piece_elems) {
    const Range piece{at, std::min(piece_elems, count - at)};
    const Range theirs{offset + at, piece.length};
    for (int k = 1; k < n; ++k) {
      const int peer = (me + k) % n;
      const Region first = k == 1 ? In(theirs) : Out(piece);
      if (r.peers_map) {  // read where it lies
        ops.push_back(ReduceOp3(Out(piece), first, PeerIn(peer, theirs)));
        continue;
      }
      ops.push_back(Local(Op::Kind::kReadPeer, Scratch(0, piece.length), PeerIn(peer, theirs)));
      ops.push_back(ReduceOp3(Out(piece), first, Scratch(0, piece.length)));
    }
    if (r.args.op == ReduceOp::kAvg) ops.push_back(DivideOp(Out(piece)));
  }
  ops.push_back(Sync(1, 0));
  return OneLane(std::move(ops), r.peers_map ? 0 : std::min(piece_elems, count));
}

Plan PeerAllGatherPlan(const PlanRequest& r) {
  const size_t count = r.args.count;
  auto chunk = [&](int rank) { return Out(Range{static_cast<size_t>(rank) * count, count}); };
  std::vector<Op> ops{CopyOp(chunk(r.rank), In(Range{0, count})), Publish()};
  for (int k = 1; k < r.size; ++k) {
    const int peer = (r.rank + k) % r.size;
    ops.push_back(Local(Op::Kind::kReadPeer, chunk(peer), PeerIn(peer, Range{0, count})));
  }
  ops.push_back(Sync(1, 0));
  return OneLane(std::move(ops));
}

Plan PeerAllToAllPlan(const PlanRequest& r) {
  const size_t count = r.args.count;
  auto block = [&](int rank) { return Range{static_cast<size_t>(rank) * count, count}; };
  std::vector<Op> ops{CopyOp(Out(block(r.rank)), In(block(r.rank))), Publish()};
  for (int k = 1; k < r.size; ++k) {
    const int peer = (r.rank + k) % r.size;
    ops.push_back(Local(Op::Kind::kReadPeer, Out(block(peer)), PeerIn(peer, block(r.rank))));
  }
  ops.push_back(Sync(1, 0));
  return OneLane(std::move(ops));
}

}  // namespace braid
