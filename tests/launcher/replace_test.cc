// braidrun --restart-policy=replace, the launcher's half, with real processes:
// a worker that dies (or that the survivors evict) is replaced by a new
// process in its slot while the others keep running; replacements count
// against --max-restarts; the workers' fallback key restarts everything. The
// workers are probe_workers (no elastic group: runtime/elastic's own tests
// cover the survivors' half); the test plays the survivors' part in the store
// where it needs to (evict and fallback keys), with the job's own secret.
// The pure parts (the replacement's spec, the report's policy line) first.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/auth.h"
#include "base/socket.h"
#include "catch2/catch.hpp"
#include "launcher/replace_policy.h"
#include "store/membership.h"
#include "store/tcp_store.h"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"

namespace braid {
namespace {

// No test waits for the 600 s default collective/rendezvous timeout.
const std::map<std::string, std::string> kEnv = {{"BRAID_TIMEOUT_SEC", "10"}};

TEST_CASE("replace: a replacement's spec is the original's plus BRAID_JOIN_RUNNING, in a directory of its own",
          "[launcher]") {
  WorkerSpec original;
  original.global_rank = 5;
  original.local_rank = 1;
  original.argv = {"train", "--lr=1"};
  original.env = {"RANK=5", "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_ERROR_FILE=/l/attempt_0/5/error.json"};
  original.stdout_log = "/l/attempt_0/5/stdout.log";
  original.error_file = "/l/attempt_0/5/error.json";
  const WorkerSpec spec = ReplacementSpec(original, 2, 3);
  CHECK(spec.global_rank == 5);
  CHECK(spec.local_rank == 1);
  CHECK(spec.argv == original.argv);
  CHECK(spec.stdout_log == "/l/attempt_0/5.r2/stdout.log");
  CHECK(spec.stderr_log.empty());
  CHECK(spec.error_file == "/l/attempt_0/5.r2/error.json");
  CHECK(spec.env == std::vector<std::string>{"RANK=5", "TORCHELASTIC_RESTART_COUNT=3",
                                             "TORCHELASTIC_ERROR_FILE=/l/attempt_0/5.r2/error.json",
                                             "BRAID_JOIN_RUNNING=1"});
}

TEST_CASE("replace: the report's line says which policy acted and what it cost", "[launcher]") {
  CHECK(RestartPolicyLine(RestartPolicy::kReplace, {1, 3}, 2, 3) ==
        "restart policy: replace; 2 workers replaced (rank 1, rank 3), survivors never stopped; restarts used 2 of 3");
  CHECK(RestartPolicyLine(RestartPolicy::kReplace, {1}, 1, 1) ==
        "restart policy: replace; 1 worker replaced (rank 1), survivors never stopped; restarts used 1 of 1");
  CHECK(RestartPolicyLine(RestartPolicy::kReplace, {2, 0, 2}, 4, 5) ==
        "restart policy: replace; 3 workers replaced (rank 2 x2, rank 0); 1 restart stopped every worker; "
        "restarts used 4 of 5");
  CHECK(RestartPolicyLine(RestartPolicy::kReplace, {}, 0, 2) ==
        "restart policy: replace; no worker replaced; restarts used 0 of 2");
  CHECK(RestartPolicyLine(RestartPolicy::kAll, {}, 1, 1) ==
        "restart policy: all; 1 restart stopped every worker; restarts used 1 of 1");
  CHECK(RestartPolicyLine(RestartPolicy::kAll, {}, 2, 3) ==
        "restart policy: all; 2 restarts stopped every worker; restarts used 2 of 3");
  CHECK(RestartPolicyLine(RestartPolicy::kAll, {}, 0, 0) == "restart policy: all; no restart; restarts used 0 of 0");
}

// A fresh directory for one test's --start-log files.
std::string StartDir(const std::string& tag) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", tag, "_starts");
  mkdir(dir.c_str(), 0755);
  return dir;
}

// The pids rank `rank` started with, in order (probe_worker --start-log).
std::vector<std::string> Starts(const std::string& dir, int rank) {
  return absl::StrSplit(ReadFile(absl::StrCat(dir, "/", rank, ".starts")), '\n', absl::SkipEmpty());
}

// Waits (bounded) until `path` contains `text`; the time it was seen, or InfiniteFuture.
absl::Time WaitForText(const std::string& path, const std::string& text, absl::Duration timeout) {
  const Deadline deadline = DeadlineIn(timeout);
  while (!Expired(deadline)) {
    if (absl::StrContains(ReadFile(path), text)) return absl::Now();
    absl::SleepFor(absl::Milliseconds(2));
  }
  return absl::InfiniteFuture();
}

// The workers' namespace of a running job, reached as a worker would (its
// rank 0 printed the address, the secret and the prefix: probe_worker --env).
std::unique_ptr<Store> WorkersStore(const std::string& tag) {
  const std::string address = WaitForVariable(tag, "BRAID_STORE_ADDR");
  const std::string secret = WaitForVariable(tag, "BRAID_JOB_SECRET");
  const std::string prefix = WaitForVariable(tag, "BRAID_STORE_PREFIX");
  absl::StatusOr<HostPort> host_port = ParseHostPort(address, 0);
  if (!host_port.ok() || prefix.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<TcpStore>> client =
      TcpStore::Connect(*host_port, DeadlineIn(absl::Seconds(5)), JobSecret(secret));
  if (!client.ok()) return nullptr;
  return std::make_unique<PrefixStore>(prefix, std::shared_ptr<Store>(std::move(*client)));
}

TEST_CASE("replace: kill -9 of one worker: a new process takes its slot, the others never stop, the job succeeds",
          "[launcher][replace]") {
  const std::string tag = "replace_kill";
  const std::string starts = StartDir(tag);
  const std::string logs = absl::StrCat(TestTempDir(), "/", tag, "_logs");
  const absl::Time began = absl::Now();
  // Rank 1 SIGKILLs itself at its first start; the others sleep 3 s and succeed.
  const pid_t agent = Spawn(Braidrun({"--nproc-per-node=3", "--restart-policy=replace", "--max-restarts=2",
                                      "--rdzv-id=replace_kill", "--log-dir=" + logs, "--tee=3"},
                                     {"--env", "--fail-rank=1", "--exit-code=-9", "--replacement-exit=0",
                                      "--start-log=" + starts, "--sleep=3"}),
                            kEnv, tag, kWorkerContract);
  REQUIRE(agent > 0);
  const std::string out_path = absl::StrCat(TestTempDir(), "/", tag, ".out");
  const std::string err_path = absl::StrCat(TestTempDir(), "/", tag, ".err");
  const absl::Time died = WaitForText(err_path, "[rank 1]: probe_worker: rank 1 failing on purpose", absl::Seconds(10));
  const absl::Time replaced = WaitForText(out_path, "[rank 1]: replacement rank 1", absl::Seconds(10));
  // The dead process is declared dead in the workers' namespace while the job runs.
  std::string dead_value = "(the store could not be read)";
  const std::vector<std::string> rank1 = Starts(starts, 1);
  if (std::unique_ptr<Store> store = WorkersStore(tag); store != nullptr && !rank1.empty()) {
    absl::StatusOr<std::string> value = store->Get(
        membership::DeadKey(1, membership::ProcessToken(HostName(), std::stoi(rank1[0]))), DeadlineIn(absl::Seconds(2)));
    dead_value = value.ok() ? *value : value.status().ToString();
  }
  const ProcessExit exit = WaitAll({agent}, {tag}, DeadlineIn(absl::Seconds(20)))[0];
  const absl::Duration took = absl::Now() - began;
  INFO(Dump(exit) << "\n(took " << took << "; replacement printed " << replaced - died << " after the death line)");
  CHECK(exit.code == 0);
  CHECK(absl::StrContains(exit.err, "braidrun: rank 1 failed: signal SIGKILL (9); replacing it, the others keep "
                                    "running (--restart-policy=replace, restart 1 of 2)"));
  // Started with BRAID_JOIN_RUNNING=1 (only then it prints this) and the new restart count.
  CHECK(absl::StrContains(exit.out, "[rank 1]: replacement rank 1 (restart count 1)\n"));
  CHECK(absl::StrContains(exit.err, "braidrun: job done; 1 worker was replaced in place (--restart-policy=replace)"));
  CHECK_FALSE(absl::StrContains(exit.err, "restarting the workers"));
  CHECK(dead_value == "signal SIGKILL (9)");
  // Survivors started once and ran to the end; rank 1's slot twice.
  CHECK(Starts(starts, 0).size() == 1);
  CHECK(Starts(starts, 2).size() == 1);
  CHECK(rank1.size() == 2);
  // The replacement has files of its own; the first process's are kept.
  CHECK(absl::StrContains(ReadFile(logs + "/replace_kill/attempt_0/1.r1/stdout.log"), "replacement rank 1"));
  CHECK(absl::StrContains(ReadFile(logs + "/replace_kill/attempt_0/1/stderr.log"), "failing on purpose"));
  // Fast: the survivors' agent-side wait is the replacement's start (no settle wait, no new round).
  CHECK(replaced - died < absl::Seconds(2));
  CHECK(took < absl::Seconds(12));
}

TEST_CASE("replace: replacements count against --max-restarts; then the job fails and the report names the policy",
          "[launcher][replace]") {
  const std::string tag = "replace_budget";
  const std::string starts = StartDir(tag);
  // Rank 1 SIGKILLs itself, its replacement exits 3: the one restart is spent on the first.
  const ProcessExit exit = RunProcess(
      Braidrun({"--nproc-per-node=2", "--restart-policy=replace", "--max-restarts=1"},
               {"--fail-rank=1", "--exit-code=-9", "--replacement-exit=3", "--start-log=" + starts, "--sleep=10"}),
      kEnv, tag, absl::Seconds(20), kWorkerContract);
  INFO(Dump(exit));
  CHECK(exit.code == 1);
  CHECK(absl::StrContains(exit.err, "braidrun: rank 1 failed: signal SIGKILL (9); replacing it, the others keep "
                                    "running (--restart-policy=replace, restart 1 of 1)"));
  CHECK(absl::StrContains(exit.out, "[rank 1]: replacement rank 1 (restart count 1)\n"));
  CHECK(absl::StrContains(exit.err, "braidrun: job failed"));
  CHECK(absl::StrContains(exit.err, "\nrestart policy: replace; 1 worker replaced (rank 1), survivors never stopped; "
                                    "restarts used 1 of 1\n"));
  CHECK(absl::StrContains(exit.err, "first failure: rank 1 (local rank 1) on "));
  CHECK(absl::StrContains(exit.err, ": signal SIGKILL (9) at "));
  CHECK(absl::StrContains(exit.err, "also failed: rank 1: exit code 3 (replacement 1 of rank 1) (+"));
  CHECK_FALSE(absl::StrContains(exit.err, "restarting the workers"));
  CHECK(Starts(starts, 0).size() == 1);
  CHECK(Starts(starts, 1).size() == 2);
}

TEST_CASE("replace: under --restart-policy=all (the default) the report says so", "[launcher][replace]") {
  const ProcessExit exit =
      RunProcess(Braidrun({"--nproc-per-node=2", "--max-restarts=1"}, {"--fail-rank=1", "--fail-attempt=all"}), kEnv,
                 "replace_policy_all", absl::Seconds(20), kWorkerContract);
  INFO(Dump(exit));
  CHECK(exit.code == 1);
  CHECK(absl::StrContains(exit.err, "rank 1 failed: exit code 1; restarting the workers (restart 1 of 1)"));
  CHECK(absl::StrContains(exit.err, "\nrestart policy: all; 1 restart stopped every worker; restarts used 1 of 1\n"));
}

TEST_CASE("replace: a bad --restart-policy, or replace with --mpi, is one line and exit 2", "[launcher][replace]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--restart-policy=foo"}, "argument --restart-policy: invalid value 'foo': expected all or replace"},
      {{"--mpi", "--restart-policy=replace"}, "mpirun cannot replace one rank"},
  };
  for (const auto& [flags, expected] : cases) {
    const ProcessExit exit = RunProcess(Braidrun(flags, {}), {}, "replace_bad_flag", absl::Seconds(10));
    INFO(Dump(exit));
    CHECK(exit.code == 2);
    CHECK(exit.out.empty());
    CHECK(absl::StartsWith(exit.err, "braidrun: error: "));
    CHECK(absl::StrContains(exit.err, expected));
    CHECK(std::count(exit.err.begin(), exit.err.end(), '\n') == 1);
  }
}

TEST_CASE("replace: a live worker the survivors evict is SIGKILLed and replaced", "[launcher][replace]") {
  const std::string tag = "replace_evict";
  const std::string starts = StartDir(tag);
  const pid_t agent = Spawn(Braidrun({"--nproc-per-node=2", "--restart-policy=replace", "--max-restarts=1"},
                                     {"--env", "--replacement-exit=0", "--start-log=" + starts, "--sleep=4"}),
                            kEnv, tag, kWorkerContract);
  REQUIRE(agent > 0);
  std::unique_ptr<Store> store = WorkersStore(tag);
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  while (Starts(starts, 1).empty() && !Expired(deadline)) absl::SleepFor(absl::Milliseconds(5));
  const std::vector<std::string> first = Starts(starts, 1);
  std::string token;
  std::string dead_value = "(not read)";
  if (store != nullptr && !first.empty()) {
    // What a survivor's agreement writes for a member that did not check in.
    token = membership::ProcessToken(HostName(), std::stoi(first[0]));
    CHECK(store->Set(membership::EvictKey(1, token), "no check-in for epoch 1 within 10s").ok());
    WaitForText(absl::StrCat(TestTempDir(), "/", tag, ".out"), "[rank 1]: replacement rank 1", absl::Seconds(10));
    absl::StatusOr<std::string> value = store->Get(membership::DeadKey(1, token), DeadlineIn(absl::Seconds(2)));
    dead_value = value.ok() ? *value : value.status().ToString();
  }
  const ProcessExit exit = WaitAll({agent}, {tag}, DeadlineIn(absl::Seconds(20)))[0];
  INFO(Dump(exit));
  REQUIRE(store != nullptr);
  REQUIRE_FALSE(token.empty());
  CHECK(exit.code == 0);
  CHECK(absl::StrContains(exit.err, absl::StrCat("braidrun: rank 1 (", token, ") was evicted by the others (no "
                                                 "check-in for epoch 1 within 10s): killed it with SIGKILL")));
  CHECK(absl::StrContains(exit.err, "braidrun: rank 1 failed: evicted by the others (no check-in for epoch 1 within "
                                    "10s), then signal SIGKILL (9) from braidrun; replacing it, the others keep "
                                    "running (--restart-policy=replace, restart 1 of 1)"));
  CHECK(absl::StrContains(exit.out, "[rank 1]: replacement rank 1 (restart count 1)\n"));
  CHECK(absl::StartsWith(dead_value, "evicted by the others"));
  CHECK(Starts(starts, 0).size() == 1);
  CHECK(Starts(starts, 1).size() == 2);
}

TEST_CASE("replace: the workers' fallback key restarts every worker, as --restart-policy=all would",
          "[launcher][replace]") {
  const std::string tag = "replace_fallback";
  const std::string starts = StartDir(tag);
  const pid_t agent = Spawn(Braidrun({"--nproc-per-node=2", "--restart-policy=replace", "--max-restarts=1"},
                                     {"--env", "--start-log=" + starts, "--sleep=2"}),
                            kEnv, tag, kWorkerContract);
  REQUIRE(agent > 0);
  std::unique_ptr<Store> store = WorkersStore(tag);
  // Both workers have started once before the fallback asks for a restart
  // (under TSan a worker can take longer to start than the key to arrive).
  const Deadline started = DeadlineIn(absl::Seconds(10));
  while ((Starts(starts, 0).empty() || Starts(starts, 1).empty()) && !Expired(started)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (store != nullptr) {
    CHECK(store->Set(membership::FallbackKey(), "only 1 ranks are left (ids 0), fewer than the minimum of 2").ok());
  }
  const ProcessExit exit = WaitAll({agent}, {tag}, DeadlineIn(absl::Seconds(20)))[0];
  INFO(Dump(exit));
  REQUIRE(store != nullptr);
  CHECK(exit.code == 0);
  CHECK(absl::StrContains(exit.err, "braidrun: the workers asked for a full restart: only 1 ranks are left (ids 0), "
                                    "fewer than the minimum of 2; restarting the workers (restart 1 of 1)"));
  CHECK_FALSE(absl::StrContains(exit.err, "replacing it"));
  CHECK_FALSE(absl::StrContains(exit.err, "replaced in place"));
  // Every worker started again, in the next round (its namespace has no fallback key).
  CHECK(Starts(starts, 0).size() == 2);
  CHECK(Starts(starts, 1).size() == 2);
}

}  // namespace
}  // namespace braid
