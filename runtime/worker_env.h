// The worker environment contract: what a launcher tells each process.
//
// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...), as braidrun sets them, or Open
// MPI's (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
// OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE) under mpirun, or,
// for a task srun started directly (one per rank, no agent), Slurm's:
// SLURM_PROCID (rank), SLURM_STEP_NUM_TASKS / SLURM_NTASKS (world size),
// SLURM_LOCALID, the step's tasks on this node (SLURM_STEP_TASKS_PER_NODE,
// "2(x3),1" form), SLURM_NODEID (group rank), MASTER_ADDR defaulting to the
// step's first node and MASTER_PORT to SlurmMasterPort (base/slurm_step.h).
// torchrun's variables win over Open MPI's, which win over Slurm's: a
// launcher started inside a Slurm step sets its own for its workers.
// braid's own additions are BRAID_* knobs: BRAID_STORE_ADDR (a store the
// launcher already runs) and BRAID_STORE_PREFIX (its namespace for this run).
#ifndef BRAID_RUNTIME_WORKER_ENV_H_
#define BRAID_RUNTIME_WORKER_ENV_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace braid {

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;         // node rank
  std::string master_addr;    // where rank 0 hosts the store (when no BRAID_STORE_ADDR)
  uint16_t master_port = 0;
  // torchrun 2.x's agent holds MASTER_PORT with torch's own store
  // (TORCHELASTIC_USE_AGENT_STORE=True): rank 0 hosts braid's store on
  // MASTER_PORT + 1 instead (StorePort).
  bool agent_holds_master_port = false;

  uint16_t StorePort() const { return static_cast<uint16_t>(agent_holds_master_port ? master_port + 1 : master_port); }
  std::string store_addr;     // BRAID_STORE_ADDR "host:port", or empty
  std::string store_prefix;   // BRAID_STORE_PREFIX, or empty
  bool under_mpirun = false;  // the contract came from Open MPI's variables
};

// Reads the contract. Missing or malformed variables are kInvalidArgument
// naming them ("RANK is not set: start workers with braidrun, torchrun,
// mpirun or srun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT").
absl::StatusOr<WorkerEnv> ReadWorkerEnv();

}  // namespace braid

#endif  // BRAID_RUNTIME_WORKER_ENV_H_
