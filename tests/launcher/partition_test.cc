// A network partition of one "node": two braidrun agents in network
// namespaces the test creates (joined by a veth pair), workers on the tcp
// transport; mid-job the test takes node 2's link down. No EOF, no reset:
// only deadlines can notice. Both sides must fail with a deadline error
// within BRAID_TIMEOUT_SEC plus the rendezvous timeout, never hang.
// Needs root (CAP_NET_ADMIN) and iproute2; without them it says so and passes
// nothing else.
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "tests/harness/subprocess.h"
#include "tests/launcher/launcher_test_util.h"

namespace braid {
namespace {

int Sh(const std::string& command) {
  return RunProcess({"/bin/sh", "-c", command}, {}, "partition_sh", absl::Seconds(20)).code;
}

// Two namespaces, 10.77.<id>.1 and .2, a veth pair between them; removed
// (with the pair) on destruction.
class TwoNamespaces {
 public:
  TwoNamespaces() : id_(std::to_string(getpid() % 200 + 20)) {
    a_ = "braid_a" + id_;
    b_ = "braid_b" + id_;
    ok_ = Sh(absl::StrCat("set -e; ip netns add ", a_, "; ip netns add ", b_, "; ip link add va", id_,
                          " type veth peer name vb", id_, "; ip link set va", id_, " netns ", a_, "; ip link set vb",
                          id_, " netns ", b_, "; ip -n ", a_, " addr add ", Address(1), "/24 dev va", id_,
                          "; ip -n ", b_, " addr add ", Address(2), "/24 dev vb", id_, "; ip -n ", a_,
                          " link set va", id_, " up; ip -n ", b_, " link set vb", id_, " up; ip -n ", a_,
                          " link set lo up; ip -n ", b_, " link set lo up")) == 0;
  }
  ~TwoNamespaces() { Sh(absl::StrCat("ip netns del ", a_, "; ip netns del ", b_)); }
  bool ok() const { return ok_; }
  std::string Address(int node) const { return absl::StrCat("10.77.", id_, ".", node); }
  std::string Namespace(int node) const { return node == 1 ? a_ : b_; }
  bool CutNode2() const { return Sh(absl::StrCat("ip -n ", b_, " link set vb", id_, " down")) == 0; }

 private:
  std::string id_, a_, b_;
  bool ok_ = false;
};

TEST_CASE("faults: a partitioned node: both sides fail by their deadlines, nothing hangs", "[faults][netns]") {
  if (geteuid() != 0 || Sh("command -v ip >/dev/null") != 0) {
    WARN("needs root and iproute2 (ip netns): partition test not run");
    return;
  }
  TwoNamespaces net;
  REQUIRE(net.ok());
  const std::map<std::string, std::string> env = {
      {"BRAID_TRANSPORT", "tcp"}, {"BRAID_TIMEOUT_SEC", "3"}, {"BRAID_JOB_SECRET", "partition-secret"}};
  std::vector<pid_t> agents;
  std::vector<std::string> tags;
  for (int node : {1, 2}) {
    tags.push_back(absl::StrCat("partition_", node));
    agents.push_back(Spawn({"/usr/sbin/ip", "netns", "exec", net.Namespace(node), Runfile("launcher/braidrun"),
                            "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                            absl::StrCat("--rdzv-endpoint=", net.Address(1), ":29460"), "--rdzv-id=partition",
                            absl::StrCat("--local-addr=", net.Address(node)), "--rdzv-conf=join_timeout=3",
                            Runfile("tests/launcher/probe_worker"), "--allreduce", "--rounds=400",
                            "--round-sleep=0.05"},
                           env, tags.back(), kWorkerContract));
  }
  // Let the job run, then cut node 2 off.
  absl::SleepFor(absl::Seconds(2));
  REQUIRE(net.CutNode2());
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
