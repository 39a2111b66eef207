// BRAID_DEBUG=detail: before every collective the ranks compare what they are
// about to run. Agreeing ranks run as usual; ranks that disagree on something
// the frame check cannot see (a broadcast's root: the frames of a chain that
// starts at different roots never meet) all fail at once, each error listing
// every rank's call.
#include <stdlib.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "tests/harness/statuses.h"
#include "collectives/communicator.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"

namespace braid {
namespace {

using ::braid::testing::AllTransports;
using ::braid::testing::HarnessBootstrap;
using ::braid::testing::RankContext;
using ::braid::testing::RankMode;
using ::braid::testing::RunRanks;

std::vector<absl::Status> RunDetail(const std::function<absl::Status(Communicator&, int rank)>& body) {
  setenv("BRAID_DEBUG", "detail", 1);  // read when each forked rank creates its communicator
  std::vector<absl::Status> all;
  for (const auto& transport : AllTransports()) {
    std::vector<absl::Status> statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& ctx) -> absl::Status {
      HarnessBootstrap bootstrap(ctx);
      BRAID_ASSIGN_OR_RETURN(auto link, transport.create(bootstrap, DeadlineIn(absl::Seconds(20))));
      CommunicatorOptions options = transport.communicator;
      options.timeout = absl::Seconds(20);
      BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(link), options));
      return Annotate(body(*comm, ctx.rank()), transport.name);
    });
    all.insert(all.end(), statuses.begin(), statuses.end());
  }
  unsetenv("BRAID_DEBUG");
  return all;
}

TEST_CASE("BRAID_DEBUG=detail: agreeing ranks run every collective as usual", "[collectives][debug]") {
  const std::vector<absl::Status> statuses = RunDetail([](Communicator& comm, int rank) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({100}, DType::kF32));
    t.data<float>()[0] = static_cast<float>(rank + 1);
    BRAID_ASSIGN_OR_RETURN(WorkHandle a, comm.AllReduce(t, ReduceOp::kSum));
    BRAID_RETURN_IF_ERROR(a->Wait());
    if (t.data<float>()[0] != 6.0f) return absl::InternalError("wrong sum");
    BRAID_ASSIGN_OR_RETURN(WorkHandle b, comm.Broadcast(t, 2));
    BRAID_RETURN_IF_ERROR(b->Wait());
    BRAID_ASSIGN_OR_RETURN(WorkHandle c, comm.Barrier());
    return c->Wait();
  });
  CHECK_ALL_OK(statuses);
}

TEST_CASE("BRAID_DEBUG=detail: ranks with different broadcast roots all get every rank's call", "[collectives][debug]") {
  const std::vector<absl::Status> statuses = RunDetail([](Communicator& comm, int rank) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({10}, DType::kF32));
    BRAID_ASSIGN_OR_RETURN(WorkHandle b, comm.Broadcast(t, rank == 1 ? 1 : 0));
    return b->Wait();
  });
  for (const absl::Status& s : statuses) {
    INFO(s);
    CHECK(absl::IsInvalidArgument(s));
    CHECK(absl::StrContains(s.message(), "BRAID_DEBUG=detail: the ranks issued different collectives"));
    CHECK(absl::StrContains(s.message(), "rank 0 issued broadcast seq 1 (count 10, float32, root 0)"));
    CHECK(absl::StrContains(s.message(), "rank 1 issued broadcast seq 1 (count 10, float32, root 1)"));
  }
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

TEST_CASE("BRAID_DEBUG: unset or info checks native collectives, detail every one, off none; others refused",
          "[collectives][debug]") {
  auto with = [](const char* value) {
    setenv("BRAID_DEBUG", value, 1);
    absl::StatusOr<AgreementChecks> checks = AgreementChecksFromEnv();
    unsetenv("BRAID_DEBUG");
    return checks;
  };
  CHECK(AgreementChecksFromEnv().value() == AgreementChecks::kNative);
  CHECK(with("INFO").value() == AgreementChecks::kNative);
  CHECK(with("detail").value() == AgreementChecks::kEvery);
  CHECK(with("Detail").value() == AgreementChecks::kEvery);
  CHECK(with("off").value() == AgreementChecks::kOff);
  const absl::StatusOr<AgreementChecks> bogus = with("verbose");
  CHECK(bogus.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(bogus.status().message(), "BRAID_DEBUG=\"verbose\""));
}

}  // namespace
}  // namespace braid
