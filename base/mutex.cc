#include "base/mutex.h"

namespace braid {
namespace {

#if defined(__SANITIZE_THREAD__)
// See mutex.h: Abseil's deadlock graph is uninstrumented; TSan misreads it.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();
#endif

}  // namespace
}  // namespace braid
