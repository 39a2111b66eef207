#include "collectives/programs/tree_programs.h"

#include <algorithm>
#include <bit>
#include <utility>
#include <vector>

#include "collectives/programs/plan_builders.h"
#include "collectives/topology.h"

namespace braid {
namespace {

using namespace plan;  // NOLINT(build/namespaces): the Plans below are written in its words

// One segment's lane over `links`: the children's partial sums into
// scratch (a segment each), reduced with this rank's own input, sent up;
// the result received from the parent (the root divides for avg) and sent
// down. `with_first` joins the first group (the children's receives),
// `with_last` the last (the sends down).
std::vector<Op> TreeLane(const PlanRequest& r, const TreeLinks& links, const Range& range, size_t seg,
                         std::vector<Transfer> with_first = {}, std::vector<Transfer> with_last = {}) {
  const size_t children = links.children.size();
  std::vector<Op> ops;
  for (size_t c = 0; c < children; ++c) {
    with_first.push_back(RecvFrom(links.children[c], Scratch(c * seg, range.length)));
  }
  if (!with_first.empty()) ops.push_back(Group(std::move(with_first)));
  for (size_t c = 0; c < children; ++c) {
    ops.push_back(ReduceOp3(Out(range), c == 0 ? In(range) : Out(range), Scratch(c * seg, range.length)));
  }
  if (links.parent >= 0) {
    ops.push_back(Group({SendTo(links.parent, children > 0 ? Out(range) : In(range))}));
    ops.push_back(Group({RecvFrom(links.parent, Out(range))}));
  } else if (r.args.op == ReduceOp::kAvg) {
    ops.push_back(DivideOp(Out(range)));
  }
  for (int child : links.children) with_last.push_back(SendTo(child, Out(range)));
  if (!with_last.empty()) ops.push_back(Group(std::move(with_last)));
  return ops;
}

// Lanes in flight for a tree of `size` ranks: a segment on every level on
// its way up and on its way down (fewer, and each lane's round trip through
// the tree's depth would stall the pipeline: 2.4x the bandwidth bound at
// 1,024 ranks in braid_sim with 8).
size_t TreeWindow(int size) {
  const size_t depth = static_cast<size_t>(std::bit_width(static_cast<unsigned>(size)));  // floor(log2) + 1
  return std::max(kLaneWindow, 2 * depth);
}

}  // namespace

Plan TreeAllReduce(const PlanRequest& r) {
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, 1);
  const TreeLinks links = BinaryTree(r.rank, r.size);
  Plan plan;
  plan.scratch_elements = links.children.size() * seg;
  plan.lane_window = TreeWindow(r.size);
  for (size_t j = 0; j < SegmentCount(count, seg); ++j) {
    plan.lanes.push_back(TreeLane(r, links, Lane(Range{0, count}, seg, j), seg));
  }
  return plan;
}

Plan DoubleTreeAllReduce(const PlanRequest& r) {
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, 2);
  const Range halves[2] = {ChunkRange(count, 2, 0), ChunkRange(count, 2, 1)};
  const TreeLinks trees[2] = {BinaryTree(r.rank, r.size), ReversedBinaryTree(r.rank, r.size)};
  // The tree this rank is inner in (a leaf in both, the middle rank of an
  // odd group, takes the first), and the other, where it is a leaf.
  const int inner = trees[0].children.empty() && !trees[1].children.empty() ? 1 : 0;
  const TreeLinks& outer = trees[1 - inner];
  Plan plan;
  plan.scratch_elements = 2 * seg;  // the inner tree's children's segments
  plan.lane_window = TreeWindow(r.size);
  // One lane a segment of each half. Its own input goes up the tree it is a
  // leaf in with its first receives, and its inner tree's result goes down
  // before it waits for the other's: the trees cross (a rank's child in one
  // may be its parent in the other), and waiting for both at once would
  // deadlock.
  for (size_t j = 0; j < SegmentCount(halves[0].length, seg); ++j) {
    const Range ranges[2] = {Lane(halves[0], seg, j), Lane(halves[1], seg, j)};
    const Range other = ranges[1 - inner];
    plan.lanes.push_back(TreeLane(r, trees[inner], ranges[inner], seg, {SendTo(outer.parent, In(other))},
                                  {RecvFrom(outer.parent, Out(other))}));
  }
  return plan;
}

}  // namespace braid
