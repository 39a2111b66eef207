// CUDA element-wise kernels: reductions with the same semantics as the host
// kernels (tensor/reduce.h): f16/bf16 combine in f32 and round to nearest
// even, integers wrap, floating min/max propagate NaN, integer divide
// truncates. And casts between the floating types (round to nearest even).
//
// Every kernel is memory-bound, so the layout is what matters: each thread
// moves 16-byte vectors (one uint4 per operand per group, several groups in
// flight) when every operand can be 16-byte aligned at the same element. A
// common misalignment (a chunk that starts mid-vector in all operands) is
// peeled off as a scalar head; the leftover tail runs scalar too. Operands
// misaligned relative to each other take the scalar path for all elements,
// with the same unrolled loads. The grid is a few blocks per SM (the SM count
// of the current device, cached), capped by the work, with a grid-stride
// loop: launching more blocks than can be resident only adds scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
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

// `op` is a compile-time constant at every call site below, so the switch
// folds away after inlining.
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

// Conversions between the floating types, each rounding once to nearest
// even: f16 <-> bf16 goes through f32, which holds either exactly.
template <typename D, typename S>
__device__ D Convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, double>) {
    if constexpr (std::is_same_v<D, float>) return __double2float_rn(v);
    else if constexpr (std::is_same_v<D, __half>) return __double2half(v);
    else return __double2bfloat16(v);
  } else {
    const float f = Compute<S>::Load(v);  // exact
    if constexpr (std::is_same_v<D, double>) return static_cast<double>(f);
    else return Compute<D>::Store(f);
  }
}

constexpr int kThreads = 256;
// Groups per thread per grid-stride step: all their loads issue before the
// first store (the stores may alias the loads, so the compiler cannot hoist
// loads across them itself). Each operation may lower it (its kUnroll) where
// a group unpacks into many registers (16 bytes, or 64 bytes of f64 read for
// 16-bit output): at 4 those spill under the register cap below.
constexpr int kMaxUnroll = 4;
// 4 x 256 threads = half an SM's thread slots (and at most 64 registers a
// thread), with 2-4 x 16 bytes in flight per operand per thread: well over
// what Little's law asks of HBM3e.
constexpr int kBlocksPerSm = 4;
constexpr size_t kVectorBytes = 16;

// N elements of T moved as a whole: as N * sizeof(T) / 16 uint4 when that
// divides (the vector path; the address must be 16-byte aligned), else one
// element at a time (the scalar path, N == 1).
template <typename T, int N>
struct alignas(N * sizeof(T) % kVectorBytes == 0 ? kVectorBytes : alignof(T)) Pack {
  T v[N];
};

template <int N, typename T>
__device__ Pack<T, N> LoadPack(const T* p) {
  Pack<T, N> out;
  if constexpr (N * sizeof(T) % kVectorBytes == 0) {
    constexpr int kWords = N * sizeof(T) / kVectorBytes;
#pragma unroll
    for (int k = 0; k < kWords; ++k) reinterpret_cast<uint4*>(&out)[k] = reinterpret_cast<const uint4*>(p)[k];
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) out.v[e] = p[e];
  }
  return out;
}

// One 16-byte store, spelled out: left to itself the compiler splits some
// 16-bit packs' stores into 4-byte pieces.
__device__ void StoreVector(void* p, uint4 w) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)), "r"(w.x), "r"(w.y),
               "r"(w.z), "r"(w.w)
               : "memory");
}

template <int N, typename T>
__device__ void StorePack(T* p, const Pack<T, N>& in) {
  if constexpr (N * sizeof(T) % kVectorBytes == 0) {
    constexpr int kWords = N * sizeof(T) / kVectorBytes;
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      StoreVector(p + k * (kVectorBytes / sizeof(T)), reinterpret_cast<const uint4*>(&in)[k]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) p[e] = in.v[e];
  }
}

// The element-wise operations. Each says what one element does (Element)
// and what kUnroll groups of N elements do (Groups): group g covers elements
// head + g * N .. + N, and a thread takes groups first, first + kThreads, ...
template <typename T, int kOp>
struct ReduceFn {
  T* dst;
  const T* a;
  const T* b;
  static constexpr int kUnroll = sizeof(T) == 1 ? 2 : kMaxUnroll;

  __device__ static T Combine(T x, T y) {
    using C = typename Compute<T>::Type;
    return Compute<T>::Store(Apply<C>(kOp, Compute<T>::Load(x), Compute<T>::Load(y)));
  }
  __device__ void Element(size_t i) const { dst[i] = Combine(a[i], b[i]); }
  template <int N>
  __device__ void Groups(size_t head, size_t first, size_t groups) const {
    Pack<T, N> x[kUnroll], y[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t g = first + static_cast<size_t>(j) * kThreads;
      if (g < groups) {
        x[j] = LoadPack<N>(a + head + g * N);
        y[j] = LoadPack<N>(b + head + g * N);
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t g = first + static_cast<size_t>(j) * kThreads;
      if (g < groups) {
#pragma unroll
        for (int e = 0; e < N; ++e) x[j].v[e] = Combine(x[j].v[e], y[j].v[e]);
        StorePack<N>(dst + head + g * N, x[j]);
      }
    }
  }
};

template <typename T>
struct DivideFn {
  T* data;
  int64_t divisor;
  static constexpr int kUnroll = sizeof(T) == 1 ? 2 : kMaxUnroll;

  __device__ T Divide(T v) const {
    using C = typename Compute<T>::Type;
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<int64_t>(v) / divisor);
    } else {
      return Compute<T>::Store(Compute<T>::Load(v) / static_cast<C>(divisor));
    }
  }
  __device__ void Element(size_t i) const { data[i] = Divide(data[i]); }
  template <int N>
  __device__ void Groups(size_t head, size_t first, size_t groups) const {
    Pack<T, N> x[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t g = first + static_cast<size_t>(j) * kThreads;
      if (g < groups) x[j] = LoadPack<N>(data + head + g * N);
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t g = first + static_cast<size_t>(j) * kThreads;
      if (g < groups) {
#pragma unroll
        for (int e = 0; e < N; ++e) x[j].v[e] = Divide(x[j].v[e]);
        StorePack<N>(data + head + g * N, x[j]);
      }
    }
  }
};

template <typename D, typename S>
struct CastFn {
  D* dst;
  const S* src;
  static constexpr int kUnroll = sizeof(S) == 8 && sizeof(D) == 2 ? 2 : kMaxUnroll;

  __device__ void Element(size_t i) const { dst[i] = Convert<D>(src[i]); }
  template <int N>
  __device__ void Groups(size_t head, size_t first, size_t groups) const {
    Pack<S, N> x[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t g = first + static_cast<size_t>(j) * kThreads;
      if (g < groups) x[j] = LoadPack<N>(src + head + g * N);
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const size_t g = first + static_cast<size_t>(j) * kThreads;
      if (g < groups) {
        Pack<D, N> y;
#pragma unroll
        for (int e = 0; e < N; ++e) y.v[e] = Convert<D>(x[j].v[e]);
        StorePack<N>(dst + head + g * N, y);
      }
    }
  }
};

// Elements [0, head) and [head + groups * N, count) one per thread (fewer
// than N <= 16 each, so one pass of the first threads covers them); the
// groups in between by the grid-stride loop.
template <int N, typename Fn>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    ElementwiseKernel(Fn fn, size_t count, size_t head, size_t groups) {
  const size_t step = static_cast<size_t>(gridDim.x) * kThreads * Fn::kUnroll;
  for (size_t first = static_cast<size_t>(blockIdx.x) * kThreads * Fn::kUnroll + threadIdx.x; first < groups;
       first += step) {
    fn.template Groups<N>(head, first, groups);
  }
  const size_t tid = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
  const size_t tail = head + groups * N;
  if (tid < head) fn.Element(tid);
  if (tail + tid < count) fn.Element(tail + tid);
}

// The most blocks worth launching on the current device: kBlocksPerSm per SM.
// The SM count is cached per device (a benign race: every writer stores the
// same value).
int MaxBlocks(unsigned* blocks) {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> sm_counts[kCachedDevices] = {};
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return static_cast<int>(error);
  int sms = (device >= 0 && device < kCachedDevices) ? sm_counts[device].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (error != cudaSuccess) return static_cast<int>(error);
    if (sms <= 0) sms = 1;
    if (device >= 0 && device < kCachedDevices) sm_counts[device].store(sms, std::memory_order_relaxed);
  }
  *blocks = static_cast<unsigned>(sms) * kBlocksPerSm;
  return 0;
}

// An operand's address and element size, for the alignment plan.
struct Operand {
  const void* data;
  size_t element_size;
};

// Runs `fn` over `count` elements: vectorized with groups of N when one head
// length makes every operand 16-byte aligned (the first operand decides it),
// else scalar.
template <int N, typename Fn>
int Launch(const Fn& fn, size_t count, std::initializer_list<Operand> operands, void* stream) {
  size_t head = 0;
  size_t groups = 0;
  bool vector = true;
  {
    const Operand& lead = *operands.begin();
    const uintptr_t address = reinterpret_cast<uintptr_t>(lead.data);
    if (address % lead.element_size != 0) {
      vector = false;
    } else {
      head = (kVectorBytes - address % kVectorBytes) % kVectorBytes / lead.element_size;
      for (const Operand& operand : operands) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(operand.data) + head * operand.element_size;
        if (at % kVectorBytes != 0) vector = false;
      }
      if (head > count || (count - head) / N == 0) vector = false;
    }
  }
  if (vector) {
    groups = (count - head) / N;
  } else {
    head = 0;
    groups = count;  // groups of one element
  }
  unsigned blocks = 0;
  if (const int error = MaxBlocks(&blocks); error != 0) return error;
  const size_t per_block = static_cast<size_t>(kThreads) * Fn::kUnroll;
  const size_t wanted = (groups + per_block - 1) / per_block;
  if (wanted < blocks) blocks = static_cast<unsigned>(wanted == 0 ? 1 : wanted);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (vector) {
    ElementwiseKernel<N><<<blocks, kThreads, 0, s>>>(fn, count, head, groups);
  } else {
    ElementwiseKernel<1><<<blocks, kThreads, 0, s>>>(fn, count, head, groups);
  }
  return static_cast<int>(cudaGetLastError());
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

template <typename Fn>
int DispatchFloat(int dtype, Fn&& fn) {
  switch (dtype) {
    case kF32: return fn(float{});
    case kF64: return fn(double{});
    case kF16: return fn(__half{});
    case kBF16: return fn(__nv_bfloat16{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

// avg reduces as sum (the division comes once, at the end).
template <typename Fn>
int DispatchOp(int op, Fn&& fn) {
  switch (op) {
    case kSum:
    case kAvg: return fn(std::integral_constant<int, kSum>{});
    case kProd: return fn(std::integral_constant<int, kProd>{});
    case kMin: return fn(std::integral_constant<int, kMin>{});
    case kMax: return fn(std::integral_constant<int, kMax>{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int Reduce(int dtype, int op, void* dst, const void* a, const void* b, size_t count, void* stream) {
  if (count == 0) return 0;
  return Dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    return DispatchOp(op, [&](auto op_constant) {
      const ReduceFn<T, decltype(op_constant)::value> fn{static_cast<T*>(dst), static_cast<const T*>(a),
                                                         static_cast<const T*>(b)};
      return Launch<kVectorBytes / sizeof(T)>(fn, count, {{dst, sizeof(T)}, {a, sizeof(T)}, {b, sizeof(T)}},
                                              stream);
    });
  });
}

int Divide(int dtype, void* data, size_t count, int64_t divisor, void* stream) {
  if (count == 0 || divisor == 1) return 0;
  return Dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    const DivideFn<T> fn{static_cast<T*>(data), divisor};
    return Launch<kVectorBytes / sizeof(T)>(fn, count, {{data, sizeof(T)}}, stream);
  });
}

int Cast(int dst_dtype, void* dst, int src_dtype, const void* src, size_t count, void* stream) {
  return DispatchFloat(dst_dtype, [&](auto dst_zero) {
    using D = decltype(dst_zero);
    return DispatchFloat(src_dtype, [&](auto src_zero) {
      using S = decltype(src_zero);
      if (count == 0) return 0;
      // A group is one uint4 of the narrower type, several of the wider.
      constexpr int kN = kVectorBytes / (sizeof(D) < sizeof(S) ? sizeof(D) : sizeof(S));
      const CastFn<D, S> fn{static_cast<D*>(dst), static_cast<const S*>(src)};
      return Launch<kN>(fn, count, {{dst, sizeof(D)}, {src, sizeof(S)}}, stream);
    });
  });
}

}  // namespace braid::cuda_launch
