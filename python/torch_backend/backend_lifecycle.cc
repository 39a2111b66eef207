// The backend's lifecycle: made over a store or sharing a braid group,
// split, timeouts, abort and shutdown.
#include <Python.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "python/torch_backend/backend.h"
#include "python/torch_backend/errors.h"

namespace braid_torch {

c10::intrusive_ptr<BraidBackend> BraidBackend::Create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world_size, double timeout_sec) {
  const braid_store_ops ops = StoreOps::For(store);
  braid_group_options options;
  braid_group_options_init(&options);
  options.rank = rank;
  options.world_size = world_size;
  options.timeout_sec = timeout_sec;
  options.store = &ops;
  braid_group* group = nullptr;
  Check(braid_group_create(&options, &group));
  return c10::make_intrusive<BraidBackend>(group, rank, world_size, store, timeout_sec);
}

c10::intrusive_ptr<BraidBackend> BraidBackend::Share(braid_group* group, c10::intrusive_ptr<c10d::Store> store,
                                                     double timeout_sec) {
  braid_group_retain(group);
  return c10::make_intrusive<BraidBackend>(group, braid_group_rank(group), braid_group_size(group), std::move(store),
                                           timeout_sec);
}

BraidBackend::BraidBackend(braid_group* group, int rank, int size, c10::intrusive_ptr<c10d::Store> store,
                           double timeout_sec)
    : c10d::Backend(rank, size),
      store_(std::move(store)),
      group_(group),
      transport_(braid_group_transport(group)),
      completion_(std::make_shared<Completion>()),
      timeout_sec_(timeout_sec) {
  completion_->group = group;
  thread_ = std::thread([completion = completion_] { completion->Run(); });
}

BraidBackend::~BraidBackend() { shutdown(); }

void BraidBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(completion_->mu);
    if (shut_down_) return;
    shut_down_ = true;
    completion_->stopping = true;
  }
  completion_->bell->Ring();
  if (Completion::OnCompletionThread()) {
    thread_.detach();  // from a callback on a completion thread: the waiter finishes on its own
  } else if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release no_gil;
    thread_.join();
  } else {
    thread_.join();
  }
}

void BraidBackend::abort() {
  std::lock_guard<std::mutex> lock(completion_->mu);
  if (!shut_down_) braid_group_abort(group_, "torch ProcessGroup.abort()");
}

braid_group* BraidBackend::group() const {
  if (shut_down_) Fail("braid: the process group was shut down (destroy_process_group)");
  return group_;
}

c10::intrusive_ptr<c10d::Backend> BraidBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::vector<int>& ranks,
                                                      const c10::intrusive_ptr<Options>& opts) {
  const auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  if (mine == ranks.end()) return nullptr;
  // torch's default timeout means "not given": the parent's applies.
  const bool given = opts && opts->timeout.count() > 0 && opts->timeout != kBackendDefaultTimeout;
  const double timeout_sec = given ? opts->timeout.count() / 1000.0 : timeout_sec_.load();
  const int rank = static_cast<int>(mine - ranks.begin());
  const int size = static_cast<int>(ranks.size());
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release no_gil;  // a rendezvous: the callback threads may need Python meanwhile
    return Create(store, rank, size, timeout_sec);
  }
  return Create(store, rank, size, timeout_sec);
}

c10::intrusive_ptr<c10d::Backend::Options> BraidBackend::getBackendOptions() {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_sec_.load() * 1000));
  return c10::make_intrusive<Options>("braid", timeout.count() > 0 ? timeout : kBackendDefaultTimeout);
}

void BraidBackend::setTimeout(std::chrono::milliseconds timeout) { timeout_sec_ = timeout.count() / 1000.0; }

braid_call_options BraidBackend::CallOptions(std::chrono::milliseconds timeout, bool async) const {
  braid_call_options call;
  braid_call_options_init(&call);
  call.timeout_sec = timeout.count() > 0 ? timeout.count() / 1000.0 : timeout_sec_.load();
  call.async = async ? 1 : 0;
  return call;
}

}  // namespace braid_torch
