// Work: the handle of one issued collective (as c10d's Work). The
// communicator finishes it once: from the thread that ran the collective,
// or, for one on device memory, from the stream's callback once the device
// is done (a later Finish, e.g. an abort racing it, is ignored). Any thread
// may wait on it or test it.
#ifndef BRAID_COLLECTIVES_WORK_H_
#define BRAID_COLLECTIVES_WORK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/deadline.h"
#include "tensor/stream.h"

namespace braid {

class Work {
 public:
  // Blocks until the collective finished or `deadline`; returns its status
  // (kDeadlineExceeded if still running at the deadline: it keeps running
  // and ends by its own deadline).
  absl::Status Wait(Deadline deadline = absl::InfiniteFuture());
  // Makes `stream`'s later work wait for the collective, without blocking
  // on the device: for a collective on device memory, its done event (the
  // host waits only until the collective has been queued, at most until
  // `deadline`); for one on the host, it blocks until finished, as Wait.
  // The collective's error, if it already failed.
  absl::Status WaitStream(Stream& stream, Deadline deadline = absl::InfiniteFuture());
  // Non-blocking: true once finished.
  bool Test();
  // Runs `callback` once the collective finished: at once on this thread if
  // it already has, else on the thread that finishes it (braid's progress
  // thread, the device's completion thread, an aborting one), which may hold
  // braid's own locks: it must be short, must not block and must not call
  // braid. What an owner uses to wake its own waiter only when there is
  // something to do, instead of on every issue.
  void OnFinish(absl::AnyInvocable<void() &&> callback);
  // The result once finished; kUnavailable ("still running") before.
  absl::Status status();
  uint64_t seq() const { return seq_; }
  // The peer a finished receive came from (a receive from any source learns
  // it when it runs); -1 before it finished, or for anything else.
  int source_rank() const { return done_.load(std::memory_order_acquire) ? source_rank_ : -1; }

 private:
  friend class Communicator;
  explicit Work(uint64_t seq) : seq_(seq) {}
  // One allocation for the Work and its shared count (make_shared needs a
  // public constructor).
  static std::shared_ptr<Work> Make(uint64_t seq);
  // A Work for `seq`: one of `spares`, reset, that nothing else holds any
  // more (its collective finished and its owner let go), else a new one that
  // takes the place of the oldest spare. Saves a small collective its
  // allocation; a caller holds on to its last handle or two while issuing.
  static std::shared_ptr<Work> Reuse(absl::Span<std::shared_ptr<Work>> spares, uint64_t seq);
  void Finish(absl::Status status);
  // Finish for a Work no other thread can see yet (a collective run on the
  // caller's thread, before its handle is returned): no waiter to wake.
  void FinishUnshared(absl::Status status);
  // The collective is queued on the device; `done` completes after it.
  void Queued(std::shared_ptr<Event> done);

  uint64_t seq_;  // set again only by Reuse, when no other thread holds the Work
  int source_rank_ = -1;  // written before Finish publishes done_
  absl::Mutex mu_;
  // Set once, after status_ (release): a finished Work is read without mu_.
  std::atomic<bool> done_{false};
  absl::Status status_;
  std::shared_ptr<Event> device_done_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::AnyInvocable<void() &&>> on_finish_ ABSL_GUARDED_BY(mu_);
};
using WorkHandle = std::shared_ptr<Work>;

}  // namespace braid

#endif  // BRAID_COLLECTIVES_WORK_H_
