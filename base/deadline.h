// Deadlines. Every wait in braid has one: an absl::Time after which the wait
// gives up with kDeadlineExceeded. Helpers turn it into what system calls take.
#ifndef BRAID_BASE_DEADLINE_H_
#define BRAID_BASE_DEADLINE_H_

#include <algorithm>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace braid {

using Deadline = absl::Time;

inline Deadline DeadlineIn(absl::Duration timeout) { return absl::Now() + timeout; }
inline bool Expired(Deadline deadline) { return absl::Now() >= deadline; }

// absl::Now() to within a clock tick (a few milliseconds) at a fraction of
// its cost: for what every collective stamps (flight recorder times, its
// deadline), where a tick does not matter and absl::Now() was a third of an
// 8-byte all-reduce's own time.
absl::Time CoarseNow();

// Milliseconds left until `deadline`, for poll(2)/epoll_wait(2): 0 once
// expired, rounded up so a wait never ends early, capped at INT_MAX;
// -1 (wait forever) only for absl::InfiniteFuture().
int PollTimeoutMs(Deadline deadline);

// The default collective / rendezvous timeout: BRAID_TIMEOUT_SEC, 600 s unless set.
absl::StatusOr<absl::Duration> DefaultTimeout();

// The one timeout rule, for every object and call that waits: its own
// timeout if given, else the one it inherits (a reducer its group's, a call
// its communicator's), else DefaultTimeout().
absl::StatusOr<absl::Duration> ResolveTimeout(absl::optional<absl::Duration> own,
                                              absl::optional<absl::Duration> inherited = absl::nullopt);

namespace deadline_internal {
inline const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}
}  // namespace deadline_internal

// A wait that must notice something besides its own result (a signal, a
// revoked epoch, a peer called off): `attempt(until)` runs with deadlines a
// `slice` apart up to `deadline`; after each that ends in kDeadlineExceeded
// before `deadline`, `between()` may end the wait with its error. Returns
// the last attempt's result (a Status or StatusOr), or that error.
template <typename Attempt, typename Between>
auto InSlices(Deadline deadline, absl::Duration slice, Attempt attempt, Between between)
    -> decltype(attempt(deadline)) {
  while (true) {
    auto result = attempt(std::min(deadline, DeadlineIn(slice)));
    if (!absl::IsDeadlineExceeded(deadline_internal::StatusOf(result)) || Expired(deadline)) return result;
    if (absl::Status stop = between(); !stop.ok()) return stop;
  }
}

}  // namespace braid

#endif  // BRAID_BASE_DEADLINE_H_
