// Host reduction kernels against memcpy, on the same machine in the same run.
//
// Bandwidth counts bytes moved through memory: memcpy reads n and writes n
// (2n); dst = a op b and dst op= src read 2n and write n (3n). A kernel that
// runs "at memory bandwidth" shows a ratio near 1.0 against memcpy.
//
//   bazel run //bench:reduce_kernels_bench -- --sizes=32768,1048576,67108864
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tensor/cpu_kernels.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

ABSL_FLAG(std::string, sizes, "32768,1048576,67108864", "Buffer sizes in bytes, comma-separated.");
ABSL_FLAG(std::string, dtypes, "float32,float64,float16,bfloat16,int32,int8", "Element types.");
ABSL_FLAG(double, seconds, 0.25, "Minimum measuring time per row.");

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;

// Runs fn repeatedly for at least `seconds`; returns the best seconds per call.
template <typename Fn>
double BestSecondsPerCall(Fn&& fn, double seconds) {
  fn();  // warm: first touch and caches
  double best = 1e30;
  const auto start = Clock::now();
  int calls = 0;
  while (calls < 3 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    ++calls;
  }
  return best;
}

Tensor Filled(size_t bytes, DType dtype, int seed) {
  Tensor t = *Tensor::Empty({static_cast<int64_t>(bytes / DTypeSize(dtype))}, dtype);
  // Small positive values: no overflow to infinity, no NaN slow paths.
  DispatchDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float v = 1.0f + static_cast<float>((i * 7 + seed) % 13) / 16.0f;
      if constexpr (std::is_same_v<T, Half>) p[i] = FloatToHalf(v);
      else if constexpr (std::is_same_v<T, BFloat16>) p[i] = FloatToBFloat16(v);
      else p[i] = static_cast<T>(v);
    }
  });
  return t;
}

int Main() {
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    size_t bytes = 0;
    if (!absl::SimpleAtoi(s, &bytes) || bytes == 0) {
      std::fprintf(stderr, "reduce_kernels_bench: bad size \"%s\"\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(bytes);
  }
  std::vector<DType> dtypes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',')) {
    auto dtype = ParseDType(s);
    if (!dtype.ok()) {
      std::fprintf(stderr, "reduce_kernels_bench: %s\n", std::string(dtype.status().message()).c_str());
      return 2;
    }
    dtypes.push_back(*dtype);
  }
  const double seconds = absl::GetFlag(FLAGS_seconds);

  std::vector<const cpu_kernels::KernelTable*> tables = {&cpu_kernels::GenericKernels()};
  if (cpu_kernels::CpuHasAvx2()) tables.push_back(&cpu_kernels::Avx2Kernels());
  if (cpu_kernels::CpuHasAvx512()) tables.push_back(&cpu_kernels::Avx512Kernels());

  std::printf("# host reduction kernels vs memcpy; GB/s of memory traffic (read + write); ratio = kernel / memcpy\n");
  std::printf("# default ISA on this CPU: %s\n", HostKernelIsa());
  std::printf("| size | dtype | isa | memcpy GB/s | dst+=src GB/s | ratio | dst=a+b GB/s | ratio |\n");
  std::printf("|---:|---|---|---:|---:|---:|---:|---:|\n");
  for (size_t bytes : sizes) {
    // memcpy measured for each size, next to the kernels it is compared with.
    Tensor src = Filled(bytes, DType::kU8, 1);
    Tensor dst = Filled(bytes, DType::kU8, 2);
    const double copy_s = BestSecondsPerCall([&] { std::memcpy(dst.data(), src.data(), bytes); }, seconds);
    const double copy_gbs = 2.0 * bytes / copy_s / 1e9;
    for (DType dtype : dtypes) {
      const size_t usable = bytes / DTypeSize(dtype) * DTypeSize(dtype);
      Tensor a = Filled(usable, dtype, 3);
      Tensor b = Filled(usable, dtype, 4);
      Tensor out = Filled(usable, dtype, 5);
      const size_t count = usable / DTypeSize(dtype);
      for (const cpu_kernels::KernelTable* table : tables) {
        const double inplace_s = BestSecondsPerCall(
            [&] { table->reduce(dtype, ReduceOp::kSum, a.data(), a.data(), b.data(), count); }, seconds);
        const double outofplace_s = BestSecondsPerCall(
            [&] { table->reduce(dtype, ReduceOp::kSum, out.data(), a.data(), b.data(), count); }, seconds);
        const double inplace_gbs = 3.0 * usable / inplace_s / 1e9;
        const double outofplace_gbs = 3.0 * usable / outofplace_s / 1e9;
        std::printf("| %zu | %s | %s | %.1f | %.1f | %.2f | %.1f | %.2f |\n", bytes, DTypeName(dtype), table->isa,
                    copy_gbs, inplace_gbs, inplace_gbs / copy_gbs, outofplace_gbs, outofplace_gbs / copy_gbs);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return braid::Main();
}
