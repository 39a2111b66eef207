// braidrun end to end under a cluster's environment: a two-node static job
// configured by torchrun's PET_* variables alone (as a Kubeflow PyTorchJob
// runs it), and a scheduler's signal (Slurm's preemption warning, a plain
// SIGTERM or SIGQUIT) forwarded to real worker processes: one traps it and
// records it, one ignores it and is SIGKILLed after --shutdown-timeout.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/deadline.h"
#include "catch2/catch.hpp"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"

namespace braid {
namespace {

const absl::Duration kTimeout = absl::Seconds(60);

std::string MakeDir(const std::string& name) {
  const std::string dir = absl::StrCat(TestTempDir(), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Running, or stopped: not gone, and not a zombie left for whoever inherited it.
bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Waits (bounded) until every worker has written its pid file, that is has
// set up its signal handling.
bool WaitForPids(const std::string& dir, int workers) {
  const Deadline deadline = DeadlineIn(kTimeout);
  while (!Expired(deadline)) {
    int ready = 0;
    for (int r = 0; r < workers; ++r) ready += Exists(absl::StrCat(dir, "/", r, ".pid")) ? 1 : 0;
    if (ready == workers) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST_CASE("braidrun: a two-node job configured only by PET_* variables", "[launcher][pet]") {
  const uint16_t master_port = UnusedPortPair();  // the store takes master_port + 1
  std::vector<pid_t> pids;
  std::vector<std::string> tags;
  for (int node : {1, 0}) {
    tags.push_back(absl::StrCat("pet_", node));
    // The PyTorchJob operator's variables for replica `node`; nothing on the command line but the program.
    pids.push_back(Spawn(Braidrun({}, {"--env", "--allreduce"}),
                         {{"PET_NNODES", "2"},
                          {"PET_NPROC_PER_NODE", "2"},
                          {"PET_NODE_RANK", absl::StrCat(node)},
                          {"PET_MASTER_ADDR", "127.0.0.1"},
                          {"PET_MASTER_PORT", absl::StrCat(master_port)},
                          {"PET_RDZV_ID", "pytorchjob-pet"},
                          {"PET_MAX_RESTARTS", "1"},
                          {"BRAID_JOB_SECRET", "pet-secret"}},
                         tags.back(), kWorkerContract));
  }
  const std::string all_out = WaitForJob(pids, tags, kTimeout);
  CheckTwoByTwoJob(all_out, master_port);
  INFO(all_out);
  CHECK(absl::StrContains(all_out, "[rank 0]: TORCHELASTIC_RUN_ID=pytorchjob-pet\n"));
  CHECK(absl::StrContains(all_out, "[rank 0]: TORCHELASTIC_MAX_RESTARTS=1\n"));
  CHECK(absl::StrContains(all_out, "[rank 3]: LOCAL_WORLD_SIZE=2\n"));
}

struct SignalCase {
  const char* name;         // as --trap takes it
  int number;
  std::string handled;      // --signals-to-handle, or "" for the default list
};

TEST_CASE("braidrun: a handled signal reaches every worker, SIGKILL after --shutdown-timeout", "[launcher][signals]") {
  const SignalCase c = GENERATE(SignalCase{"USR1", SIGUSR1, "SIGUSR1,SIGTERM"}, SignalCase{"TERM", SIGTERM, ""},
                                SignalCase{"QUIT", SIGQUIT, ""});
  const bool one_ignores = GENERATE(false, true);
  const std::string dir = MakeDir(absl::StrCat("signal_", c.name, one_ignores ? "_ignored" : "_trapped"));
  const absl::Duration shutdown_timeout = absl::Seconds(2);
  std::vector<std::string> flags = {"--standalone", "--nproc-per-node=2", "--shutdown-timeout=2"};
  if (!c.handled.empty()) flags.push_back("--signals-to-handle=" + c.handled);
  std::vector<std::string> probe = {absl::StrCat("--trap=", c.name), "--signal-dir=" + dir, "--pid-dir=" + dir,
                                    "--sleep=60"};
  if (one_ignores) probe.push_back("--ignore-rank=1");
  const std::string tag = absl::StrCat("signal_", c.name, one_ignores ? "_ignored" : "_trapped");
  const pid_t braidrun = Spawn(Braidrun(flags, probe), {}, tag, kWorkerContract);
  REQUIRE(braidrun > 0);
  REQUIRE(WaitForPids(dir, 2));
  const absl::Time sent = absl::Now();
  REQUIRE(kill(braidrun, c.number) == 0);
  const ProcessExit exit = WaitAll({braidrun}, {tag}, DeadlineIn(kTimeout))[0];
  const absl::Duration took = absl::Now() - sent;
  INFO(Dump(exit) << "took " << took);
  CHECK(exit.code == 128 + c.number);
  CHECK(absl::StrContains(exit.err, absl::StrCat("received SIG", c.name, ": forwarding it to the workers")));
  CHECK(absl::StripTrailingAsciiWhitespace(ReadFile(dir + "/0.signal")) == absl::StrCat("SIG", c.name));
  if (one_ignores) {
    CHECK_FALSE(Exists(dir + "/1.signal"));
    CHECK(took >= shutdown_timeout);  // rank 1 ignored it: only SIGKILL ended it
    const pid_t rank1 = std::stoi(ReadFile(dir + "/1.pid"));
    CHECK_FALSE(Alive(rank1));  // and it is gone
  } else {
    CHECK(absl::StripTrailingAsciiWhitespace(ReadFile(dir + "/1.signal")) == absl::StrCat("SIG", c.name));
    CHECK(took < shutdown_timeout);  // both exited on the signal: no wait for SIGKILL
  }
  CHECK(took < shutdown_timeout + absl::Seconds(10));
}

TEST_CASE("braidrun: a signal not in --signals-to-handle has its default effect", "[launcher][signals]") {
  const std::string dir = MakeDir("signal_unhandled");
  const pid_t braidrun = Spawn(
      Braidrun({"--standalone", "--nproc-per-node=1"}, {"--trap=USR1", "--signal-dir=" + dir, "--pid-dir=" + dir,
                                                         "--sleep=60"}),
      {}, "signal_unhandled", kWorkerContract);
  REQUIRE(braidrun > 0);
  REQUIRE(WaitForPids(dir, 1));
  REQUIRE(kill(braidrun, SIGUSR1) == 0);
  const ProcessExit exit = WaitAll({braidrun}, {"signal_unhandled"}, DeadlineIn(kTimeout))[0];
  INFO(Dump(exit));
  CHECK(exit.code == -SIGUSR1);  // SIGUSR1 is not in the default list: braidrun dies of it
  CHECK(ReadFile(dir + "/0.signal").empty());  // and its worker dies with it (PR_SET_PDEATHSIG), unsignalled
  const pid_t worker = std::stoi(ReadFile(dir + "/0.pid"));
  const Deadline gone = DeadlineIn(absl::Seconds(10));
  while (Alive(worker) && !Expired(gone)) absl::SleepFor(absl::Milliseconds(20));
  CHECK_FALSE(Alive(worker));
}

}  // namespace
}  // namespace braid
