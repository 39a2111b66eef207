// A Bootstrap over the test harness's exchange, so transports and
// communicators under test find each other without the store.
#ifndef BRAID_TESTS_COLLECTIVES_TEST_BOOTSTRAP_H_
#define BRAID_TESTS_COLLECTIVES_TEST_BOOTSTRAP_H_

#include <string>
#include <vector>

#include "collectives/transport/bootstrap.h"
#include "tests/harness/run_ranks.h"

namespace braid::testing {

class HarnessBootstrap final : public Bootstrap {
 public:
  explicit HarnessBootstrap(RankContext& context) : context_(context) {}
  int rank() const override { return context_.rank(); }
  int size() const override { return context_.size(); }
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline) override {
    return context_.AllGather(mine);  // bounded by the run's deadline
  }

 private:
  RankContext& context_;
};

}  // namespace braid::testing

#endif  // BRAID_TESTS_COLLECTIVES_TEST_BOOTSTRAP_H_
