#include "collectives/work.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"

namespace braid {

void Work::Finish(absl::Status status) {
  std::vector<absl::AnyInvocable<void() &&>> callbacks;
  {
    MutexLock lock(&mu_);
    if (done_.load(std::memory_order_relaxed)) return;
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
    callbacks.swap(on_finish_);
  }
  for (auto& callback : callbacks) std::move(callback)();
}

void Work::OnFinish(absl::AnyInvocable<void() &&> callback) {
  {
    MutexLock lock(&mu_);
    if (!done_.load(std::memory_order_relaxed)) {
      on_finish_.push_back(std::move(callback));
      return;
    }
  }
  std::move(callback)();
}

void Work::Queued(std::shared_ptr<Event> done) {
  MutexLock lock(&mu_);
  device_done_ = std::move(done);
}

absl::Status Work::WaitStream(Stream& stream, Deadline deadline) {
  std::shared_ptr<Event> event;
  {
    MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return device_done_ != nullptr || done_.load(std::memory_order_relaxed);
    };
    if (!AwaitWithDeadline(&mu_, absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("collective seq ", seq_, " not yet queued at the wait's deadline"));
    }
    if (done_.load(std::memory_order_relaxed) && !status_.ok()) return status_;
    event = device_done_;
  }
  if (event == nullptr) return absl::OkStatus();  // a host collective, finished
  return stream.WaitEvent(*event);
}

void Work::FinishUnshared(absl::Status status) {
  status_ = std::move(status);
  done_.store(true, std::memory_order_release);
}

std::shared_ptr<Work> Work::Make(uint64_t seq) {
  struct Constructible : Work {
    explicit Constructible(uint64_t seq) : Work(seq) {}
  };
  return std::make_shared<Constructible>(seq);
}

// No lock: no other thread can reach a Work whose only owner is `spare`.
std::shared_ptr<Work> Work::Reuse(absl::Span<std::shared_ptr<Work>> spares, uint64_t seq) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  auto reusable = std::find_if(spares.begin(), spares.end(),
                               [](const std::shared_ptr<Work>& w) { return w != nullptr && w.use_count() == 1; });
  if (reusable == spares.end()) {
    // The oldest spare (the lowest seq) makes room.
    auto oldest = std::min_element(spares.begin(), spares.end(), [](const auto& a, const auto& b) {
      return b != nullptr && (a == nullptr || a->seq_ < b->seq_);
    });
    *oldest = Make(seq);
    return *oldest;
  }
  std::shared_ptr<Work>& spare = *reusable;
  // use_count() read the count (relaxed) after the last other owner's
  // release decrement: an acquire fence orders whatever that owner read or
  // wrote of the Work before what follows. TSan does not model fences: there,
  // taking and dropping a reference (an acquire-release decrement) does it.
#if defined(__SANITIZE_THREAD__)
  { std::shared_ptr<Work> handshake = spare; }
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
  Work& work = *spare;
  work.seq_ = seq;
  work.source_rank_ = -1;
  work.status_ = absl::OkStatus();
  work.device_done_.reset();
  work.on_finish_.clear();
  work.done_.store(false, std::memory_order_relaxed);
  return spare;
}

absl::Status Work::Wait(Deadline deadline) {
  if (done_.load(std::memory_order_acquire)) return status_;
  MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_.load(std::memory_order_relaxed); };
  if (!AwaitWithDeadline(&mu_, absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("collective seq ", seq_, " still running at the wait's deadline"));
  }
  return status_;
}

bool Work::Test() { return done_.load(std::memory_order_acquire); }

absl::Status Work::status() {
  if (!done_.load(std::memory_order_acquire)) return absl::UnavailableError(absl::StrCat("collective seq ", seq_, " still running"));
  return status_;
}

}  // namespace braid
