// braid across "hosts": network namespaces with their own addresses and host
// names, 1 Gbit/s links (NetnsBed), one braidrun agent per host (c10d
// rendezvous on host 1), two ranks per host, the transport left to auto
// (which must pick tcp: the hosts differ). hosts_worker checks every
// collective exactly; then a host's link goes down while the ranks loop over
// all-reduces, and every rank on every host must fail within its deadline.
// Needs root and iproute2; without them it says so and passes nothing else.
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"
#include "tests/netns/netns_bed.h"

namespace braid {
namespace {

constexpr int kRanksPerHost = 2;
constexpr int kPort = 29400;  // in the bed's own namespaces: always free

struct Job {
  std::vector<pid_t> agents;
  std::vector<std::string> tags;
};

// One agent per host, each running hosts_worker with `worker_args`. The
// environment is the job's alone: nothing of the test's own leaks in
// (BRAID_TRANSPORT stays unset, so auto chooses).
Job StartJob(const NetnsBed& bed, const std::string& run_id, const std::map<std::string, std::string>& env,
             const std::vector<std::string>& agent_flags, const std::vector<std::string>& worker_args) {
  std::vector<std::string> unset = kWorkerContract;
  unset.insert(unset.end(), {"BRAID_TRANSPORT", "BRAID_ALGO", "BRAID_TCP_ADDR"});
  Job job;
  for (int host = 1; host <= bed.hosts(); ++host) {
    std::vector<std::string> argv = {Runfile("launcher/braidrun")};
    for (const std::string& flag : bed.AgentFlags(host, kRanksPerHost, kPort, run_id)) argv.push_back(flag);
    argv.insert(argv.end(), agent_flags.begin(), agent_flags.end());
    argv.push_back(Runfile("tests/netns/hosts_worker"));
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    job.tags.push_back(absl::StrCat(run_id, "_host", host));
    job.agents.push_back(Spawn(bed.On(host, argv), env, job.tags.back(), unset));
  }
  return job;
}

size_t CountOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

std::string RunId(const std::string& what) { return absl::StrCat(what, "-", getpid()); }

// How many lines of the agents' stdout so far contain `text`.
int CountLines(const Job& job, const std::string& text) {
  int count = 0;
  for (const std::string& tag : job.tags) {
    for (absl::string_view line : absl::StrSplit(ReadFile(absl::StrCat(TestTempDir(), "/", tag, ".out")), '\n')) {
      count += absl::StrContains(line, text) ? 1 : 0;
    }
  }
  return count;
}

std::unique_ptr<NetnsBed> MakeBed(int hosts) {
  absl::StatusOr<std::unique_ptr<NetnsBed>> bed = NetnsBed::Create({.hosts = hosts});
  INFO(bed.status().ToString());
  REQUIRE(bed.ok());
  for (const std::string& warning : (*bed)->warnings()) WARN(warning);
  return std::move(*bed);
}

TEST_CASE("netns hosts: every collective, exact, over tcp between 2 and 3 hosts of 2 ranks", "[netns]") {
  if (const std::string why = NetnsBed::Unavailable(); !why.empty()) {
    WARN(why);
    return;
  }
  // hosts, BRAID_ALGO ("": the selector's choice, hierarchical at every size;
  // ring: flat; hierarchical: forced), and the subgroup checks.
  const auto [hosts, algo] = GENERATE(table<int, std::string>({{2, ""}, {3, ""}, {2, "ring"}, {3, "hierarchical"}}));
  INFO(hosts << " hosts, BRAID_ALGO=" << algo);
  std::unique_ptr<NetnsBed> bed = MakeBed(hosts);
  std::map<std::string, std::string> env = {{"BRAID_TIMEOUT_SEC", "60"}, {"BRAID_JOB_SECRET", "hosts-secret"}};
  if (!algo.empty()) env["BRAID_ALGO"] = algo;
  const absl::Time start = absl::Now();
  const Job job = StartJob(*bed, RunId(absl::StrCat("hosts", hosts)), env, {"--rdzv-conf=join_timeout=60"},
                           {"--expect-transport=tcp", "--subgroups=1"});
  const std::vector<ProcessExit> exits = WaitAll(job.agents, job.tags, DeadlineIn(absl::Seconds(240)));
  WARN(hosts << " hosts x " << kRanksPerHost << " ranks: every collective checked in " << absl::Now() - start);

  const int world = hosts * kRanksPerHost;
  std::set<int> ranks;
  for (int host = 1; host <= hosts; ++host) {
    const ProcessExit& exit = exits[host - 1];
    INFO("host " << host << "'s agent: " << Dump(exit));
    CHECK(exit.code == 0);
    int ok_lines = 0;
    for (int rank = 0; rank < world; ++rank) {
      // Ranks go to nodes in rendezvous order: find which are this host's.
      const std::string ok = absl::StrCat("hosts worker rank ", rank, "/", world, " host ", NetnsBed::HostName(host),
                                          " transport tcp ok");
      if (absl::StrContains(exit.out, ok)) {
        ranks.insert(rank);
        ++ok_lines;
      }
    }
    CHECK(ok_lines == kRanksPerHost);
    CHECK(CountOf(exit.out, "subgroups ok") == static_cast<size_t>(kRanksPerHost));
    for (absl::string_view line : absl::StrSplit(exit.out, '\n')) {
      if (host == 1 && absl::StrContains(line, "all-reduce ran")) WARN(std::string(line));
    }
    // What ran where it was asked for (auto takes hierarchical here).
    if (algo != "ring") CHECK(absl::StrContains(exit.out, "hierarchical"));
  }
  CHECK(static_cast<int>(ranks.size()) == world);
}

TEST_CASE("netns hosts: a host's link down mid-collective fails every rank on every host by its deadline",
          "[netns][faults]") {
  if (const std::string why = NetnsBed::Unavailable(); !why.empty()) {
    WARN(why);
    return;
  }
  constexpr int kHosts = 3;
  std::unique_ptr<NetnsBed> bed = MakeBed(kHosts);
  // join_timeout also bounds how long host 1's agent keeps the store up for
  // a node it can no longer hear from.
  const Job job = StartJob(*bed, RunId("cut"), {{"BRAID_TIMEOUT_SEC", "3"}, {"BRAID_JOB_SECRET", "cut-secret"}},
                           {"--rdzv-conf=join_timeout=5"}, {"--loop=120"});
  // Cut only once every rank is inside the loop of all-reduces.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (CountLines(job, "looping") < kHosts * kRanksPerHost && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  REQUIRE(CountLines(job, "looping") == kHosts * kRanksPerHost);
  absl::SleepFor(absl::Milliseconds(300));  // some all-reduces in, one in flight
  REQUIRE(bed->Cut(2).ok());
  const absl::Time cut = absl::Now();
  const std::vector<ProcessExit> exits = WaitAll(job.agents, job.tags, DeadlineIn(absl::Seconds(60)));
  const absl::Duration took = absl::Now() - cut;
  for (int host = 1; host <= kHosts; ++host) {
    const ProcessExit& exit = exits[host - 1];
    INFO("host " << host << "'s agent: " << Dump(exit));
    CHECK(exit.code > 0);  // failed, not killed by WaitAll's deadline
    // Each of this host's ranks says why: its deadline, or a peer gone, naming the peer.
    int failed = 0;
    for (absl::string_view line : absl::StrSplit(exit.err, '\n')) {
      if (absl::StrContains(line, "hosts_worker: rank") &&
          (absl::StrContains(line, "DEADLINE_EXCEEDED") || absl::StrContains(line, "UNAVAILABLE") ||
           absl::StrContains(line, "ABORTED")) &&
          absl::StrContains(line, "peer")) {
        ++failed;
      }
    }
    CHECK(failed >= 1);
    CHECK_FALSE(absl::StrContains(exit.out, " ok"));
  }
  WARN("every agent ended " << took << " after the cut");
  // BRAID_TIMEOUT_SEC, then the agents' own teardown (join_timeout at most).
  CHECK(took < absl::Seconds(15));
}

}  // namespace
}  // namespace braid
