// CUDA reduction and cast kernels against the host reference, on a GPU when
// there is one: aligned buffers (the 16-byte vector path), buffers offset by
// one element alike (a scalar head, then vectors) and offset differently (the
// scalar path). Without --config=cuda or without a GPU the test says so and
// returns.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "tensor/reduce.h"
#include "tensor/tensor.h"
#ifdef BRAID_WITH_CUDA
#include "tensor/cuda_kernels.h"
#endif

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

// Integers and every single-rounding result must be bit-exact; f32/f64
// division may differ by the device's rounding only in the last place.
void RequireMatches(const Tensor& got, const Tensor& expected, ReduceOp op) {
  const DType dtype = got.dtype();
  const int64_t count = got.numel();
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
        RequireMatches(got, expected, op);
      }
    }
  }
}

// A device copy of `host` starting `offset` elements into a fresh
// allocation (allocations are at least 256-byte aligned, so offset 1 is
// misaligned for the 16-byte vectors).
Tensor DeviceAt(const Tensor& host, int64_t offset) {
  Tensor buffer = *Tensor::Empty({host.numel() + offset}, host.dtype(), Device::Cuda(0));
  Tensor view = *buffer.Narrow(0, offset, host.numel());
  REQUIRE(view.CopyFrom(host).ok());
  return view;  // shares (and keeps alive) the buffer's storage
}

TEST_CASE("CUDA reduce and divide kernels on pointers off 16-byte alignment", "[tensor][cuda]") {
  if (!HaveGpu()) return;
  std::mt19937_64 rng(11);
  struct Offsets {
    int64_t dst, a, b;
  };
  // All one element off (a scalar head, then vectors); off by different
  // amounts (all scalar).
  const Offsets kOffsets[] = {{1, 1, 1}, {1, 0, 1}, {0, 1, 0}};
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{1000}, (int64_t{1} << 16) + 5}) {
        Tensor a = RandomHost(dtype, count, rng);
        Tensor b = RandomHost(dtype, count, rng);
        Tensor expected = *a.Clone();
        REQUIRE(ReduceInto(expected, b, op).ok());
        if (op == ReduceOp::kAvg) REQUIRE(DivideBy(expected, 3).ok());
        Tensor poison = *Tensor::Empty({count}, dtype);
        std::memset(poison.data(), 0xA5, poison.nbytes());
        for (const Offsets& offsets : kOffsets) {
          INFO(DTypeName(dtype) << " " << ReduceOpName(op) << " count " << count << " offsets dst " << offsets.dst
                                << " a " << offsets.a << " b " << offsets.b);
          Tensor da = DeviceAt(a, offsets.a);
          Tensor db = DeviceAt(b, offsets.b);
          Tensor dout = DeviceAt(poison, offsets.dst);  // poisoned before the run
          REQUIRE(ReduceInto(dout, da, db, op).ok());
          if (op == ReduceOp::kAvg) REQUIRE(DivideBy(dout, 3).ok());
          RequireMatches(*dout.Clone(Device::Cpu()), expected, op);
        }
        // In place: dst is a, both one element off.
        Tensor da = DeviceAt(a, 1);
        Tensor db = DeviceAt(b, 1);
        REQUIRE(ReduceInto(da, db, op).ok());
        if (op == ReduceOp::kAvg) REQUIRE(DivideBy(da, 3).ok());
        INFO(DTypeName(dtype) << " " << ReduceOpName(op) << " count " << count << " in place, offset 1");
        RequireMatches(*da.Clone(Device::Cpu()), expected, op);
      }
    }
  }
}

#ifdef BRAID_WITH_CUDA
// float32 inputs that exercise rounding: random bit patterns (every
// exponent: overflow to infinity, subnormals, NaN), the usual range, and
// exact ties for bfloat16 (16 dropped bits 0x8000) and float16 (13 dropped
// bits 0x1000, in float16's normal range).
Tensor CastInputs(int64_t count, std::mt19937_64& rng) {
  Tensor t = *Tensor::Empty({count}, DType::kF32);
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  std::uniform_int_distribution<uint32_t> f16_exponent(113, 142);  // float16 normals, as float32 exponents
  float* p = t.data<float>();
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    switch (i % 4) {
      case 0: p[i] = BitsToFloat(bits); break;
      case 1: p[i] = real(rng); break;
      case 2: p[i] = BitsToFloat((bits & 0xffff0000u) | 0x8000u); break;
      default:
        p[i] = BitsToFloat((bits & 0x80000000u) | (f16_exponent(rng) << 23) | (bits & 0x007fe000u) | 0x1000u);
        break;
    }
  }
  p[0] = 0.0f;
  if (count > 1) p[1] = -0.0f;
  return t;
}

// Bit-exact, except that a NaN need only come back NaN (payloads are the
// hardware's business). Reports the first mismatch.
void RequireSameFloats(const float* got, const float* expected, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const bool same = std::isnan(expected[i]) ? std::isnan(got[i]) : FloatBits(got[i]) == FloatBits(expected[i]);
    if (!same) {
      INFO("element " << i << " expected bits " << FloatBits(expected[i]) << " got " << FloatBits(got[i]));
      REQUIRE(same);
    }
  }
}

TEST_CASE("CUDA casts round-trip float32 through bfloat16, float16 and float64 as the host does", "[tensor][cuda]") {
  if (!HaveGpu()) return;
  std::mt19937_64 rng(13);
  for (DType narrow : {DType::kBF16, DType::kF16, DType::kF64}) {
    for (int64_t count : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3}) {
      for (int64_t offset : {int64_t{0}, int64_t{1}}) {
        INFO("float32 -> " << DTypeName(narrow) << " -> float32, count " << count << " offset " << offset);
        Tensor input = CastInputs(count, rng);
        // The host reference: one rounding each way.
        Tensor expected = *Tensor::Empty({count}, DType::kF32);
        for (int64_t i = 0; i < count; ++i) {
          const float x = input.data<float>()[i];
          float y = x;
          if (narrow == DType::kBF16) y = BFloat16ToFloat(FloatToBFloat16(x));
          if (narrow == DType::kF16) y = HalfToFloat(FloatToHalf(x));
          expected.data<float>()[i] = y;
        }
        Tensor src = DeviceAt(input, offset);
        Tensor middle = DeviceAt(*Tensor::Zeros({count}, narrow), offset);
        Tensor back = DeviceAt(*Tensor::Zeros({count}, DType::kF32), 0);
        REQUIRE(CudaCast(narrow, middle.data(), DType::kF32, src.data(), static_cast<size_t>(count), nullptr,
                         /*synchronize=*/true)
                    .ok());
        REQUIRE(CudaCast(DType::kF32, back.data(), narrow, middle.data(), static_cast<size_t>(count), nullptr,
                         /*synchronize=*/true)
                    .ok());
        Tensor got = *back.Clone(Device::Cpu());
        RequireSameFloats(got.data<float>(), expected.data<float>(), count);
        // The 16-bit intermediate too, bit for bit (NaN: any NaN).
        if (narrow != DType::kF64) {
          Tensor mid = *middle.Clone(Device::Cpu());
          for (int64_t i = 0; i < count; ++i) {
            const float x = input.data<float>()[i];
            const uint16_t want = narrow == DType::kBF16 ? FloatToBFloat16(x).bits : FloatToHalf(x).bits;
            const uint16_t have = static_cast<const uint16_t*>(mid.data())[i];
            const float have_value = narrow == DType::kBF16 ? BFloat16ToFloat(BFloat16{have}) : HalfToFloat(Half{have});
            const bool same = std::isnan(x) ? std::isnan(have_value) : have == want;
            if (!same) {
              INFO("element " << i << " input bits " << FloatBits(x) << " expected " << want << " got " << have);
              REQUIRE(same);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("CUDA cast rejects non-floating dtypes by name", "[tensor][cuda]") {
  if (!HaveGpu()) return;
  Tensor a = *Tensor::Zeros({4}, DType::kI32, Device::Cuda(0));
  Tensor b = *Tensor::Zeros({4}, DType::kF32, Device::Cuda(0));
  const absl::Status status = CudaCast(DType::kF32, b.data(), DType::kI32, a.data(), 4, nullptr, true);
  REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(status.message().find("int32") != absl::string_view::npos);
  REQUIRE(status.message().find("float32") != absl::string_view::npos);
}
#endif  // BRAID_WITH_CUDA

}  // namespace
}  // namespace braid
