// Tests of base/deadline.h: Expired, DeadlineIn and PollTimeoutMs rounding.
#include "base/deadline.h"

#include <climits>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

TEST_CASE("Expired and DeadlineIn", "[base][deadline]") {
  CHECK(Expired(absl::Now() - absl::Milliseconds(1)));
  CHECK(Expired(absl::InfinitePast()));
  CHECK_FALSE(Expired(DeadlineIn(absl::Seconds(60))));
  CHECK_FALSE(Expired(absl::InfiniteFuture()));
  CHECK(Expired(DeadlineIn(absl::ZeroDuration())));
  CHECK(Expired(DeadlineIn(-absl::Seconds(1))));

  const absl::Time before = absl::Now();
  const Deadline deadline = DeadlineIn(absl::Seconds(5));
  const absl::Time after = absl::Now();
  CHECK(deadline >= before + absl::Seconds(5));
  CHECK(deadline <= after + absl::Seconds(5));
}

TEST_CASE("PollTimeoutMs: 0 once expired, -1 only for the infinite future", "[base][deadline]") {
  CHECK(PollTimeoutMs(absl::Now()) == 0);
  CHECK(PollTimeoutMs(absl::Now() - absl::Seconds(3)) == 0);
  CHECK(PollTimeoutMs(absl::InfinitePast()) == 0);
  CHECK(PollTimeoutMs(absl::InfiniteFuture()) == -1);
}

TEST_CASE("PollTimeoutMs rounds up so a wait never ends early", "[base][deadline]") {
  // With d - now = 10.2 ms the answer is 11 (or 10 if more than 0.2 ms passed
  // before the call), never less than what is left after the call.
  for (int i = 0; i < 100; ++i) {
    const Deadline deadline = absl::Now() + absl::Microseconds(10200);
    const int ms = PollTimeoutMs(deadline);
    const absl::Duration left_after = deadline - absl::Now();
    CAPTURE(ms, absl::FormatDuration(left_after));
    CHECK(ms <= 11);
    CHECK(absl::Milliseconds(ms) >= left_after);
  }
  // A sliver left is a wait of 1 ms, not a busy 0.
  const Deadline soon = absl::Now() + absl::Microseconds(900);
  const int ms = PollTimeoutMs(soon);
  if (!Expired(soon)) CHECK(ms == 1);

  // Whole milliseconds: the ceiling of slightly less than an hour is an hour.
  const int hour = PollTimeoutMs(absl::Now() + absl::Hours(1));
  CHECK(hour <= 3600000);
  CHECK(hour >= 3600000 - 100);
}

TEST_CASE("PollTimeoutMs caps far deadlines at INT_MAX", "[base][deadline]") {
  CHECK(PollTimeoutMs(absl::Now() + absl::Hours(24 * 100)) == INT_MAX);
  CHECK(PollTimeoutMs(absl::Now() + absl::Hours(24 * 365 * 1000)) == INT_MAX);
  // Just below the cap stays exact-ish.
  const int below = PollTimeoutMs(absl::Now() + absl::Milliseconds(INT_MAX - 1000));
  CHECK(below < INT_MAX);
  CHECK(below >= INT_MAX - 1100);
}

}  // namespace
}  // namespace braid
