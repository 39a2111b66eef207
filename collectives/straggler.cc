#include "collectives/straggler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace braid {

namespace {

// Where tiny collectives stop doubling the stride (one timed in a million).
constexpr uint64_t kMaxStride = uint64_t{1} << 20;

}  // namespace

StragglerReport AnalyzeWaits(absl::Span<const float> waits_us, int ranks, int window, size_t row) {
  StragglerReport report;
  report.window = window;
  if (ranks < 2 || window <= 0 || row < static_cast<size_t>(window) || waits_us.size() < static_cast<size_t>(ranks) * row) {
    return report;
  }
  std::vector<int> last_count(static_cast<size_t>(ranks), 0);
  std::vector<std::vector<float>> behind(static_cast<size_t>(ranks));
  std::vector<float> column(static_cast<size_t>(ranks));
  for (int j = 0; j < window; ++j) {
    int last = 0;
    for (int r = 0; r < ranks; ++r) {
      column[r] = waits_us[static_cast<size_t>(r) * row + j];
      if (column[r] < column[last]) last = r;
    }
    const float least = column[last];
    std::nth_element(column.begin(), column.begin() + ranks / 2, column.end());
    ++last_count[last];
    behind[last].push_back(column[ranks / 2] - least);
  }
  const int most = static_cast<int>(std::max_element(last_count.begin(), last_count.end()) - last_count.begin());
  std::vector<float>& lateness = behind[most];
  std::nth_element(lateness.begin(), lateness.begin() + lateness.size() / 2, lateness.end());
  const double fraction = static_cast<double>(last_count[most]) / window;
  const double behind_ms = lateness[lateness.size() / 2] / 1000.0;
  if (fraction >= kStragglerFraction && behind_ms >= kStragglerMinBehindMs) {
    report.rank = most;
    report.last_fraction = fraction;
    report.behind_ms = behind_ms;
  }
  return report;
}

std::string DescribeStraggler(const StragglerReport& report) {
  if (report.rank < 0) return absl::StrFormat("no rank stands out as last in the last %d collectives", report.window);
  const bool ms = report.behind_ms >= 1;
  const std::string looked_at =
      report.stride > 1 ? absl::StrFormat("%d collectives timed, one in %d", report.window, report.stride)
                        : absl::StrFormat("the last %d collectives", report.window);
  return absl::StrFormat("rank %d arrived last in %d %% of %s, %.1f %s behind the median", report.rank,
                         static_cast<int>(std::lround(report.last_fraction * 100)), looked_at,
                         ms ? report.behind_ms : report.behind_ms * 1000, ms ? "ms" : "us");
}

StragglerMonitor::StragglerMonitor(int ranks, int window)
    : ranks_(ranks),
      window_(ranks > 1 ? std::max(window, 0) : 0),
      ticks_(static_cast<size_t>(window_)),
      mine_(static_cast<size_t>(window_) + 1),
      all_(mine_.size() * static_cast<size_t>(std::max(ranks, 1))),
      window_stamp_(Stamp()),
      window_time_(absl::Now()) {}

uint64_t StragglerMonitor::Stamp() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

bool StragglerMonitor::Record(uint64_t start, uint64_t end) {
  if (window_ == 0) return false;
  ticks_[filled_++] = end > start ? end - start : 0;
  if (filled_ < ticks_.size()) return false;
  // Once per window: the ticks' rate from the window's own span of real time.
  const uint64_t stamp = Stamp();
  const absl::Time now = absl::Now();
  const double us = absl::ToDoubleMicroseconds(now - window_time_);
  const double per_us = us > 0 && stamp > window_stamp_ ? static_cast<double>(stamp - window_stamp_) / us : 1;
  for (size_t j = 0; j < ticks_.size(); ++j) mine_[j] = static_cast<float>(static_cast<double>(ticks_[j]) / per_us);
  mine_.back() = static_cast<float>(us);
  window_stamp_ = stamp;
  window_time_ = now;
  return true;
}

absl::Span<const std::byte> StragglerMonitor::Mine() const {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(mine_.data()), mine_.size() * sizeof(float));
}

absl::Span<std::byte> StragglerMonitor::All() {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(all_.data()), all_.size() * sizeof(float));
}

StragglerReport StragglerMonitor::Analyze() {
  filled_ = 0;
  StragglerReport report = AnalyzeWaits(all_, ranks_, window_, mine_.size());
  report.stride = stride_;
  float longest_us = 0;
  for (int r = 0; r < ranks_; ++r) longest_us = std::max(longest_us, all_[(static_cast<size_t>(r) + 1) * mine_.size() - 1]);
  const absl::Duration longest = absl::Microseconds(longest_us);
  if (longest < kMinWindowSpan && stride_ < kMaxStride) stride_ *= 2;
  if (longest > kMaxWindowSpan && stride_ > 1) stride_ /= 2;
  return report;
}

}  // namespace braid
