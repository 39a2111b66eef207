// braidrun's defaults inside a Slurm step, for `srun braidrun ...` with one
// agent per node (srun -N2 --ntasks-per-node=1 braidrun --nproc-per-node=4
// train):
//
//   --nnodes       the step's node count (SLURM_STEP_NUM_NODES / SLURM_NNODES)
//   --node-rank    SLURM_NODEID (static rendezvous only)
//   --rdzv-id      SLURM_JOB_ID
//   --master-addr  the step's first node (several nodes, static)
//   --master-port  SlurmMasterPort(SLURM_JOB_ID) (several nodes, static;
//                  braidrun's store is then on that port + 1)
//   --rdzv-endpoint first node : SlurmMasterPort + 1 (several nodes, c10d)
//
// Only flags the user did not ask for (on the command line or by PET_*) get a
// value here, and none at all with --standalone. On one node the master
// address and port keep braidrun's one-node defaults (127.0.0.1, a free port),
// which cannot collide. A step that is not one task per node (srun -n4 on one
// node starts four agents that would all claim node rank 0) gets no defaults
// and a note saying so.
#ifndef BRAID_LAUNCHER_SLURM_DEFAULTS_H_
#define BRAID_LAUNCHER_SLURM_DEFAULTS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"

namespace braid {

struct SlurmDefault {
  std::string flag;    // canonical "--nnodes"
  std::string value;
  std::string source;  // the variable(s) it came from, for error messages
};

struct SlurmDefaults {
  std::vector<SlurmDefault> flags;
  std::vector<std::string> notes;  // why Slurm's environment was ignored, when it was
};

// `asked`: canonical flag name -> value of every flag the user gave.
absl::StatusOr<SlurmDefaults> SlurmFlagDefaults(const EnvLookup& env, const std::map<std::string, std::string>& asked);

}  // namespace braid

#endif  // BRAID_LAUNCHER_SLURM_DEFAULTS_H_
