// CUDA reduction kernels: the same semantics as the host kernels
// (tensor/reduce.h): f16/bf16 combine in f32 and round to nearest even,
// integers wrap, floating min/max propagate NaN, integer divide truncates.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tensor/cuda_launch.h"

namespace braid::cuda_launch {
namespace {

// Mirrors braid::DType and braid::ReduceOp (static_asserts in cuda_kernels.cc).
enum DTypeCode { kF32 = 0, kF64 = 1, kF16 = 2, kBF16 = 3, kI8 = 4, kU8 = 5, kI32 = 6, kI64 = 7 };
enum OpCode { kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4 };

template <typename T>
struct Compute {
  using Type = T;
  __device__ static T Load(T v) { return v; }
  __device__ static T Store(T v) { return v; }
};
template <>
struct Compute<__half> {
  using Type = float;
  __device__ static float Load(__half v) { return __half2float(v); }
  __device__ static __half Store(float v) { return __float2half_rn(v); }
};
template <>
struct Compute<__nv_bfloat16> {
  using Type = float;
  __device__ static float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Store(float v) { return __float2bfloat16_rn(v); }
};

template <typename C>
__device__ C Apply(int op, C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    using Wide = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, U>;
    switch (op) {
      case kProd: return static_cast<C>(static_cast<Wide>(static_cast<U>(a)) * static_cast<Wide>(static_cast<U>(b)));
      case kMin: return b < a ? b : a;
      case kMax: return b > a ? b : a;
      default: return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    }
  } else {
    switch (op) {
      case kProd: return a * b;
      case kMin: return (a != a) ? a : ((b < a || b != b) ? b : a);
      case kMax: return (a != a) ? a : ((b > a || b != b) ? b : a);
      default: return a + b;
    }
  }
}

template <typename T>
__global__ void ReduceKernel(int op, T* dst, const T* a, const T* b, size_t count) {
  using C = typename Compute<T>::Type;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const C x = Compute<T>::Load(a[i]);
    const C y = Compute<T>::Load(b[i]);
    dst[i] = Compute<T>::Store(Apply<C>(op, x, y));
  }
}

template <typename T>
__global__ void DivideKernel(T* data, size_t count, int64_t divisor) {
  using C = typename Compute<T>::Type;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    if constexpr (std::is_integral_v<C>) {
      data[i] = static_cast<C>(static_cast<int64_t>(data[i]) / divisor);
    } else {
      data[i] = Compute<T>::Store(Compute<T>::Load(data[i]) / static_cast<C>(divisor));
    }
  }
}

constexpr int kThreads = 256;

unsigned Blocks(size_t count) {
  // Enough blocks to fill a large GPU several times over; the grid-stride
  // loop covers the rest.
  const size_t wanted = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 65536 ? (wanted == 0 ? 1 : wanted) : 65536);
}

template <typename Fn>
int Dispatch(int dtype, Fn&& fn) {
  switch (dtype) {
    case kF32: return fn(float{});
    case kF64: return fn(double{});
    case kF16: return fn(__half{});
    case kBF16: return fn(__nv_bfloat16{});
    case kI8: return fn(int8_t{});
    case kU8: return fn(uint8_t{});
    case kI32: return fn(int32_t{});
    case kI64: return fn(int64_t{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int Reduce(int dtype, int op, void* dst, const void* a, const void* b, size_t count, void* stream) {
  if (count == 0) return 0;
  return Dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    ReduceKernel<T><<<Blocks(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        op, static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count);
    return static_cast<int>(cudaGetLastError());
  });
}

int Divide(int dtype, void* data, size_t count, int64_t divisor, void* stream) {
  if (count == 0 || divisor == 1) return 0;
  return Dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    DivideKernel<T><<<Blocks(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<T*>(data), count,
                                                                                    divisor);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace braid::cuda_launch
