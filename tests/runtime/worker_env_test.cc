// Tests of ReadWorkerEnv for a task srun started directly (one per rank, no
// agent): the contract from SLURM_*, the master address and port defaults,
// torchrun's and Open MPI's variables winning over Slurm's, a batch script
// (no step) left alone, and malformed Slurm variables named.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/slurm_step.h"
#include "catch2/catch.hpp"
#include "runtime/worker_env.h"
#include "tests/harness/scoped_env.h"

namespace braid {
namespace {

const std::vector<std::string> kVariables = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "BRAID_STORE_ADDR", "BRAID_STORE_PREFIX", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_JOB_ID",
    "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES", "SLURM_STEP_NUM_NODES",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST", "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"};

// Task 4 of `srun -N3 -n7 worker` on nodes node[01-03] (3 + 2 + 2 tasks):
// node 1's second task.
struct SlurmTask : ::braid::testing::ScopedEnv {
  SlurmTask() : ScopedEnv(kVariables) {
    Set("SLURM_JOB_ID", "4321");
    Set("SLURM_STEP_ID", "0");
    Set("SLURM_PROCID", "4");
    Set("SLURM_NTASKS", "7");
    Set("SLURM_LOCALID", "1");
    Set("SLURM_NODEID", "1");
    Set("SLURM_NNODES", "3");
    Set("SLURM_JOB_NODELIST", "node[01-03]");
    Set("SLURM_TASKS_PER_NODE", "3,2(x2)");
  }
};

TEST_CASE("ReadWorkerEnv: a task srun started directly", "[runtime][slurm]") {
  SlurmTask env;
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  INFO(worker.status());
  REQUIRE(worker.ok());
  CHECK(worker->rank == 4);
  CHECK(worker->world_size == 7);
  CHECK(worker->local_rank == 1);
  CHECK(worker->local_world_size == 2);
  CHECK(worker->group_rank == 1);
  CHECK(worker->master_addr == "node01");
  CHECK(worker->master_port == SlurmMasterPort("4321"));
  CHECK(worker->master_port == 29500 + 2 * 321);
  CHECK_FALSE(worker->under_mpirun);
}

TEST_CASE("ReadWorkerEnv: the step's variables win over the job's", "[runtime][slurm]") {
  SlurmTask env;  // a 2-node step inside a 3-node allocation
  env.Set("SLURM_STEP_NODELIST", "node[02-03]");
  env.Set("SLURM_STEP_NUM_NODES", "2");
  env.Set("SLURM_STEP_NUM_TASKS", "4");
  env.Set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
  env.Set("SLURM_PROCID", "3");
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  INFO(worker.status());
  REQUIRE(worker.ok());
  CHECK(worker->world_size == 4);
  CHECK(worker->local_world_size == 2);
  CHECK(worker->master_addr == "node02");
}

TEST_CASE("ReadWorkerEnv: MASTER_ADDR, MASTER_PORT and SLURM_NTASKS_PER_NODE", "[runtime][slurm]") {
  SlurmTask env;
  env.Set("MASTER_ADDR", "10.1.2.3");
  env.Set("MASTER_PORT", "12345");
  env.Set("SLURM_TASKS_PER_NODE", "");
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  // An empty SLURM_TASKS_PER_NODE is malformed, and named.
  REQUIRE(worker.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(worker.status().message(), "SLURM_TASKS_PER_NODE"));
  ::braid::testing::ScopedEnv unset({"SLURM_TASKS_PER_NODE"});
  env.Set("SLURM_NTASKS_PER_NODE", "3");
  worker = ReadWorkerEnv();
  INFO(worker.status());
  REQUIRE(worker.ok());
  CHECK(worker->master_addr == "10.1.2.3");
  CHECK(worker->master_port == 12345);
  CHECK(worker->local_world_size == 3);
}

TEST_CASE("ReadWorkerEnv: torchrun's and Open MPI's variables win over Slurm's", "[runtime][slurm]") {
  SlurmTask env;
  SECTION("braidrun or torchrun inside a Slurm step") {
    env.Set("RANK", "0");
    env.Set("WORLD_SIZE", "2");
    env.Set("MASTER_ADDR", "127.0.0.1");
    env.Set("MASTER_PORT", "29999");
    absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
    REQUIRE(worker.ok());
    CHECK(worker->rank == 0);
    CHECK(worker->world_size == 2);
    CHECK(worker->master_port == 29999);
  }
  SECTION("mpirun inside a Slurm allocation") {
    env.Set("OMPI_COMM_WORLD_RANK", "1");
    env.Set("OMPI_COMM_WORLD_SIZE", "3");
    absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
    REQUIRE(worker.ok());
    CHECK(worker->rank == 1);
    CHECK(worker->world_size == 3);
    CHECK(worker->under_mpirun);
  }
}

TEST_CASE("ReadWorkerEnv: a batch script (no step) is not a Slurm task", "[runtime][slurm]") {
  SlurmTask env;
  ::braid::testing::ScopedEnv no_step({"SLURM_STEP_ID"});
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  REQUIRE(worker.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(worker.status().message(), "RANK is not set"));
  CHECK(absl::StrContains(worker.status().message(), "srun"));
}

TEST_CASE("ReadWorkerEnv: malformed Slurm variables are named", "[runtime][slurm]") {
  SlurmTask env;
  const auto [name, value, says] = GENERATE(table<const char*, const char*, const char*>({
      {"SLURM_PROCID", "x", "SLURM_PROCID"},
      {"SLURM_PROCID", "7", "SLURM_PROCID 7 is not below the step's 7 tasks"},
      {"SLURM_NODEID", "3", "SLURM_NODEID"},
      {"SLURM_NNODES", "2", "names 3"},
      {"SLURM_JOB_NODELIST", "node[03-01]", "SLURM_JOB_NODELIST"},
      {"SLURM_TASKS_PER_NODE", "2(x", "SLURM_TASKS_PER_NODE"},
      {"SLURM_NTASKS", "-1", "SLURM_NTASKS"},
  }));
  env.Set(name, value);
  absl::StatusOr<WorkerEnv> worker = ReadWorkerEnv();
  INFO(name << "=" << value << ": " << worker.status());
  REQUIRE(worker.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(worker.status().message(), says));
}

}  // namespace
}  // namespace braid
