// Rendezvous over a real StoreServer, agents as threads each with its own
// TcpStore connection: membership agreement, the last-call window, late
// nodes, restarts into the next round, the static backend, timeouts, and
// failure records.
#include "launcher/rendezvous.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "store/tcp_store.h"

namespace braid {
namespace {

struct Job {
  std::unique_ptr<StoreServer> server;
  HostPort address;

  Job() {
    absl::StatusOr<std::unique_ptr<StoreServer>> started = StoreServer::Start("127.0.0.1", 0);
    REQUIRE(started.ok());
    server = std::move(*started);
    address = {"127.0.0.1", server->port()};
  }
  std::shared_ptr<Store> Client() {
    absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Connect(address, DeadlineIn(absl::Seconds(10)));
    REQUIRE(client.ok());
    return std::shared_ptr<Store>(std::move(*client));
  }
};

RendezvousSpec Spec(int min_nodes, int max_nodes, int index) {
  RendezvousSpec spec;
  spec.run_id = "job";
  spec.min_nodes = min_nodes;
  spec.max_nodes = max_nodes;
  spec.join_timeout = absl::Seconds(20);
  spec.last_call_timeout = absl::Milliseconds(300);
  spec.self = {absl::StrCat("10.0.0.", index), index + 1};
  return spec;
}

// Joins `specs.size()` agents at once (after `after_round`) on threads.
std::vector<absl::StatusOr<RendezvousResult>> JoinAll(Job& job, const std::vector<RendezvousSpec>& specs,
                                                     int after_round = -1) {
  std::vector<absl::StatusOr<RendezvousResult>> results(specs.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::shared_ptr<Store> client = job.Client();
    threads.emplace_back([&, i, client] { results[i] = Rendezvous(client, specs[i]).Join(after_round); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

void CheckAgreement(const std::vector<absl::StatusOr<RendezvousResult>>& results, size_t members) {
  std::vector<bool> seen(members, false);
  for (const auto& result : results) {
    INFO(result.status());
    REQUIRE(result.ok());
    REQUIRE(result->nodes.size() == members);
    CHECK(result->round == results[0]->round);
    for (size_t n = 0; n < members; ++n) {
      CHECK(result->nodes[n].addr == results[0]->nodes[n].addr);
      CHECK(result->nodes[n].nproc == results[0]->nodes[n].nproc);
    }
    REQUIRE(result->node_rank >= 0);
    REQUIRE(result->node_rank < static_cast<int>(members));
    CHECK_FALSE(seen[result->node_rank]);
    seen[result->node_rank] = true;
  }
}

TEST_CASE("rendezvous: three agents agree on one membership and ranks follow node ranks", "[launcher]") {
  Job job;
  const std::vector<RendezvousSpec> specs = {Spec(3, 3, 0), Spec(3, 3, 1), Spec(3, 3, 2)};
  auto results = JoinAll(job, specs);
  CheckAgreement(results, 3);
  for (size_t i = 0; i < results.size(); ++i) {
    const RendezvousResult& r = *results[i];
    CHECK(r.nodes[r.node_rank].addr == specs[i].self.addr);
    CHECK(r.world_size() == 1 + 2 + 3);
    int expected_first = 0;
    for (int n = 0; n < r.node_rank; ++n) expected_first += r.nodes[n].nproc;
    CHECK(r.first_global_rank() == expected_first);
  }
}

TEST_CASE("rendezvous: MIN:MAX closes at MIN after the last call", "[launcher]") {
  Job job;
  const absl::Time start = absl::Now();
  auto results = JoinAll(job, {Spec(2, 3, 0), Spec(2, 3, 1)});
  CheckAgreement(results, 2);
  CHECK(absl::Now() - start >= absl::Milliseconds(300));  // waited for a third
}

TEST_CASE("rendezvous: a late node is seen waiting and joins the next round", "[launcher]") {
  Job job;
  auto first = JoinAll(job, {Spec(1, 2, 0)});
  CheckAgreement(first, 1);
  Rendezvous watcher(job.Client(), Spec(1, 2, 0));
  CHECK_FALSE(*watcher.NodesWaiting(0));

  // The late node joins round 1 (round 0 is closed) and waits there; the
  // running agent sees it and rejoins, as the agent does on a membership change.
  absl::StatusOr<RendezvousResult> late = absl::UnknownError("not run");
  std::shared_ptr<Store> late_client = job.Client();
  std::thread late_thread([&] { late = Rendezvous(late_client, Spec(1, 2, 1)).Join(); });
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  while (!*watcher.NodesWaiting(0) && !Expired(deadline)) absl::SleepFor(absl::Milliseconds(5));
  CHECK(*watcher.NodesWaiting(0));
  absl::StatusOr<RendezvousResult> rejoined = Rendezvous(job.Client(), Spec(1, 2, 0)).Join(0);
  late_thread.join();
  INFO(late.status() << " / " << rejoined.status());
  REQUIRE(late.ok());
  REQUIRE(rejoined.ok());
  CHECK(late->round == 1);
  CHECK(rejoined->round == 1);
  CHECK(late->nodes.size() == 2);
  CHECK(late->node_rank != rejoined->node_rank);
}

TEST_CASE("rendezvous: after a restart every agent meets in the next round", "[launcher]") {
  Job job;
  const std::vector<RendezvousSpec> specs = {Spec(2, 2, 0), Spec(2, 2, 1)};
  auto round0 = JoinAll(job, specs);
  CheckAgreement(round0, 2);
  Rendezvous agent(job.Client(), specs[0]);
  CHECK(agent.RestartReason(0)->empty());
  CHECK(*agent.RequestRestart(0, "rank 1 failed") == "rank 1 failed");
  CHECK(*agent.RequestRestart(0, "rank 0 failed") == "rank 1 failed");  // the first reason wins
  CHECK(*agent.RestartReason(0) == "rank 1 failed");
  auto round1 = JoinAll(job, specs, /*after_round=*/0);
  CheckAgreement(round1, 2);
  CHECK(round1[0]->round == 1);
}

TEST_CASE("rendezvous: static node ranks are the ones given", "[launcher]") {
  Job job;
  std::vector<RendezvousSpec> specs = {Spec(2, 2, 0), Spec(2, 2, 1)};
  specs[0].static_node_rank = 1;
  specs[1].static_node_rank = 0;
  auto results = JoinAll(job, specs);
  CheckAgreement(results, 2);
  CHECK(results[0]->node_rank == 1);
  CHECK(results[1]->node_rank == 0);
  CHECK(results[0]->nodes[0].addr == "10.0.0.1");
}

TEST_CASE("rendezvous: static node ranks arriving out of order all meet in one round", "[launcher]") {
  // Node ranks 0 and 2 first, node rank 1 half a second later: node 0 must
  // not close the round at node 2's arrival (the highest slot), leaving node
  // 1 late for a round the others wait in.
  Job job;
  std::vector<absl::StatusOr<RendezvousResult>> results(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank : {0, 2, 1}) {
    std::shared_ptr<Store> client = job.Client();
    if (rank == 1) absl::SleepFor(absl::Milliseconds(500));
    threads.emplace_back([&results, rank, client] {
      RendezvousSpec spec = Spec(3, 3, rank);
      spec.static_node_rank = rank;
      results[static_cast<size_t>(rank)] = Rendezvous(client, spec).Join();
    });
  }
  for (std::thread& t : threads) t.join();
  CheckAgreement(results, 3);
  for (int rank = 0; rank < 3; ++rank) CHECK(results[static_cast<size_t>(rank)]->node_rank == rank);
}

TEST_CASE("rendezvous: a node that never arrives is a timeout naming the count", "[launcher]") {
  Job job;
  RendezvousSpec spec = Spec(2, 2, 0);
  spec.join_timeout = absl::Milliseconds(400);
  absl::StatusOr<RendezvousResult> result = Rendezvous(job.Client(), spec).Join();
  INFO(result.status());
  REQUIRE(absl::IsDeadlineExceeded(result.status()));
  CHECK(absl::StrContains(result.status().message(), "1 of 2 required nodes"));
  CHECK(absl::StrContains(result.status().message(), "join_timeout"));
}

TEST_CASE("rendezvous: failure records come back sorted by time", "[launcher]") {
  Job job;
  Rendezvous agent(job.Client(), Spec(1, 1, 0));
  const absl::Time t0 = absl::Now();
  REQUIRE(agent.RecordFailure(0, {t0 + absl::Seconds(1), 3, 1, "b", "exit code 1", "late\n"}).ok());
  REQUIRE(agent.RecordFailure(0, {t0, 2, 0, "a", "signal SIGKILL (9)", "first\tline\n"}).ok());
  absl::StatusOr<std::vector<FailureRecord>> failures = agent.Failures(0);
  REQUIRE(failures.ok());
  REQUIRE(failures->size() == 2);
  CHECK((*failures)[0].global_rank == 2);
  CHECK((*failures)[0].how == "signal SIGKILL (9)");
  CHECK((*failures)[0].tail == "first\tline\n");
  CHECK((*failures)[1].global_rank == 3);
  CHECK(agent.Failures(1)->empty());
}

}  // namespace
}  // namespace braid
