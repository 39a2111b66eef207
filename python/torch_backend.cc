// braid as a torch.distributed backend: BraidProcessGroup, a c10d::ProcessGroup
// of torch 1.13 (Debian's libtorch-dev) built on braid's C API alone
// (capi/braid.h, libbraid.so), so a process that also uses the plain Python
// package holds one braid runtime.
//
// Contract, as c10d's CPU backends have it:
//   - One tensor per call (CPU tensors; CUDA tensors are passed to braid as
//     BRAID_CUDA buffers, which braid stages: untested, Debian's torch has no
//     CUDA). Tensors that are written must be contiguous; tensors that are
//     only read are made contiguous (a copy) when they are not.
//   - Every collective is issued at once through the C API and returns a
//     BraidWork holding braid's handle's outcome and a c10::ivalue::Future
//     (DDP chains on it). One completion thread per process group waits on
//     the outstanding braid works in issue order (braid runs them in that
//     order), runs the copy-outs of the list-shaped collectives, and
//     completes the Work and its Future, or fails both with braid's message.
//   - Nothing waits forever: braid bounds every collective by the group's
//     deadline (the creator's timeout, or BRAID_TIMEOUT_SEC), and a failed
//     collective aborts braid's communicator, so later ones fail at once
//     with the first cause. Work::wait(timeout) adds the caller's own bound.
//   - Errors: torch's error channel is C++ exceptions (std::runtime_error
//     becomes Python's RuntimeError). This file is the boundary where braid's
//     status codes become them; braid's messages pass through unchanged.
//   - Point to point: tag must be 0 (braid matches sends and receives by
//     issue order, not by tag); recv from any source is not supported.
//   - Per-call timeouts in c10d's option structs are ignored: the C API has
//     a per-group deadline only.
//
// Locking uses std::mutex, not absl::Mutex: this file links torch and the C
// API only, never Abseil (libbraid.so keeps its Abseil inside).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "capi/braid.h"

namespace braid_torch {
namespace {

[[noreturn]] void Fail(const std::string& message) { throw std::runtime_error(message); }

// The message of an exception from torch (c10::Error's without its C++ backtrace).
std::string MessageOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) return error->what_without_backtrace();
  return e.what();
}

// ---- The caller's store, as braid_store_ops --------------------------------

// braid_store_ops over a c10d::Store (torch hands the backend creator a
// PrefixStore, so each process group's keys are its own). The store's verbs
// throw; here they become nonzero returns with the message kept for error(),
// per thread: braid reads it on the thread whose call failed.
class StoreOps {
 public:
  explicit StoreOps(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
    ops_.ctx = this;
    ops_.set = &StoreOps::Set;
    ops_.get = &StoreOps::Get;
    ops_.add = &StoreOps::Add;
    ops_.check = &StoreOps::Check;
    ops_.remove = &StoreOps::Remove;
    ops_.error = &StoreOps::Error;
  }
  StoreOps(const StoreOps&) = delete;
  StoreOps& operator=(const StoreOps&) = delete;

  const braid_store_ops* ops() const { return &ops_; }

 private:
  static c10d::Store& StoreOf(void* ctx) { return *static_cast<StoreOps*>(ctx)->store_; }

  template <typename Body>
  static int Guard(const char* verb, const char* key, Body body) {
    try {
      body();
      return 0;
    } catch (const std::exception& e) {
      last_error_ = std::string("c10d store ") + verb + " \"" + key + "\": " + MessageOf(e);
      return 1;
    }
  }

  static int Set(void* ctx, const char* key, const void* value, size_t size) {
    return Guard("set", key, [&] {
      const auto* bytes = static_cast<const uint8_t*>(value);
      StoreOf(ctx).set(key, std::vector<uint8_t>(bytes, bytes + size));
    });
  }

  static int Get(void* ctx, const char* key, int64_t timeout_ms,
                 void (*sink)(void* sink_ctx, const void* value, size_t size), void* sink_ctx) {
    return Guard("get", key, [&] {
      c10d::Store& store = StoreOf(ctx);
      if (timeout_ms < 0) {
        store.wait({key});  // the store's own timeout
      } else if (timeout_ms == 0) {
        // c10d reads a zero timeout as "none": look once instead.
        if (!store.check({key})) Fail("not there and no time left to wait");
      } else {
        store.wait({key}, std::chrono::milliseconds(timeout_ms));
      }
      const std::vector<uint8_t> value = store.get(key);
      sink(sink_ctx, value.data(), value.size());
    });
  }

  static int Add(void* ctx, const char* key, int64_t delta, int64_t* result) {
    return Guard("add", key, [&] { *result = StoreOf(ctx).add(key, delta); });
  }

  static int Check(void* ctx, const char* const* keys, size_t count, int* exists) {
    return Guard("check", count > 0 ? keys[0] : "", [&] {
      *exists = StoreOf(ctx).check(std::vector<std::string>(keys, keys + count)) ? 1 : 0;
    });
  }

  static int Remove(void* ctx, const char* key, int* existed) {
    return Guard("delete", key, [&] { *existed = StoreOf(ctx).deleteKey(key) ? 1 : 0; });
  }

  static const char* Error(void*) { return last_error_.c_str(); }

  static thread_local std::string last_error_;

  const c10::intrusive_ptr<c10d::Store> store_;
  braid_store_ops ops_{};
};

thread_local std::string StoreOps::last_error_;

// ---- Tensors as braid buffers -----------------------------------------------

bool ToBraidDType(at::ScalarType type, braid_dtype* out) {
  switch (type) {
    case at::kFloat: *out = BRAID_FLOAT32; return true;
    case at::kDouble: *out = BRAID_FLOAT64; return true;
    case at::kHalf: *out = BRAID_FLOAT16; return true;
    case at::kBFloat16: *out = BRAID_BFLOAT16; return true;
    case at::kChar: *out = BRAID_INT8; return true;
    case at::kByte: *out = BRAID_UINT8; return true;
    case at::kInt: *out = BRAID_INT32; return true;
    case at::kLong: *out = BRAID_INT64; return true;
    default: return false;
  }
}

braid_op ToBraidOp(const c10d::ReduceOp& op, const char* collective) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return BRAID_SUM;
    case c10d::ReduceOp::PRODUCT: return BRAID_PROD;
    case c10d::ReduceOp::MIN: return BRAID_MIN;
    case c10d::ReduceOp::MAX: return BRAID_MAX;
    case c10d::ReduceOp::AVG: return BRAID_AVG;
    default:
      Fail(std::string("braid ") + collective + ": ReduceOp " + std::to_string(static_cast<int>(op.op_)) +
           " is not supported (braid reduces with SUM, PRODUCT, MIN, MAX and AVG)");
  }
}

// What a collective moves: reductions need one of braid's dtypes; data that
// is only moved (broadcast, gathers, all-to-all, send/recv) may be any dtype,
// carried as bytes.
enum class Use { kReduce, kMove };

// A braid view of `tensor`, which must be dense and contiguous.
braid_buffer ToBuffer(const at::Tensor& tensor, Use use, const char* collective) {
  if (!tensor.defined()) Fail(std::string("braid ") + collective + ": an undefined tensor");
  if (tensor.layout() != at::kStrided) {
    Fail(std::string("braid ") + collective + ": only dense (strided) tensors are supported");
  }
  if (!tensor.is_contiguous()) {
    Fail(std::string("braid ") + collective + ": the tensor must be contiguous (call .contiguous())");
  }
  braid_buffer buffer{};
  buffer.data = tensor.data_ptr();
  buffer.count = tensor.numel();
  if (!ToBraidDType(tensor.scalar_type(), &buffer.dtype)) {
    if (use == Use::kReduce) {
      Fail(std::string("braid ") + collective + ": dtype " + c10::toString(tensor.scalar_type()) +
           " is not supported (float32, float64, float16, bfloat16, int8, uint8, int32, int64)");
    }
    buffer.dtype = BRAID_UINT8;
    buffer.count = static_cast<int64_t>(tensor.nbytes());
  }
  if (tensor.is_cuda()) {
    buffer.device = braid_device{BRAID_CUDA, tensor.device().index()};
  } else if (tensor.is_cpu()) {
    buffer.device = braid_device{BRAID_CPU, 0};
  } else {
    Fail(std::string("braid ") + collective + ": tensors on " + tensor.device().str() +
         " are not supported (CPU and CUDA)");
  }
  return buffer;
}

const at::Tensor& Single(const std::vector<at::Tensor>& tensors, const char* collective) {
  if (tensors.size() != 1) {
    Fail(std::string("braid ") + collective + ": expects one tensor per call (got " +
         std::to_string(tensors.size()) + ")");
  }
  return tensors[0];
}

// `tensor` (`what`) must have the dtype and device of `like` (`like_what`).
void CheckLike(const at::Tensor& tensor, const at::Tensor& like, const char* collective, const char* what,
               const char* like_what = "the input") {
  if (tensor.scalar_type() != like.scalar_type() || tensor.device() != like.device()) {
    Fail(std::string("braid ") + collective + ": " + what + " is " + c10::toString(tensor.scalar_type()) +
         " on " + tensor.device().str() + ", " + like_what + " " + c10::toString(like.scalar_type()) + " on " +
         like.device().str());
  }
}

void CheckNumel(int64_t got, int64_t want, const char* collective, const char* what) {
  if (got != want) {
    Fail(std::string("braid ") + collective + ": " + what + " has " + std::to_string(got) + " elements, expected " +
         std::to_string(want));
  }
}

// `tensors` flattened into one new contiguous tensor, in order.
at::Tensor Flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive blocks of `flat` into `tensors` (the inverse of Flatten).
void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (at::Tensor& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// ---- Work ------------------------------------------------------------------

// One issued collective as c10d sees it. Completed exactly once, by the
// process group's completion thread; any thread may wait on it.
class BraidWork : public c10d::Work {
 public:
  BraidWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type, title),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  // Blocks until the collective finished (bounded by braid's deadline) or,
  // with a nonzero timeout, until then (then throws; the collective goes on).
  // Throws braid's error if it failed.
  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == std::chrono::milliseconds::zero()) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      Fail("braid " + c10d::opTypeToString(opType_) + ": Work.wait timed out after " +
           std::to_string(timeout.count()) + " ms (rank " + std::to_string(rank_) +
           "; the collective goes on until it ends or reaches braid's deadline)");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // The completion thread only. The Future first, as ProcessGroupGloo does:
  // once wait() returns, the Future's value is there too. The Future runs
  // its callbacks inline; one that throws must not keep wait() from
  // returning, nor end the completion thread.
  void Complete(std::exception_ptr error) {
    try {
      if (error) {
        future_->setError(error);
      } else {
        future_->markCompleted(c10::IValue(outputs_));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] braid %s: a callback of the Work's Future threw: %s\n", rank_,
                   c10d::opTypeToString(opType_).c_str(), MessageOf(e).c_str());
    }
    finish(error);
  }

 private:
  const std::vector<at::Tensor> outputs_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// ---- The completion thread -------------------------------------------------

// One issued collective awaiting completion.
struct Pending {
  braid_work* work = nullptr;
  c10::intrusive_ptr<BraidWork> handle;
  // Copy-outs from temporaries into the caller's tensors, after success.
  std::function<void()> on_success;
  // Every tensor braid reads or writes, alive until it is done.
  std::vector<at::Tensor> keep_alive;
};

// The state the completion thread shares with its process group. The thread
// owns the braid group once started: it destroys it after draining, so a
// process group destroyed from a Future callback on that very thread can
// leave without joining itself.
struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> queue;  // guarded by mu, issue order
  bool stopping = false;      // guarded by mu
  // A collective is being finished (by the thread, or inline by its issuer):
  // one at a time, so Futures complete in issue order. Guarded by mu.
  bool busy = false;
  braid_group* group = nullptr;

  // Waits for `next` (its own deadline bounds the wait), copies its results
  // out, and completes its Work and Future.
  // Python is shutting down: a Future's callbacks and a tensor's release may
  // take the GIL, which a thread outside Python can no longer get (Python
  // ends it with a forced unwind, which aborts the process with "terminate
  // called without an active exception"). What is left is then left alone.
  static bool PythonFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return !Py_IsInitialized() || Py_IsFinalizing();
#else
    return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
  }

  static void Finish(Pending& next) {
    const braid_status status = braid_work_wait(next.work, -1);
    std::exception_ptr error;
    if (status != BRAID_OK) {
      // braid_last_error() is per thread: read on the thread that got the status.
      error = std::make_exception_ptr(std::runtime_error(braid_last_error()));
    }
    braid_work_free(next.work);
    next.work = nullptr;
    if (PythonFinalizing()) return;  // Run leaves `next` to the process's end
    if (!error && next.on_success) {
      try {
        next.on_success();
      } catch (const std::exception& e) {
        error = std::make_exception_ptr(std::runtime_error("braid: copying the result out: " + MessageOf(e)));
      }
    }
    next.keep_alive.clear();
    next.handle->Complete(error);
  }

  void Run() {
    for (;;) {
      Pending next;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || (!queue.empty() && !busy); });
        if (queue.empty()) break;  // stopping and drained
        next = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      Finish(next);
      if (PythonFinalizing()) new Pending(std::move(next));  // its destructors may need Python: never run them
      {
        std::lock_guard<std::mutex> lock(mu);
        busy = false;
      }
    }
    braid_group_destroy(group);
  }
};

// ---- The process group -----------------------------------------------------

class BraidProcessGroup final : public c10d::ProcessGroup {
 public:
  // Collective over the ranks of the group: rendezvous over `store`, then
  // braid's transports. timeout_sec <= 0: BRAID_TIMEOUT_SEC (braid's default).
  // Blocks until the group is up or braid's deadline; throws braid's error.
  static c10::intrusive_ptr<BraidProcessGroup> Create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int world_size, double timeout_sec) {
    auto ops = std::make_unique<StoreOps>(store);
    braid_group_options options;
    braid_group_options_init(&options);
    options.rank = rank;
    options.world_size = world_size;
    options.timeout_sec = timeout_sec;
    options.store = ops->ops();
    braid_group* group = nullptr;
    if (braid_group_create(&options, &group) != BRAID_OK) Fail(braid_last_error());
    return c10::make_intrusive<BraidProcessGroup>(group, rank, world_size, std::move(ops));
  }

  BraidProcessGroup(braid_group* group, int rank, int size, std::unique_ptr<StoreOps> store_ops)
      : c10d::ProcessGroup(rank, size), store_ops_(std::move(store_ops)), completion_(std::make_shared<Completion>()) {
    completion_->group = group;
    group_ = group;
    thread_ = std::thread([completion = completion_] { completion->Run(); });
    init();
  }

  // Finishes what was issued (each bounded by braid's deadline), then frees
  // the braid group. Drops the GIL while it waits: a Future callback on the
  // completion thread may need it.
  ~BraidProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(completion_->mu);
      completion_->stopping = true;
    }
    completion_->cv.notify_all();
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();  // destroyed from a callback on the thread itself: it finishes on its own
    } else if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      thread_.join();
    } else {
      thread_.join();
    }
  }

  const std::string getBackendName() const override { return "braid"; }

  // "shm", "tcp", ...: what carries this group's CPU buffers.
  std::string transport() const { return braid_group_transport(group_); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const at::Tensor& tensor = Single(tensors, "broadcast");
    if (opts.rootTensor != 0) Fail("braid broadcast: rootTensor must be 0 (one tensor per call)");
    const braid_buffer buffer = ToBuffer(tensor, Use::kMove, "broadcast");
    const int root = static_cast<int>(opts.rootRank);
    return Issue(c10d::OpType::BROADCAST, "braid:broadcast", tensors, {tensor}, {},
                 [&](braid_work** w) { return braid_broadcast(group_, &buffer, root, nullptr, w); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const at::Tensor& tensor = Single(tensors, "allreduce");
    const braid_op op = ToBraidOp(opts.reduceOp, "allreduce");
    const braid_buffer buffer = ToBuffer(tensor, Use::kReduce, "allreduce");
    return Issue(c10d::OpType::ALLREDUCE, "braid:all_reduce", tensors, {tensor}, {},
                 [&](braid_work** w) { return braid_all_reduce(group_, &buffer, &buffer, op, nullptr, w); });
  }

  // Several tensors of one dtype reduced as one flat buffer, then copied back.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    if (tensors.empty()) Fail("braid allreduce_coalesced: no tensors");
    for (const at::Tensor& t : tensors) CheckLike(t, tensors[0], "allreduce_coalesced", "a tensor", "the first");
    const braid_op op = ToBraidOp(opts.reduceOp, "allreduce_coalesced");
    at::Tensor flat = Flatten(tensors);
    const braid_buffer buffer = ToBuffer(flat, Use::kReduce, "allreduce_coalesced");
    std::vector<at::Tensor> outputs = tensors;
    return Issue(c10d::OpType::ALLREDUCE_COALESCED, "braid:all_reduce_coalesced", tensors, {flat},
                 [flat, outputs]() mutable { Unflatten(flat, outputs); },
                 [&](braid_work** w) { return braid_all_reduce(group_, &buffer, &buffer, op, nullptr, w); });
  }

  // In place: the root's tensor gets the result; the others' are left as
  // braid leaves them (c10d does not define them).
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    const at::Tensor& tensor = Single(tensors, "reduce");
    if (opts.rootTensor != 0) Fail("braid reduce: rootTensor must be 0 (one tensor per call)");
    const braid_op op = ToBraidOp(opts.reduceOp, "reduce");
    const braid_buffer buffer = ToBuffer(tensor, Use::kReduce, "reduce");
    const int root = static_cast<int>(opts.rootRank);
    return Issue(c10d::OpType::REDUCE, "braid:reduce", tensors, {tensor}, {},
                 [&](braid_work** w) { return braid_reduce(group_, &buffer, &buffer, op, root, nullptr, w); });
  }

  // Gathers into one flat temporary, then copies rank r's block to outputs[0][r].
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    const at::Tensor input = Single(inputs, "allgather").contiguous();
    if (outputs.size() != 1) Fail("braid allgather: expects one output list per call");
    std::vector<at::Tensor>& list = outputs[0];
    CheckNumel(static_cast<int64_t>(list.size()), size_, "allgather", "the output list");
    for (const at::Tensor& t : list) {
      CheckLike(t, input, "allgather", "an output");
      CheckNumel(t.numel(), input.numel(), "allgather", "an output");
    }
    at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
    const braid_buffer in = ToBuffer(input, Use::kMove, "allgather");
    const braid_buffer out = ToBuffer(flat, Use::kMove, "allgather");
    std::vector<at::Tensor> copy_to = list;
    return Issue(c10d::OpType::ALLGATHER, "braid:all_gather", list, {input, flat},
                 [flat, copy_to]() mutable { Unflatten(flat, copy_to); },
                 [&](braid_work** w) { return braid_all_gather(group_, &in, &out, nullptr, w); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input_tensor,
                                                 const c10d::AllgatherOptions& opts) override {
    const at::Tensor input = input_tensor.contiguous();
    CheckLike(output, input, "_allgather_base", "the output");
    CheckNumel(output.numel(), size_ * input.numel(), "_allgather_base", "the output");
    const braid_buffer in = ToBuffer(input, Use::kMove, "_allgather_base");
    const braid_buffer out = ToBuffer(output, Use::kMove, "_allgather_base");
    return Issue(c10d::OpType::_ALLGATHER_BASE, "braid:_allgather_base", {output}, {input, output}, {},
                 [&](braid_work** w) { return braid_all_gather(group_, &in, &out, nullptr, w); });
  }

  // Flattens inputs[0] (one tensor per rank) into a temporary, then reduces and scatters.
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const at::Tensor& output = Single(outputs, "reduce_scatter");
    if (inputs.size() != 1) Fail("braid reduce_scatter: expects one input list per call");
    const std::vector<at::Tensor>& list = inputs[0];
    CheckNumel(static_cast<int64_t>(list.size()), size_, "reduce_scatter", "the input list");
    for (const at::Tensor& t : list) {
      CheckLike(t, output, "reduce_scatter", "an input", "the output");
      CheckNumel(t.numel(), output.numel(), "reduce_scatter", "an input");
    }
    const braid_op op = ToBraidOp(opts.reduceOp, "reduce_scatter");
    at::Tensor flat = Flatten(list);
    const braid_buffer in = ToBuffer(flat, Use::kReduce, "reduce_scatter");
    const braid_buffer out = ToBuffer(output, Use::kReduce, "reduce_scatter");
    return Issue(c10d::OpType::REDUCE_SCATTER, "braid:reduce_scatter", outputs, {flat, output}, {},
                 [&](braid_work** w) { return braid_reduce_scatter(group_, &in, &out, op, nullptr, w); });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input_tensor,
                                                      const c10d::ReduceScatterOptions& opts) override {
    const at::Tensor input = input_tensor.contiguous();
    CheckLike(output, input, "_reduce_scatter_base", "the output");
    CheckNumel(input.numel(), size_ * output.numel(), "_reduce_scatter_base", "the input");
    const braid_op op = ToBraidOp(opts.reduceOp, "_reduce_scatter_base");
    const braid_buffer in = ToBuffer(input, Use::kReduce, "_reduce_scatter_base");
    const braid_buffer out = ToBuffer(output, Use::kReduce, "_reduce_scatter_base");
    return Issue(c10d::OpType::_REDUCE_SCATTER_BASE, "braid:_reduce_scatter_base", {output}, {input, output}, {},
                 [&](braid_work** w) { return braid_reduce_scatter(group_, &in, &out, op, nullptr, w); });
  }

  // Equal splits only: braid's all-to-all moves blocks of one size.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input_tensor,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    const at::Tensor input = input_tensor.contiguous();
    CheckLike(output, input, "alltoall_base", "the output");
    CheckNumel(output.numel(), input.numel(), "alltoall_base", "the output");
    CheckEqualSplits(input_splits, input, "input");
    CheckEqualSplits(output_splits, output, "output");
    if (input.numel() % size_ != 0) {
      Fail("braid alltoall_base: " + std::to_string(input.numel()) + " elements do not split evenly over " +
           std::to_string(size_) + " ranks");
    }
    const braid_buffer in = ToBuffer(input, Use::kMove, "alltoall_base");
    const braid_buffer out = ToBuffer(output, Use::kMove, "alltoall_base");
    return Issue(c10d::OpType::ALLTOALL_BASE, "braid:all_to_all", {output}, {input, output}, {},
                 [&](braid_work** w) { return braid_all_to_all(group_, &in, &out, nullptr, w); });
  }

  // One tensor to and from each rank, all of one size: flattened through temporaries.
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    CheckNumel(static_cast<int64_t>(inputs.size()), size_, "alltoall", "the input list");
    CheckNumel(static_cast<int64_t>(outputs.size()), size_, "alltoall", "the output list");
    for (const at::Tensor& t : inputs) {
      CheckLike(t, inputs[0], "alltoall", "an input", "the first input");
      CheckNumel(t.numel(), inputs[0].numel(), "alltoall",
                 "an input (braid's all-to-all moves blocks of one size)");
    }
    for (const at::Tensor& t : outputs) {
      CheckLike(t, inputs[0], "alltoall", "an output", "the first input");
      CheckNumel(t.numel(), inputs[0].numel(), "alltoall", "an output");
    }
    at::Tensor flat_in = Flatten(inputs);
    at::Tensor flat_out = at::empty_like(flat_in);
    const braid_buffer in = ToBuffer(flat_in, Use::kMove, "alltoall");
    const braid_buffer out = ToBuffer(flat_out, Use::kMove, "alltoall");
    std::vector<at::Tensor> copy_to = outputs;
    return Issue(c10d::OpType::ALLTOALL, "braid:all_to_all", outputs, {flat_in, flat_out},
                 [flat_out, copy_to]() mutable { Unflatten(flat_out, copy_to); },
                 [&](braid_work** w) { return braid_all_to_all(group_, &in, &out, nullptr, w); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return Issue(c10d::OpType::BARRIER, "braid:barrier", {}, {}, {},
                 [&](braid_work** w) { return braid_barrier(group_, w); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    const at::Tensor& tensor = Single(tensors, "send");
    CheckTag(tag, "send");
    const braid_buffer buffer = ToBuffer(tensor, Use::kMove, "send");
    return Issue(c10d::OpType::SEND, "braid:send", tensors, {tensor}, {},
                 [&](braid_work** w) { return braid_send(group_, &buffer, dst, nullptr, w); });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    const at::Tensor& tensor = Single(tensors, "recv");
    CheckTag(tag, "recv");
    const braid_buffer buffer = ToBuffer(tensor, Use::kMove, "recv");
    return Issue(c10d::OpType::RECV, "braid:recv", tensors, {tensor}, {},
                 [&](braid_work** w) { return braid_recv(group_, &buffer, src, nullptr, w); });
  }

 private:
  // Issues one collective with `call` and queues it for the completion
  // thread. Issue and queueing happen under one lock, so the queue's order
  // is braid's issue order even when several threads issue. Throws braid's
  // error if the call is refused (a bad argument, or a group already aborted).
  c10::intrusive_ptr<c10d::Work> Issue(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
                                       std::vector<at::Tensor> keep_alive, std::function<void()> on_success,
                                       const std::function<braid_status(braid_work**)>& call) {
    auto handle = c10::make_intrusive<BraidWork>(rank_, type, title, std::move(outputs));
    Pending pending;
    bool inline_finish = false;
    {
      std::lock_guard<std::mutex> lock(completion_->mu);
      braid_work* work = nullptr;
      if (call(&work) != BRAID_OK) Fail(braid_last_error());
      pending = Pending{work, handle, std::move(on_success), std::move(keep_alive)};
      // braid ran it inline (a small collective on an idle group) and nothing
      // earlier is unfinished: finish it here, without waking the thread
      // (two thread switches were most of an 8-byte all-reduce's time).
      int done = 0;
      inline_finish = completion_->queue.empty() && !completion_->busy && braid_work_test(work, &done) == BRAID_OK &&
                      done != 0;
      if (inline_finish) {
        completion_->busy = true;
      } else {
        completion_->queue.push_back(std::move(pending));  // a failure too: the thread reports it in order
      }
    }
    if (inline_finish) {
      Completion::Finish(pending);
      std::lock_guard<std::mutex> lock(completion_->mu);
      completion_->busy = false;
    }
    completion_->cv.notify_one();
    return handle;
  }

  void CheckEqualSplits(const std::vector<int64_t>& splits, const at::Tensor& tensor, const char* which) const {
    if (splits.empty()) return;
    std::ostringstream list;
    bool equal = static_cast<int>(splits.size()) == size_;
    for (size_t i = 0; i < splits.size(); ++i) {
      list << (i > 0 ? ", " : "") << splits[i];
      if (splits[i] != splits[0]) equal = false;
    }
    if (!equal || splits[0] * size_ != (tensor.dim() > 0 ? tensor.size(0) : 0)) {
      Fail("braid alltoall_base: " + std::string(which) + " split sizes [" + list.str() +
           "] are not supported: braid's all-to-all moves equal blocks (dim 0 of " +
           std::to_string(tensor.dim() > 0 ? tensor.size(0) : 0) + " split evenly over " + std::to_string(size_) +
           " ranks)");
    }
  }

  static void CheckTag(int tag, const char* op) {
    if (tag != 0) {
      Fail(std::string("braid ") + op + ": tag " + std::to_string(tag) +
           " is not supported: braid matches sends and receives between two ranks in issue order; use tag 0");
    }
  }

  const std::unique_ptr<StoreOps> store_ops_;
  braid_group* group_ = nullptr;  // owned by the completion thread, which destroys it last
  const std::shared_ptr<Completion> completion_;
  std::thread thread_;
};

}  // namespace
}  // namespace braid_torch

PYBIND11_MODULE(_torch, m) {
  using braid_torch::BraidProcessGroup;
  if (braid_abi_version() != BRAID_ABI_VERSION) {
    throw py::import_error("braid._torch was built for braid ABI " + std::to_string(BRAID_ABI_VERSION) +
                           " but the libbraid.so loaded has ABI " + std::to_string(braid_abi_version()));
  }
  m.doc() = "braid's torch.distributed backend (import braid.torch to register it)";
  // Registers c10d::ProcessGroup and c10d::Store with pybind11, the base and
  // the argument types below.
  py::module_::import("torch.distributed");
  py::class_<BraidProcessGroup, c10d::ProcessGroup, c10::intrusive_ptr<BraidProcessGroup>>(m, "BraidProcessGroup")
      .def_property_readonly("transport", &BraidProcessGroup::transport,
                             "What carries this group's CPU buffers: 'shm', 'tcp', 'mpi' or 'nccl'.");
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, double timeout_sec) {
        return BraidProcessGroup::Create(store, rank, world_size, timeout_sec);
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout_sec"),
      py::call_guard<py::gil_scoped_release>(),
      "Collective: a braid process group over `store` (rendezvous), as rank `rank` of `world_size`.\n"
      "timeout_sec <= 0: BRAID_TIMEOUT_SEC. Blocks until every rank joined or the deadline; raises\n"
      "RuntimeError with braid's message on failure.");
  m.attr("braid_version") = braid_version();
}
