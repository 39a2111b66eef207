// braidrun's defaults from a cluster's environment, through the options
// parser with a map for the environment: torchrun's PET_* variables (as a
// Kubeflow PyTorchJob sets them), a Slurm step's SLURM_* (one agent per node),
// which of them wins, what the command line overrides, and the
// --signals-to-handle / --shutdown-timeout flags.
#include <signal.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/slurm_step.h"
#include "catch2/catch.hpp"
#include "launcher/flag_table.h"
#include "launcher/options.h"

namespace braid {
namespace {

using Env = std::map<std::string, std::string>;

absl::StatusOr<LaunchOptions> Parse(std::vector<std::string> args, Env env) {
  return ParseLaunchOptions(args, MapEnv(std::move(env)));
}

LaunchOptions ParseOk(std::vector<std::string> args, Env env) {
  absl::StatusOr<LaunchOptions> o = Parse(std::move(args), std::move(env));
  INFO(o.status());
  REQUIRE(o.ok());
  return *o;
}

// Node 1 of `srun -N2 --ntasks-per-node=1 braidrun ...` in job 1234.
Env SlurmNode1() {
  return {{"SLURM_JOB_ID", "1234"},        {"SLURM_STEP_ID", "0"},      {"SLURM_NNODES", "2"},
          {"SLURM_NTASKS", "2"},           {"SLURM_NODEID", "1"},       {"SLURM_PROCID", "1"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_TASKS_PER_NODE", "1(x2)"}};
}

TEST_CASE("PET_*: every flag's torchrun variable is its default", "[launcher][pet]") {
  const LaunchOptions o = ParseOk({"train"}, {{"PET_NNODES", "2:3"},
                                              {"PET_NPROC_PER_NODE", "4"},
                                              {"PET_RDZV_BACKEND", "c10d"},
                                              {"PET_RDZV_ENDPOINT", "master-0:23456"},
                                              {"PET_RDZV_ID", "pytorchjob-7"},
                                              {"PET_RDZV_CONF", "join_timeout=30"},
                                              {"PET_MAX_RESTARTS", "3"},
                                              {"PET_MONITOR_INTERVAL", "0.5"},
                                              {"PET_ROLE", "trainer"},
                                              {"PET_LOCAL_ADDR", "10.0.0.9"},
                                              {"PET_REDIRECTS", "3"},
                                              {"PET_TEE", "1"},
                                              {"PET_LOG_DIR", "/tmp/logs"},
                                              {"PET_LOCAL_RANKS_FILTER", "0"},
                                              {"PET_START_METHOD", "fork"},
                                              {"PET_SIGNALS_TO_HANDLE", "SIGUSR1,SIGTERM"},
                                              {"PET_SHUTDOWN_TIMEOUT", "30"}});
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 3);
  CHECK(o.nproc_per_node == 4);
  CHECK(o.rdzv_backend == "c10d");
  CHECK(o.rdzv_endpoint == "master-0:23456");
  CHECK(o.rdzv_id == "pytorchjob-7");
  CHECK(o.join_timeout == absl::Seconds(30));
  CHECK(o.max_restarts == 3);
  CHECK(o.monitor_interval == absl::Milliseconds(500));
  CHECK(o.role == "trainer");
  CHECK(o.local_addr == "10.0.0.9");
  CHECK(o.redirects.all == 3);
  CHECK(o.tee.all == 1);
  CHECK(o.log_dir == "/tmp/logs");
  CHECK(o.local_ranks_filter == std::vector<int>{0});
  CHECK(o.signals_to_handle == std::vector<int>{SIGUSR1, SIGTERM});
  CHECK(o.shutdown_timeout == absl::Seconds(30));
}

TEST_CASE("PET_*: a Kubeflow PyTorchJob's static variables", "[launcher][pet]") {
  // What the training operator sets on worker 1 of a two-replica job.
  const LaunchOptions o = ParseOk({"train.py"}, {{"PET_NNODES", "2"},
                                                 {"PET_NPROC_PER_NODE", "2"},
                                                 {"PET_NODE_RANK", "1"},
                                                 {"PET_MASTER_ADDR", "job-master-0"},
                                                 {"PET_MASTER_PORT", "23456"}});
  CHECK(o.max_nodes == 2);
  CHECK(o.nproc_per_node == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.rdzv_backend == "static");
  CHECK(o.master_addr == "job-master-0");
  CHECK(o.master_port == 23456);
}

TEST_CASE("PET_*: the command line wins", "[launcher][pet]") {
  const LaunchOptions o =
      ParseOk({"--nproc_per_node=3", "--rdzv-id", "cli", "train"},
              {{"PET_NPROC_PER_NODE", "8"}, {"PET_RDZV_ID", "env"}, {"PET_MAX_RESTARTS", "2"}});
  CHECK(o.nproc_per_node == 3);
  CHECK(o.rdzv_id == "cli");
  CHECK(o.max_restarts == 2);
}

TEST_CASE("PET_*: switches are integers, as torchrun's check_env reads them", "[launcher][pet]") {
  CHECK(ParseOk({"train"}, {{"PET_STANDALONE", "1"}}).standalone);
  CHECK_FALSE(ParseOk({"train"}, {{"PET_STANDALONE", "0"}}).standalone);
  CHECK(ParseOk({"--standalone", "train"}, {{"PET_STANDALONE", "0"}}).standalone);
  CHECK(ParseOk({"train.py"}, {{"PET_NO_PYTHON", "1"}}).no_python);
  CHECK(ParseOk({"pkg.train"}, {{"PET_MODULE", "1"}}).module);
  CHECK(ParseOk({"train"}, {{"PET_MPI", "1"}}).mpi);
  absl::StatusOr<LaunchOptions> bad = Parse({"train"}, {{"PET_STANDALONE", "yes"}});
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(bad.status().message(), "PET_STANDALONE=\"yes\" is not an integer"));
}

TEST_CASE("PET_*: a bad value is refused naming the variable", "[launcher][pet]") {
  const auto [name, value, says] = GENERATE(table<std::string, std::string, std::string>({
      {"PET_NNODES", "two", "PET_NNODES: argument --nnodes: invalid value 'two'"},
      {"PET_NPROC_PER_NODE", "0", "PET_NPROC_PER_NODE: argument --nproc-per-node"},
      {"PET_MASTER_PORT", "70000", "PET_MASTER_PORT: argument --master-port"},
      {"PET_RDZV_BACKEND", "etcd", "PET_RDZV_BACKEND"},
      {"PET_SIGNALS_TO_HANDLE", "SIGBOGUS", "PET_SIGNALS_TO_HANDLE: argument --signals-to-handle"},
      {"PET_SHUTDOWN_TIMEOUT", "-1", "PET_SHUTDOWN_TIMEOUT"},
  }));
  absl::StatusOr<LaunchOptions> o = Parse({"train"}, {{name, value}});
  INFO(o.status());
  REQUIRE(o.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(o.status().message(), says));
}

TEST_CASE("PET_*: -h and --print-env read no environment", "[launcher][pet]") {
  CHECK(ParseOk({"-h"}, {{"PET_NNODES", "bogus"}}).help);
  CHECK(ParseOk({"--print-env"}, {{"PET_NNODES", "bogus"}, {"PET_PRINT_ENV", "1"}}).print_env);
  CHECK_FALSE(ParseOk({"train"}, {{"PET_PRINT_ENV", "1"}}).print_env);
}

TEST_CASE("PetVariable: argparse's dest of the longest spelling", "[launcher][pet]") {
  CHECK(PetVariable(*FindLaunchFlag("--nproc-per-node")) == "PET_NPROC_PER_NODE");
  CHECK(PetVariable(*FindLaunchFlag("--redirects")) == "PET_REDIRECTS");
  CHECK(PetVariable(*FindLaunchFlag("--module")) == "PET_MODULE");
  CHECK(PetVariable(*FindLaunchFlag("--rdzv-endpoint")) == "PET_RDZV_ENDPOINT");
}

TEST_CASE("Slurm: one braidrun per node takes the step's nodes, rank, job id and master", "[launcher][slurm]") {
  const LaunchOptions o = ParseOk({"--nproc-per-node=4", "train"}, SlurmNode1());
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.rdzv_backend == "static");
  CHECK(o.rdzv_id == "1234");
  CHECK(o.master_addr == "gpu07");
  CHECK(o.master_port == SlurmMasterPort("1234"));
  CHECK(o.master_port == 29500 + 2 * 234);
  CHECK(o.notes.empty());
}

TEST_CASE("Slurm: explicit flags and PET_* win, flag by flag", "[launcher][slurm]") {
  Env env = SlurmNode1();
  LaunchOptions o = ParseOk({"--master-port=40000", "--rdzv-id=mine", "train"}, env);
  CHECK(o.master_port == 40000);
  CHECK(o.rdzv_id == "mine");
  CHECK(o.master_addr == "gpu07");
  CHECK(o.node_rank == 1);
  env["PET_MASTER_ADDR"] = "10.0.0.1";
  env["PET_NODE_RANK"] = "0";
  o = ParseOk({"train"}, env);
  CHECK(o.master_addr == "10.0.0.1");
  CHECK(o.node_rank == 0);
  // --rdzv-endpoint says where the store is: no master defaults then.
  o = ParseOk({"--rdzv-endpoint=head:29400", "train"}, SlurmNode1());
  CHECK(o.master_addr.empty());
  CHECK(o.master_port == -1);
}

TEST_CASE("Slurm: c10d gets the first node as its endpoint, and no node rank", "[launcher][slurm]") {
  const LaunchOptions o = ParseOk({"--rdzv-backend=c10d", "train"}, SlurmNode1());
  CHECK(o.node_rank == -1);
  CHECK(o.rdzv_endpoint == absl::StrCat("gpu07:", SlurmMasterPort("1234") + 1));
  CHECK(o.max_nodes == 2);
}

TEST_CASE("Slurm: one node keeps braidrun's own one-node master", "[launcher][slurm]") {
  Env env = SlurmNode1();
  env["SLURM_NNODES"] = "1";
  env["SLURM_NTASKS"] = "1";
  env["SLURM_NODEID"] = "0";
  env["SLURM_JOB_NODELIST"] = "gpu07";
  const LaunchOptions o = ParseOk({"train"}, env);
  CHECK(o.max_nodes == 1);
  CHECK(o.node_rank == 0);
  CHECK(o.rdzv_id == "1234");
  CHECK(o.master_addr.empty());
  CHECK(o.master_port == -1);
}

TEST_CASE("Slurm: --standalone, a batch script and a step not one task per node get nothing",
          "[launcher][slurm]") {
  LaunchOptions o = ParseOk({"--standalone", "train"}, SlurmNode1());
  CHECK(o.max_nodes == 1);
  CHECK(o.notes.empty());
  Env batch = SlurmNode1();
  batch.erase("SLURM_STEP_ID");
  o = ParseOk({"train"}, batch);
  CHECK(o.max_nodes == 1);
  CHECK(o.rdzv_id == "none");
  CHECK(o.notes.empty());
  Env four_agents = SlurmNode1();
  four_agents["SLURM_NTASKS"] = "4";
  o = ParseOk({"train"}, four_agents);
  CHECK(o.max_nodes == 1);
  REQUIRE(o.notes.size() == 1);
  CHECK(absl::StrContains(o.notes[0], "4 tasks on 2 node(s), not one braidrun per node"));
  // The user said how many nodes: nothing to note.
  CHECK(ParseOk({"--nnodes=1", "train"}, four_agents).notes.empty());
}

TEST_CASE("Slurm: a malformed step is ignored with a note naming the variable", "[launcher][slurm]") {
  Env env = SlurmNode1();
  env["SLURM_JOB_NODELIST"] = "gpu[08-07]";
  const LaunchOptions o = ParseOk({"train"}, env);
  CHECK(o.max_nodes == 1);
  REQUIRE(o.notes.size() == 1);
  CHECK(absl::StrContains(o.notes[0], "SLURM_JOB_NODELIST"));
  CHECK(absl::StrContains(o.notes[0], "runs backwards"));
}

TEST_CASE("--signals-to-handle and --shutdown-timeout", "[launcher]") {
  LaunchOptions o = ParseOk({"train"}, {});
  CHECK(o.signals_to_handle == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(o.shutdown_timeout == absl::Seconds(5));
  o = ParseOk({"--signals-to-handle=SIGUSR1,TERM,SIGUSR1", "--shutdown_timeout=0.5", "train"}, {});
  CHECK(o.signals_to_handle == std::vector<int>{SIGUSR1, SIGTERM});
  CHECK(o.shutdown_timeout == absl::Milliseconds(500));
  for (const std::string bad : {"SIGKILL", "SIGSTOP", "SIGCHLD", "SIGNOPE", "", "SIGTERM,"}) {
    absl::StatusOr<LaunchOptions> refused = Parse({"--signals-to-handle=" + bad, "train"}, {});
    INFO(bad << ": " << refused.status());
    CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(refused.status().message(), "--signals-to-handle"));
  }
  CHECK_FALSE(Parse({"--shutdown-timeout=soon", "train"}, {}).ok());
}

}  // namespace
}  // namespace braid
