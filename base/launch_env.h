// The launch contract's variable names, declared once: what braidrun sets for
// every worker (launcher/agent.cc) and what a worker reads back
// (runtime/worker_env.cc). torchrun's names, so a PyTorch script runs under
// braidrun unchanged (DESIGN.md, "The worker environment contract"); Open
// MPI's, which a worker reads under mpirun; and braid's own BRAID_* additions.
//
// Only names live here. What a BRAID_* variable means (its default and help) is
// the EnvKnob declared next to the code that reads it (base/env.h); such a
// knob may be declared with one of these constants as its name.
#ifndef BRAID_BASE_LAUNCH_ENV_H_
#define BRAID_BASE_LAUNCH_ENV_H_

namespace braid::launch_env {

// torchrun's per-worker variables.
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";  // the node's rank
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";

// Open MPI's, as mpirun sets them.
inline constexpr char kOmpiRank[] = "OMPI_COMM_WORLD_RANK";
inline constexpr char kOmpiSize[] = "OMPI_COMM_WORLD_SIZE";
inline constexpr char kOmpiLocalRank[] = "OMPI_COMM_WORLD_LOCAL_RANK";
inline constexpr char kOmpiLocalSize[] = "OMPI_COMM_WORLD_LOCAL_SIZE";
inline constexpr char kOmpiNodeRank[] = "OMPI_COMM_WORLD_NODE_RANK";

// braid's own: the store braidrun already runs, this run's namespace in it,
// the job secret, and where the flight recorder dumps.
inline constexpr char kStoreAddr[] = "BRAID_STORE_ADDR";
inline constexpr char kStorePrefix[] = "BRAID_STORE_PREFIX";
inline constexpr char kJobSecret[] = "BRAID_JOB_SECRET";
inline constexpr char kFlightDir[] = "BRAID_FLIGHT_DIR";
// Set to "1" for a worker that braidrun starts to replace a failed one
// (--restart-policy=replace): it joins the running group (runtime/elastic.h).
inline constexpr char kJoinRunning[] = "BRAID_JOIN_RUNNING";

}  // namespace braid::launch_env

#endif  // BRAID_BASE_LAUNCH_ENV_H_
