// braid._braid: the Python binding of braid's C API (capi/braid.h), built
// with Debian's pybind11. Arrays come in through DLPack (`__dlpack__`), so
// NumPy arrays, torch tensors and JAX arrays are used in place, never copied.
// Only libbraid.so's C functions are called: the process holds one braid
// runtime whether it is reached from here, from braid.torch or from C.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/braid.h"

namespace py = pybind11;

namespace {

// DLPack's ABI (github.com/dmlc/dlpack, include/dlpack/dlpack.h), the
// structs every producer hands out; versions 0.5-0.8 share this layout.
struct DLDevice {
  int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned)
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL = compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

PyObject* error_type = nullptr;  // braid.Error

const char* CodeName(braid_status code) {
  static const char* const kNames[] = {"OK",        "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",   "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                       "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < 17 ? kNames[index] : "UNKNOWN";
}

// Raises braid.Error(message) with .code (the braid_status) and .code_name.
[[noreturn]] void Raise(braid_status code, const std::string& message) {
  py::object error = py::reinterpret_borrow<py::object>(error_type)(message);
  error.attr("code") = static_cast<int>(code);
  error.attr("code_name") = CodeName(code);
  PyErr_SetObject(error_type, error.ptr());
  throw py::error_already_set();
}

void Check(braid_status code) {
  if (code != BRAID_OK) Raise(code, braid_last_error());
}

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
  ~Borrowed() {
    if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
  }
  braid_buffer& buffer() { return buffer_; }

 private:
  DLManagedTensor* managed_;
  braid_buffer buffer_{};
};

braid_dtype DTypeOf(const DLDataType& t, const char* what) {
  if (t.lanes == 1) {
    if (t.code == 2 && t.bits == 32) return BRAID_FLOAT32;
    if (t.code == 2 && t.bits == 64) return BRAID_FLOAT64;
    if (t.code == 2 && t.bits == 16) return BRAID_FLOAT16;
    if (t.code == 4 && t.bits == 16) return BRAID_BFLOAT16;
    if (t.code == 0 && t.bits == 8) return BRAID_INT8;
    if (t.code == 1 && t.bits == 8) return BRAID_UINT8;
    if (t.code == 0 && t.bits == 32) return BRAID_INT32;
    if (t.code == 0 && t.bits == 64) return BRAID_INT64;
  }
  throw py::type_error(std::string(what) + ": braid takes float32, float64, float16, bfloat16, int8, uint8, int32 "
                       "and int64 arrays; this one has DLPack type code " + std::to_string(t.code) + ", " +
                       std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) + " lanes");
}

// Takes `array` (anything with __dlpack__, or a DLPack capsule) in place.
Borrowed Borrow(const py::handle& array, const char* what) {
  py::object capsule;
  if (PyCapsule_CheckExact(array.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(array);
  } else if (py::hasattr(array, "__dlpack__")) {
    capsule = array.attr("__dlpack__")();
  } else {
    throw py::type_error(std::string(what) + ": expected an array with __dlpack__ (NumPy, torch, JAX), got " +
                         std::string(py::str(py::type::handle_of(array))));
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  // The capsule is consumed: its deleter is now ours to call (DLPack's protocol).
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  Borrowed borrowed(managed);
  const DLTensor& t = managed->dl_tensor;
  int64_t count = 1;
  for (int d = 0; d < t.ndim; ++d) count *= t.shape[d];
  if (t.strides != nullptr && count > 1) {
    int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] != 1 && t.strides[d] != expected) {
        throw py::value_error(std::string(what) + ": braid needs a contiguous array (dimension " +
                              std::to_string(d) + " has stride " + std::to_string(t.strides[d]) + ", expected " +
                              std::to_string(expected) + "); pass a contiguous copy");
      }
      expected *= t.shape[d];
    }
  }
  braid_buffer& b = borrowed.buffer();
  b.data = static_cast<char*>(t.data) + t.byte_offset;
  b.count = count;
  b.dtype = DTypeOf(t.dtype, what);
  switch (t.device.device_type) {
    case 1:
    case 3:
      b.device = {BRAID_CPU, 0};
      break;
    case 2:
      b.device = {BRAID_CUDA, t.device.device_id};
      break;
    default:
      throw py::value_error(std::string(what) + ": DLPack device type " + std::to_string(t.device.device_type) +
                            " (braid takes CPU and CUDA arrays)");
  }
  return borrowed;
}

braid_op OpOf(const std::string& op) {
  if (op == "sum") return BRAID_SUM;
  if (op == "avg" || op == "mean") return BRAID_AVG;
  if (op == "max") return BRAID_MAX;
  if (op == "min") return BRAID_MIN;
  if (op == "prod" || op == "product") return BRAID_PROD;
  throw py::value_error("op must be \"sum\", \"avg\", \"max\", \"min\" or \"prod\", not \"" + op + "\"");
}

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

}  // namespace

PYBIND11_MODULE(_braid, m) {
  m.doc() = "braid's collectives over DLPack arrays (the C API of libbraid.so)";
  error_type = PyErr_NewExceptionWithDoc(
      "braid.Error", "A braid failure: the message names rank, peer and collective; .code is braid's status code.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(error_type);
  m.def("version", &braid_version);

  py::class_<Work>(m, "Work")
      .def("wait", &Work::Wait, py::arg("timeout") = py::none(),
           "Blocks until the collective is done and returns its output; raises braid.Error.")
      .def("is_completed", &Work::IsCompleted)
      .def_property_readonly("source", &Work::Source,
                             "The rank a finished recv received from (recv without src learns it); -1 before.");

  py::class_<Group, std::shared_ptr<Group>>(m, "Group")
      .def(py::init<py::object, py::object>(), py::arg("timeout") = py::none(), py::arg("transport") = py::none())
      .def_property_readonly("rank", &Group::rank)
      .def_property_readonly("size", &Group::size)
      .def_property_readonly("local_rank", &Group::local_rank)
      .def_property_readonly("local_size", &Group::local_size)
      .def_property_readonly("transport", &Group::transport)
      .def_property_readonly("_handle", [](const Group& g) { return reinterpret_cast<uintptr_t>(g.get()); },
                             "The braid_group* (braid.torch.share_backend issues on the same group).")
      .def_static("_adopt", &Group::Adopt, py::arg("handle"),
                  "A Group over a braid group this process already holds (another Group's or a torch backend's).")
      .def_property_readonly("is_member", [](const Group& g) { return braid_group_is_member(g.get()) != 0; })
      .def("split", &Group::Split, py::arg("color"), py::arg("key") = 0, py::arg("name") = "",
           "Collective: the ranks of one color (>= 0) form a group ordered by (key, rank); a negative color gets "
           "a group that refuses every collective.")
      .def("new_group", &Group::NewGroup, py::arg("ranks"), py::arg("name") = "",
           "Collective: the group of `ranks` (every rank passes the same list); outsiders get a group that "
           "refuses every collective.")
      .def("close", &Group::Close)
      .def("abort", &Group::Abort, py::arg("reason") = "aborted from Python")
      .def(
          "all_reduce",
          [](Group& g, py::handle x, const std::string& op, py::object out, bool async_op) {
            const braid_op o = OpOf(op);
            return g.InOut(x, out, async_op, "all_reduce",
                           [o](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_all_reduce(group, in, output, o, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("op") = "sum", py::arg("out") = py::none(), py::arg("async_op") = false)
      .def(
          "reduce",
          [](Group& g, py::handle x, int dst, const std::string& op, py::object out, bool async_op) {
            const braid_op o = OpOf(op);
            return g.InOut(x, out, async_op, "reduce",
                           [o, dst](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_reduce(group, in, output, o, dst, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("dst") = 0, py::arg("op") = "sum", py::arg("out") = py::none(),
          py::arg("async_op") = false)
      .def(
          "all_gather",
          [](Group& g, py::object out, py::handle x, bool async_op) {
            return g.InOut(x, out, async_op, "all_gather",
                           [](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_all_gather(group, in, output, nullptr, w);
                           });
          },
          py::arg("out"), py::arg("x"), py::arg("async_op") = false)
      .def(
          "reduce_scatter",
          [](Group& g, py::object out, py::handle x, const std::string& op, bool async_op) {
            const braid_op o = OpOf(op);
            return g.InOut(x, out, async_op, "reduce_scatter",
                           [o](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_reduce_scatter(group, in, output, o, nullptr, w);
                           });
          },
          py::arg("out"), py::arg("x"), py::arg("op") = "sum", py::arg("async_op") = false)
      .def(
          "all_to_all",
          [](Group& g, py::object out, py::handle x, bool async_op) {
            return g.InOut(x, out, async_op, "all_to_all",
                           [](braid_group* group, braid_buffer* in, braid_buffer* output, braid_work** w) {
                             return braid_all_to_all(group, in, output, nullptr, w);
                           });
          },
          py::arg("out"), py::arg("x"), py::arg("async_op") = false)
      .def(
          "broadcast",
          [](Group& g, py::handle x, int src, bool async_op) {
            return g.InOut(x, py::none(), async_op, "broadcast",
                           [src](braid_group* group, braid_buffer* buffer, braid_buffer*, braid_work** w) {
                             return braid_broadcast(group, buffer, src, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("src") = 0, py::arg("async_op") = false)
      .def(
          "send",
          [](Group& g, py::handle x, int dst, bool async_op) {
            return g.InOut(x, py::none(), async_op, "send",
                           [dst](braid_group* group, braid_buffer* buffer, braid_buffer*, braid_work** w) {
                             return braid_send(group, buffer, dst, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("dst"), py::arg("async_op") = false)
      .def(
          "recv",
          [](Group& g, py::handle x, py::object src, bool async_op) {
            // No src: from whichever rank sends first (shm, tcp, mpi); async_op's Work.source names it.
            const int peer = src.is_none() ? BRAID_ANY_SOURCE : src.cast<int>();
            return g.InOut(x, py::none(), async_op, "recv",
                           [peer](braid_group* group, braid_buffer* buffer, braid_buffer*, braid_work** w) {
                             return braid_recv(group, buffer, peer, nullptr, w);
                           });
          },
          py::arg("x"), py::arg("src") = py::none(), py::arg("async_op") = false)
      .def(
          "barrier",
          [](Group& g, bool async_op) {
            return g.Run({}, py::none(), async_op, [](braid_group* group, std::vector<Borrowed>&, braid_work** w) {
              return braid_barrier(group, nullptr, w);
            });
          },
          py::arg("async_op") = false)
      .def(
          "broadcast_parameters",
          [](Group& g, py::list arrays, int src) {
            std::vector<Borrowed> borrowed;
            std::vector<braid_buffer> buffers;
            for (py::handle a : arrays) {
              borrowed.push_back(Borrow(a, "broadcast_parameters"));
              buffers.push_back(borrowed.back().buffer());
            }
            braid_group* group = g.get();
            CheckWithoutGil([&] {
              return braid_broadcast_buffers(group, buffers.data(), static_cast<int>(buffers.size()), src);
            });
          },
          py::arg("arrays"), py::arg("src") = 0);

  py::class_<Reducer>(m, "Reducer")
      .def(py::init<std::shared_ptr<Group>, py::list, double, double, bool>(), py::arg("group"),
           py::arg("gradients"), py::arg("bucket_cap_mb") = 25.0, py::arg("first_bucket_mb") = 1.0,
           py::arg("find_unused_parameters") = false, py::keep_alive<1, 2>())
      .def("prepare", &Reducer::Prepare)
      .def("mark_ready", &Reducer::MarkReady, py::arg("index"))
      .def("finalize", &Reducer::Finalize)
      .def("no_sync_begin", &Reducer::NoSyncBegin)
      .def("no_sync_end", &Reducer::NoSyncEnd);
}
