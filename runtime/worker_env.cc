#include "runtime/worker_env.h"

#include <cstdlib>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/launch_env.h"
#include "base/slurm_step.h"
#include "base/status.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kStoreAddrKnob, launch_env::kStoreAddr, "",
               "host:port of a running braid store (braidrun sets it); else rank 0 hosts one on MASTER_PORT.");
BRAID_ENV_KNOB(kStorePrefixKnob, launch_env::kStorePrefix, "", "Namespace of this run in the store (braidrun sets it).");

constexpr char kHowToStart[] =
    "start workers with braidrun, torchrun, mpirun or srun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT";

absl::StatusOr<int> IntVariable(const char* name, bool required, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    if (!required) return fallback;
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set: ", kHowToStart));
  }
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", value, "\" is not a non-negative integer"));
  }
  return parsed;
}

// A task that srun started directly (one per rank, no agent): the contract
// from the step's variables. MASTER_ADDR and MASTER_PORT still win when set;
// else rank 0 (always on the step's first node) hosts the store there, on the
// port every task derives alike from the job id.
absl::Status ReadSlurmTask(const SlurmStep& step, WorkerEnv& env) {
  if (step.proc_id < 0) return absl::InvalidArgumentError("inside a Slurm step but SLURM_PROCID is not set");
  env.rank = step.proc_id;
  env.world_size = step.num_tasks;
  env.local_rank = step.local_id >= 0 ? step.local_id : 0;
  env.local_world_size = step.tasks_on_this_node();
  env.group_rank = step.node_id;
  const char* addr = std::getenv(launch_env::kMasterAddr);
  env.master_addr = addr != nullptr ? std::string(addr) : step.nodes.front();
  BRAID_ASSIGN_OR_RETURN(int port, IntVariable(launch_env::kMasterPort, false, SlurmMasterPort(step.job_id)));
  if (port > 65535) return absl::InvalidArgumentError(absl::StrCat("MASTER_PORT=", port, " is not a port"));
  env.master_port = static_cast<uint16_t>(port);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerEnv> ReadWorkerEnv() {
  WorkerEnv env;
  env.store_addr = kStoreAddrKnob.String();
  env.store_prefix = kStorePrefixKnob.String();
  const bool torchrun = std::getenv(launch_env::kRank) != nullptr;
  if (!torchrun && std::getenv(launch_env::kOmpiRank) == nullptr) {
    BRAID_ASSIGN_OR_RETURN(std::optional<SlurmStep> step, ReadSlurmStep(ProcessEnv()));
    if (step.has_value()) {
      BRAID_RETURN_IF_ERROR(ReadSlurmTask(*step, env));
      if (env.rank >= env.world_size) {
        return absl::InvalidArgumentError(absl::StrCat("SLURM_PROCID ", env.rank, " is not below the step's ",
                                                       env.world_size, " tasks"));
      }
      return env;
    }
  }
  if (!torchrun && std::getenv(launch_env::kOmpiRank) != nullptr) {
    env.under_mpirun = true;
    BRAID_ASSIGN_OR_RETURN(env.rank, IntVariable(launch_env::kOmpiRank, true, 0));
    BRAID_ASSIGN_OR_RETURN(env.world_size, IntVariable(launch_env::kOmpiSize, true, 1));
    BRAID_ASSIGN_OR_RETURN(env.local_rank, IntVariable(launch_env::kOmpiLocalRank, false, 0));
    BRAID_ASSIGN_OR_RETURN(env.local_world_size, IntVariable(launch_env::kOmpiLocalSize, false, env.world_size));
    BRAID_ASSIGN_OR_RETURN(env.group_rank, IntVariable(launch_env::kOmpiNodeRank, false, 0));
  } else {
    BRAID_ASSIGN_OR_RETURN(env.rank, IntVariable(launch_env::kRank, true, 0));
    BRAID_ASSIGN_OR_RETURN(env.world_size, IntVariable(launch_env::kWorldSize, true, 1));
    BRAID_ASSIGN_OR_RETURN(env.local_rank, IntVariable(launch_env::kLocalRank, false, env.rank));
    BRAID_ASSIGN_OR_RETURN(env.local_world_size, IntVariable(launch_env::kLocalWorldSize, false, env.world_size));
    BRAID_ASSIGN_OR_RETURN(env.group_rank, IntVariable(launch_env::kGroupRank, false, 0));
  }
  if (env.world_size < 1 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", env.rank, " is not below the world size ", env.world_size));
  }
  const char* addr = std::getenv(launch_env::kMasterAddr);
  env.master_addr = addr != nullptr ? addr : "";
  BRAID_ASSIGN_OR_RETURN(int port, IntVariable(launch_env::kMasterPort, false, 0));
  if (port > 65535) return absl::InvalidArgumentError(absl::StrCat("MASTER_PORT=", port, " is not a port"));
  env.master_port = static_cast<uint16_t>(port);
  const char* agent_store = std::getenv(launch_env::kUseAgentStore);
  env.agent_holds_master_port = agent_store != nullptr && std::string_view(agent_store) == "True" && port != 0;
  if (env.agent_holds_master_port && port == 65535) {
    return absl::InvalidArgumentError("MASTER_PORT=65535 under torchrun leaves braid's store no port above it");
  }
  // Under mpirun the group bootstraps over MPI instead (runtime/process_group.h).
  if (env.store_addr.empty() && env.world_size > 1 && !env.under_mpirun &&
      (env.master_addr.empty() || env.master_port == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("MASTER_ADDR and MASTER_PORT must be set: ", kHowToStart));
  }
  return env;
}

}  // namespace braid
