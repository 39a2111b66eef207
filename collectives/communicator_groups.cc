// Communicator's groups (communicator.h): its host layout, the hierarchical
// collectives' levels, subgroups (Split, NewGroup), and its straggler reports.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/socket.h"
#include "base/status.h"
#include "collectives/communicator.h"
#include "collectives/run_algorithm.h"
#include "collectives/transport/subset_bootstrap.h"

namespace braid {
namespace {

// An outsider's view of a group made by NewGroup: its communicator's calls
// are refused before they reach this (Enqueue); it only carries the size.
class OutsiderTransport final : public Transport {
 public:
  explicit OutsiderTransport(int size) : Transport(-1, size) {}
  const char* name() const override { return "none"; }
  absl::StatusOr<OpId> PostSend(int, FrameHeader, absl::Span<const std::byte>) override { return Refused(); }
  absl::StatusOr<OpId> PostRecv(int, FrameHeader, absl::Span<std::byte>) override { return Refused(); }
  absl::Status Wait(absl::Span<const OpId>, Deadline) override { return Refused(); }
  void Abort(const absl::Status&) override {}

 private:
  static absl::Status Refused() { return absl::FailedPreconditionError("this rank is not a member of the group"); }
};

// A digest of NewGroup's list, so that ranks passing different lists fail.
uint64_t ListCheck(const std::vector<int>& ranks) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ ranks.size();
  for (int r : ranks) {
    h ^= static_cast<uint64_t>(r) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

}  // namespace

absl::StatusOr<HostLayout> Communicator::GatherLayout(Transport& transport, const CommunicatorOptions& options,
                                                      Deadline deadline) {
  const std::string mine = options.host_name.empty() ? HostName() : options.host_name;
  // Outsiders have no group; a group of device memory (nccl) stays on one
  // level; a group of one is its own host.
  if (transport.rank() < 0 || transport.device_memory_only() || transport.size() == 1) {
    return MakeHostLayout(std::vector<std::string>(static_cast<size_t>(std::max(transport.size(), 0)), mine));
  }
  std::vector<int> everyone(static_cast<size_t>(transport.size()));
  for (int r = 0; r < transport.size(); ++r) everyone[r] = r;
  SubsetBootstrap bootstrap(transport, std::move(everyone), /*seq=*/0);
  absl::StatusOr<std::vector<std::string>> hosts = bootstrap.AllGather(mine, deadline);
  if (!hosts.ok()) return Annotate(hosts.status(), absl::StrCat("rank ", transport.rank(), ": the group's host names"));
  return MakeHostLayout(*hosts);
}

TransportCaps Communicator::CapsFor(Transport& transport, const HostLayout& layout,
                                    const CommunicatorOptions& options) {
  TransportCaps caps = CapsOf(transport);
  caps.hosts = std::max(layout.hosts(), 1);
  caps.min_per_host = std::max(layout.min_per_host(), 1);
  caps.max_per_host = std::max(layout.max_per_host(), 1);
  caps.subgroups = options.subgroup_transport != nullptr && !transport.device_memory_only();
  return caps;
}

absl::Status Communicator::DispatchHierarchical(const Task& task, absl::Span<const std::byte> in,
                                                absl::Span<std::byte> out) {
  if (!levels_) {
    BRAID_ASSIGN_OR_RETURN(levels_, HostLevels::Create(*transport_, layout_, options_.subgroup_transport,
                                                       task.args.seq, task.args.deadline, options_.thresholds));
  }
  // A broadcast's buffer is its output (the input is the same memory on the root).
  if (task.args.kind == CollectiveKind::kBroadcast) return levels_->Run(task.args, out, out, scratch_);
  return levels_->Run(task.args, in, out, scratch_);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key, std::string name,
                                                                  CallOptions call) {
  auto job = std::make_shared<SplitJob>();
  job->request.color = color < 0 ? -1 : color;
  job->request.key = key;
  if (name.empty()) name = color < 0 ? absl::StrCat(name_, ".none") : absl::StrCat(name_, ".", color);
  return RunSplitJob(std::move(job), std::move(name), call);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::NewGroup(std::vector<int> ranks, std::string name,
                                                                     CallOptions call) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (ranks.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 ||
      sorted.back() >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, ": new group of ranks [", absl::StrJoin(ranks, ", "),
                                                   "]: expected distinct ranks of [0, ", size_, ")"));
  }
  auto job = std::make_shared<SplitJob>();
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  job->request.color = me == ranks.end() ? -1 : 0;
  job->request.key = me - ranks.begin();
  job->request.check = ListCheck(ranks);
  if (name.empty()) name = absl::StrCat(name_, ".ranks_", absl::StrJoin(ranks.size() > 8 ? sorted : ranks, "_"));
  const int size = static_cast<int>(ranks.size());
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group, RunSplitJob(std::move(job), name, call));
  if (group->member()) return group;
  // The outsider's communicator knows the group's size, for the messages.
  CommunicatorOptions options = options_;
  options.name = std::move(name);
  options.timeout = timeout_;
  return Communicator::Create(std::make_unique<OutsiderTransport>(size), options);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::RunSplitJob(std::shared_ptr<SplitJob> job,
                                                                        std::string name, const CallOptions& call) {
  Request request;
  request.kind = CollectiveKind::kSplit;
  request.count = sizeof(SplitRequest);
  request.bytes = sizeof(SplitRequest);
  request.may_inline = false;  // sets up a transport: the progress thread's
  request.split = job;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, Enqueue(request, call));
  BRAID_RETURN_IF_ERROR(work->Wait());  // bounded by the split's deadline
  CommunicatorOptions options = options_;
  options.name = std::move(name);
  options.timeout = timeout_;
  if (!job->transport) return Communicator::Create(std::make_unique<OutsiderTransport>(0), options);
  absl::StatusOr<std::unique_ptr<Communicator>> group = Communicator::Create(std::move(job->transport), options);
  if (!group.ok()) return Annotate(group.status(), absl::StrCat("rank ", rank_, ": group '", options.name, "'"));
  BRAID_LOG(INFO) << "group '" << (*group)->name() << "': rank " << (*group)->rank() << " of " << (*group)->size()
                  << " over " << (*group)->transport_name() << " (rank " << rank_ << " of '" << name_ << "')";
  return group;
}

absl::Status Communicator::DispatchSplit(const Task& task) {
  SplitJob& job = *task.split;
  std::vector<SplitRequest> requests(static_cast<size_t>(size_));
  BRAID_RETURN_IF_ERROR(GatherBytes(
      task, CollectiveKind::kSplit,
      absl::MakeConstSpan(reinterpret_cast<const std::byte*>(&job.request), sizeof(SplitRequest)),
      absl::MakeSpan(reinterpret_cast<std::byte*>(requests.data()), requests.size() * sizeof(SplitRequest))));
  absl::StatusOr<SplitPlan> plan = PlanSplit(requests, rank_);
  if (!plan.ok()) return Annotate(plan.status(), absl::StrCat("rank ", rank_, ": split of group '", name_, "'"));
  job.plan = *std::move(plan);
  // The engine's own split, where it has one: every rank calls it.
  absl::StatusOr<std::unique_ptr<Transport>> native =
      transport_->Split(static_cast<int>(job.request.color), static_cast<int>(job.request.key), task.args.deadline);
  if (native.ok()) {
    job.transport = *std::move(native);
    return absl::OkStatus();
  }
  if (!absl::IsUnimplemented(native.status())) return native.status();
  if (!options_.subgroup_transport) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": group '", name_, "' over ", transport_name_,
        " cannot make subgroups: its communicator was created without a subgroup transport factory"));
  }
  if (job.plan.rank < 0) return absl::OkStatus();
  bool same_host = true;
  for (int member : job.plan.members) same_host = same_host && layout_.host_of[member] == layout_.host_of[rank_];
  SubsetBootstrap bootstrap(*transport_, job.plan.members, task.args.seq);
  BRAID_ASSIGN_OR_RETURN(job.transport, options_.subgroup_transport(bootstrap, task.args.deadline, same_host));
  return absl::OkStatus();
}

absl::Status Communicator::ExchangeStragglerWindow(const Task& task) {
  absl::Status status = GatherBytes(task, CollectiveKind::kStragglers, stragglers_.Mine(), stragglers_.All());
  if (!status.ok()) return Annotate(status, "straggler report");
  const StragglerReport report = stragglers_.Analyze();
  {
    LightMutexLock lock(&mu_);
    straggler_report_ = report;
  }
  if (report.rank < 0) return absl::OkStatus();
  const std::string line =
      absl::StrCat(DescribeStraggler(report), name_ == "world" ? "" : absl::StrCat(" (group '", name_, "')"));
  flight_.Note(line);
  if (timeline_) timeline_->Instant("straggler", Timeline::Track::kCollectives, absl::Now(),
                                    absl::StrCat("\"rank\": ", report.rank, ", \"behind_ms\": ", report.behind_ms));
  if (rank_ == 0) BRAID_LOG(WARNING) << line;
  return absl::OkStatus();
}

StragglerReport Communicator::straggler_report() {
  LightMutexLock lock(&mu_);
  return straggler_report_;
}

}  // namespace braid
