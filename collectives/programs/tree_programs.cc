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
// scratch from `scratch` on (a segment each), reduced with this rank's own
// input, sent up; the result received from the parent (the root divides
// for avg) and sent down.
std::vector<Op> TreeLane(const PlanRequest& r, const TreeLinks& links, const Range& range, size_t scratch,
                         size_t seg) {
  const size_t children = links.children.size();
  std::vector<Op> ops;
  if (children > 0) {
    std::vector<Transfer> from_children;
    for (size_t c = 0; c < children; ++c) {
      from_children.push_back(RecvFrom(links.children[c], Scratch(scratch + c * seg, range.length)));
    }
    ops.push_back(Group(std::move(from_children)));
    for (size_t c = 0; c < children; ++c) {
      ops.push_back(ReduceOp3(Out(range), c == 0 ? In(range) : Out(range), Scratch(scratch + c * seg, range.length)));
    }
  }
  if (links.parent >= 0) {
    ops.push_back(Group({SendTo(links.parent, children > 0 ? Out(range) : In(range))}));
    ops.push_back(Group({RecvFrom(links.parent, Out(range))}));
  } else if (r.args.op == ReduceOp::kAvg) {
    ops.push_back(DivideOp(Out(range)));
  }
  if (children > 0) {
    std::vector<Transfer> down;
    for (int child : links.children) down.push_back(SendTo(child, Out(range)));
    ops.push_back(Group(std::move(down)));
  }
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
    plan.lanes.push_back(TreeLane(r, links, Lane(Range{0, count}, seg, j), 0, seg));
  }
  return plan;
}

Plan DoubleTreeAllReduce(const PlanRequest& r) {
  const size_t count = r.args.count;
  const size_t seg = SegmentOf(r, 2);
  const Range halves[2] = {ChunkRange(count, 2, 0), ChunkRange(count, 2, 1)};
  const TreeLinks trees[2] = {BinaryTree(r.rank, r.size), ReversedBinaryTree(r.rank, r.size)};
  // The tree this rank is inner in (-1: a leaf in both, the middle rank of
  // an odd group), and the other, where it is a leaf with a parent.
  const int inner = !trees[0].children.empty() ? 0 : !trees[1].children.empty() ? 1 : -1;
  Plan plan;
  plan.scratch_elements = 2 * seg;  // the inner tree's children's segments
  plan.lane_window = TreeWindow(r.size);
  // One lane a segment of each half. A rank's sends that wait on nothing
  // (its own input up the tree it is a leaf in) go out with its first
  // receives, and its inner tree's result goes down before it waits for the
  // other's: the trees cross (a rank's child in one may be its parent in the
  // other), and waiting for both at once would deadlock.
  for (size_t j = 0; j < SegmentCount(halves[0].length, seg); ++j) {
    const Range ranges[2] = {Lane(halves[0], seg, j), Lane(halves[1], seg, j)};
    std::vector<Op> ops;
    std::vector<Transfer> first;
    for (int t = 0; t < 2; ++t) {
      if (t != inner) first.push_back(SendTo(trees[t].parent, In(ranges[t])));
    }
    if (inner < 0) {
      ops.push_back(Group(std::move(first)));
      ops.push_back(Group({RecvFrom(trees[0].parent, Out(ranges[0])), RecvFrom(trees[1].parent, Out(ranges[1]))}));
      plan.lanes.push_back(std::move(ops));
      continue;
    }
    const TreeLinks& links = trees[inner];
    const Range range = ranges[inner];
    const Range other = ranges[1 - inner];
    for (size_t c = 0; c < links.children.size(); ++c) {
      first.push_back(RecvFrom(links.children[c], Scratch(c * seg, range.length)));
    }
    ops.push_back(Group(std::move(first)));
    for (size_t c = 0; c < links.children.size(); ++c) {
      ops.push_back(ReduceOp3(Out(range), c == 0 ? In(range) : Out(range), Scratch(c * seg, range.length)));
    }
    if (links.parent >= 0) {
      ops.push_back(Group({SendTo(links.parent, Out(range))}));
      ops.push_back(Group({RecvFrom(links.parent, Out(range))}));
    } else if (r.args.op == ReduceOp::kAvg) {
      ops.push_back(DivideOp(Out(range)));
    }
    std::vector<Transfer> last;
    for (int child : links.children) last.push_back(SendTo(child, Out(range)));
    last.push_back(RecvFrom(trees[1 - inner].parent, Out(other)));
    ops.push_back(Group(std::move(last)));
    plan.lanes.push_back(std::move(ops));
  }
  return plan;
}

}  // namespace braid
