// braidrun's flag parser: torchrun's spellings, defaults, and one clear line
// for every bad flag or impossible combination.
#include "launcher/options.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

// No PET_* or SLURM_* from the test's own environment: cluster_env_test sets those.
absl::StatusOr<LaunchOptions> Parse(std::vector<std::string> args) { return ParseLaunchOptions(args, MapEnv({})); }

TEST_CASE("options: both spellings, both value forms, program and its arguments", "[launcher]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nproc-per-node=4", "--max-restarts", "2", "--standalone", "train", "--epochs=3", "-x"},
           {"--nproc_per_node", "4", "--max_restarts=2", "--standalone", "train", "--epochs=3", "-x"}}) {
    absl::StatusOr<LaunchOptions> o = Parse(args);
    INFO(o.status());
    REQUIRE(o.ok());
    CHECK(o->nproc_per_node == 4);
    CHECK(o->max_restarts == 2);
    CHECK(o->standalone);
    CHECK(o->rdzv_backend == "c10d");
    CHECK(o->program == "train");
    CHECK(o->program_args == std::vector<std::string>{"--epochs=3", "-x"});
  }
}

TEST_CASE("options: nnodes ranges, rdzv-conf, streams, filters", "[launcher]") {
  absl::StatusOr<LaunchOptions> o =
      Parse({"--nnodes=2:4", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1", "--rdzv-id=job",
             "--rdzv-conf=join_timeout=5,last_call_timeout=0.5,close_timeout=2,is_host=false", "-t", "3",
             "--redirects=0:1,1:2", "--local-ranks-filter=0,1", "--nproc-per-node=2", "--monitor-interval=0.5",
             "--", "prog"});
  INFO(o.status());
  REQUIRE(o.ok());
  CHECK(o->min_nodes == 2);
  CHECK(o->max_nodes == 4);
  CHECK(o->join_timeout == absl::Seconds(5));
  CHECK(o->last_call_timeout == absl::Milliseconds(500));
  CHECK(o->close_timeout == absl::Seconds(2));
  CHECK(o->is_host == 0);
  CHECK(o->tee.For(5) == 3);
  CHECK(o->redirects.For(0) == 1);
  CHECK(o->redirects.For(1) == 2);
  CHECK(o->redirects.For(2) == 0);
  CHECK(o->local_ranks_filter == std::vector<int>{0, 1});
  CHECK(o->monitor_interval == absl::Milliseconds(500));
  CHECK(o->program == "prog");
}

TEST_CASE("options: defaults are torchrun's", "[launcher]") {
  absl::StatusOr<LaunchOptions> o = Parse({"prog"});
  REQUIRE(o.ok());
  CHECK(o->min_nodes == 1);
  CHECK(o->max_nodes == 1);
  CHECK(o->nproc_per_node == 1);
  CHECK(o->rdzv_backend == "static");
  CHECK(o->node_rank == 0);
  CHECK(o->max_restarts == 0);
  CHECK(o->restart_policy == RestartPolicy::kAll);
  CHECK(o->role == "default");
  CHECK(o->join_timeout == absl::Seconds(600));
}

TEST_CASE("options: --restart-policy all or replace, both spellings", "[launcher]") {
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, RestartPolicy>>{
           {{"--restart-policy=replace", "prog"}, RestartPolicy::kReplace},
           {{"--restart_policy", "replace", "--max-restarts=3", "prog"}, RestartPolicy::kReplace},
           {{"--restart-policy=all", "prog"}, RestartPolicy::kAll},
           {{"--restart-policy=replace", "--restart-policy=all", "prog"}, RestartPolicy::kAll},
           {{"--mpi", "--restart-policy=all", "prog"}, RestartPolicy::kAll},
       }) {
    absl::StatusOr<LaunchOptions> o = Parse(args);
    INFO(o.status());
    REQUIRE(o.ok());
    CHECK(o->restart_policy == expected);
  }
  // As every flag, from PET_RESTART_POLICY too (the command line wins).
  absl::StatusOr<LaunchOptions> pet = ParseLaunchOptions({"prog"}, MapEnv({{"PET_RESTART_POLICY", "replace"}}));
  REQUIRE(pet.ok());
  CHECK(pet->restart_policy == RestartPolicy::kReplace);
}

TEST_CASE("options: nproc-per-node cpu and auto count this machine", "[launcher]") {
  absl::StatusOr<LaunchOptions> cpu = Parse({"--nproc-per-node=cpu", "prog"});
  REQUIRE(cpu.ok());
  CHECK(cpu->nproc_per_node >= 1);
  absl::StatusOr<LaunchOptions> automatic = Parse({"--nproc-per-node=auto", "prog"});
  REQUIRE(automatic.ok());
  CHECK(automatic->nproc_per_node >= 1);
}

TEST_CASE("options: worker command lines", "[launcher]") {
  auto command = [](std::vector<std::string> args) { return WorkerCommand(*Parse(args)); };
  CHECK(command({"train.py", "--lr=1"}) == std::vector<std::string>{"python3", "-u", "train.py", "--lr=1"});
  CHECK(command({"-m", "pkg.train", "a"}) == std::vector<std::string>{"python3", "-u", "-m", "pkg.train", "a"});
  CHECK(command({"--run-path", "script"}) == std::vector<std::string>{"python3", "-u", "script"});
  CHECK(command({"--no-python", "train.py"}) == std::vector<std::string>{"train.py"});
  CHECK(command({"./train_mlp", "--check"}) == std::vector<std::string>{"./train_mlp", "--check"});
}

TEST_CASE("options: -h needs no program", "[launcher]") {
  absl::StatusOr<LaunchOptions> o = Parse({"-h"});
  REQUIRE(o.ok());
  CHECK(o->help);
  const std::string help = LaunchHelpText();
  for (const char* flag : {"--nnodes", "--nproc-per-node", "--node-rank", "--rdzv-backend", "--rdzv-endpoint",
                           "--rdzv-id", "--rdzv-conf", "--standalone", "--max-restarts", "--monitor-interval",
                           "--master-addr", "--master-port", "--role", "--local-addr", "--redirects", "--tee",
                           "--log-dir", "--local-ranks-filter", "--no-python", "--run-path", "--module", "--mpi",
                           "--print-env", "--restart-policy"}) {
    INFO(flag);
    CHECK(absl::StrContains(help, flag));
  }
}

TEST_CASE("options: --print-env needs no program and stops parsing", "[launcher]") {
  absl::StatusOr<LaunchOptions> o = Parse({"--print-env"});
  REQUIRE(o.ok());
  CHECK(o->print_env);
  CHECK_FALSE(o->help);
  o = Parse({"--nproc-per-node=2", "--print-env", "--bogus"});
  REQUIRE(o.ok());
  CHECK(o->print_env);
  // A bad flag before it is still refused.
  CHECK_FALSE(Parse({"--nproc-per-node=many", "--print-env"}).ok());
}

TEST_CASE("options: --rdzv-endpoint takes HOST, HOST:PORT and [ADDR]:PORT", "[launcher]") {
  for (const std::string endpoint : {"10.0.0.1", "node7:29400", "node7:1", "[::1]:65535", "[fe80::1]"}) {
    absl::StatusOr<LaunchOptions> o = Parse({"--rdzv-backend=c10d", "--nnodes=2", "--rdzv-endpoint", endpoint, "prog"});
    INFO(endpoint << " <- " << o.status());
    REQUIRE(o.ok());
    CHECK(o->rdzv_endpoint == endpoint);
  }
  // Static multi-node with the endpoint given: MASTER_PORT+1 is not needed.
  CHECK(Parse({"--nnodes=2", "--master-port=65535", "--rdzv-endpoint=h:29400", "prog"}).ok());
}

TEST_CASE("options: every bad flag or combination is one clear line", "[launcher]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus", "prog"}, "unrecognized argument: --bogus"},
      {{"--nproc-per-node=zero", "prog"}, "--nproc-per-node: invalid value 'zero'"},
      {{"--nproc-per-node=0", "prog"}, "must be at least 1"},
      {{"--nnodes=3:2", "prog"}, "MAX is smaller than MIN"},
      {{"--nnodes=1:2:3", "prog"}, "expected N or MIN:MAX"},
      {{"--rdzv-backend=etcd", "prog"}, "expected c10d or static"},
      {{"--rdzv-conf=colour=red", "prog"}, "unknown key"},
      {{"--rdzv-conf=join_timeout=soon", "prog"}, "not a non-negative number of seconds"},
      {{"--tee=7", "prog"}, "expected 0 (none)"},
      {{"--master-port=70000", "prog"}, "not a port"},
      {{"--max-restarts"}, "expected a value"},
      {{"--standalone=1", "prog"}, "takes no value"},
      {{"--nproc-per-node=2"}, "required: program"},
      {{"--no-python", "-m", "prog"}, "--no-python cannot be used with --module"},
      {{"--standalone", "--nnodes=2", "prog"}, "--standalone runs one node"},
      {{"--nnodes=1:2", "prog"}, "needs --rdzv-backend=c10d"},
      {{"--nnodes=2", "--node-rank=2", "prog"}, "--node-rank 2 is out of range"},
      {{"--rdzv-backend=c10d", "--nnodes=2", "prog"}, "needs --rdzv-endpoint"},
      {{"--rdzv-backend=c10d", "--node-rank=1", "--rdzv-endpoint=h", "--nnodes=2", "prog"},
       "--node-rank is for --rdzv-backend=static"},
      {{"--nproc-per-node=2", "--local-ranks-filter=3", "prog"}, "not a local rank"},
      {{"--mpi", "--nnodes=2", "prog"}, "--mpi starts one node's workers"},
      {{"--restart-policy=foo", "prog"}, "--restart-policy: invalid value 'foo': expected all or replace"},
      {{"--restart-policy=", "prog"}, "--restart-policy: invalid value ''"},
      {{"--restart-policy"}, "expected a value"},
      {{"--mpi", "--restart-policy=replace", "prog"}, "mpirun cannot replace one rank"},
      {{"--restart-policy=replace", "--mpi", "prog"}, "mpirun cannot replace one rank"},
      {{"--rdzv-endpoint=host:99999", "prog"}, "--rdzv-endpoint: invalid value 'host:99999'"},
      {{"--rdzv-endpoint=host:abc", "prog"}, "--rdzv-endpoint: invalid value 'host:abc'"},
      {{"--rdzv-endpoint", ":29400", "prog"}, "--rdzv-endpoint: invalid value ':29400'"},
      {{"--rdzv-endpoint=[::1", "prog"}, "--rdzv-endpoint: invalid value '[::1'"},
      {{"--rdzv-backend=c10d", "--nnodes=2", "--rdzv-endpoint=h:-1", "prog"}, "--rdzv-endpoint: invalid value"},
      {{"--nnodes=2", "--master-port=65535", "prog"}, "leaves no port for the store"},
  };
  for (const auto& [args, expected] : cases) {
    absl::StatusOr<LaunchOptions> o = Parse(args);
    INFO(expected << " <- " << o.status());
    REQUIRE_FALSE(o.ok());
    CHECK(absl::IsInvalidArgument(o.status()));
    CHECK(absl::StrContains(o.status().message(), expected));
    CHECK_FALSE(absl::StrContains(o.status().message(), "\n"));
  }
}

}  // namespace
}  // namespace braid
