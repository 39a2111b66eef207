// The flight recorder over real processes: a failing collective dumps every
// rank that saw the failure, SIGUSR1 dumps on demand, and
// tools/flight_analyze.py reads the dumps and names the rank that is behind or
// the sequence number where ranks diverged. (No recorder is created in the
// test process itself: its SIGUSR1 thread would make the forks below
// multi-threaded, which TSan refuses.)
#include "collectives/flight_recorder.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "collectives/transport/shm/shm_transport.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/subprocess.h"
#include "tests/harness/statuses.h"

namespace braid {
namespace {

using ::braid::testing::HarnessBootstrap;
using ::braid::testing::RankContext;
using ::braid::testing::RankMode;
using ::braid::testing::RunRanks;

// Runs 3 ranks over shm that do `plan(rank)` all-reduces of `count(rank, i)`
// elements (1 s deadline), then dump (SIGUSR1 for ranks that did not fail),
// and returns the analyser's output.
std::string RunAndAnalyze(const std::string& name, int (*calls)(int rank), size_t (*count)(int rank, int i)) {
  const std::string dir = absl::StrCat(TestTempDir(), "/flight_", name);
  setenv("BRAID_FLIGHT_DIR", dir.c_str(), 1);
  const std::vector<absl::Status> statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& ctx) -> absl::Status {
    HarnessBootstrap bootstrap(ctx);
    BRAID_ASSIGN_OR_RETURN(auto link, ShmTransport::Create(bootstrap, DeadlineIn(absl::Seconds(20))));
    CommunicatorOptions options;
    options.timeout = absl::Seconds(1);
    BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(link), options));
    bool failed = false;
    for (int i = 0; i < calls(ctx.rank()) && !failed; ++i) {
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({static_cast<int64_t>(count(ctx.rank(), i))}, DType::kF32));
      BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm->AllReduce(t, ReduceOp::kSum));
      failed = !work->Wait().ok();
    }
    const std::string mine = absl::StrCat(dir, "/rank", ctx.rank(), ".json");
    if (!failed) raise(SIGUSR1);  // a healthy rank dumps on demand
    const Deadline deadline = DeadlineIn(absl::Seconds(10));
    struct stat st;
    while (stat(mine.c_str(), &st) != 0 && !Expired(deadline)) absl::SleepFor(absl::Milliseconds(10));
    if (stat(mine.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("no dump at ", mine));
    return absl::OkStatus();
  });
  unsetenv("BRAID_FLIGHT_DIR");
  CHECK_ALL_OK(statuses);
  const ProcessExit analysis =
      RunProcess({"/usr/bin/python3", Runfile("tools/flight_analyze.py"), dir}, {}, "analyze_" + name, absl::Seconds(30));
  INFO(analysis.out << analysis.err);
  CHECK(analysis.code == 0);
  return analysis.out;
}

TEST_CASE("flight recorder + analyser: a rank that skipped a collective is named as behind", "[flight]") {
  const std::string out = RunAndAnalyze(
      "behind", [](int rank) { return rank == 2 ? 2 : 3; }, [](int, int) -> size_t { return 1000; });
  INFO(out);
  CHECK(absl::StrContains(out, "3 of 3 ranks dumped"));
  CHECK(absl::StrContains(out, "rank 2 is behind: it issued collectives up to seq 2; rank(s) 0, 1 reached seq 3"));
  CHECK_FALSE(absl::StrContains(out, "diverged"));
}

TEST_CASE("flight recorder + analyser: ranks that issued different counts are named with the seq", "[flight]") {
  const std::string out = RunAndAnalyze(
      "diverged", [](int) { return 3; }, [](int rank, int i) -> size_t { return rank == 1 && i == 1 ? 999 : 1000; });
  INFO(out);
  CHECK(absl::StrContains(out, "diverged at seq 2: rank 0 issued allreduce count 1000 float32 sum; "
                               "rank 1 issued allreduce count 999 float32 sum; rank 2 issued allreduce count 1000"));
}

}  // namespace
}  // namespace braid
