// Straggler reports: which rank arrives last at the collectives, and by how
// much, learnt at almost no cost. Each rank times every collective it runs
// (two cycle-counter reads): the rank that arrived last waits least, the
// others wait for it, and all finish together, so a rank's lateness is the
// median wait minus its own, with no clocks to compare across hosts. Every
// `window` timed collectives the ranks all-gather their waits (4 bytes each)
// and every rank computes the same report; a rank last in most of them, by
// more than noise, is named (communicator.cc logs it on rank 0, and the
// flight recorder and timeline keep it). Where a window passes in less than
// kMinWindowSpan, only every second, fourth, ... collective is timed, so
// that tiny collectives do not pay for their own monitoring.
#ifndef BRAID_COLLECTIVES_STRAGGLER_H_
#define BRAID_COLLECTIVES_STRAGGLER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace braid {

struct StragglerReport {
  int window = 0;            // collectives looked at
  uint64_t stride = 1;       // one collective in `stride` was timed
  int rank = -1;             // the straggler, or -1: none stands out
  double last_fraction = 0;  // of the window, how often that rank arrived last
  double behind_ms = 0;      // its median lateness when last, behind the median rank
};

// Named when last in at least this fraction of the window, this far behind.
inline constexpr double kStragglerFraction = 0.6;
inline constexpr double kStragglerMinBehindMs = 0.05;

// A window shorter than this (on its slowest rank) doubles the stride; one
// longer than kMaxWindowSpan halves it.
inline constexpr absl::Duration kMinWindowSpan = absl::Milliseconds(10);
inline constexpr absl::Duration kMaxWindowSpan = absl::Milliseconds(80);

// `waits_us[rank * row + j]`: rank's wait in collective j < window <= row. Pure.
StragglerReport AnalyzeWaits(absl::Span<const float> waits_us, int ranks, int window, size_t row);

// "rank 3 arrived last in 92 % of the last 1000 collectives, 4.1 ms behind
// the median" (with a stride: "of 1000 collectives timed, one in 8, ...").
std::string DescribeStraggler(const StragglerReport& report);

class StragglerMonitor {
 public:
  // window 0: off (BRAID_STRAGGLER_WINDOW).
  StragglerMonitor(int ranks, int window);
  bool enabled() const { return window_ > 0; }
  int window() const { return window_; }

  // Whether collective `seq` is timed (the same answer on every rank).
  bool Times(uint64_t seq) const { return window_ > 0 && seq != 0 && (seq & (stride_ - 1)) == 0; }
  uint64_t stride() const { return stride_; }
  // A cheap timestamp (the cycle counter where there is one).
  static uint64_t Stamp();
  // A timed collective ran from `start` to `end` (Stamps) on this rank. True
  // when the window is full: every rank reaches it at the same collective,
  // and must then exchange Mine() into All() before the next Record.
  bool Record(uint64_t start, uint64_t end);
  absl::Span<const std::byte> Mine() const;
  absl::Span<std::byte> All();
  // After the exchange: the report, and the next window begins (with the
  // stride every rank derives from the window's longest span).
  StragglerReport Analyze();

 private:
  const int ranks_;
  const int window_;
  std::vector<uint64_t> ticks_;  // this window's waits, in Stamp units
  std::vector<float> mine_;      // in microseconds; then the window's span
  std::vector<float> all_;
  size_t filled_ = 0;
  uint64_t stride_ = 1;  // a power of two
  // When the window began, in Stamp units and real time: ticks per microsecond.
  uint64_t window_stamp_ = 0;
  absl::Time window_time_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_STRAGGLER_H_
