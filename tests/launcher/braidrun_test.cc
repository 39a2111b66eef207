// braidrun end to end: the real binary, real worker processes (probe_worker),
// real signals. One node with 1-8 workers; two and three "nodes" as agents on
// 127.0.0.1-3 forming one world through c10d rendezvous; two static nodes;
// restarts; the failure report; no orphans after SIGTERM or SIGKILL to the
// agent; a node that never arrives; a busy --master-port; a node joining an
// elastic job; log files; a PyTorch DDP script unchanged (when Debian's
// python3-torch is installed); --mpi through a real mpirun.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/socket.h"
#include "catch2/catch.hpp"
#include "tests/harness/mpi_env.h"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"

namespace braid {
namespace {

const absl::Duration kTimeout = absl::Seconds(60);

ProcessExit Run(std::vector<std::string> flags, std::vector<std::string> probe_args, const std::string& tag) {
  return RunProcess(Braidrun(std::move(flags), std::move(probe_args)), {}, tag, kTimeout, kWorkerContract);
}

std::string MakeDir(const std::string& name) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

std::vector<int> WorkerCounts() {
  const char* matrix = std::getenv("BRAID_TEST_MATRIX");
  if (matrix != nullptr && std::string(matrix) == "full") return {1, 2, 3, 4, 5, 6, 7, 8};
  return {1, 2, 4};
}

TEST_CASE("braidrun: one node, N workers, the contract and a checked all-reduce", "[launcher]") {
  for (int n : WorkerCounts()) {
    const ProcessExit exit = Run({"--standalone", absl::StrCat("--nproc-per-node=", n)}, {"--env", "--allreduce"},
                                 absl::StrCat("one_node_", n));
    INFO(Dump(exit));
    REQUIRE(exit.code == 0);
    for (int r = 0; r < n; ++r) {
      CHECK(absl::StrContains(exit.out, absl::StrCat("[rank ", r, "]: all-reduce ok: rank ", r, " of ", n, " ")));
      CHECK(absl::StrContains(exit.out, absl::StrCat("[rank ", r, "]: LOCAL_RANK=", r, "\n")));
      CHECK(absl::StrContains(exit.out, absl::StrCat("[rank ", r, "]: WORLD_SIZE=", n, "\n")));
    }
    CHECK(absl::StrContains(exit.out, "[rank 0]: TORCHELASTIC_RESTART_COUNT=0\n"));
    CHECK(absl::StrContains(exit.out, "[rank 0]: OMP_NUM_THREADS=1\n"));
    CHECK(absl::StrContains(exit.out, "[rank 0]: ROLE_NAME=default\n"));
    CHECK(absl::StrContains(exit.out, "[rank 0]: TORCHELASTIC_USE_AGENT_STORE=False\n"));
  }
}

TEST_CASE("braidrun: two and three nodes on 127.0.0.x form one world through c10d", "[launcher]") {
  for (int nodes : {2, 3}) {
    const uint16_t port = UnusedPort();
    std::vector<pid_t> pids;
    std::vector<std::string> tags;
    for (int i = 1; i <= nodes; ++i) {
      tags.push_back(absl::StrCat("nodes_", nodes, "_", i));
      pids.push_back(Spawn(Braidrun({absl::StrCat("--nnodes=", nodes), "--nproc-per-node=2", "--rdzv-backend=c10d",
                                     absl::StrCat("--rdzv-endpoint=127.0.0.1:", port), "--rdzv-id=multi",
                                     absl::StrCat("--local-addr=127.0.0.", i)},
                                    {"--env", "--allreduce"}),
                           {{"BRAID_JOB_SECRET", "multi-node-secret"}}, tags.back(), kWorkerContract));
    }
    const std::vector<ProcessExit> exits = WaitAll(pids, tags, DeadlineIn(kTimeout));
    std::string all_out;
    for (const ProcessExit& exit : exits) {
      INFO(Dump(exit));
      CHECK(exit.code == 0);
      all_out += exit.out;
    }
    const int world = 2 * nodes;
    for (int r = 0; r < world; ++r) {
      INFO(all_out);
      CHECK(absl::StrContains(all_out, absl::StrCat("[rank ", r, "]: all-reduce ok: rank ", r, " of ", world, " ")));
      CHECK(absl::StrContains(all_out, absl::StrCat("[rank ", r, "]: GROUP_RANK=", r / 2, "\n")));
    }
    CHECK(absl::StrContains(all_out, absl::StrCat("[rank 0]: GROUP_WORLD_SIZE=", nodes, "\n")));
  }
}

TEST_CASE("braidrun: static backend, two nodes given --node-rank, store on MASTER_PORT+1", "[launcher]") {
  const uint16_t master_port = UnusedPortPair();
  std::vector<pid_t> pids;
  std::vector<std::string> tags;
  for (int node : {1, 0}) {  // node 1 first: it waits for node 0's store
    tags.push_back(absl::StrCat("static_", node));
    pids.push_back(Spawn(Braidrun({"--nnodes=2", "--nproc-per-node=2", absl::StrCat("--node-rank=", node),
                                   "--master-addr=127.0.0.1", absl::StrCat("--master-port=", master_port),
                                   "--rdzv-id=static"},
                                  {"--env", "--allreduce"}),
                         {{"BRAID_JOB_SECRET", "static-secret"}}, tags.back(), kWorkerContract));
  }
  const std::string all_out = WaitForJob(pids, tags, kTimeout);
  CheckTwoByTwoJob(all_out, master_port);
  INFO(all_out);
  CHECK(absl::StrContains(all_out, absl::StrCat("[rank 3]: BRAID_STORE_ADDR=127.0.0.1:", master_port + 1, "\n")));
}

TEST_CASE("braidrun: a worker failing in attempt 0 succeeds after one restart", "[launcher]") {
  const ProcessExit exit = Run({"--standalone", "--nproc-per-node=3", "--max-restarts=1"},
                               {"--allreduce", "--fail-rank=1", "--exit-code=3"}, "restart_once");
  INFO(Dump(exit));
  REQUIRE(exit.code == 0);
  CHECK(absl::StrContains(exit.err, "rank 1 failed: exit code 3; restarting the workers (restart 1 of 1)"));
  for (int r = 0; r < 3; ++r) {
    CHECK(absl::StrContains(exit.out, absl::StrCat("[rank ", r, "]: all-reduce ok: rank ", r, " of 3 (attempt 1)")));
  }
}

TEST_CASE("braidrun: restarts run out -> one report naming the first failure, exit 1", "[launcher]") {
  SECTION("exit code and the last lines of output") {
    const ProcessExit exit = Run({"--standalone", "--nproc-per-node=2", "--max-restarts=1"},
                                 {"--fail-rank=1", "--fail-attempt=all", "--exit-code=7"}, "exhausted");
    INFO(Dump(exit));
    REQUIRE(exit.code == 1);
    CHECK(absl::StrContains(exit.err, "braidrun: job failed"));
    CHECK(absl::StrContains(exit.err, "attempt 1, restarts used 1 of 1, world size 2"));
    CHECK(absl::StrContains(exit.err, "first failure: rank 1 (local rank 1) on "));
    CHECK(absl::StrContains(exit.err, ": exit code 7 at "));
    CHECK(absl::StrContains(exit.err, "last output of rank 1:\n  probe_worker: rank 1 failing on purpose in attempt 1"));
  }
  SECTION("a signal, and the worker's error file") {
    const ProcessExit exit = Run({"--standalone", "--nproc-per-node=2"},
                                 {"--allreduce", "--fail-rank=0", "--exit-code=-11", "--error-file"}, "signal");
    INFO(Dump(exit));
    REQUIRE(exit.code == 1);
    CHECK(absl::StrContains(exit.err, "first failure: rank 0 (local rank 0)"));
    CHECK(absl::StrContains(exit.err, "signal SIGSEGV (11)"));
    CHECK(absl::StrContains(exit.err, "ProbeError: rank 0 gave up"));
  }
}

TEST_CASE("braidrun: SIGTERM or SIGKILL to the agent leaves no worker behind", "[launcher]") {
  for (int sig : {SIGTERM, SIGINT, SIGKILL}) {
    const std::string dir = MakeDir(absl::StrCat("pids_", sig));
    const std::string tag = absl::StrCat("orphans_", sig);
    const pid_t agent = Spawn(Braidrun({"--standalone", "--nproc-per-node=3"}, {"--pid-dir=" + dir, "--sleep=60"}),
                              {}, tag, kWorkerContract);
    REQUIRE(agent > 0);
    std::vector<pid_t> workers;
    const Deadline deadline = DeadlineIn(absl::Seconds(20));
    while (workers.size() < 3 && !Expired(deadline)) {
      workers.clear();
      for (int r = 0; r < 3; ++r) {
        const std::string pid = ReadFile(absl::StrCat(dir, "/", r, ".pid"));
        if (!pid.empty()) workers.push_back(std::atoi(pid.c_str()));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    REQUIRE(workers.size() == 3);
    kill(agent, sig);
    const ProcessExit exit = WaitAll({agent}, {tag}, DeadlineIn(absl::Seconds(20)))[0];
    INFO(Dump(exit));
    CHECK(exit.code == (sig == SIGKILL ? -SIGKILL : 128 + sig));
    // PR_SET_PDEATHSIG fires asynchronously after a SIGKILLed agent: allow a moment.
    const Deadline gone = DeadlineIn(absl::Seconds(5));
    for (pid_t pid : workers) {
      while (Alive(pid) && !Expired(gone)) absl::SleepFor(absl::Milliseconds(10));
      CHECK_FALSE(Alive(pid));
    }
  }
}

TEST_CASE("braidrun: a node that never arrives is a clear timeout", "[launcher]") {
  const ProcessExit exit = Run({"--nnodes=2", "--rdzv-backend=c10d",
                                absl::StrCat("--rdzv-endpoint=127.0.0.1:", UnusedPort()),
                                "--rdzv-conf=join_timeout=1"},
                               {"--allreduce"}, "never_arrives");
  INFO(Dump(exit));
  CHECK(exit.code == 1);
  CHECK(absl::StrContains(exit.err, "timed out after 1s (--rdzv-conf join_timeout) with 1 of 2 required nodes"));
}

TEST_CASE("braidrun: a busy --master-port is a clear error", "[launcher]") {
  absl::StatusOr<TcpListener> busy = TcpListener::Listen("127.0.0.1", 0);
  REQUIRE(busy.ok());
  const ProcessExit exit =
      Run({"--standalone", absl::StrCat("--master-port=", busy->port())}, {"--allreduce"}, "busy_port");
  INFO(Dump(exit));
  CHECK(exit.code == 1);
  CHECK(absl::StrContains(exit.err, absl::StrCat("--master-port ", busy->port(), " is already in use on this host")));
}

TEST_CASE("braidrun: static rendezvous whose store port is taken fails at once, naming it", "[launcher]") {
  // Something else holds MASTER_PORT + 1 on node 0's address: node 0 cannot
  // host the store, and node 1 would talk to that program instead.
  const uint16_t master_port = UnusedPortPair();
  absl::StatusOr<TcpListener> taken = TcpListener::Listen("127.0.0.1", master_port + 1);
  REQUIRE(taken.ok());
  auto flags = [&](int node) {
    return std::vector<std::string>{"--nnodes=2", "--nproc-per-node=1", absl::StrCat("--node-rank=", node),
                                    "--master-addr=127.0.0.1", absl::StrCat("--master-port=", master_port),
                                    "--rdzv-id=taken", "--rdzv-conf=join_timeout=5"};
  };
  const absl::Time start = absl::Now();
  const ProcessExit node0 = RunProcess(Braidrun(flags(0), {"--allreduce"}), {{"BRAID_JOB_SECRET", "taken"}},
                                       "taken_port_0", kTimeout, kWorkerContract);
  INFO(Dump(node0));
  CHECK(node0.code == 1);
  CHECK(absl::StrContains(node0.err, absl::StrCat("node 0 hosts the rendezvous store (static rendezvous) on 127.0.0.1:",
                                                  master_port + 1, ", and cannot:")));
  CHECK(absl::Now() - start < absl::Seconds(5));
  // Node 1 reaches the port, where nothing answers as a store: an error by
  // the rendezvous deadline (join_timeout), not a silent wait.
  const ProcessExit node1 = RunProcess(Braidrun(flags(1), {"--allreduce"}), {{"BRAID_JOB_SECRET", "taken"}},
                                       "taken_port_1", kTimeout, kWorkerContract);
  INFO(Dump(node1));
  CHECK(node1.code == 1);
  CHECK(absl::StrContains(node1.err, absl::StrCat("does not answer as braid's store")));
}

TEST_CASE("braidrun: a node joining an elastic job restarts it bigger, no restart spent", "[launcher]") {
  const uint16_t port = UnusedPort();
  auto flags = [&](int i) {
    return std::vector<std::string>{"--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                                    absl::StrCat("--rdzv-endpoint=127.0.0.1:", port), "--rdzv-id=elastic",
                                    "--rdzv-conf=last_call_timeout=0.2", absl::StrCat("--local-addr=127.0.0.", i)};
  };
  const pid_t first = Spawn(Braidrun(flags(1), {"--wait-world=2", "--allreduce"}), {}, "elastic_1", kWorkerContract);
  absl::SleepFor(absl::Milliseconds(800));  // the first round closes with one node
  const pid_t second = Spawn(Braidrun(flags(2), {"--wait-world=2", "--allreduce"}), {}, "elastic_2", kWorkerContract);
  const std::vector<ProcessExit> exits = WaitAll({first, second}, {"elastic_1", "elastic_2"}, DeadlineIn(kTimeout));
  INFO(Dump(exits[0]) << Dump(exits[1]));
  CHECK(exits[0].code == 0);
  CHECK(exits[1].code == 0);
  CHECK(absl::StrContains(exits[0].out, "waiting for a world of 2 (have 1)"));
  CHECK(absl::StrContains(exits[0].err, "a node is waiting to join: restarting the group"));
  CHECK(absl::StrContains(exits[0].out + exits[1].out, "all-reduce ok: rank 0 of 2 (attempt 0)"));
  CHECK(absl::StrContains(exits[0].out + exits[1].out, "all-reduce ok: rank 1 of 2 (attempt 0)"));
}

TEST_CASE("braidrun: --tee, --redirects and --local-ranks-filter", "[launcher]") {
  const std::string logs = MakeDir("logs");
  const ProcessExit tee = Run({"--nproc-per-node=2", "--rdzv-id=teejob", "--tee=3", "--log-dir=" + logs},
                              {"--allreduce"}, "tee");
  INFO(Dump(tee));
  REQUIRE(tee.code == 0);
  CHECK(absl::StrContains(tee.out, "[rank 1]: all-reduce ok"));
  CHECK(absl::StrContains(ReadFile(logs + "/teejob/attempt_0/1/stdout.log"), "all-reduce ok: rank 1 of 2"));
  CHECK(ReadFile(logs + "/teejob/attempt_0/0/stderr.log").empty());

  const ProcessExit redirected =
      Run({"--nproc-per-node=2", "--rdzv-id=rjob", "--redirects=1", "--log-dir=" + logs}, {"--allreduce"}, "redir");
  INFO(Dump(redirected));
  REQUIRE(redirected.code == 0);
  CHECK_FALSE(absl::StrContains(redirected.out, "all-reduce ok"));
  CHECK(absl::StrContains(ReadFile(logs + "/rjob/attempt_0/0/stdout.log"), "all-reduce ok: rank 0 of 2"));

  const ProcessExit filtered = Run({"--nproc-per-node=2", "--local-ranks-filter=1"}, {"--allreduce"}, "filter");
  INFO(Dump(filtered));
  REQUIRE(filtered.code == 0);
  CHECK(absl::StrContains(filtered.out, "[rank 1]: all-reduce ok"));
  CHECK_FALSE(absl::StrContains(filtered.out, "[rank 0]:"));
}

TEST_CASE("braidrun: --mpi starts the workers through a real mpirun with the same contract", "[launcher][mpi]") {
  const ProcessExit exit =
      RunProcess(Braidrun({"--standalone", "--mpi", "--nproc-per-node=3"}, {"--env", "--allreduce"}),
                 MpiJobEnv(), "mpi", kTimeout, kWorkerContract);
  INFO(Dump(exit));
  REQUIRE(exit.code == 0);
  for (int r = 0; r < 3; ++r) {
    CHECK(absl::StrContains(exit.out, absl::StrCat("[mpirun]: all-reduce ok: rank ", r, " of 3 ")));
    CHECK(absl::StrContains(exit.out, absl::StrCat("[mpirun]: RANK=", r, "\n")));
  }
  CHECK(absl::StrContains(exit.out, "[mpirun]: WORLD_SIZE=3\n"));
}

TEST_CASE("braidrun: a bad flag is one line and exit code 2", "[launcher]") {
  const ProcessExit exit = Run({"--nproc-per-node=many"}, {}, "bad_flag");
  INFO(Dump(exit));
  CHECK(exit.code == 2);
  CHECK(exit.err == "braidrun: error: argument --nproc-per-node: invalid value 'many': not an integer "
                    "(braidrun -h lists the flags)\n");
}

TEST_CASE("braidrun: a bad --rdzv-endpoint is exit 2 and one line, before anything else", "[launcher]") {
  for (const std::string endpoint : {"host:99999", "host:abc"}) {
    INFO(endpoint);
    // Several nodes and no job secret: the agent used to warn about the secret first, then fail with exit 1.
    const ProcessExit exit =
        Run({"--rdzv-backend=c10d", "--nnodes=2", absl::StrCat("--rdzv-endpoint=", endpoint)}, {}, "bad_endpoint");
    INFO(Dump(exit));
    CHECK(exit.code == 2);
    CHECK(exit.out.empty());
    CHECK(absl::StartsWith(exit.err, "braidrun: error: argument --rdzv-endpoint: invalid value '" + endpoint + "'"));
    CHECK(std::count(exit.err.begin(), exit.err.end(), '\n') == 1);
    CHECK(absl::EndsWith(exit.err, "\n"));
  }
}

TEST_CASE("braidrun --print-env: knobs of every layer, with values, defaults and help", "[launcher]") {
  const ProcessExit exit = RunProcess({Runfile("launcher/braidrun"), "--print-env"}, {{"BRAID_ALGO", "ring"}},
                                      "print_env", kTimeout, {"BRAID_TRANSPORT", "BRAID_TIMEOUT_SEC"});
  INFO(Dump(exit));
  CHECK(exit.code == 0);
  CHECK(exit.err.empty());
  const std::string out = "\n" + exit.out;  // every knob's line starts after a newline
  // collectives/ (set here), runtime/ (unset), base/ and launcher/: braidrun links none of the first two.
  CHECK(absl::StrContains(out, "\nBRAID_ALGO=ring\n    All-reduce algorithm: auto, ring, tree, double-tree, rhd"));
  CHECK(absl::StrContains(out, "\nBRAID_TRANSPORT (unset, default auto)\n    Transport: auto (mpi under mpirun"));
  CHECK(absl::StrContains(out, "\nBRAID_TIMEOUT_SEC (unset, default 600)\n    Deadline for every collective"));
  CHECK(absl::StrContains(out, "\nBRAID_JOB_SECRET_FILE (unset, no default)\n"));
  // The grace before SIGKILL is --shutdown-timeout now: one way to set it.
  CHECK_FALSE(absl::StrContains(out, "BRAID_STOP_GRACE_SEC"));
  CHECK(absl::StrContains(out, "\nBRAID_TIMELINE (unset, no default)\n"));
}

TEST_CASE("braidrun: a PyTorch DDP script runs unchanged (env:// init, gloo)", "[launcher][torch]") {
  // The project's virtualenv (tools/setup.sh; @torch//:python runs it) first
  // on PATH: braidrun runs a .py program with `python3`.
  const std::string venv_bin = Runfile("../torch/bin");
  REQUIRE(RunProcess({venv_bin + "/python3", "-c", "import torch.distributed"}, {}, "torch_probe", kTimeout).code == 0);
  const char* path = std::getenv("PATH");
  const ProcessExit exit = RunProcess(
      {Runfile("launcher/braidrun"), "--standalone", "--nproc-per-node=2", Runfile("tests/launcher/ddp_check.py")},
      {{"PATH", absl::StrCat(venv_bin, ":", path != nullptr ? path : "")}}, "ddp", absl::Seconds(120),
      kWorkerContract);
  INFO(Dump(exit));
  REQUIRE(exit.code == 0);
  CHECK(absl::StrContains(exit.out, "[rank 0]: ddp ok: rank 0 of 2"));
  CHECK(absl::StrContains(exit.out, "[rank 1]: ddp ok: rank 1 of 2"));
}

}  // namespace
}  // namespace braid
