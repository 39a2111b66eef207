#include "launcher/replace_policy.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/launch_env.h"
#include "base/logging.h"
#include "base/status.h"
#include "store/membership.h"

namespace braid {

ReplacePolicy::ReplacePolicy(std::shared_ptr<Store> workers_store, std::string host,
                             const std::vector<WorkerSpec>& specs)
    : store_(std::move(workers_store)), host_(std::move(host)) {
  for (const WorkerSpec& spec : specs) specs_.emplace(spec.global_rank, spec);
}

absl::StatusOr<std::string> ReplacePolicy::FallbackReason() {
  BRAID_ASSIGN_OR_RETURN(const std::optional<std::string> fallback, GetIfSet(*store_, membership::FallbackKey()));
  if (!fallback.has_value()) return std::string();
  // A worker that set it empty still asked for the fallback.
  return fallback->empty() ? std::string("a worker asked for a full restart") : *fallback;
}

absl::StatusOr<std::vector<std::string>> ReplacePolicy::KillEvicted(WorkerGroup& group) {
  std::vector<std::string> killed;
  for (const RunningWorker& worker : group.Running()) {
    if (evicted_.count(worker.pid) != 0) continue;  // killed already; its exit is on the way
    const std::string token = membership::ProcessToken(host_, worker.pid);
    BRAID_ASSIGN_OR_RETURN(const std::optional<std::string> evict,
                           GetIfSet(*store_, membership::EvictKey(worker.global_rank, token)));
    if (!evict.has_value()) continue;
    const std::string why = evict->empty() ? std::string("left out by the others") : *evict;
    evicted_[worker.pid] = why;
    group.Kill(worker.global_rank, worker.pid);
    killed.push_back(absl::StrCat("rank ", worker.global_rank, " (", token, ") was evicted by the others (", why,
                                  "): killed it with SIGKILL"));
  }
  return killed;
}

std::string ReplacePolicy::How(const WorkerExit& exit) const {
  std::string how = exit.Describe();
  if (auto it = evicted_.find(exit.pid); it != evicted_.end()) {
    how = absl::StrCat("evicted by the others (", it->second, "), then ", how, " from braidrun");
  }
  if (auto it = replacement_of_.find(exit.pid); it != replacement_of_.end()) {
    absl::StrAppend(&how, " (replacement ", it->second, " of rank ", exit.global_rank, ")");
  }
  return how;
}

absl::Status ReplacePolicy::Replace(WorkerGroup& group, const WorkerExit& exit, const std::string& how,
                                    int restart_count) {
  auto spec = specs_.find(exit.global_rank);
  BRAID_CHECK(spec != specs_.end()) << "rank " << exit.global_rank << " is not one of this node's workers";
  const std::string token = membership::ProcessToken(host_, exit.pid);
  BRAID_RETURN_IF_ERROR(Annotate(membership::DeclareDead(*store_, exit.global_rank, token, how),
                                 absl::StrCat("declaring rank ", exit.global_rank, " (", token, ") dead")));
  const int k = ++replacements_[exit.global_rank];
  absl::StatusOr<pid_t> pid = group.Add(ReplacementSpec(spec->second, k, restart_count));
  if (!pid.ok()) return Annotate(pid.status(), absl::StrCat("starting a replacement for rank ", exit.global_rank));
  replacement_of_[*pid] = k;
  return absl::OkStatus();
}

absl::Status ReplacePolicy::DeclareLost(int first_rank, int nproc, const std::string& how) {
  auto on_node = [&](int id) { return id >= first_rank && id < first_rank + nproc; };
  std::set<std::pair<int, std::string>> processes;  // id, token
  BRAID_ASSIGN_OR_RETURN(const int64_t latest, membership::Latest(*store_));
  if (latest >= 0) {
    bool decided = false;
    BRAID_ASSIGN_OR_RETURN(const std::vector<membership::Member> members,
                           membership::MembersIfDecided(*store_, latest, &decided));
    for (const membership::Member& m : members) {
      if (on_node(m.id)) processes.emplace(m.id, m.token);
    }
  }
  for (int id = first_rank; id < first_rank + nproc; ++id) {
    BRAID_ASSIGN_OR_RETURN(const std::optional<std::string> in,
                           GetIfSet(*store_, membership::CheckInKey(latest + 1, id)));
    if (!in.has_value()) continue;
    BRAID_ASSIGN_OR_RETURN(const membership::Member m, membership::DecodeCheckIn(id, *in));
    processes.emplace(id, m.token);
  }
  for (const auto& [id, token] : processes) {
    BRAID_RETURN_IF_ERROR(Annotate(membership::DeclareDead(*store_, id, token, how),
                                   absl::StrCat("declaring rank ", id, " (", token, ") of a lost node dead")));
  }
  return absl::OkStatus();
}

WorkerSpec ReplacementSpec(const WorkerSpec& original, int k, int restart_count) {
  WorkerSpec spec = original;
  // ".../attempt_0/1/stdout.log" -> ".../attempt_0/1.r2/stdout.log"
  auto moved = [k](const std::string& path) {
    const size_t slash = path.rfind('/');
    if (path.empty() || slash == std::string::npos) return path;
    return absl::StrCat(path.substr(0, slash), ".r", k, path.substr(slash));
  };
  spec.stdout_log = moved(original.stdout_log);
  spec.stderr_log = moved(original.stderr_log);
  spec.error_file = moved(original.error_file);
  if (!spec.error_file.empty()) SetEnvVar(spec.env, launch_env::kErrorFile, spec.error_file);
  SetEnvVar(spec.env, launch_env::kJoinRunning, "1");
  SetEnvVar(spec.env, launch_env::kRestartCount, absl::StrCat(restart_count));
  return spec;
}

std::string RestartPolicyLine(RestartPolicy policy, const std::vector<int>& replaced_ranks, int restarts,
                              int max_restarts) {
  const int replaced = static_cast<int>(replaced_ranks.size());
  const int full = restarts - replaced;  // the restarts that stopped every worker
  auto restarts_text = [](int n) {
    return absl::StrCat(n, n == 1 ? " restart" : " restarts", " stopped every worker");
  };
  std::string text = "restart policy: ";
  if (policy == RestartPolicy::kReplace) {
    // "rank 1, rank 3"; a rank replaced more than once: "rank 1 x2".
    std::vector<std::pair<int, int>> counts;  // rank, replacements, in first-replacement order
    for (int rank : replaced_ranks) {
      bool seen = false;
      for (auto& [r, n] : counts) {
        if (r != rank) continue;
        ++n;
        seen = true;
      }
      if (!seen) counts.emplace_back(rank, 1);
    }
    std::vector<std::string> ranks;
    for (const auto& [rank, n] : counts) {
      ranks.push_back(absl::StrCat("rank ", rank, n > 1 ? absl::StrCat(" x", n) : ""));
    }
    absl::StrAppend(&text, "replace; ");
    if (replaced == 0) {
      absl::StrAppend(&text, "no worker replaced");
    } else {
      absl::StrAppend(&text, replaced, replaced == 1 ? " worker" : " workers", " replaced (",
                      absl::StrJoin(ranks, ", "), ")", full > 0 ? "" : ", survivors never stopped");
    }
    if (full > 0) absl::StrAppend(&text, "; ", restarts_text(full));
  } else {
    absl::StrAppend(&text, "all; ", full > 0 ? restarts_text(full) : std::string("no restart"));
  }
  absl::StrAppend(&text, "; restarts used ", restarts, " of ", max_restarts);
  return text;
}

}  // namespace braid
