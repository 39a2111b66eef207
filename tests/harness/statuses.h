// One rank's status per line, and the assertions a multi-rank test makes on
// them. Catch2 v2's assertions are not thread-safe: call these on the main
// thread, after RunRanks has collected every rank's status.
//
//   const std::vector<absl::Status> statuses = RunRanks(n, mode, fn);
//   REQUIRE_ALL_OK(statuses);   // stops the test case at the first failure
//   CHECK_ALL_OK(statuses);     // records the failure and goes on
#ifndef BRAID_TESTS_HARNESS_STATUSES_H_
#define BRAID_TESTS_HARNESS_STATUSES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"

namespace braid::testing {

// "statuses:\n  rank 0: OK\n  rank 1: UNAVAILABLE: ..." (one line a rank).
std::string DescribeStatuses(const std::vector<absl::Status>& statuses);

// True when every status is OK.
bool AllOk(const std::vector<absl::Status>& statuses);

}  // namespace braid::testing

#define BRAID_ALL_OK_(ASSERT, statuses)                                       \
  do {                                                                        \
    const std::vector<absl::Status>& braid_statuses_ = (statuses);            \
    INFO(::braid::testing::DescribeStatuses(braid_statuses_));                \
    ASSERT(::braid::testing::AllOk(braid_statuses_));                         \
  } while (false)
#define REQUIRE_ALL_OK(statuses) BRAID_ALL_OK_(REQUIRE, statuses)
#define CHECK_ALL_OK(statuses) BRAID_ALL_OK_(CHECK, statuses)

#endif  // BRAID_TESTS_HARNESS_STATUSES_H_
