// Internal to tensor/: the CUDA kernel launchers, with a plain C++ interface
// so that the .cu file (compiled by nvcc) and the rest (compiled by g++) share
// no Abseil types. Codes: DType and ReduceOp values; the result is a
// cudaError_t value (0 = success). `stream` is a cudaStream_t (null = default).
#ifndef BRAID_TENSOR_CUDA_LAUNCH_H_
#define BRAID_TENSOR_CUDA_LAUNCH_H_

#include <cstddef>
#include <cstdint>

namespace braid::cuda_launch {

// dst[i] = a[i] op b[i]; asynchronous on `stream`.
int Reduce(int dtype, int op, void* dst, const void* a, const void* b, size_t count, void* stream);
// data[i] /= divisor; asynchronous on `stream`.
int Divide(int dtype, void* data, size_t count, int64_t divisor, void* stream);
// dst[i] = src[i] converted to dst_dtype, rounding to nearest even; both
// dtypes among f32, f64, f16, bf16 (else cudaErrorInvalidValue, nothing
// launched). No overlap. Asynchronous on `stream`.
int Cast(int dst_dtype, void* dst, int src_dtype, const void* src, size_t count, void* stream);

}  // namespace braid::cuda_launch

#endif  // BRAID_TENSOR_CUDA_LAUNCH_H_
