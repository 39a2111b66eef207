// A network partition of one "node": two braidrun agents on two hosts of a
// NetnsBed (network namespaces behind a bridge, links unshaped), workers on the tcp
// transport; mid-job the test takes node 2's link down. No EOF, no reset:
// only deadlines can notice. Both sides must fail with a deadline error
// within BRAID_TIMEOUT_SEC plus the rendezvous timeout, never hang.
// Needs root (CAP_NET_ADMIN) and iproute2; without them it says so and passes
// nothing else.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"
#include "tests/netns/netns_bed.h"

namespace braid {
namespace {

TEST_CASE("faults: a partitioned node: both sides fail by their deadlines, nothing hangs", "[faults][netns]") {
  if (const std::string why = NetnsBed::Unavailable(); !why.empty()) {
    WARN(why << ": partition test not run");
    return;
  }
  absl::StatusOr<std::unique_ptr<NetnsBed>> bed = NetnsBed::Create({.hosts = 2, .rate = "none"});
  INFO(bed.status().ToString());
  REQUIRE(bed.ok());
  const NetnsBed& net = **bed;
  const std::map<std::string, std::string> env = {
      {"BRAID_TRANSPORT", "tcp"}, {"BRAID_TIMEOUT_SEC", "3"}, {"BRAID_JOB_SECRET", "partition-secret"}};
  std::vector<pid_t> agents;
  std::vector<std::string> tags;
  for (int node : {1, 2}) {
    tags.push_back(absl::StrCat("partition_", node));
    std::vector<std::string> argv = {Runfile("launcher/braidrun")};
    for (const std::string& flag : net.AgentFlags(node, 1, 29460, "partition")) argv.push_back(flag);
    argv.insert(argv.end(), {"--rdzv-conf=join_timeout=3", Runfile("tests/launcher/probe_worker"), "--allreduce",
                             "--rounds=400", "--round-sleep=0.05"});
    agents.push_back(Spawn(net.On(node, argv), env, tags.back(), kWorkerContract));
  }
  // Let the job run, then cut node 2 off.
  absl::SleepFor(absl::Seconds(2));
  REQUIRE(net.Cut(2).ok());
  const absl::Time cut = absl::Now();
  const std::vector<ProcessExit> exits = WaitAll(agents, tags, DeadlineIn(absl::Seconds(60)));
  const absl::Duration took = absl::Now() - cut;
  for (const ProcessExit& exit : exits) {
    INFO("exit " << exit.code << "\n--- stdout\n" << exit.out << "--- stderr\n" << exit.err);
    CHECK(exit.code == 1);
    CHECK((absl::StrContains(exit.err, "DEADLINE_EXCEEDED") || absl::StrContains(exit.err, "timed out") ||
           absl::StrContains(exit.err, "lost the rendezvous store")));
  }
  CHECK_FALSE(absl::StrContains(exits[0].out + exits[1].out, "all-reduce ok"));  // the job never finished
  INFO("both agents ended " << took << " after the cut");
  CHECK(took < absl::Seconds(30));
}

}  // namespace
}  // namespace braid
