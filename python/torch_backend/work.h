// What the backend returns for each operation (BraidWork), and the one thread
// per backend that completes them in issue order (Completion).
//
// braid runs a group's collectives in the order they were issued, so one
// thread waiting on them in that order completes each as soon as it can: it
// waits on braid's handles (each bounded by braid's deadline), runs the
// copy-outs of the list-shaped collectives, then completes the Work and its
// Future (which DDP chains on) with the list of output tensors, or fails
// both with braid's message.
#ifndef BRAID_PYTHON_TORCH_BACKEND_WORK_H_
#define BRAID_PYTHON_TORCH_BACKEND_WORK_H_

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "capi/braid.h"

namespace braid_torch {

struct Completion;

class BraidWork : public c10d::Work {
 public:
  // `completion`: the backend's, whose queue this Work waits in.
  BraidWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs, uint64_t seq,
            std::weak_ptr<Completion> completion);

  // Blocks until the operation finished (bounded by braid's deadline) or,
  // with a nonzero timeout, until then (then throws; the operation goes on).
  // Throws braid's error if it failed. Without a timeout, a Work first in its
  // backend's queue is completed by its own waiter (Completion::FinishOwn).
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Marks the Future as watched: from then on its completion (and so its
  // callbacks) runs on a callback thread.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }
  int sourceRank() const override;

  // The completion thread only: the Future first (as ProcessGroupGloo), so
  // once wait() returns the Future's value is there too. A Future callback
  // that throws neither keeps wait() from returning nor ends the thread.
  void Complete(std::exception_ptr error);
  // Completes on the calling thread if no one asked for the Future, so no
  // callback can run here (getFuture waits until the Future is complete);
  // false, doing nothing, if someone did.
  bool CompleteUnwatched(std::exception_ptr error);
  void set_source_rank(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    source_rank_ = rank;
  }
  // The error it failed with (null while running or after a success).
  std::exception_ptr error();

 private:
  // The Future's value (the outputs) or error; runs its callbacks.
  void SettleFuture(std::exception_ptr error);

  const std::vector<at::Tensor> outputs_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  const std::weak_ptr<Completion> completion_;
  const uint64_t seq_;
  int source_rank_ = -1;
  bool future_watched_ = false;  // guarded by mutex_
};

// Wakes a backend's waiter thread. braid rings it from its own threads when a
// handle finishes (braid_work_on_finish), possibly under braid's locks, so it
// is never held across a braid call; the backend rings it when it has news
// for the waiter (shutdown, an operation with nothing to wait for). Issuing
// an operation does not ring it: a wake per issue took the caller's core on a
// machine with few cores, and the waiter has nothing to do until braid is done.
class Doorbell {
 public:
  void Ring();
  uint64_t rings();
  // Until a ring after `seen` rings, or `timeout`.
  void WaitPast(uint64_t seen, std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t rings_ = 0;  // guarded by mu_
};

// How many of an operation's braid handles have not finished yet, plus one
// while its issuer is still registering them.
struct Arrival {
  explicit Arrival(int unfinished, std::shared_ptr<Doorbell> bell) : unfinished(unfinished), bell(std::move(bell)) {}
  // One of them finished (or its issuer is done registering): rings the bell after the last.
  void Arrive();
  // braid_work_on_finish's callback; `arg` is a heap std::shared_ptr<Arrival> it frees.
  static void OnBraidFinished(void* arg);

  std::atomic<int> unfinished;
  // The operation's own waiter took it (Completion::FinishOwn): braid wakes
  // that thread itself, and the bell would wake the waiter thread for nothing.
  std::atomic<bool> owner_waits{false};
  const std::shared_ptr<Doorbell> bell;
};

// One issued operation awaiting completion: zero or more braid handles
// (several for the schedules the backend composes of point-to-point calls).
struct Pending {
  std::vector<braid_work*> works;
  c10::intrusive_ptr<BraidWork> handle;
  // Copy-outs from temporaries into the caller's tensors, after success.
  std::function<void()> on_success;
  // Every tensor braid reads or writes, alive until it is done.
  std::vector<at::Tensor> keep_alive;
  // Operations this one stands for (endCoalescing): it fails if any did.
  std::vector<c10::intrusive_ptr<BraidWork>> covers;
  // Null: waited for as it is (nothing to wait for, or what failed to post).
  std::shared_ptr<Arrival> arrival;

  // braid is done with every handle: the waiter will not block on it.
  bool Arrived() const { return arrival == nullptr || arrival->unfinished.load(std::memory_order_acquire) == 0; }
};

// The state the completion threads share with their backend.
//
// The waiter thread takes operations in issue order once braid has finished
// them (it sleeps on the Doorbell until then) and copies the results out; completing a Work (its Future's callbacks, which are torch's
// and the user's code) runs on callback threads. A callback may wait for a
// later operation (PowerSGD's hook waits on an all-reduce it issues), whose
// completion must then come from another thread: one callback thread runs
// completions in order, and another starts when every one is blocked.
//
// The waiter owns the braid group once started and destroys it after
// draining, so a backend destroyed from a callback can leave without joining
// the thread it runs on.
struct Completion {
  std::mutex mu;
  const std::shared_ptr<Doorbell> bell = std::make_shared<Doorbell>();  // the waiter's
  std::condition_variable ready_cv;                                     // the callback threads'
  std::deque<Pending> queue;  // guarded by mu, issue order
  bool stopping = false;      // guarded by mu
  // An operation is being waited for (by the waiter, or inline by its
  // issuer): one at a time, so results arrive in issue order. Guarded by mu.
  bool busy = false;
  // Completions to run, in order, and the callback threads. Guarded by mu.
  std::deque<std::function<void()>> ready;
  std::vector<std::thread> callback_threads;
  int idle_callback_threads = 0;
  bool callbacks_stopping = false;
  braid_group* group = nullptr;

  // Nothing issued is unfinished or uncompleted: an issuer may finish its
  // own operation inline without overtaking an earlier one. mu held.
  bool Idle() const {
    return queue.empty() && !busy && ready.empty() &&
           idle_callback_threads == static_cast<int>(callback_threads.size());
  }
  // Has the waiter woken once braid finished `pending`'s handles. mu held (the
  // waiter takes no operation from the queue before this returns).
  void Watch(Pending& pending);
  // Waits for `next`'s handles and copies its results out: its error, or null.
  static std::exception_ptr Await(Pending& next);
  // After Await, by whoever took `next` off the queue (busy): completes it
  // here when no one asked for its Future and no callback is pending, else
  // hands it to the callback threads; then clears `busy`. While the process
  // is ending, `next` is left alone.
  void Finish(Pending next, std::exception_ptr error);
  // `handle`'s own waiter, instead of waking the waiter thread and waiting
  // for it: if `handle` is first in the queue and nothing runs, takes it,
  // waits for braid and completes it on the calling thread (one thread
  // switch fewer). False, doing nothing, otherwise.
  bool FinishOwn(const BraidWork* handle);
  // Completes `next`'s Work on this thread (an issuer's inline finish).
  static void Complete(Pending& next, std::exception_ptr error);
  // Queues a completion for the callback threads, starting one if none is free. mu held.
  void Post(std::function<void()> completion);
  // The waiter's loop: until stopping and drained; then stops the callback
  // threads and destroys the group.
  void Run();
  void CallbackLoop();
  // Whether the calling thread is one of some backend's completion threads.
  static bool OnCompletionThread();
};

}  // namespace braid_torch

#endif  // BRAID_PYTHON_TORCH_BACKEND_WORK_H_
