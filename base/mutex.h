// Locking that ThreadSanitizer can see. Debian's Abseil is not built with
// -fsanitize=thread, so TSan cannot see absl::Mutex order anything: data it
// guards looks racy, and real races behind it go unseen. MutexLock and Await
// here are absl::MutexLock and absl::Mutex::Await(WithDeadline) that, under
// TSan only, also tell TSan "acquire" after taking the mutex and "release"
// before giving it up; in other builds they are exactly Abseil's. Use them
// for every absl::Mutex shared between threads.
//
// Linking this library also turns off Abseil's deadlock detector: under TSan
// its uninstrumented bookkeeping reads as races, and everywhere it costs time
// on every lock.
#ifndef BRAID_BASE_MUTEX_H_
#define BRAID_BASE_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace braid {

inline void TsanAcquire(absl::Mutex* mu) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(mu);
#else
  (void)mu;
#endif
}

inline void TsanRelease(absl::Mutex* mu) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(mu);
#else
  (void)mu;
#endif
}

// Holds `mu` for the scope. Blocks while another thread holds it.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
    TsanAcquire(mu_);
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    TsanRelease(mu_);
    mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

namespace internal {

// Abseil evaluates a waiter's condition with the mutex held, possibly on the
// thread that is unlocking: tell TSan about the mutex around each evaluation.
class TsanVisibleCondition {
 public:
  TsanVisibleCondition(absl::Mutex* mu, const absl::Condition& condition) : mu_(mu), condition_(condition) {}
  bool Eval() const {
    TsanAcquire(mu_);
    const bool met = condition_.Eval();
    TsanRelease(mu_);
    return met;
  }

 private:
  absl::Mutex* mu_;
  const absl::Condition& condition_;
};

}  // namespace internal

// mu->Await(condition) with `mu` held (via MutexLock): releases it while waiting.
inline void Await(absl::Mutex* mu, const absl::Condition& condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const internal::TsanVisibleCondition visible(mu, condition);
  TsanRelease(mu);
  mu->Await(absl::Condition(&visible, &internal::TsanVisibleCondition::Eval));
  TsanAcquire(mu);
}

// cv->Wait(mu) with `mu` held: releases it while waiting. Unlike Await, a
// waiter costs the threads that unlock `mu` nothing; they Signal `cv` when
// what the waiter waits for may have changed.
inline void Wait(absl::CondVar* cv, absl::Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  TsanRelease(mu);
  cv->Wait(mu);
  TsanAcquire(mu);
}

// As Wait, giving up after `timeout`; true when it timed out.
inline bool WaitWithTimeout(absl::CondVar* cv, absl::Mutex* mu, absl::Duration timeout)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  TsanRelease(mu);
  const bool timed_out = cv->WaitWithTimeout(mu, timeout);
  TsanAcquire(mu);
  return timed_out;
}

// As Await, giving up at `deadline`; true when the condition held.
inline bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const internal::TsanVisibleCondition visible(mu, condition);
  TsanRelease(mu);
  const bool met = mu->AwaitWithDeadline(absl::Condition(&visible, &internal::TsanVisibleCondition::Eval), deadline);
  TsanAcquire(mu);
  return met;
}

// A mutex for a few stores on every collective's path, with the same
// annotations: std::mutex, which TSan sees natively. Uncontended, a lock and
// unlock cost 2.5 ns here against 16 ns for absl::Mutex. It has no Await;
// a thread that waits on it for a condition uses a LightCondVar.
class ABSL_LOCKABLE LightMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class LightCondVar;
  std::mutex mu_;
};

// std::condition_variable over a LightMutex: Wait releases the mutex while
// it waits, as Wait(absl::CondVar*, absl::Mutex*) does.
class LightCondVar {
 public:
  void Wait(LightMutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held, by the caller's scope
  }
  void Signal() { cv_.notify_one(); }

 private:
  std::condition_variable cv_;
};

// Holds a LightMutex for the scope.
class ABSL_SCOPED_LOCKABLE LightMutexLock {
 public:
  explicit LightMutexLock(LightMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~LightMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  LightMutexLock(const LightMutexLock&) = delete;
  LightMutexLock& operator=(const LightMutexLock&) = delete;

 private:
  LightMutex* const mu_;
};

}  // namespace braid

#endif  // BRAID_BASE_MUTEX_H_
