// Straggler reports: the analysis alone, then real ranks in processes where
// one rank sleeps before each collective and must be the one named.
#include "collectives/straggler.h"

#include <algorithm>
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

namespace braid::testing {
namespace {

TEST_CASE("Stragglers: the rank that waits least, in most collectives, by more than noise", "[straggler]") {
  constexpr int kRanks = 4, kWindow = 10;
  std::vector<float> waits(kRanks * kWindow, 500.0f);
  // Rank 3 waits 100 us where the others wait 500: it came 400 us late, in 9 of 10.
  for (int j = 0; j < 9; ++j) waits[3 * kWindow + j] = 100.0f;
  waits[1 * kWindow + 9] = 50.0f;
  StragglerReport report = AnalyzeWaits(waits, kRanks, kWindow, kWindow);
  CHECK(report.rank == 3);
  CHECK(report.last_fraction == Approx(0.9));
  CHECK(report.behind_ms == Approx(0.4));
  CHECK(DescribeStraggler(report) == "rank 3 arrived last in 90 % of the last 10 collectives, 400.0 us behind the median");
  // Last half the time only: nobody stands out.
  for (int j = 0; j < 5; ++j) waits[3 * kWindow + j] = 500.0f;
  CHECK(AnalyzeWaits(waits, kRanks, kWindow, kWindow).rank == -1);
  // Always last, but by a few microseconds: noise.
  std::vector<float> close(kRanks * kWindow, 20.0f);
  for (int j = 0; j < kWindow; ++j) close[2 * kWindow + j] = 18.0f;
  CHECK(AnalyzeWaits(close, kRanks, kWindow, kWindow).rank == -1);
  report.rank = -1;
  CHECK(absl::StrContains(DescribeStraggler(report), "no rank stands out"));
}

TEST_CASE("Stragglers: short windows time every second, fourth, ... collective; long ones halve that", "[straggler]") {
  constexpr int kRanks = 2, kWindow = 10;
  StragglerMonitor monitor(kRanks, kWindow);
  // Runs collectives until a window closes; `pause` before each timed one.
  auto window = [&](uint64_t& seq, absl::Duration pause) {
    for (;; ++seq) {
      if (!monitor.Times(seq)) continue;
      absl::SleepFor(pause);
      const uint64_t start = StragglerMonitor::Stamp();
      if (!monitor.Record(start, start + 100)) continue;
      // Both ranks' rows the same, as after the all-gather.
      absl::Span<const std::byte> mine = monitor.Mine();
      absl::Span<std::byte> all = monitor.All();
      REQUIRE(all.size() == mine.size() * kRanks);
      for (int r = 0; r < kRanks; ++r) std::copy(mine.begin(), mine.end(), all.begin() + r * mine.size());
      ++seq;
      return monitor.Analyze();
    }
  };
  uint64_t seq = 1;
  CHECK(monitor.stride() == 1);
  CHECK(window(seq, absl::ZeroDuration()).stride == 1);
  CHECK(monitor.stride() == 2);
  CHECK(!monitor.Times(seq | 1));
  CHECK(window(seq, absl::ZeroDuration()).stride == 2);
  CHECK(monitor.stride() == 4);
  // Ten timed collectives 10 ms apart: a window of 100 ms, past kMaxWindowSpan.
  CHECK(window(seq, absl::Milliseconds(10)).stride == 4);
  CHECK(monitor.stride() == 2);
  const StragglerReport report{.window = 10, .stride = 2, .rank = 1, .last_fraction = 0.9, .behind_ms = 0.4};
  CHECK(DescribeStraggler(report) ==
        "rank 1 arrived last in 90 % of 10 collectives timed, one in 2, 400.0 us behind the median");
  CHECK(!StragglerMonitor(kRanks, 0).Times(1));
}

TEST_CASE("Stragglers: a rank that sleeps in its loop is named on every rank, and only it", "[straggler]") {
  for (const NamedTransport& kind : AllTransports()) {
    for (int slow : {2, 1}) {
      INFO(kind.name << ", rank " << slow << " sleeps");
      auto statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        HarnessBootstrap bootstrap(context);
        BRAID_ASSIGN_OR_RETURN(auto transport, kind.create(bootstrap, context.deadline()));
        CommunicatorOptions options = kind.communicator;
        options.straggler_window = 40;
        BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), options));
        BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({8}, DType::kF32));
        for (int i = 0; i < 80; ++i) {
          if (context.rank() == slow) absl::SleepFor(absl::Milliseconds(2));
          BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm->AllReduce(t, ReduceOp::kSum));
          BRAID_RETURN_IF_ERROR(work->Wait(context.deadline()));
        }
        const StragglerReport report = comm->straggler_report();
        if (report.window != 40 || report.rank != slow || report.last_fraction < 0.8 || report.behind_ms < 1) {
          return absl::InternalError(absl::StrCat("report: ", DescribeStraggler(report)));
        }
        return absl::OkStatus();
      });
      REQUIRE_ALL_OK(statuses);
    }
  }
}

}  // namespace
}  // namespace braid::testing
