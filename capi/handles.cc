// The C API's conversions (capi/handles.h).
#include "capi/handles.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "collectives/selection.h"

namespace braid::capi {

std::string& LastError() {
  thread_local std::string last_error;
  return last_error;
}

braid_status Fail(const absl::Status& status) {
  LastError() = std::string(status.message());
  return static_cast<braid_status>(status.code());
}

braid_status Finish(const absl::Status& status) {
  if (status.ok()) {
    LastError().clear();
    return BRAID_OK;
  }
  return Fail(status);
}

braid_status Invalid(absl::string_view what) { return Fail(absl::InvalidArgumentError(what)); }

namespace {

absl::StatusOr<DType> ToDType(braid_dtype dtype) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= kNumDTypes) {
    return absl::InvalidArgumentError(absl::StrCat("unknown braid_dtype ", static_cast<int>(dtype)));
  }
  return static_cast<DType>(dtype);
}

}  // namespace

absl::StatusOr<ReduceOp> ToOp(braid_op op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(ReduceOp::kAvg)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown braid_op ", static_cast<int>(op)));
  }
  return static_cast<ReduceOp>(op);
}

absl::StatusOr<Tensor> ToTensor(const braid_buffer* buffer, absl::string_view name) {
  if (buffer == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " buffer is NULL"));
  if (buffer->count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " buffer has a negative count ", buffer->count));
  }
  if (buffer->data == nullptr && buffer->count > 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " buffer of ", buffer->count, " elements has no data"));
  }
  BRAID_ASSIGN_OR_RETURN(DType dtype, ToDType(buffer->dtype));
  Device device;
  switch (buffer->device.type) {
    case BRAID_CPU:
      device = Device::Cpu();
      break;
    case BRAID_CUDA:
      device = Device::Cuda(buffer->device.index);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(name, " buffer has an unknown device type ", static_cast<int>(buffer->device.type)));
  }
  return Tensor::View(buffer->data, {buffer->count}, dtype, device);
}

// braid's CallOptions for the C API's (NULL: the defaults).
absl::StatusOr<CallOptions> ToCallOptions(const braid_call_options* call) {
  CallOptions options;
  if (call == nullptr) return options;
  if (call->stream != nullptr) {
    return absl::UnimplementedError(
        "a CUDA stream was given, but the C API's collectives are not stream-ordered yet: pass NULL (CUDA buffers "
        "are then ordered synchronously with the device)");
  }
  if (call->timeout_sec > 0) options.timeout = absl::Seconds(call->timeout_sec);
  if (call->algorithm != nullptr) {
    BRAID_ASSIGN_OR_RETURN(options.algorithm, ParseAlgorithm(call->algorithm));
  }
  options.async = call->async != 0;
  return options;
}

// The communicator for `tensor`.
absl::StatusOr<Communicator*> CommFor(braid_group* group, const Tensor& tensor) {
  if (group->sub) return group->sub.get();  // a subgroup is one host communicator (CUDA buffers staged)
  return group->group->CommFor(tensor.device());
}

braid_status Issue(absl::StatusOr<WorkHandle> handle, braid_work** work) {
  if (!handle.ok()) return Fail(handle.status());
  if (work == nullptr) return Finish((*handle)->Wait());
  *work = new braid_work{std::move(*handle)};
  LastError().clear();
  return BRAID_OK;
}

std::vector<Tensor> ToTensors(const braid_buffer* buffers, int count, absl::Status& status) {
  std::vector<Tensor> tensors;
  for (int i = 0; i < count && status.ok(); ++i) {
    absl::StatusOr<Tensor> tensor = ToTensor(&buffers[i], absl::StrCat("buffer ", i, ": the"));
    if (tensor.ok()) {
      tensors.push_back(std::move(*tensor));
    } else {
      status = tensor.status();
    }
  }
  return tensors;
}

}  // namespace braid::capi
