#include "tensor/cuda_kernels.h"

#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tensor/cuda_launch.h"

namespace braid {
namespace {

// reduce_kernels.cu mirrors these values.
static_assert(static_cast<int>(DType::kF32) == 0 && static_cast<int>(DType::kF64) == 1 &&
              static_cast<int>(DType::kF16) == 2 && static_cast<int>(DType::kBF16) == 3 &&
              static_cast<int>(DType::kI8) == 4 && static_cast<int>(DType::kU8) == 5 &&
              static_cast<int>(DType::kI32) == 6 && static_cast<int>(DType::kI64) == 7);
static_assert(static_cast<int>(ReduceOp::kSum) == 0 && static_cast<int>(ReduceOp::kProd) == 1 &&
              static_cast<int>(ReduceOp::kMin) == 2 && static_cast<int>(ReduceOp::kMax) == 3 &&
              static_cast<int>(ReduceOp::kAvg) == 4);

absl::Status Finish(int launched, void* stream, bool synchronize, const std::string& what) {
  cudaError_t error = static_cast<cudaError_t>(launched);
  if (error == cudaSuccess && synchronize) error = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status Finish(int launched, void* stream, bool synchronize, const char* what, DType dtype) {
  return Finish(launched, stream, synchronize, absl::StrCat(what, " on ", DTypeName(dtype)));
}

}  // namespace

absl::Status CudaReduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count, void* stream,
                        bool synchronize) {
  const int launched =
      cuda_launch::Reduce(static_cast<int>(dtype), static_cast<int>(op), dst, a, b, count, stream);
  return Finish(launched, stream, synchronize, "CUDA reduce", dtype);
}

absl::Status CudaDivide(DType dtype, void* data, size_t count, int64_t divisor, void* stream, bool synchronize) {
  const int launched = cuda_launch::Divide(static_cast<int>(dtype), data, count, divisor, stream);
  return Finish(launched, stream, synchronize, "CUDA divide", dtype);
}

absl::Status CudaCast(DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t count, void* stream,
                      bool synchronize) {
  const std::string what = absl::StrCat("CUDA cast ", DTypeName(src_dtype), " -> ", DTypeName(dst_dtype));
  if (!IsFloatingPoint(dst_dtype) || !IsFloatingPoint(src_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": only float32, float64, float16 and bfloat16 convert to one another"));
  }
  const int launched =
      cuda_launch::Cast(static_cast<int>(dst_dtype), dst, static_cast<int>(src_dtype), src, count, stream);
  return Finish(launched, stream, synchronize, what);
}

}  // namespace braid
