#include "python/torch_backend/work.h"

#include <Python.h>
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "python/torch_backend/errors.h"

namespace braid_torch {
namespace {

// Python is shutting down: a Future's callbacks and a tensor's release may
// take the GIL, which a thread outside Python can no longer get (Python ends
// it with a forced unwind, which aborts the process with "terminate called
// without an active exception"). What is left is then left alone.
bool PythonFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

}  // namespace

BraidWork::BraidWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs, uint64_t seq,
                     std::weak_ptr<Completion> completion)
    : c10d::Work(rank, type, title),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())),
      completion_(std::move(completion)),
      seq_(seq) {}

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  // Not with a timeout: waiting for braid is bounded only by braid's deadline.
  if (timeout.count() <= 0 && !isCompleted()) {
    if (std::shared_ptr<Completion> completion = completion_.lock()) completion->FinishOwn(this);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout.count() <= 0) {  // c10d's kNoTimeout (0) or kUnsetTimeout (-1)
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    Fail("braid " + c10d::opTypeToString(opType_) + ": Work.wait timed out after " + std::to_string(timeout.count()) +
         " ms (rank " + std::to_string(rank_) + "; the operation goes on until it ends or reaches braid's deadline)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

int BraidWork::sourceRank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (source_rank_ < 0) Fail("braid: sourceRank() is known only for a finished recvAnysource");
  return source_rank_;
}

std::exception_ptr BraidWork::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() {
  std::lock_guard<std::mutex> lock(mutex_);
  future_watched_ = true;
  return future_;
}

void BraidWork::SettleFuture(std::exception_ptr error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool BraidWork::CompleteUnwatched(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (future_watched_) return false;
    SettleFuture(error);
  }
  finish(error);
  return true;
}

void BraidWork::Complete(std::exception_ptr error) {
  try {
    SettleFuture(error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] braid %s: a callback of the Work's Future threw: %s\n", rank_,
                 c10d::opTypeToString(opType_).c_str(), MessageOf(e).c_str());
  }
  finish(error);
}

namespace {
thread_local bool on_completion_thread = false;
constexpr size_t kMaxCallbackThreads = 64;
}  // namespace

bool Completion::OnCompletionThread() { return on_completion_thread; }

void Doorbell::Ring() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++rings_;
  }
  cv_.notify_one();
}

uint64_t Doorbell::rings() {
  std::lock_guard<std::mutex> lock(mu_);
  return rings_;
}

void Doorbell::WaitPast(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return rings_ != seen; });
}

void Arrival::Arrive() {
  if (unfinished.fetch_sub(1, std::memory_order_acq_rel) == 1 && !owner_waits.load(std::memory_order_acquire)) {
    bell->Ring();
  }
}

void Arrival::OnBraidFinished(void* arg) {
  auto* arrival = static_cast<std::shared_ptr<Arrival>*>(arg);
  (*arrival)->Arrive();
  delete arrival;
}

void Completion::Watch(Pending& pending) {
  pending.arrival = std::make_shared<Arrival>(static_cast<int>(pending.works.size()) + 1, bell);
  for (braid_work* work : pending.works) {
    auto* arg = new std::shared_ptr<Arrival>(pending.arrival);
    if (braid_work_on_finish(work, &Arrival::OnBraidFinished, arg) != BRAID_OK) Arrival::OnBraidFinished(arg);
  }
}

std::exception_ptr Completion::Await(Pending& next) {
  std::exception_ptr error;
  for (braid_work* work : next.works) {
    const braid_status status = braid_work_wait(work, -1);
    // A receive names its peer (recvAnysource learns it only now).
    if (const int source = braid_work_source(work); source >= 0 && next.handle) next.handle->set_source_rank(source);
    // braid_last_error() is per thread: read on the thread that got the status.
    if (status != BRAID_OK && !error) error = std::make_exception_ptr(std::runtime_error(braid_last_error()));
    braid_work_free(work);
  }
  next.works.clear();
  if (PythonFinalizing()) return error;  // the caller leaves `next` to the process's end
  if (!error && next.on_success) {
    try {
      next.on_success();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(std::runtime_error("braid: copying the result out: " + MessageOf(e)));
    }
  }
  next.keep_alive.clear();
  return error;
}

// The operations `covers` stands for were posted earlier, so their outcome is
// known when this runs on the callback thread after them.
static std::exception_ptr WithCovered(std::exception_ptr error, const std::vector<c10::intrusive_ptr<BraidWork>>& covers) {
  for (const auto& covered : covers) {
    if (!error) error = covered->error();
  }
  return error;
}

void Completion::Complete(Pending& next, std::exception_ptr error) {
  if (!PythonFinalizing()) next.handle->Complete(WithCovered(error, next.covers));
}

namespace {

// The waiter and the callback threads work for the caller: woken, each
// waits for a core rather than preempt the caller that is about to return
// (SCHED_BATCH, as braid's own progress thread; best effort).
void RunAsBackgroundThread() {
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
}

}  // namespace

void Completion::Post(std::function<void()> completion) {
  ready.push_back(std::move(completion));
  if (idle_callback_threads == 0 && callback_threads.size() < kMaxCallbackThreads) {
    callback_threads.emplace_back([this] { CallbackLoop(); });
  }
  ready_cv.notify_one();
}

void Completion::CallbackLoop() {
  RunAsBackgroundThread();
  on_completion_thread = true;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    ++idle_callback_threads;
    ready_cv.wait(lock, [&] { return !ready.empty() || callbacks_stopping; });
    --idle_callback_threads;
    if (ready.empty()) break;  // stopping and drained
    std::function<void()> completion = std::move(ready.front());
    ready.pop_front();
    lock.unlock();
    if (PythonFinalizing()) {
      new std::function<void()>(std::move(completion));  // its destructors may need Python: never run them
    } else {
      completion();
      completion = nullptr;  // the Work's last references go here, not under the lock
    }
    lock.lock();
  }
}

void Completion::Finish(Pending next, std::exception_ptr error) {
  // Nothing earlier is left to complete (only the thread that is busy posts
  // to the callback threads) and no one asked for the Future, so no callback
  // can run: it completes here, a thread switch sooner. Still busy meanwhile,
  // so no issuer finishes a later operation inline before it.
  bool completed = false;
  if (!PythonFinalizing()) {
    bool callbacks_idle = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      callbacks_idle = ready.empty() && idle_callback_threads == static_cast<int>(callback_threads.size());
    }
    completed = callbacks_idle && next.handle->CompleteUnwatched(WithCovered(error, next.covers));
  }
  bool others_waiting = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    busy = false;
    others_waiting = !queue.empty();
    if (!completed) {
      if (PythonFinalizing()) {
        new Pending(std::move(next));  // its destructors may need Python: never run them
      } else {
        Post([handle = std::move(next.handle), error, covers = std::move(next.covers)] {
          handle->Complete(WithCovered(error, covers));
        });
      }
    }
  }
  // The waiter may have looked while this was busy. (`next` goes after the
  // lock: its last references are not released under it.)
  if (others_waiting && !on_completion_thread) bell->Ring();
}

bool Completion::FinishOwn(const BraidWork* handle) {
  if (on_completion_thread) return false;  // a callback: the waiter's order stands
  Pending own;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (queue.empty() || busy || stopping || queue.front().handle.get() != handle) return false;
    own = std::move(queue.front());
    queue.pop_front();
    busy = true;
    if (own.arrival) own.arrival->owner_waits.store(true, std::memory_order_release);
  }
  std::exception_ptr error = Await(own);
  Finish(std::move(own), error);
  return true;
}

void Completion::Run() {
  RunAsBackgroundThread();
  on_completion_thread = true;
  // Waits in slices: the loop looks again after each (a ring it could miss
  // is none: every change it waits for rings after it is made).
  constexpr std::chrono::milliseconds kSlice(1000);
  for (;;) {
    Pending next;
    {
      std::unique_lock<std::mutex> lock(mu);
      const uint64_t seen = bell->rings();
      if (stopping && queue.empty()) break;  // drained
      // Once stopping, what braid has not finished is waited for here (braid's deadline bounds it).
      if (queue.empty() || busy || !(stopping || queue.front().Arrived())) {
        lock.unlock();
        bell->WaitPast(seen, kSlice);
        continue;
      }
      next = std::move(queue.front());
      queue.pop_front();
      busy = true;
    }
    std::exception_ptr error = Await(next);
    Finish(std::move(next), error);
  }
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu);
    callbacks_stopping = true;
    threads.swap(callback_threads);
  }
  ready_cv.notify_all();
  for (std::thread& t : threads) t.join();
  braid_group_destroy(group);
}

}  // namespace braid_torch
