#include "base/mutex.h"

namespace braid {
namespace {

// See mutex.h: Abseil's deadlock graph is uninstrumented, so TSan misreads
// it; elsewhere its bookkeeping on every lock cost about a tenth of a small
// collective's time (Debian's Abseil has it on).
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace
}  // namespace braid
