// CUDA reduction and cast kernels against device-to-device cudaMemcpy on the
// same GPU in the same run. Bandwidth counts bytes read plus written (memcpy
// 2n, dst = a op b 3n, a cast n * (source + destination element size)), and
// the ratio is kernel over memcpy: 1.0 means the kernel streams as fast as
// the copy does. A dtype row is dst = dst + src (sum); "+1" rows run it one
// element off 16-byte alignment in every operand (a scalar head, then the
// vector loop); "cast" rows convert float32 to and from the 16-bit types.
// Built only with --config=cuda.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tensor/cuda_kernels.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid {
namespace {

#define CUDA_OR_DIE(expr)                                                                  \
  do {                                                                                     \
    cudaError_t error_ = (expr);                                                           \
    if (error_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(error_));          \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (false)

// Best seconds per call over `iterations` timed calls after a warm-up.
template <typename Fn>
double BestSeconds(Fn&& fn, int iterations) {
  cudaEvent_t start, stop;
  CUDA_OR_DIE(cudaEventCreate(&start));
  CUDA_OR_DIE(cudaEventCreate(&stop));
  fn();
  CUDA_OR_DIE(cudaDeviceSynchronize());
  float best_ms = 1e30f;
  for (int i = 0; i < iterations; ++i) {
    CUDA_OR_DIE(cudaEventRecord(start));
    fn();
    CUDA_OR_DIE(cudaEventRecord(stop));
    CUDA_OR_DIE(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best_ms) best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best_ms / 1e3;
}

int Main() {
  if (CudaDeviceCount() == 0) {
    std::fprintf(stderr, "reduce_kernels_cuda_bench: no usable GPU\n");
    return 1;
  }
  cudaDeviceProp prop;
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  std::printf("# CUDA reduction and cast kernels vs cudaMemcpy D2D on %s; GB/s of traffic (read + write)\n", prop.name);
  std::printf("| size | kernel | memcpy GB/s | kernel GB/s | ratio |\n|---:|---|---:|---:|---:|\n");
  for (size_t bytes : {size_t{1} << 20, size_t{16} << 20, size_t{256} << 20, size_t{1} << 30}) {
    Tensor x = *Tensor::Zeros({static_cast<int64_t>(bytes)}, DType::kU8, Device::Cuda(0));
    Tensor y = *Tensor::Zeros({static_cast<int64_t>(bytes)}, DType::kU8, Device::Cuda(0));
    const double copy_s = BestSeconds(
        [&] { CUDA_OR_DIE(cudaMemcpyAsync(y.data(), x.data(), bytes, cudaMemcpyDeviceToDevice)); }, 20);
    const double copy_gbs = 2.0 * bytes / copy_s / 1e9;
    const auto row = [&](const std::string& kernel, double traffic_bytes, const auto& call) {
      const double seconds = BestSeconds(
          [&] {
            absl::Status status = call();
            if (!status.ok()) {
              std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
              std::exit(1);
            }
          },
          20);
      const double gbs = traffic_bytes / seconds / 1e9;
      std::printf("| %zu | %s | %.0f | %.0f | %.2f |\n", bytes, kernel.c_str(), copy_gbs, gbs, gbs / copy_gbs);
    };
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32}) {
      const size_t size = DTypeSize(dtype);
      const size_t count = bytes / size;
      row(DTypeName(dtype), 3.0 * count * size,
          [&] { return CudaReduce(dtype, ReduceOp::kSum, y.data(), y.data(), x.data(), count, nullptr, false); });
      if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) {
        std::byte* y1 = static_cast<std::byte*>(y.data()) + size;
        const std::byte* x1 = static_cast<const std::byte*>(x.data()) + size;
        row(std::string(DTypeName(dtype)) + " +1", 3.0 * (count - 1) * size,
            [&] { return CudaReduce(dtype, ReduceOp::kSum, y1, y1, x1, count - 1, nullptr, false); });
      }
    }
    // Casts between float32 and the 16-bit types; x holds zeros of either.
    for (DType narrow : {DType::kBF16, DType::kF16}) {
      const size_t count = bytes / 4;
      row(std::string("cast float32->") + DTypeName(narrow), 6.0 * count,
          [&] { return CudaCast(narrow, y.data(), DType::kF32, x.data(), count, nullptr, false); });
      row(std::string("cast ") + DTypeName(narrow) + "->float32", 6.0 * count,
          [&] { return CudaCast(DType::kF32, y.data(), narrow, x.data(), count, nullptr, false); });
    }
  }
  return 0;
}

}  // namespace
}  // namespace braid

int main() { return braid::Main(); }
