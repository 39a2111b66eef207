#include "collectives/hierarchical.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "collectives/run_algorithm.h"
#include "collectives/transport/subset_bootstrap.h"
#include "tensor/reduce.h"

namespace braid {
namespace {

// The steps reduce as sum where the whole is an average: one division, by
// the whole group's size, at the end.
CollectiveArgs StepArgs(const CollectiveArgs& args, CollectiveKind kind, size_t count, int root = -1) {
  CollectiveArgs step = args;
  step.kind = kind;
  step.count = count;
  step.root = root;
  if (step.op == ReduceOp::kAvg) step.op = ReduceOp::kSum;
  return step;
}

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
  return std::unique_ptr<HostLevels>(new HostLevels(layout, rank, std::move(local), std::move(cross), thresholds));
}

HostLevels::HostLevels(const HostLayout& layout, int rank, std::unique_ptr<Transport> local,
                       std::unique_ptr<Transport> cross, const SelectionThresholds& thresholds)
    : layout_(layout),
      rank_(rank),
      host_(layout.host_of[rank]),
      local_rank_(layout.local_rank_of[rank]),
      local_(std::move(local)),
      cross_(std::move(cross)),
      local_selector_(CapsOf(*local_), thresholds),
      cross_selector_(CapsOf(*cross_), thresholds) {}

void HostLevels::Abort(const absl::Status& cause) {
  local_->Abort(cause);
  cross_->Abort(cause);
}

absl::Status HostLevels::Step(Transport& level, const Selector& selector, const CollectiveArgs& args,
                              absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_ASSIGN_OR_RETURN(const Algorithm algorithm,
                         selector.Select(args.kind, args.count, DTypeSize(args.dtype), Algorithm::kAuto));
  absl::Status status = RunAlgorithm(level, algorithm, args, input, output, scratch, selector.window_plan());
  if (status.ok()) return status;
  // The level's messages number its own ranks: say which ranks of the whole group those are.
  const bool local = &level == local_.get();
  const std::vector<int> members = local ? layout_.LocalGroup(rank_) : layout_.CrossGroup(rank_);
  return Annotate(status, absl::StrCat("hierarchical ", CollectiveKindName(args.kind), " step within the ",
                                       local ? "intra-host" : "inter-host", " group of ranks [",
                                       absl::StrJoin(members, ", "), "] (their ranks there: 0..",
                                       members.size() - 1, ")"));
}

absl::Status HostLevels::AllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                   absl::Span<std::byte> output, Scratch& scratch) {
  const size_t n = args.count;
  if (n == 0) return absl::OkStatus();
  if (!layout_.even()) return LeaderAllReduce(args, input, output, scratch);
  const size_t es = DTypeSize(args.dtype);
  const size_t ranks_here = static_cast<size_t>(local_->size());
  const size_t block = (n + ranks_here - 1) / ranks_here;
  // The host's vector in ranks_here equal blocks: the caller's buffers when
  // they divide evenly, else a padded copy.
  const bool padded = block * ranks_here != n;
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> buffer, staging_.Get((padded ? block * ranks_here : 0) * es + block * es));
  absl::Span<std::byte> mine = buffer.subspan(0, block * es);
  absl::Span<std::byte> whole = padded ? buffer.subspan(block * es) : output;
  absl::Span<const std::byte> from = input;
  if (padded) {
    std::memcpy(whole.data(), input.data(), n * es);
    std::memset(whole.data() + n * es, 0, whole.size() - n * es);
    from = whole;
  }
  BRAID_RETURN_IF_ERROR(
      Step(*local_, local_selector_, StepArgs(args, CollectiveKind::kReduceScatter, block), from, mine, scratch));
  BRAID_RETURN_IF_ERROR(
      Step(*cross_, cross_selector_, StepArgs(args, CollectiveKind::kAllReduce, block), mine, mine, scratch));
  if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, mine, static_cast<int64_t>(layout_.host_of.size()));
  BRAID_RETURN_IF_ERROR(
      Step(*local_, local_selector_, StepArgs(args, CollectiveKind::kAllGather, block), mine, whole, scratch));
  if (padded) std::memcpy(output.data(), whole.data(), n * es);
  return absl::OkStatus();
}

absl::Status HostLevels::LeaderAllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                         absl::Span<std::byte> output, Scratch& scratch) {
  // Each host's first rank holds the host's sum; those ranks are the
  // inter-host group of local index 0, which every host has.
  BRAID_RETURN_IF_ERROR(
      Step(*local_, local_selector_, StepArgs(args, CollectiveKind::kReduce, args.count, 0), input, output, scratch));
  if (local_rank_ == 0) {
    BRAID_RETURN_IF_ERROR(Step(*cross_, cross_selector_, StepArgs(args, CollectiveKind::kAllReduce, args.count),
                               output, output, scratch));
    if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, output, static_cast<int64_t>(layout_.host_of.size()));
  }
  return Step(*local_, local_selector_, StepArgs(args, CollectiveKind::kBroadcast, args.count, 0), output, output,
              scratch);
}

absl::StatusOr<HostLevels::HostBlocks> HostLevels::Stage(size_t block_bytes) {
  const size_t host_bytes = static_cast<size_t>(layout_.hosts()) * block_bytes;
  const size_t ranks_here = static_cast<size_t>(local_->size());
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> buffer, staging_.Get(host_bytes * (ranks_here + 1)));
  return HostBlocks{buffer.subspan(0, host_bytes * ranks_here), buffer.subspan(host_bytes * ranks_here, host_bytes)};
}

void HostLevels::Regroup(const std::byte* from, std::byte* to, size_t block_bytes, bool to_local_major) const {
  const int hosts = layout_.hosts();
  for (int j = 0; j < local_->size(); ++j) {
    for (int g = 0; g < hosts; ++g) {
      const size_t by_rank = static_cast<size_t>(layout_.RankAt(g, j)) * block_bytes;
      const size_t by_local = (static_cast<size_t>(j) * hosts + g) * block_bytes;
      if (to_local_major) {
        std::memcpy(to + by_local, from + by_rank, block_bytes);
      } else {
        std::memcpy(to + by_rank, from + by_local, block_bytes);
      }
    }
  }
}

absl::Status HostLevels::ReduceScatter(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                       absl::Span<std::byte> output, Scratch& scratch) {
  const size_t c = args.count;
  if (c == 0) return absl::OkStatus();
  const size_t hosts = static_cast<size_t>(layout_.hosts());
  BRAID_ASSIGN_OR_RETURN(HostBlocks blocks, Stage(c * DTypeSize(args.dtype)));
  // The intra-host step hands local index j the blocks of every host's rank
  // j, which the inter-host step then splits.
  Regroup(input.data(), blocks.whole.data(), c * DTypeSize(args.dtype), /*to_local_major=*/true);
  BRAID_RETURN_IF_ERROR(Step(*local_, local_selector_, StepArgs(args, CollectiveKind::kReduceScatter, hosts * c),
                             blocks.whole, blocks.mine, scratch));
  BRAID_RETURN_IF_ERROR(
      Step(*cross_, cross_selector_, StepArgs(args, CollectiveKind::kReduceScatter, c), blocks.mine, output, scratch));
  if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, output, static_cast<int64_t>(layout_.host_of.size()));
  return absl::OkStatus();
}

absl::Status HostLevels::AllGather(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                   absl::Span<std::byte> output, Scratch& scratch) {
  const size_t c = args.count;
  if (c == 0) return absl::OkStatus();
  const size_t hosts = static_cast<size_t>(layout_.hosts());
  BRAID_ASSIGN_OR_RETURN(HostBlocks blocks, Stage(c * DTypeSize(args.dtype)));
  BRAID_RETURN_IF_ERROR(
      Step(*cross_, cross_selector_, StepArgs(args, CollectiveKind::kAllGather, c), input, blocks.mine, scratch));
  BRAID_RETURN_IF_ERROR(Step(*local_, local_selector_, StepArgs(args, CollectiveKind::kAllGather, hosts * c),
                             blocks.mine, blocks.whole, scratch));
  Regroup(blocks.whole.data(), output.data(), c * DTypeSize(args.dtype), /*to_local_major=*/false);
  return absl::OkStatus();
}

absl::Status HostLevels::Broadcast(const CollectiveArgs& args, absl::Span<std::byte> buffer, Scratch& scratch) {
  if (args.count == 0) return absl::OkStatus();
  const int root_host = layout_.host_of[args.root];
  const int root_local = layout_.local_rank_of[args.root];
  auto across = [&](int local) -> absl::Status {
    if (local_rank_ != local) return absl::OkStatus();
    // Every host has a rank of this index: its inter-host rank is its host.
    return Step(*cross_, cross_selector_, StepArgs(args, CollectiveKind::kBroadcast, args.count, root_host), buffer,
                buffer, scratch);
  };
  auto within = [&](int local) {
    return Step(*local_, local_selector_, StepArgs(args, CollectiveKind::kBroadcast, args.count, local), buffer,
                buffer, scratch);
  };
  if (root_local < layout_.min_per_host()) {
    BRAID_RETURN_IF_ERROR(across(root_local));
    return within(root_local);
  }
  // Through the first rank of each host.
  if (host_ == root_host) BRAID_RETURN_IF_ERROR(within(root_local));
  BRAID_RETURN_IF_ERROR(across(0));
  if (host_ != root_host) return within(0);
  return absl::OkStatus();
}

}  // namespace braid
