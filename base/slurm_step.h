// What srun tells every task of a job step, read once for the two readers
// that need it: braidrun started by srun as one agent per node
// (launcher/slurm_defaults.h), and a braid worker started by srun as one task
// per rank (runtime/worker_env.h).
//
// A step is recognised by SLURM_JOB_ID and SLURM_STEP_ID together: a batch
// script or an salloc shell has the job's variables (SLURM_NNODES,
// SLURM_PROCID=0, ...) but no step, and a program run there is not one of
// several tasks. The step's own variables (SLURM_STEP_NUM_NODES,
// SLURM_STEP_NODELIST, ...) win over the job's (SLURM_NNODES,
// SLURM_JOB_NODELIST), which describe the whole allocation: a step may use
// only part of it.
#ifndef BRAID_BASE_SLURM_STEP_H_
#define BRAID_BASE_SLURM_STEP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"

namespace braid {

struct SlurmStep {
  std::string job_id;               // SLURM_JOB_ID
  int node_id = 0;                  // SLURM_NODEID: this node's index in `nodes`
  int num_tasks = 1;                // SLURM_STEP_NUM_TASKS, else SLURM_NTASKS
  int proc_id = -1;                 // SLURM_PROCID, -1 when unset
  int local_id = -1;                // SLURM_LOCALID, -1 when unset
  std::vector<std::string> nodes;   // SLURM_STEP_NODELIST, else SLURM_NODELIST / SLURM_JOB_NODELIST, expanded
  std::vector<int> tasks_per_node;  // SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE; empty when unset

  int num_nodes() const { return static_cast<int>(nodes.size()); }
  // Tasks on this node: tasks_per_node[node_id], else SLURM_NTASKS_PER_NODE
  // (kept in ntasks_per_node), else num_tasks / num_nodes.
  int tasks_on_this_node() const;
  int ntasks_per_node = 0;  // SLURM_NTASKS_PER_NODE, 0 when unset
};

// The step this process is a task of, or nullopt outside one. Inside one, a
// missing or malformed variable is kInvalidArgument naming it.
absl::StatusOr<std::optional<SlurmStep>> ReadSlurmStep(const EnvLookup& env);

// MASTER_PORT for a Slurm job when none is given: 29500 (torch's) plus twice
// the job id modulo 1000, so two jobs sharing a node rarely collide, and
// port + 1 (braidrun's store for a static rendezvous) stays the job's own.
// A job id that is not a number gets 29500.
uint16_t SlurmMasterPort(const std::string& job_id);

}  // namespace braid

#endif  // BRAID_BASE_SLURM_STEP_H_
