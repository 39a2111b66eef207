#include "collectives/programs/hierarchical_program.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/programs/plan_builders.h"

namespace braid {
namespace {

using namespace plan;  // NOLINT(build/namespaces): the Plans below are written in its words
using Level = LevelStep::Level;

Op Step(Level level, CollectiveKind kind, size_t count, int root, Region in, Region out) {
  Op op = Local(Op::Kind::kStep, out, in);
  op.step = LevelStep{level, kind, count, root};
  return op;
}

struct Place {
  int host;
  int local_rank;
  size_t ranks_here;  // on this rank's host
  size_t hosts;
};

void AllReduce(std::vector<Op>& ops, Plan& plan, const CollectiveArgs& args, const HostLayout& layout,
               const Place& at) {
  const size_t n = args.count;
  const Range all{0, n};
  if (!layout.even()) {
    // Each host's first rank holds the host's sum; those ranks are the
    // inter-host group of local index 0, which every host has.
    ops.push_back(Step(Level::kIntraHost, CollectiveKind::kReduce, n, 0, In(all), Out(all)));
    if (at.local_rank == 0) {
      ops.push_back(Step(Level::kInterHost, CollectiveKind::kAllReduce, n, -1, Out(all), Out(all)));
      if (args.op == ReduceOp::kAvg) ops.push_back(DivideOp(Out(all)));
    }
    ops.push_back(Step(Level::kIntraHost, CollectiveKind::kBroadcast, n, 0, Out(all), Out(all)));
    return;
  }
  // The host's vector in ranks_here equal blocks: the caller's buffers when
  // they divide evenly, else a padded copy in scratch after this rank's block.
  const size_t block = (n + at.ranks_here - 1) / at.ranks_here;
  const bool padded = block * at.ranks_here != n;
  const Region mine = Scratch(0, block);
  const Region whole = padded ? Scratch(block, block * at.ranks_here) : Out(all);
  plan.scratch_elements = block + (padded ? block * at.ranks_here : 0);
  if (padded) {
    ops.push_back(CopyOp(Scratch(block, n), In(all)));
    ops.push_back(Local(Op::Kind::kZero, Scratch(block + n, block * at.ranks_here - n)));
  }
  ops.push_back(Step(Level::kIntraHost, CollectiveKind::kReduceScatter, block, -1, padded ? whole : In(all), mine));
  ops.push_back(Step(Level::kInterHost, CollectiveKind::kAllReduce, block, -1, mine, mine));
  if (args.op == ReduceOp::kAvg) ops.push_back(DivideOp(mine));
  ops.push_back(Step(Level::kIntraHost, CollectiveKind::kAllGather, block, -1, mine, whole));
  if (padded) ops.push_back(CopyOp(Out(all), Scratch(block, n)));
}

// Reduce-scatter's and all-gather's staging in scratch: every rank's block
// of `c` elements ordered by (local index, host), then one block per host.
// Regroup copies each block between that order and rank order.
void Regroup(std::vector<Op>& ops, const HostLayout& layout, const Place& at, size_t c, bool to_local_major) {
  for (size_t j = 0; j < at.ranks_here; ++j) {
    for (size_t g = 0; g < at.hosts; ++g) {
      const Range by_rank{static_cast<size_t>(layout.RankAt(static_cast<int>(g), static_cast<int>(j))) * c, c};
      const Region by_local = Scratch((j * at.hosts + g) * c, c);
      ops.push_back(to_local_major ? CopyOp(by_local, In(by_rank)) : CopyOp(Out(by_rank), by_local));
    }
  }
}

void ReduceScatter(std::vector<Op>& ops, Plan& plan, const CollectiveArgs& args, const HostLayout& layout,
                   const Place& at) {
  const size_t c = args.count;
  const size_t staged = at.ranks_here * at.hosts * c;
  plan.scratch_elements = staged + at.hosts * c;
  // The intra-host step hands local index j the blocks of every host's rank
  // j, which the inter-host step then splits.
  Regroup(ops, layout, at, c, /*to_local_major=*/true);
  ops.push_back(Step(Level::kIntraHost, CollectiveKind::kReduceScatter, at.hosts * c, -1, Scratch(0, staged),
                     Scratch(staged, at.hosts * c)));
  ops.push_back(Step(Level::kInterHost, CollectiveKind::kReduceScatter, c, -1, Scratch(staged, at.hosts * c),
                     Out(Range{0, c})));
  if (args.op == ReduceOp::kAvg) ops.push_back(DivideOp(Out(Range{0, c})));
}

void AllGather(std::vector<Op>& ops, Plan& plan, const CollectiveArgs& args, const HostLayout& layout,
               const Place& at) {
  const size_t c = args.count;
  const size_t staged = at.ranks_here * at.hosts * c;
  plan.scratch_elements = staged + at.hosts * c;
  ops.push_back(Step(Level::kInterHost, CollectiveKind::kAllGather, c, -1, In(Range{0, c}),
                     Scratch(staged, at.hosts * c)));
  ops.push_back(Step(Level::kIntraHost, CollectiveKind::kAllGather, at.hosts * c, -1, Scratch(staged, at.hosts * c),
                     Scratch(0, staged)));
  Regroup(ops, layout, at, c, /*to_local_major=*/false);
}

void Broadcast(std::vector<Op>& ops, const CollectiveArgs& args, const HostLayout& layout, const Place& at) {
  const Region buffer = Out(Range{0, args.count});
  const int root_host = layout.host_of[static_cast<size_t>(args.root)];
  const int root_local = layout.local_rank_of[static_cast<size_t>(args.root)];
  // Every host has a rank of this index: its inter-host rank is its host.
  auto across = [&](int local) {
    if (at.local_rank == local) {
      ops.push_back(Step(Level::kInterHost, CollectiveKind::kBroadcast, args.count, root_host, buffer, buffer));
    }
  };
  auto within = [&](int local) {
    ops.push_back(Step(Level::kIntraHost, CollectiveKind::kBroadcast, args.count, local, buffer, buffer));
  };
  if (root_local < layout.min_per_host()) {
    across(root_local);
    within(root_local);
    return;
  }
  // Through the first rank of each host.
  if (at.host == root_host) within(root_local);
  across(0);
  if (at.host != root_host) within(0);
}

}  // namespace

absl::StatusOr<Plan> MakeHierarchicalPlan(const CollectiveArgs& args, const HostLayout& layout, int rank) {
  const int size = static_cast<int>(layout.host_of.size());
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " not in a layout of ", size));
  }
  const bool blocks = args.kind == CollectiveKind::kReduceScatter || args.kind == CollectiveKind::kAllGather;
  if (blocks && !layout.even()) {
    return absl::InvalidArgumentError(absl::StrCat("hierarchical ", CollectiveKindName(args.kind),
                                                   " needs the same number of ranks on every host"));
  }
  if (args.kind == CollectiveKind::kBroadcast && (args.root < 0 || args.root >= size)) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", args.root, " not in [0, ", size, ")"));
  }
  const Place at{layout.host_of[static_cast<size_t>(rank)], layout.local_rank_of[static_cast<size_t>(rank)],
                 layout.LocalGroup(rank).size(), static_cast<size_t>(layout.hosts())};
  Plan plan;
  plan.levels = true;
  if (args.count == 0) return plan;
  std::vector<Op> ops;
  switch (args.kind) {
    case CollectiveKind::kAllReduce: AllReduce(ops, plan, args, layout, at); break;
    case CollectiveKind::kReduceScatter: ReduceScatter(ops, plan, args, layout, at); break;
    case CollectiveKind::kAllGather: AllGather(ops, plan, args, layout, at); break;
    case CollectiveKind::kBroadcast: Broadcast(ops, args, layout, at); break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("no hierarchical program for ", CollectiveKindName(args.kind)));
  }
  plan.lanes.push_back(std::move(ops));
  return plan;
}

}  // namespace braid
