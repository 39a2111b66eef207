// CUDA reduction kernels against the host reference, on a GPU when there is
// one. Without --config=cuda or without a GPU the test says so and returns.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid {
namespace {

bool HaveGpu() {
  if (!CudaCompiledIn()) {
    WARN("built without --config=cuda: CUDA kernels not run");
    return false;
  }
  if (CudaDeviceCount() == 0) {
    WARN("no usable GPU (cudaGetDeviceCount failed or found none): CUDA kernels not run");
    return false;
  }
  return true;
}

Tensor RandomHost(DType dtype, int64_t count, std::mt19937_64& rng) {
  Tensor t = *Tensor::Empty({count}, dtype);
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  DispatchDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, Half>) p[i] = FloatToHalf(real(rng));
      else if constexpr (std::is_same_v<T, BFloat16>) p[i] = FloatToBFloat16(real(rng));
      else if constexpr (std::is_integral_v<T>) p[i] = static_cast<T>(rng());
      else p[i] = static_cast<T>(real(rng));
    }
  });
  return t;
}

TEST_CASE("CUDA reduce and divide kernels match the host kernels", "[tensor][cuda]") {
  if (!HaveGpu()) return;
  std::mt19937_64 rng(7);
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
        Tensor a = RandomHost(dtype, count, rng);
        Tensor b = RandomHost(dtype, count, rng);
        Tensor expected = *a.Clone();
        REQUIRE(ReduceInto(expected, b, op).ok());
        if (op == ReduceOp::kAvg) REQUIRE(DivideBy(expected, 3).ok());

        Tensor da = *a.Clone(Device::Cuda(0));
        Tensor db = *b.Clone(Device::Cuda(0));
        Tensor dout = *Tensor::Empty({count}, dtype, Device::Cuda(0));
        Tensor poison = *Tensor::Empty({count}, dtype);
        std::memset(poison.data(), 0xA5, poison.nbytes());
        REQUIRE(dout.CopyFrom(poison).ok());  // output poisoned before the run
        REQUIRE(ReduceInto(dout, da, db, op).ok());
        if (op == ReduceOp::kAvg) REQUIRE(DivideBy(dout, 3).ok());
        Tensor got = *dout.Clone(Device::Cpu());
        INFO(DTypeName(dtype) << " " << ReduceOpName(op) << " count " << count);
        // Integers and every single-rounding result must be bit-exact; f32/f64
        // division may differ by the device's rounding only in the last place.
        const bool exact = !(IsFloatingPoint(dtype) && op == ReduceOp::kAvg);
        if (exact) {
          REQUIRE(std::memcmp(got.data(), expected.data(), got.nbytes()) == 0);
        } else {
          DispatchDType(dtype, [&](auto zero) {
            using T = decltype(zero);
            for (int64_t i = 0; i < count; ++i) {
              double x, y;
              if constexpr (std::is_same_v<T, Half>) {
                x = HalfToFloat(got.data<T>()[i]);
                y = HalfToFloat(expected.data<T>()[i]);
              } else if constexpr (std::is_same_v<T, BFloat16>) {
                x = BFloat16ToFloat(got.data<T>()[i]);
                y = BFloat16ToFloat(expected.data<T>()[i]);
              } else {
                x = static_cast<double>(got.data<T>()[i]);
                y = static_cast<double>(expected.data<T>()[i]);
              }
              REQUIRE(std::fabs(x - y) <= 1e-2 * std::fabs(y) + 1e-6);
            }
          });
        }
      }
    }
  }
}

}  // namespace
}  // namespace braid
