// CUDA reduction kernels against device-to-device cudaMemcpy on the same GPU
// in the same run. Bandwidth counts bytes read plus written (memcpy 2n,
// dst op= src 3n). Built only with --config=cuda.
#include <cuda_runtime.h>

#include <cstdio>
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
  std::printf("# CUDA reduction kernels vs cudaMemcpy D2D on %s; GB/s of traffic (read + write)\n", prop.name);
  std::printf("| size | dtype | memcpy GB/s | dst+=src GB/s | ratio |\n|---:|---|---:|---:|---:|\n");
  for (size_t bytes : {size_t{1} << 20, size_t{16} << 20, size_t{256} << 20, size_t{1} << 30}) {
    Tensor x = *Tensor::Zeros({static_cast<int64_t>(bytes)}, DType::kU8, Device::Cuda(0));
    Tensor y = *Tensor::Zeros({static_cast<int64_t>(bytes)}, DType::kU8, Device::Cuda(0));
    const double copy_s = BestSeconds(
        [&] { CUDA_OR_DIE(cudaMemcpyAsync(y.data(), x.data(), bytes, cudaMemcpyDeviceToDevice)); }, 20);
    const double copy_gbs = 2.0 * bytes / copy_s / 1e9;
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32}) {
      const size_t count = bytes / DTypeSize(dtype);
      const double reduce_s = BestSeconds(
          [&] {
            absl::Status status = CudaReduce(dtype, ReduceOp::kSum, y.data(), y.data(), x.data(), count, nullptr, false);
            if (!status.ok()) {
              std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
              std::exit(1);
            }
          },
          20);
      const double gbs = 3.0 * count * DTypeSize(dtype) / reduce_s / 1e9;
      std::printf("| %zu | %s | %.0f | %.0f | %.2f |\n", bytes, DTypeName(dtype), copy_gbs, gbs, gbs / copy_gbs);
    }
  }
  return 0;
}

}  // namespace
}  // namespace braid

int main() { return braid::Main(); }
