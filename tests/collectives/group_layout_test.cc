#include "collectives/group_layout.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

TEST_CASE("HostLayout: hosts in order of first appearance, local ranks, the two levels' groups", "[layout]") {
  const std::vector<std::string> names = {"b", "a", "b", "c", "a", "b"};
  const HostLayout layout = MakeHostLayout(names);
  CHECK(layout.hosts() == 3);
  CHECK(layout.host_of == std::vector<int>{0, 1, 0, 2, 1, 0});
  CHECK(layout.local_rank_of == std::vector<int>{0, 0, 1, 0, 1, 2});
  CHECK(layout.ranks_on[0] == std::vector<int>{0, 2, 5});
  CHECK(layout.min_per_host() == 1);
  CHECK(layout.max_per_host() == 3);
  CHECK_FALSE(layout.even());
  CHECK(layout.LocalGroup(2) == std::vector<int>{0, 2, 5});
  CHECK(layout.CrossGroup(0) == std::vector<int>{0, 1, 3});
  CHECK(layout.CrossGroup(4) == std::vector<int>{2, 4});  // host c has no local rank 1
  CHECK(layout.CrossGroup(5) == std::vector<int>{5});
  CHECK(layout.RankAt(2, 1) == -1);
  // Every rank is in exactly one local group and one cross group, and the
  // two meet in itself only.
  for (int r = 0; r < 6; ++r) {
    for (int q = 0; q < 6; ++q) {
      const auto& local = layout.LocalGroup(r);
      const auto cross = layout.CrossGroup(r);
      const bool in_local = std::find(local.begin(), local.end(), q) != local.end();
      const bool in_cross = std::find(cross.begin(), cross.end(), q) != cross.end();
      CHECK((in_local && in_cross) == (q == r));
    }
  }
  const HostLayout even = MakeHostLayout(std::vector<std::string>{"x", "y", "x", "y"});
  CHECK(even.even());
  CHECK(even.CrossGroup(2) == std::vector<int>{2, 3});
}

TEST_CASE("PlanSplit: members by (key, rank), outsiders, and lists that differ", "[layout]") {
  std::vector<SplitRequest> requests = {{1, 5, 0}, {0, 0, 0}, {1, 5, 0}, {1, -2, 0}, {-1, 0, 0}};
  absl::StatusOr<SplitPlan> plan = PlanSplit(requests, 2);
  REQUIRE(plan.ok());
  CHECK(plan->members == std::vector<int>{3, 0, 2});
  CHECK(plan->rank == 2);
  plan = PlanSplit(requests, 4);
  REQUIRE(plan.ok());
  CHECK(plan->rank == -1);
  CHECK(plan->members.empty());
  plan = PlanSplit(requests, 1);
  REQUIRE(plan.ok());
  CHECK(plan->members == std::vector<int>{1});
  requests[3].check = 7;
  plan = PlanSplit(requests, 0);
  REQUIRE_FALSE(plan.ok());
  CHECK(absl::StrContains(plan.status().message(), "ranks 0 and 3"));
}

}  // namespace
}  // namespace braid
