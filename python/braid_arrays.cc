// braid._braid's errors and DLPack arrays (braid_binding.h).
#include <string>
#include <utility>

#include "python/braid_binding.h"

namespace braid_py {

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

PyObject* error_type = nullptr;

namespace {

const char* CodeName(braid_status code) {
  static const char* const kNames[] = {"OK",        "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",   "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                       "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  return index >= 0 && index < 17 ? kNames[index] : "UNKNOWN";
}

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

}  // namespace

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

Borrowed::~Borrowed() {
  if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
}

namespace {

// torch's own exporter for a CPU torch.Tensor, or null: Tensor.__dlpack__
// runs checks in Python that cost more than an 8-byte all-reduce (about 2 us
// against 0.3). Only once torch is imported by someone else; CUDA tensors
// keep __dlpack__, which orders the export after the current stream.
py::object TorchExport(const py::handle& array) {
  // Kept for the process's life (never destroyed: that would run after Python's end).
  static PyTypeObject* tensor_type = nullptr;
  static py::object* to_dlpack = nullptr;
  if (tensor_type == nullptr) {
    PyObject* torch = PyImport_GetModule(py::str("torch").ptr());
    if (torch == nullptr) {
      PyErr_Clear();
      return py::object();
    }
    py::object module = py::reinterpret_steal<py::object>(torch);
    if (!py::hasattr(module, "Tensor") || !py::hasattr(module, "_C") || !py::hasattr(module.attr("_C"), "_to_dlpack")) {
      return py::object();
    }
    to_dlpack = new py::object(module.attr("_C").attr("_to_dlpack"));
    tensor_type = reinterpret_cast<PyTypeObject*>(py::object(module.attr("Tensor")).release().ptr());
  }
  if (!PyObject_TypeCheck(array.ptr(), tensor_type) || py::cast<bool>(array.attr("is_cuda"))) return py::object();
  return (*to_dlpack)(array);
}

}  // namespace

// Takes `array` (anything with __dlpack__, or a DLPack capsule) in place.
Borrowed Borrow(const py::handle& array, const char* what) {
  py::object capsule;
  if (PyCapsule_CheckExact(array.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(array);
  } else if (py::object exported = TorchExport(array)) {
    capsule = std::move(exported);
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

}  // namespace braid_py
