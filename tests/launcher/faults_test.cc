// Things breaking on purpose during a real braidrun job (issue 8's fault
// injection): strangers, garbage and wrong secrets at the job's store while
// the workers all-reduce; the agent of one "node" SIGKILLed in a two-node
// job; a rank issuing a different count; a worker SIGKILLed in the middle of train_mlp, which must resume from
// its checkpoint and end bit-identical to an uninterrupted run. Real
// processes, real sockets, real signals.
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/auth.h"
#include "base/fd.h"
#include "base/socket.h"
#include "catch2/catch.hpp"
#include "store/tcp_store.h"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"

namespace braid {
namespace {

TEST_CASE("faults: strangers, garbage and wrong secrets at the store during a job are refused; the job is unaffected",
          "[faults][security]") {
  for (const char* transport : {"shm", "tcp"}) {
    const std::string tag = absl::StrCat("strangers_", transport);
    // Six verified all-reduces 0.3 s apart, while the test attacks the store.
    const pid_t agent = Spawn(Braidrun({"--standalone", "--nproc-per-node=2"},
                                       {"--env", "--allreduce", "--rounds=6", "--round-sleep=0.3"}),
                              {{"BRAID_TRANSPORT", transport}}, tag, kWorkerContract);
    REQUIRE(agent > 0);
    const std::string address = WaitForVariable(tag, "BRAID_STORE_ADDR");
    const std::string secret = WaitForVariable(tag, "BRAID_JOB_SECRET");
    INFO(ReadFile(absl::StrCat(TestTempDir(), "/", tag, ".err")));
    REQUIRE_FALSE(address.empty());
    CHECK(secret.size() == 64);  // braidrun made one: 32 random bytes, hex
    absl::StatusOr<HostPort> store = ParseHostPort(address, 0);
    REQUIRE(store.ok());

    // No secret: refused at the first request (Connect's own).
    CHECK(TcpStore::Connect(*store, DeadlineIn(absl::Seconds(5))).status().code() ==
          absl::StatusCode::kUnauthenticated);
    // A wrong secret: refused in the handshake.
    CHECK(TcpStore::Connect(*store, DeadlineIn(absl::Seconds(5)), JobSecret("guess")).status().code() ==
          absl::StatusCode::kPermissionDenied);
    // Garbage and a truncated frame.
    for (const std::string& bytes : {std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), std::string("\x40\x00\x00\x00\x01", 5)}) {
      absl::StatusOr<UniqueFd> raw = ConnectTcp(*store, DeadlineIn(absl::Seconds(5)));
      REQUIRE(raw.ok());
      CHECK(SendAll(raw->get(), absl::MakeConstSpan(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
                    DeadlineIn(absl::Seconds(5)))
                .ok());
      ::shutdown(raw->get(), SHUT_WR);
    }
    // The right secret still gets in (a member of the job could).
    absl::StatusOr<std::unique_ptr<TcpStore>> member =
        TcpStore::Connect(*store, DeadlineIn(absl::Seconds(5)), JobSecret(secret));
    CHECK(member.ok());

    const ProcessExit exit = WaitAll({agent}, {tag}, DeadlineIn(absl::Seconds(60)))[0];
    INFO(Dump(exit));
    CHECK(exit.code == 0);
    CHECK(absl::StrContains(exit.out, "[rank 0]: all-reduce ok: rank 0 of 2"));
    CHECK(absl::StrContains(exit.out, "[rank 1]: all-reduce ok: rank 1 of 2"));
    // The agent hosts the store: its log names each refusal.
    CHECK(absl::StrContains(exit.err, "before the handshake"));
    CHECK(absl::StrContains(exit.err, "store server on port"));
  }
}

TEST_CASE("faults: SIGKILL to one node's agent: the other node stops and fails clearly within the rendezvous timeout",
          "[faults]") {
  const uint16_t port = UnusedPort();
  auto flags = [&](int i) {
    return std::vector<std::string>{"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                                    absl::StrCat("--rdzv-endpoint=127.0.0.1:", port), "--rdzv-id=killagent",
                                    "--max-restarts=1", "--rdzv-conf=join_timeout=3",
                                    absl::StrCat("--local-addr=127.0.0.", i)};
  };
  const std::map<std::string, std::string> env = {{"BRAID_JOB_SECRET", "two-node-secret"}};
  const pid_t survivor = Spawn(Braidrun(flags(1), {"--allreduce", "--rounds=100", "--round-sleep=0.1"}), env,
                               "killagent_1", kWorkerContract);
  const pid_t victim = Spawn(Braidrun(flags(2), {"--allreduce", "--rounds=100", "--round-sleep=0.1"}), env,
                             "killagent_2", kWorkerContract);
  // Let the job run a little (100 rounds take 10 s), then kill node 2's agent outright.
  absl::SleepFor(absl::Seconds(2));
  const absl::Time killed = absl::Now();
  kill(victim, SIGKILL);
  const std::vector<ProcessExit> exits =
      WaitAll({survivor, victim}, {"killagent_1", "killagent_2"}, DeadlineIn(absl::Seconds(60)));
  const absl::Duration took = absl::Now() - killed;
  INFO(Dump(exits[0]) << "\n(took " << took << ")");
  CHECK(exits[1].code == -SIGKILL);
  CHECK(exits[0].code == 1);
  // Its worker saw the dead peer, the agent restarted once and the new round
  // never filled: a timeout naming the missing node, well within the deadline.
  CHECK(absl::StrContains(exits[0].err, "restarting the workers (restart 1 of 1)"));
  CHECK(absl::StrContains(exits[0].err, "with 1 of 2 required nodes"));
  CHECK(took < absl::Seconds(20));
}

TEST_CASE("faults: SIGTERM to an agent waiting in rendezvous ends it at once with 128+SIGTERM", "[faults]") {
  const std::vector<std::string> flags = {"--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                                          absl::StrCat("--rdzv-endpoint=127.0.0.1:", UnusedPort()),
                                          "--rdzv-id=termwait", "--rdzv-conf=join_timeout=60"};
  const pid_t agent = Spawn(Braidrun(flags, {"--allreduce"}), {{"BRAID_JOB_SECRET", "term-secret"}}, "termwait",
                            kWorkerContract);
  // Alone, it waits for the second node (60 s) in rendezvous.
  absl::SleepFor(absl::Milliseconds(1500));
  const absl::Time sent = absl::Now();
  kill(agent, SIGTERM);
  const std::vector<ProcessExit> exits = WaitAll({agent}, {"termwait"}, DeadlineIn(absl::Seconds(30)));
  const absl::Duration took = absl::Now() - sent;
  INFO(Dump(exits[0]) << "\n(took " << took << ")");
  CHECK(exits[0].code == 128 + SIGTERM);
  CHECK(absl::StrContains(exits[0].err, "received SIGTERM"));
  CHECK(took < absl::Seconds(3));
}

// braidrun, one worker, --restart-policy=replace with 0.3 s heartbeats,
// running train_mlp --recovery=in-place --check for 4 epochs; `rdzv`: how it
// meets the other nodes.
std::vector<std::string> InPlaceNode(const std::vector<std::string>& rdzv) {
  std::vector<std::string> argv = {Runfile("launcher/braidrun"), "--nproc-per-node=1", "--restart-policy=replace",
                                   "--max-restarts=2", "--rdzv-conf=keep_alive_interval=0.3,keep_alive_max_attempt=3"};
  argv.insert(argv.end(), rdzv.begin(), rdzv.end());
  argv.insert(argv.end(), {Runfile("examples/train_mlp"), "--recovery=in-place", "--check", "--epochs=4",
                           "--samples=2048", "--batch-size=16", "--step-sleep-ms=30"});
  return argv;
}

const std::map<std::string, std::string> kInPlaceEnv = {{"BRAID_JOB_SECRET", "in-place-secret"},
                                                        {"BRAID_TIMEOUT_SEC", "20"}};

// Waits until one of the jobs of `tags` has printed `text`: 240 s at most,
// for three agents and their trainers under TSan on 2 cores take minutes to start.
bool AwaitOutput(const std::vector<std::string>& tags, const std::string& text) {
  const Deadline deadline = DeadlineIn(absl::Seconds(240));
  while (!Expired(deadline)) {
    for (const std::string& tag : tags) {
      if (absl::StrContains(ReadFile(TestTempDir() + "/" + tag + ".out"), text)) return true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST_CASE("faults: an agent stopped past its heartbeats is lost: the others go on in place, it stops its workers",
          "[faults]") {
  const uint16_t port = UnusedPort();
  const std::vector<std::string> tags = {"fence_1", "fence_2", "fence_3"};
  std::vector<pid_t> agents;
  for (int i = 1; i <= 3; ++i) {
    agents.push_back(Spawn(InPlaceNode({"--nnodes=3", "--rdzv-backend=c10d",
                                        absl::StrCat("--rdzv-endpoint=127.0.0.1:", port), "--rdzv-id=fence",
                                        absl::StrCat("--local-addr=127.0.0.", i)}),
                           kInPlaceEnv, tags[static_cast<size_t>(i - 1)], kWorkerContract));
  }
  // Training has begun when rank 0 (on whichever node) has said so.
  REQUIRE(AwaitOutput(tags, "in-place recovery"));
  absl::SleepFor(absl::Seconds(1));
  // Node 3's agent (127.0.0.1 hosts the store) stops for 3 s, ten keep-alive intervals.
  REQUIRE(kill(agents[2], SIGSTOP) == 0);
  absl::SleepFor(absl::Seconds(3));
  REQUIRE(kill(agents[2], SIGCONT) == 0);
  const std::vector<ProcessExit> exits = WaitAll(agents, tags, DeadlineIn(absl::Seconds(300)));
  INFO(Dump(exits[0]) << "\n" << Dump(exits[1]) << "\n" << Dump(exits[2]));
  CHECK(exits[0].code == 0);
  CHECK(exits[1].code == 0);
  CHECK(exits[2].code == 1);
  CHECK(absl::StrContains(exits[2].err, "declared this node"));
  const std::string survivors = exits[0].out + exits[1].out;
  CHECK(absl::StrContains(survivors, "3 -> 2 ranks"));
  CHECK(absl::StrContains(survivors, "check: PASSED"));
  CHECK(absl::StrContains(exits[0].err + exits[1].err, "missed 3 heartbeats"));
}

TEST_CASE("faults: static rendezvous: a node killed mid-training is lost; an agent with its --node-rank takes its place",
          "[faults]") {
  const uint16_t master_port = UnusedPortPair();  // the store on master_port + 1, hosted by node 0
  auto node = [&](int rank) {
    return InPlaceNode({"--nnodes=3", "--rdzv-backend=static", absl::StrCat("--node-rank=", rank),
                        "--master-addr=127.0.0.1", absl::StrCat("--master-port=", master_port), "--rdzv-id=static"});
  };
  std::vector<std::string> tags = {"static_0", "static_1", "static_2"};
  std::vector<pid_t> agents;
  for (int rank = 0; rank < 3; ++rank) {
    agents.push_back(Spawn(node(rank), kInPlaceEnv, tags[static_cast<size_t>(rank)], kWorkerContract));
  }
  REQUIRE(AwaitOutput({"static_0"}, "in-place recovery"));
  absl::SleepFor(absl::Seconds(1));
  REQUIRE(kill(agents[2], SIGKILL) == 0);  // its worker dies with it
  REQUIRE(AwaitOutput({"static_0"}, "3 -> 2 ranks"));
  tags.push_back("static_2_back");
  agents.push_back(Spawn(node(2), kInPlaceEnv, tags.back(), kWorkerContract));
  const std::vector<ProcessExit> exits = WaitAll(agents, tags, DeadlineIn(absl::Seconds(300)));
  INFO(Dump(exits[0]) << "\n" << Dump(exits[1]) << "\n" << Dump(exits[3]));
  CHECK(exits[0].code == 0);
  CHECK(exits[1].code == 0);
  CHECK(exits[2].code == -SIGKILL);
  CHECK(exits[3].code == 0);
  CHECK(absl::StrContains(exits[3].err, "this agent takes its place"));
  CHECK(absl::StrContains(exits[3].out, "joined the running group"));
  CHECK(absl::StrContains(exits[0].out, "check: PASSED"));
}

// The pid of the child of `agent` whose environment has RANK=`rank`.
pid_t WorkerPid(pid_t agent, int rank) {
  const std::string children =
      ReadFile(absl::StrCat("/proc/", agent, "/task/", agent, "/children"));
  for (absl::string_view pid_text : absl::StrSplit(children, ' ', absl::SkipEmpty())) {
    const std::string environ = ReadFile(absl::StrCat("/proc/", pid_text, "/environ"));
    for (absl::string_view entry : absl::StrSplit(environ, '\0')) {
      if (entry == absl::StrCat("RANK=", rank)) return std::atoi(std::string(pid_text).c_str());
    }
  }
  return -1;
}

std::string FinalHash(const std::string& out) {
  const size_t at = out.find("final parameters: hash ");
  return at == std::string::npos ? "" : out.substr(at, 39);
}

TEST_CASE("faults: kill -9 a worker mid-training: restart, resume from the checkpoint, same final parameters",
          "[faults]") {
  const std::vector<std::string> train = {Runfile("examples/train_mlp"), "--epochs=6", "--samples=4096"};
  auto run = [&](const std::string& dir) {
    std::vector<std::string> argv = {Runfile("launcher/braidrun"), "--standalone", "--nproc-per-node=2",
                                     "--max-restarts=1"};
    argv.insert(argv.end(), train.begin(), train.end());
    argv.push_back("--checkpoint-dir=" + dir);
    return argv;
  };
  // The uninterrupted run.
  const ProcessExit clean = RunProcess(run(TestTempDir() + "/ckpt_clean"), {}, "train_clean", absl::Seconds(120), kWorkerContract);
  INFO(Dump(clean));
  REQUIRE(clean.code == 0);
  const std::string expected = FinalHash(clean.out);
  REQUIRE_FALSE(expected.empty());

  // The same run, rank 1 SIGKILLed once epoch 2's checkpoint is written.
  const pid_t agent = Spawn(run(TestTempDir() + "/ckpt_killed"), {}, "train_killed", kWorkerContract);
  const Deadline deadline = DeadlineIn(absl::Seconds(60));
  while (!absl::StrContains(ReadFile(TestTempDir() + "/train_killed.out"), "epoch 2/6") && !Expired(deadline)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const pid_t victim = WorkerPid(agent, 1);
  REQUIRE(victim > 0);
  const absl::Time killed = absl::Now();
  REQUIRE(kill(victim, SIGKILL) == 0);
  // The survivors fail and the group restarts well within 10 s.
  while (!absl::StrContains(ReadFile(TestTempDir() + "/train_killed.err"), "restarting the workers") &&
         absl::Now() - killed < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const absl::Duration to_restart = absl::Now() - killed;
  CHECK(to_restart < absl::Seconds(10));
  const ProcessExit resumed = WaitAll({agent}, {"train_killed"}, DeadlineIn(absl::Seconds(120)))[0];
  INFO(Dump(resumed) << "\n(restart began " << to_restart << " after the kill)");
  REQUIRE(resumed.code == 0);
  CHECK(absl::StrContains(resumed.err, "rank 1 failed: signal SIGKILL (9); restarting the workers (restart 1 of 1)"));
  CHECK(absl::StrContains(resumed.out, "[rank 0]: resumed from "));
  CHECK(FinalHash(resumed.out) == expected);
}

// (That every rank's collective fails naming the mismatch is checked without
// a launcher in tests/collectives: here the agent may stop a bystander rank
// before it prints.)
TEST_CASE("faults: a rank that issues a different count: both sides name the mismatch, the dumps the seq",
          "[faults]") {
  for (int n : {2, 3}) {
    const ProcessExit exit =
        RunProcess(Braidrun({"--standalone", absl::StrCat("--nproc-per-node=", n)}, {"--allreduce", "--mismatch-rank=1"}),
                   {}, absl::StrCat("mismatch_", n), absl::Seconds(60), kWorkerContract);
    INFO(Dump(exit));
    CHECK(exit.code == 1);
    for (int r : {0, 1}) {
      // Each of the two disagreeing ranks' own lines (its log or its exit message).
      bool named = false;
      for (absl::string_view line : absl::StrSplit(exit.err, '\n')) {
        named = named || (absl::StartsWith(line, absl::StrCat("[rank ", r, "]: ")) &&
                          absl::StrContains(line, "mismatched collective"));
      }
      INFO("rank " << r);
      CHECK(named);
    }
    CHECK(absl::StrContains(exit.err, "braidrun: job failed"));
    // The report points at the flight-recorder dumps; the analyser finds the divergence there.
    const size_t at = exit.err.find("(tools/flight_analyze.py ");
    REQUIRE(at != std::string::npos);
    const size_t start = at + std::string("(tools/flight_analyze.py ").size();
    const std::string dir = exit.err.substr(start, exit.err.find(')', start) - start);
    const ProcessExit analysis = RunProcess({"/usr/bin/python3", Runfile("tools/flight_analyze.py"), dir}, {},
                                            absl::StrCat("mismatch_analysis_", n), absl::Seconds(30));
    INFO(analysis.out << analysis.err);
    CHECK(absl::StrContains(analysis.out, "diverged at seq 2: rank 0 issued allreduce count 1000 int64 sum; "
                                          "rank 1 issued allreduce count 999 int64 sum"));
  }
}

TEST_CASE("faults: a node whose workers finished rejoins the restart when another node fails later",
          "[faults]") {
  // Node 0's worker exits 0 at once; node 1's fails 1.5 s later in attempt 0.
  for (int max_restarts : {1, 0}) {
    INFO("--max-restarts=" << max_restarts);
    const uint16_t master_port = UnusedPortPair();  // the store takes master_port + 1
    std::vector<pid_t> pids;
    std::vector<std::string> tags;
    for (int node : {1, 0}) {
      tags.push_back(absl::StrCat("late_failure_", max_restarts, "_", node));
      pids.push_back(Spawn(Braidrun({"--nnodes=2", "--nproc-per-node=1", absl::StrCat("--node-rank=", node),
                                     "--master-addr=127.0.0.1", absl::StrCat("--master-port=", master_port),
                                     "--rdzv-id=late", absl::StrCat("--max-restarts=", max_restarts),
                                     "--rdzv-conf=join_timeout=20"},
                                    {"--fail-rank=1", "--fail-after=1.5"}),
                           {{"BRAID_JOB_SECRET", "late-secret"}}, tags.back(), kWorkerContract));
    }
    const std::vector<ProcessExit> exits = WaitAll(pids, tags, DeadlineIn(absl::Seconds(60)));
    const ProcessExit& node0 = exits[1];
    INFO("node 0: " << Dump(node0) << "\nnode 1: " << Dump(exits[0]));
    CHECK(absl::StrContains(node0.err, "this node's workers succeeded, but rank 1 failed"));
    if (max_restarts == 1) {
      // Both nodes ran attempt 1 together and finished.
      CHECK(node0.code == 0);
      CHECK(exits[0].code == 0);
      CHECK(absl::StrContains(node0.err, "restarting them with the others (restart 1 of 1)"));
    } else {
      // No restart left: the node that finished says the job failed, as the other does.
      CHECK(node0.code == 1);
      CHECK(exits[0].code == 1);
      CHECK(absl::StrContains(node0.err, "no restart is left"));
    }
  }
}

}  // namespace
}  // namespace braid
