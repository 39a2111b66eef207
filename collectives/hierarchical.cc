#include "collectives/hierarchical.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "collectives/programs/hierarchical_program.h"
#include "collectives/run_algorithm.h"
#include "collectives/transport/subset_bootstrap.h"

namespace braid {
namespace {

// The engine's own split where it has one (mpi), else a transport from the
// factory over the parent's. `color` and `key` name the group as a split would.
absl::StatusOr<std::unique_ptr<Transport>> Level(Transport& parent, std::vector<int> members, int color, int key,
                                                 const SubgroupTransportFactory& factory, uint64_t seq,
                                                 Deadline deadline, bool same_host, const char* what) {
  absl::StatusOr<std::unique_ptr<Transport>> level = parent.Split(color, key, deadline);
  if (absl::IsUnimplemented(level.status())) {
    SubsetBootstrap bootstrap(parent, std::move(members), seq);
    level = factory(bootstrap, deadline, same_host);
  }
  if (!level.ok()) return Annotate(level.status(), absl::StrCat("rank ", parent.rank(), ": the ", what, " group"));
  return level;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostLevels>> HostLevels::Create(Transport& parent, const HostLayout& layout,
                                                               const SubgroupTransportFactory& factory, uint64_t seq,
                                                               Deadline deadline,
                                                               const SelectionThresholds& thresholds) {
  const int rank = parent.rank();
  // The two groups of a pair of ranks never coincide (same host and same
  // local index is one rank), so their bootstraps' frames never meet.
  const int host = layout.host_of[rank];
  const int local_rank = layout.local_rank_of[rank];
  BRAID_ASSIGN_OR_RETURN(auto local, Level(parent, layout.LocalGroup(rank), host, local_rank, factory, seq,
                                           deadline, /*same_host=*/true, "intra-host"));
  BRAID_ASSIGN_OR_RETURN(auto cross, Level(parent, layout.CrossGroup(rank), local_rank, host, factory, seq,
                                           deadline, /*same_host=*/false, "inter-host"));
  return std::unique_ptr<HostLevels>(new HostLevels(parent, layout, std::move(local), std::move(cross), thresholds));
}

HostLevels::HostLevels(Transport& parent, const HostLayout& layout, std::unique_ptr<Transport> local,
                       std::unique_ptr<Transport> cross, const SelectionThresholds& thresholds)
    : parent_(parent),
      layout_(layout),
      rank_(parent.rank()),
      local_(std::move(local)),
      cross_(std::move(cross)),
      local_selector_(CapsOf(*local_), thresholds),
      cross_selector_(CapsOf(*cross_), thresholds) {}

void HostLevels::Abort(const absl::Status& cause) {
  local_->Abort(cause);
  cross_->Abort(cause);
}

absl::Status HostLevels::Run(const CollectiveArgs& args, absl::Span<const std::byte> input,
                             absl::Span<std::byte> output, Scratch& scratch) {
  const bool same = have_plan_ && plan_args_.kind == args.kind && plan_args_.count == args.count &&
                    plan_args_.dtype == args.dtype && plan_args_.op == args.op && plan_args_.root == args.root;
  if (!same) {
    have_plan_ = false;
    BRAID_ASSIGN_OR_RETURN(plan_, MakeHierarchicalPlan(args, layout_, rank_));
    plan_args_ = args;
    have_plan_ = true;
  }
  return RunPlanOnTransport(plan_, parent_, args, input, output, scratch, this);
}

absl::Status HostLevels::RunStep(const LevelStep& step, const CollectiveArgs& args, absl::Span<const std::byte> input,
                                 absl::Span<std::byte> output) {
  const bool local = step.level == LevelStep::kIntraHost;
  Transport& level = local ? *local_ : *cross_;
  const Selector& selector = local ? local_selector_ : cross_selector_;
  CollectiveArgs step_args = args;
  step_args.kind = step.kind;
  step_args.count = step.count;
  step_args.root = step.root;
  if (step_args.op == ReduceOp::kAvg) step_args.op = ReduceOp::kSum;  // the plan divides once, by the whole group
  BRAID_ASSIGN_OR_RETURN(const Algorithm algorithm, selector.Select(step_args.kind, step_args.count,
                                                                    DTypeSize(step_args.dtype), Algorithm::kAuto));
  // Every rank's level buffers are taken as braid's own (kFast), alike.
  const bool window_vote = algorithm == Algorithm::kPeerAccess && step_args.kind == CollectiveKind::kAllReduce &&
                           selector.WantsWindow(step_args.count, DTypeSize(step_args.dtype), Algorithm::kAuto,
                                                PeerMemory::kFast);
  absl::Status status =
      RunAlgorithm(level, algorithm, step_args, input, output, step_scratch_, selector.window_plan(), window_vote);
  if (status.ok()) return status;
  // The level's messages number its own ranks: say which ranks of the whole group those are.
  const std::vector<int> members = local ? layout_.LocalGroup(rank_) : layout_.CrossGroup(rank_);
  return Annotate(status, absl::StrCat("hierarchical ", CollectiveKindName(args.kind), " step within the ",
                                       local ? "intra-host" : "inter-host", " group of ranks [",
                                       absl::StrJoin(members, ", "), "] (their ranks there: 0..",
                                       members.size() - 1, ")"));
}

}  // namespace braid
