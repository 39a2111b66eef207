#include "base/slurm_step.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/hostlist.h"
#include "base/status.h"

namespace braid {
namespace {

constexpr uint16_t kTorchMasterPort = 29500;

// The first of `names` that is set, with its name.
std::optional<std::pair<std::string, std::string>> First(const EnvLookup& env,
                                                         std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (std::optional<std::string> value = env(name)) return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

// The first of `names` as a non-negative integer; `fallback` when none is set.
absl::StatusOr<int> Count(const EnvLookup& env, std::initializer_list<const char*> names, int fallback) {
  std::optional<std::pair<std::string, std::string>> found = First(env, names);
  if (!found) return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(found->second, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(found->first, "=\"", found->second, "\" is not a non-negative integer"));
  }
  return value;
}

}  // namespace

int SlurmStep::tasks_on_this_node() const {
  if (node_id < static_cast<int>(tasks_per_node.size())) return tasks_per_node[node_id];
  if (ntasks_per_node > 0) return ntasks_per_node;
  return nodes.empty() ? num_tasks : num_tasks / num_nodes();
}

absl::StatusOr<std::optional<SlurmStep>> ReadSlurmStep(const EnvLookup& env) {
  std::optional<std::pair<std::string, std::string>> job = First(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job || !First(env, {"SLURM_STEP_ID", "SLURM_STEPID"})) return std::optional<SlurmStep>();
  SlurmStep step;
  step.job_id = job->second;
  std::optional<std::pair<std::string, std::string>> nodelist =
      First(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"});
  if (!nodelist) {
    return absl::InvalidArgumentError("inside a Slurm step (SLURM_STEP_ID is set) but SLURM_STEP_NODELIST, "
                                      "SLURM_NODELIST and SLURM_JOB_NODELIST are all unset");
  }
  absl::StatusOr<std::vector<std::string>> nodes = ExpandHostlist(nodelist->second);
  if (!nodes.ok()) return Annotate(nodes.status(), nodelist->first);
  step.nodes = std::move(*nodes);
  BRAID_ASSIGN_OR_RETURN(const int num_nodes, Count(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, step.num_nodes()));
  if (num_nodes != step.num_nodes()) {
    return absl::InvalidArgumentError(absl::StrCat("the Slurm step has ", num_nodes, " nodes (SLURM_STEP_NUM_NODES/"
                                                   "SLURM_NNODES) but ", nodelist->first, "=\"", nodelist->second,
                                                   "\" names ", step.num_nodes()));
  }
  BRAID_ASSIGN_OR_RETURN(step.node_id, Count(env, {"SLURM_NODEID"}, -1));
  if (step.node_id < 0 || step.node_id >= step.num_nodes()) {
    return absl::InvalidArgumentError(absl::StrCat("SLURM_NODEID is unset or not below the step's ", step.num_nodes(),
                                                   " nodes (", nodelist->first, "=\"", nodelist->second, "\")"));
  }
  BRAID_ASSIGN_OR_RETURN(step.num_tasks, Count(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, 1));
  BRAID_ASSIGN_OR_RETURN(step.proc_id, Count(env, {"SLURM_PROCID"}, -1));
  BRAID_ASSIGN_OR_RETURN(step.local_id, Count(env, {"SLURM_LOCALID"}, -1));
  BRAID_ASSIGN_OR_RETURN(step.ntasks_per_node, Count(env, {"SLURM_NTASKS_PER_NODE"}, 0));
  if (std::optional<std::pair<std::string, std::string>> counts =
          First(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    absl::StatusOr<std::vector<int>> expanded = ExpandTaskCounts(counts->second);
    if (!expanded.ok()) return Annotate(expanded.status(), counts->first);
    step.tasks_per_node = std::move(*expanded);
  }
  return std::optional<SlurmStep>(std::move(step));
}

uint16_t SlurmMasterPort(const std::string& job_id) {
  uint64_t id = 0;
  if (!absl::SimpleAtoi(job_id, &id)) return kTorchMasterPort;
  return static_cast<uint16_t>(kTorchMasterPort + 2 * (id % 1000));
}

}  // namespace braid
