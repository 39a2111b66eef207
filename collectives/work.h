// Work: the handle of one issued collective (as c10d's Work). The
// communicator finishes it once, from the thread that ran the collective;
// any thread may wait on it or test it.
#ifndef BRAID_COLLECTIVES_WORK_H_
#define BRAID_COLLECTIVES_WORK_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/deadline.h"

namespace braid {

class Work {
 public:
  // Blocks until the collective finished or `deadline`; returns its status
  // (kDeadlineExceeded if still running at the deadline: it keeps running
  // and ends by its own deadline).
  absl::Status Wait(Deadline deadline = absl::InfiniteFuture());
  // Non-blocking: true once finished.
  bool Test();
  // The result once finished; kUnavailable ("still running") before.
  absl::Status status();
  uint64_t seq() const { return seq_; }

 private:
  friend class Communicator;
  explicit Work(uint64_t seq) : seq_(seq) {}
  // One allocation for the Work and its shared count (make_shared needs a
  // public constructor).
  static std::shared_ptr<Work> Make(uint64_t seq);
  void Finish(absl::Status status);
  // Finish for a Work no other thread can see yet (a collective run on the
  // caller's thread, before its handle is returned): no waiter to wake.
  void FinishUnshared(absl::Status status);

  const uint64_t seq_;
  absl::Mutex mu_;
  // Set once, after status_ (release): a finished Work is read without mu_.
  std::atomic<bool> done_{false};
  absl::Status status_;
};
using WorkHandle = std::shared_ptr<Work>;

}  // namespace braid

#endif  // BRAID_COLLECTIVES_WORK_H_
