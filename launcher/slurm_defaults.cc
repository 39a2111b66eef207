#include "launcher/slurm_defaults.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/slurm_step.h"

namespace braid {

absl::StatusOr<SlurmDefaults> SlurmFlagDefaults(const EnvLookup& env, const std::map<std::string, std::string>& asked) {
  SlurmDefaults defaults;
  if (asked.count("--standalone") > 0) return defaults;
  absl::StatusOr<std::optional<SlurmStep>> step = ReadSlurmStep(env);
  const bool nodes_given = asked.count("--nnodes") > 0;
  if (!step.ok()) {
    // Not braidrun's to refuse: flags may say everything; the note says what was ignored.
    if (!nodes_given) defaults.notes.push_back(absl::StrCat("ignoring SLURM_*: ", step.status().message()));
    return defaults;
  }
  if (!step->has_value()) return defaults;
  const SlurmStep& s = **step;
  if (s.num_tasks != s.num_nodes()) {
    if (!nodes_given) {
      defaults.notes.push_back(absl::StrCat(
          "ignoring SLURM_*: this step runs ", s.num_tasks, " tasks on ", s.num_nodes(),
          " node(s), not one braidrun per node (use srun --ntasks-per-node=1, or give --nnodes and --node-rank)"));
    }
    return defaults;
  }
  auto add = [&](const char* flag, std::string value, const char* source) {
    if (asked.count(flag) == 0) defaults.flags.push_back({flag, std::move(value), source});
  };
  add("--nnodes", absl::StrCat(s.num_nodes()), "SLURM_STEP_NUM_NODES/SLURM_NNODES");
  auto asked_value = [&](const char* flag, const char* fallback) {
    auto it = asked.find(flag);
    return it == asked.end() ? std::string(fallback) : it->second;
  };
  const std::string backend = asked_value("--rdzv-backend", "static");
  if (backend == "static") add("--node-rank", absl::StrCat(s.node_id), "SLURM_NODEID");
  add("--rdzv-id", s.job_id, "SLURM_JOB_ID");
  const std::string nnodes = asked_value("--nnodes", "");
  const bool several_nodes = nodes_given ? (nnodes != "1" && nnodes != "1:1") : s.num_nodes() > 1;
  if (!several_nodes || asked.count("--rdzv-endpoint") > 0) return defaults;
  const uint16_t port = SlurmMasterPort(s.job_id);
  if (backend == "static") {
    add("--master-addr", s.nodes.front(), "SLURM_STEP_NODELIST/SLURM_NODELIST/SLURM_JOB_NODELIST");
    add("--master-port", absl::StrCat(port), "SLURM_JOB_ID");
  } else {
    add("--rdzv-endpoint", absl::StrCat(s.nodes.front(), ":", port + 1), "SLURM_STEP_NODELIST and SLURM_JOB_ID");
  }
  return defaults;
}

}  // namespace braid
