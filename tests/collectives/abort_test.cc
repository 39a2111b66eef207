// Communicator::Abort from the caller (a trainer giving up, the reducer's
// sticky errors): the peers must hear the reason at once, not at their
// deadline, on every transport; later calls fail fast with the cause.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"

namespace braid {
namespace {

using ::braid::testing::AllTransports;
using ::braid::testing::HarnessBootstrap;
using ::braid::testing::RankContext;
using ::braid::testing::RankMode;
using ::braid::testing::RunRanks;

TEST_CASE("Communicator::Abort tells the peers at once, idle or not", "[collectives][abort]") {
  for (const auto& transport : AllTransports()) {
    CAPTURE(transport.name);
    const std::vector<absl::Status> statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& ctx) -> absl::Status {
      HarnessBootstrap bootstrap(ctx);
      BRAID_ASSIGN_OR_RETURN(auto link, transport.create(bootstrap, DeadlineIn(absl::Seconds(20))));
      CommunicatorOptions options = transport.communicator;
      options.timeout = absl::Seconds(30);  // the peers must not learn it from their deadline
      BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(link), options));
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({1024}, DType::kF32));
      BRAID_ASSIGN_OR_RETURN(WorkHandle first, comm->AllReduce(t, ReduceOp::kSum));
      BRAID_RETURN_IF_ERROR(first->Wait());
      if (ctx.rank() == 0) {
        comm->Abort(absl::InternalError("trainer on rank 0 gave up"));
        BRAID_ASSIGN_OR_RETURN(auto ignored, ctx.AllGather("aborted"));
        (void)ignored;
        absl::StatusOr<WorkHandle> later = comm->AllReduce(t, ReduceOp::kSum);
        if (later.ok() || !absl::StrContains(later.status().message(), "gave up")) {
          return absl::InternalError(absl::StrCat("a call after Abort: ", later.status().ToString()));
        }
        return absl::OkStatus();
      }
      BRAID_ASSIGN_OR_RETURN(auto ignored, ctx.AllGather("waiting"));
      (void)ignored;
      const absl::Time start = absl::Now();
      BRAID_ASSIGN_OR_RETURN(WorkHandle second, comm->AllReduce(t, ReduceOp::kSum));
      const absl::Status status = second->Wait();
      if (status.ok() || !absl::StrContains(status.message(), "trainer on rank 0 gave up")) {
        return absl::InternalError(absl::StrCat("expected the peer's reason, got ", status.ToString()));
      }
      if (absl::Now() - start > absl::Seconds(10)) {
        return absl::InternalError(absl::StrCat("the abort took ", absl::FormatDuration(absl::Now() - start)));
      }
      return absl::OkStatus();
    });
    CHECK_ALL_OK(statuses);
  }
}

}  // namespace
}  // namespace braid
