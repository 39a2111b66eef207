// CUDA reductions and casts with Status errors (built only with --config=cuda):
// asynchronous on `stream` (a cudaStream_t; null = the legacy default
// stream), or synchronous when `synchronize` is true. Pointers are device
// memory; dst may equal a or b.
#ifndef BRAID_TENSOR_CUDA_KERNELS_H_
#define BRAID_TENSOR_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {

absl::Status CudaReduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count, void* stream,
                        bool synchronize);
absl::Status CudaDivide(DType dtype, void* data, size_t count, int64_t divisor, void* stream, bool synchronize);
// dst[i] = src[i] converted from src_dtype to dst_dtype, rounding to nearest
// even (NaN stays NaN), between any two of float32, float64, float16 and
// bfloat16; other dtypes are InvalidArgument. dst and src must not overlap.
absl::Status CudaCast(DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t count, void* stream,
                      bool synchronize);

}  // namespace braid

#endif  // BRAID_TENSOR_CUDA_KERNELS_H_
