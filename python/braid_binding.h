// Internal to braid._braid (braid_module.cc, braid_arrays.cc): the Python
// objects over braid's C API and how arrays come in through DLPack.
#ifndef BRAID_PYTHON_BRAID_BINDING_H_
#define BRAID_PYTHON_BRAID_BINDING_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/braid.h"

namespace braid_py {

namespace py = pybind11;

struct DLManagedTensor;

// braid.Error, made when the module loads.
extern PyObject* error_type;

// Raises braid.Error(message) with .code (the braid_status) and .code_name.
[[noreturn]] void Raise(braid_status code, const std::string& message);
void Check(braid_status code);

// Runs `call` (C API calls that may wait for peers) without the GIL, so the
// process's other Python threads go on; raises braid.Error on failure.
template <typename Call>
void CheckWithoutGil(Call call) {
  braid_status status;
  {
    py::gil_scoped_release release;
    status = call();
  }
  Check(status);  // braid_last_error() is this thread's: the GIL does not change it
}

// An array borrowed through DLPack for as long as braid uses it. Destroyed
// with the GIL held (the producer's deleter may touch Python objects).
class Borrowed {
 public:
  explicit Borrowed(DLManagedTensor* managed) : managed_(managed) {}
  Borrowed(Borrowed&& other) noexcept : managed_(std::exchange(other.managed_, nullptr)), buffer_(other.buffer_) {}
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  ~Borrowed();
  braid_buffer& buffer() { return buffer_; }

 private:
  DLManagedTensor* managed_;
  braid_buffer buffer_{};
};

// Takes `array` (anything with __dlpack__, or a DLPack capsule) in place.
Borrowed Borrow(const py::handle& array, const char* what);
braid_op OpOf(const std::string& op);

// An issued collective: holds the borrowed arrays until it is done.
class Work {
 public:
  Work(braid_work* work, std::vector<Borrowed> arrays, py::object result)
      : work_(work), arrays_(std::move(arrays)), result_(std::move(result)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work() {
    // The collective writes into the arrays until it ends (by its deadline):
    // they are released only after it.
    if (work_ != nullptr) {
      {
        py::gil_scoped_release release;
        (void)braid_work_wait(work_, -1);
      }
      braid_work_free(work_);
    }
  }

  // The output array once done; braid.Error when the collective failed,
  // or (code DEADLINE_EXCEEDED) when `timeout` seconds pass first.
  py::object Wait(py::object timeout) {
    const double seconds = timeout.is_none() ? -1.0 : timeout.cast<double>();
    CheckWithoutGil([&] { return braid_work_wait(work_, seconds); });
    return result_;
  }

  bool IsCompleted() {
    int done = 0;
    const braid_status status = braid_work_test(work_, &done);
    if (done && status != BRAID_OK) Raise(status, braid_last_error());
    return done != 0;
  }

  int Source() const { return braid_work_source(work_); }

 private:
  braid_work* work_;
  std::vector<Borrowed> arrays_;
  py::object result_;
};

class Group {
 public:
  Group(py::object timeout, py::object transport) {
    braid_group_options options;
    braid_group_options_init(&options);
    if (!timeout.is_none()) options.timeout_sec = timeout.cast<double>();
    std::string name;
    if (!transport.is_none()) {
      name = transport.cast<std::string>();
      options.transport = name.c_str();
    }
    CheckWithoutGil([&] { return braid_group_create(&options, &group_); });
  }
  // A subgroup made by braid_group_split / braid_group_new (owned from here).
  explicit Group(braid_group* made) : group_(made) {}
  // Another owner's group in this process (torch's backend): one more reference.
  static std::shared_ptr<Group> Adopt(uintptr_t handle) {
    auto* group = reinterpret_cast<braid_group*>(handle);
    if (group == nullptr) throw py::value_error("Group._adopt: a NULL group handle");
    braid_group_retain(group);
    return std::make_shared<Group>(group);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() { Close(); }

  std::shared_ptr<Group> Split(int color, int key, const std::string& name) {
    braid_group* group = get();
    braid_group* made = nullptr;
    CheckWithoutGil([&] { return braid_group_split(group, color, key, name.c_str(), &made); });
    return std::make_shared<Group>(made);
  }
  std::shared_ptr<Group> NewGroup(const std::vector<int>& ranks, const std::string& name) {
    braid_group* group = get();
    braid_group* made = nullptr;
    CheckWithoutGil([&] {
      return braid_group_new(group, ranks.data(), static_cast<int>(ranks.size()), name.c_str(), &made);
    });
    return std::make_shared<Group>(made);
  }

  void Close() {
    if (group_ == nullptr) return;
    py::gil_scoped_release release;
    braid_group_destroy(std::exchange(group_, nullptr));
  }

  braid_group* get() const {
    if (group_ == nullptr) throw py::value_error("this braid group was closed");
    return group_;
  }

  int rank() const { return braid_group_rank(get()); }
  int size() const { return braid_group_size(get()); }
  int local_rank() const { return braid_group_local_rank(get()); }
  int local_size() const { return braid_group_local_size(get()); }
  std::string transport() const { return braid_group_transport(get()); }
  void Abort(const std::string& reason) { braid_group_abort(get(), reason.c_str()); }

  // Issues `call(group, buffers..., work)`: blocking (returns `result`) or
  // asynchronous (returns a Work that holds the arrays).
  template <typename Call>
  py::object Run(std::vector<Borrowed> arrays, py::object result, bool async_op, Call call) {
    braid_group* group = get();
    braid_work* work = nullptr;
    CheckWithoutGil([&] { return call(group, arrays, async_op ? &work : nullptr); });
    if (!async_op) return result;
    return py::cast(std::make_unique<Work>(work, std::move(arrays), std::move(result)));
  }

  // Input and output: `out` None means in place (in `x`).
  template <typename Call>
  py::object InOut(py::handle x, py::object out, bool async_op, const char* name, Call call) {
    std::vector<Borrowed> arrays;
    arrays.push_back(Borrow(x, name));
    const bool in_place = out.is_none();
    if (!in_place) arrays.push_back(Borrow(out, name));
    py::object result = in_place ? py::reinterpret_borrow<py::object>(x) : out;
    return Run(std::move(arrays), std::move(result), async_op,
               [call](braid_group* g, std::vector<Borrowed>& a, braid_work** w) {
                 return call(g, &a.front().buffer(), &a.back().buffer(), w);
               });
  }

 private:
  braid_group* group_ = nullptr;
};

class Reducer {
 public:
  Reducer(std::shared_ptr<Group> group, py::list gradients, double bucket_cap_mb, double first_bucket_mb,
          bool find_unused_parameters)
      : group_(std::move(group)) {
    std::vector<braid_buffer> buffers;
    for (py::handle gradient : gradients) {
      grads_.push_back(Borrow(gradient, "Reducer gradient"));
      buffers.push_back(grads_.back().buffer());
    }
    braid_reducer_options options;
    braid_reducer_options_init(&options);
    options.bucket_cap_mb = bucket_cap_mb;
    options.first_bucket_mb = first_bucket_mb;
    options.find_unused_parameters = find_unused_parameters ? 1 : 0;
    braid_group* g = group_->get();
    CheckWithoutGil([&] {
      return braid_reducer_create(g, buffers.data(), static_cast<int>(buffers.size()), &options, &reducer_);
    });
  }
  ~Reducer() {
    py::gil_scoped_release release;
    braid_reducer_destroy(reducer_);
  }

  void Prepare() { CheckWithoutGil([&] { return braid_reducer_prepare(reducer_); }); }
  void MarkReady(int index) {
    Check(braid_reducer_mark_ready(reducer_, index));  // cheap: a copy into the bucket
  }
  void Finalize() { CheckWithoutGil([&] { return braid_reducer_finalize(reducer_); }); }
  void NoSyncBegin() { Check(braid_reducer_no_sync_begin(reducer_)); }
  void NoSyncEnd() { Check(braid_reducer_no_sync_end(reducer_)); }

 private:
  std::shared_ptr<Group> group_;  // outlives the reducer
  std::vector<Borrowed> grads_;
  braid_reducer* reducer_ = nullptr;
};


// The collectives of braid._braid.Group, in two halves.
void DefReductions(py::class_<Group, std::shared_ptr<Group>>& cls);
void DefMoves(py::class_<Group, std::shared_ptr<Group>>& cls);

}  // namespace braid_py

#endif  // BRAID_PYTHON_BRAID_BINDING_H_
