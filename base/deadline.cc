#include "base/deadline.h"

#include <time.h>

#include <climits>
#include <cmath>

#include "base/env.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kTimeoutKnob, "BRAID_TIMEOUT_SEC", "600",
               "Deadline for every collective and rendezvous wait, in seconds.");

}  // namespace

absl::Time CoarseNow() {
  timespec now;
  // The coarse clock reads what the kernel stamped at its last tick.
  if (clock_gettime(CLOCK_REALTIME_COARSE, &now) != 0) return absl::Now();
  // Nanoseconds since the epoch fit an int64 until 2262; cheaper than TimeFromTimespec.
  return absl::FromUnixNanos(int64_t{now.tv_sec} * 1000000000 + now.tv_nsec);
}

int PollTimeoutMs(Deadline deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const double ms = std::ceil(absl::ToDoubleMilliseconds(left));
  return ms >= static_cast<double>(INT_MAX) ? INT_MAX : static_cast<int>(ms);
}

absl::StatusOr<absl::Duration> DefaultTimeout() { return kTimeoutKnob.Seconds(); }

absl::StatusOr<absl::Duration> ResolveTimeout(absl::optional<absl::Duration> own,
                                              absl::optional<absl::Duration> inherited) {
  if (own.has_value()) return *own;
  if (inherited.has_value()) return *inherited;
  return DefaultTimeout();
}

}  // namespace braid
