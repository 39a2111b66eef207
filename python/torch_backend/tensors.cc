#include "python/torch_backend/tensors.h"

#include <c10/core/ScalarType.h>

#include <string>

#include "python/torch_backend/errors.h"

namespace braid_torch {
namespace {

bool ToBraidDType(at::ScalarType type, braid_dtype* out) {
  switch (type) {
    case at::kFloat: *out = BRAID_FLOAT32; return true;
    case at::kDouble: *out = BRAID_FLOAT64; return true;
    case at::kHalf: *out = BRAID_FLOAT16; return true;
    case at::kBFloat16: *out = BRAID_BFLOAT16; return true;
    case at::kChar: *out = BRAID_INT8; return true;
    case at::kByte: *out = BRAID_UINT8; return true;
    case at::kBool: *out = BRAID_UINT8; return true;  // 0 or 1 in one byte
    case at::kInt: *out = BRAID_INT32; return true;
    case at::kLong: *out = BRAID_INT64; return true;
    default: return false;
  }
}

std::string Where(const char* collective) { return std::string("braid ") + collective + ": "; }

}  // namespace

Reduction ToReduction(const c10d::ReduceOp& op, at::ScalarType type, const char* collective) {
  const bool is_bool = type == at::kBool;
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = is_bool ? BRAID_MAX : BRAID_SUM; return r;
    case c10d::ReduceOp::PRODUCT: r.op = is_bool ? BRAID_MIN : BRAID_PROD; return r;
    case c10d::ReduceOp::MIN: r.op = BRAID_MIN; return r;
    case c10d::ReduceOp::MAX: r.op = BRAID_MAX; return r;
    case c10d::ReduceOp::AVG:
      if (is_bool) Fail(Where(collective) + "ReduceOp AVG is not defined for bool tensors");
      r.op = BRAID_AVG;
      return r;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
      if (!is_bool) {
        Fail(Where(collective) + "bitwise ReduceOps (BAND, BOR, BXOR) are supported on bool tensors only, not " +
             c10::toString(type));
      }
      r.op = op.op_ == c10d::ReduceOp::BAND ? BRAID_MIN : BRAID_MAX;
      return r;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (is_bool || !at::isFloatingType(type)) {
        Fail(Where(collective) + "PREMUL_SUM needs a floating-point tensor, not " + c10::toString(type));
      }
      const auto* supplement = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      if (supplement == nullptr) Fail(Where(collective) + "PREMUL_SUM without its factor");
      r.op = BRAID_SUM;
      r.premultiply = true;
      r.factor = supplement->double_factor;
      r.factor_tensor = supplement->tensor_factor;
      return r;
    }
    default:
      Fail(Where(collective) + "ReduceOp " + std::to_string(static_cast<int>(op.op_)) + " on " +
           c10::toString(type) + " is not supported (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM; BAND, BOR on bool)");
  }
}

braid_buffer ToBuffer(const at::Tensor& tensor, Use use, const char* collective) {
  if (!tensor.defined()) Fail(Where(collective) + "an undefined tensor");
  if (tensor.layout() != at::kStrided) Fail(Where(collective) + "only dense (strided) tensors are supported");
  if (!tensor.is_contiguous()) Fail(Where(collective) + "the tensor must be contiguous (call .contiguous())");
  braid_buffer buffer{};
  buffer.data = tensor.data_ptr();
  buffer.count = tensor.numel();
  if (!ToBraidDType(tensor.scalar_type(), &buffer.dtype)) {
    if (use == Use::kReduce) {
      Fail(Where(collective) + "dtype " + c10::toString(tensor.scalar_type()) +
           " cannot be reduced (float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool)");
    }
    buffer.dtype = BRAID_UINT8;
    buffer.count = static_cast<int64_t>(tensor.nbytes());
  }
  if (tensor.is_cuda()) {
    buffer.device = braid_device{BRAID_CUDA, tensor.device().index()};
  } else if (tensor.is_cpu()) {
    buffer.device = braid_device{BRAID_CPU, 0};
  } else {
    Fail(Where(collective) + "tensors on " + tensor.device().str() + " are not supported (CPU and CUDA)");
  }
  return buffer;
}

const at::Tensor& Single(const std::vector<at::Tensor>& tensors, const char* collective) {
  if (tensors.size() != 1) {
    Fail(Where(collective) + "expects one tensor per call (got " + std::to_string(tensors.size()) + ")");
  }
  return tensors[0];
}

void CheckLike(const at::Tensor& tensor, const at::Tensor& like, const char* collective, const char* what,
               const char* like_what) {
  if (tensor.scalar_type() != like.scalar_type() || tensor.device() != like.device()) {
    Fail(Where(collective) + what + " is " + c10::toString(tensor.scalar_type()) + " on " + tensor.device().str() +
         ", " + like_what + " " + c10::toString(like.scalar_type()) + " on " + like.device().str());
  }
}

void CheckNumel(int64_t got, int64_t want, const char* collective, const char* what) {
  if (got != want) {
    Fail(Where(collective) + what + " has " + std::to_string(got) + " elements, expected " + std::to_string(want));
  }
}

void CheckWritable(const at::Tensor& tensor, const char* collective, const char* what) {
  if (!tensor.is_contiguous()) Fail(Where(collective) + what + " must be contiguous (call .contiguous())");
}

at::Tensor Flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (at::Tensor& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace braid_torch
