#include "tensor/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "tensor/cpu_kernels.h"

namespace braid {
namespace {

std::vector<const cpu_kernels::KernelTable*> AvailableTables() {
  std::vector<const cpu_kernels::KernelTable*> tables = {&cpu_kernels::GenericKernels()};
  if (cpu_kernels::CpuHasAvx2()) tables.push_back(&cpu_kernels::Avx2Kernels());
  if (cpu_kernels::CpuHasAvx512()) tables.push_back(&cpu_kernels::Avx512Kernels());
  return tables;
}

// The scalar reference, written independently of the kernels.
template <typename C>
C ReferenceOp(ReduceOp op, C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    switch (op) {
      case ReduceOp::kProd: return static_cast<C>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<U>(b));
      case ReduceOp::kMin: return std::min(a, b);
      case ReduceOp::kMax: return std::max(a, b);
      default: return static_cast<C>(static_cast<uint64_t>(static_cast<U>(a)) + static_cast<U>(b));
    }
  } else {
    if (std::isnan(a) || std::isnan(b)) {
      if (op == ReduceOp::kMin || op == ReduceOp::kMax) return std::isnan(a) ? a : b;
    }
    switch (op) {
      case ReduceOp::kProd: return a * b;
      case ReduceOp::kMin: return b < a ? b : a;
      case ReduceOp::kMax: return b > a ? b : a;
      default: return a + b;
    }
  }
}

template <typename T>
T Reference(ReduceOp op, T a, T b) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(ReferenceOp<float>(op, HalfToFloat(a), HalfToFloat(b)));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(ReferenceOp<float>(op, BFloat16ToFloat(a), BFloat16ToFloat(b)));
  } else {
    return ReferenceOp<T>(op, a, b);
  }
}

template <typename T>
T RandomValue(std::mt19937_64& rng, size_t i) {
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  if constexpr (std::is_integral_v<T>) {
    // The full range, so sums and products overflow and must wrap.
    return static_cast<T>(rng());
  } else {
    // Sprinkle in the values min/max and rounding must get right.
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f,
                              std::numeric_limits<float>::infinity(), 1e-40f};
    const float value = (i % 37 == 5) ? specials[rng() % 5] : real(rng);
    if constexpr (std::is_same_v<T, Half>) {
      return FloatToHalf(value);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      // Also a signalling NaN with a payload and the largest finite value,
      // met at the same element of a (i) and b (i + 11), so sums round to
      // infinity: the vector kernels narrow without a NaN case, and these
      // show that rounding never turns a NaN into a number.
      if (i % 37 == 7 || i % 37 == 18) return BFloat16{static_cast<uint16_t>(rng() % 2 ? 0x7f81u : 0xff7fu)};
      return FloatToBFloat16(value);
    } else {
      return static_cast<T>(value);
    }
  }
}

template <typename T>
bool SameBits(const T& a, const T& b) {
  // Any NaN matches any NaN (payloads may differ between paths); else bit-exact.
  auto is_nan = [](const T& v) {
    if constexpr (std::is_same_v<T, Half>) return std::isnan(HalfToFloat(v));
    else if constexpr (std::is_same_v<T, BFloat16>) return std::isnan(BFloat16ToFloat(v));
    else if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
    else return false;
  };
  if (is_nan(a) || is_nan(b)) return is_nan(a) && is_nan(b);
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

enum class Alias { kNone, kDstIsA, kDstIsB };

// Returns "" on success, else a description of the first mismatch.
template <typename T>
std::string CheckKernel(const cpu_kernels::KernelTable& table, ReduceOp op, size_t count, size_t offset, Alias alias,
                        std::mt19937_64& rng) {
  std::vector<T> a(count + offset), b(count + offset), out(count + offset);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = RandomValue<T>(rng, i);
    b[i] = RandomValue<T>(rng, i + 11);
  }
  std::vector<T> expected(count);
  for (size_t i = 0; i < count; ++i) expected[i] = Reference<T>(op, a[offset + i], b[offset + i]);
  T* dst = alias == Alias::kDstIsA ? a.data() + offset : alias == Alias::kDstIsB ? b.data() + offset : out.data() + offset;
  table.reduce(DTypeOf<T>(), op, dst, a.data() + offset, b.data() + offset, count);
  for (size_t i = 0; i < count; ++i) {
    if (!SameBits(dst[i], expected[i])) {
      return absl::StrCat(table.isa, " ", DTypeName(DTypeOf<T>()), " ", ReduceOpName(op), " count ", count,
                          " offset ", offset, " alias ", static_cast<int>(alias), ": element ", i, " differs");
    }
  }
  return "";
}

TEST_CASE("Host reduce kernels match the scalar reference for every ISA, dtype, op, size and alignment",
          "[tensor][reduce]") {
  std::mt19937_64 rng(1234);
  const size_t sizes[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 511, 512, 513, 1000, 4097, 100003};
  size_t cases = 0;
  for (const cpu_kernels::KernelTable* table : AvailableTables()) {
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : kAllReduceOps) {
        for (size_t count : sizes) {
          for (size_t offset : {0, 1, 3}) {
            for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB}) {
              const std::string failure = DispatchDType(dtype, [&](auto zero) {
                return CheckKernel<decltype(zero)>(*table, op, count, offset, alias, rng);
              });
              INFO(failure);
              REQUIRE(failure.empty());
              ++cases;
            }
          }
        }
      }
    }
  }
  CHECK(cases >= 8 * 5 * 15 * 3 * 3);
}

// reduce_twice: dst and `also` both get a op b, whichever of the inputs
// either one is (in place, a peer's output is its input).
template <typename T>
std::string CheckTwice(const cpu_kernels::KernelTable& table, ReduceOp op, size_t count, int dst_is, int also_is,
                       std::mt19937_64& rng) {
  std::vector<T> a(count), b(count), out(count), extra(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = RandomValue<T>(rng, i);
    b[i] = RandomValue<T>(rng, i + 11);
  }
  std::vector<T> expected(count);
  for (size_t i = 0; i < count; ++i) expected[i] = Reference<T>(op, a[i], b[i]);
  auto pick = [&](int which, std::vector<T>& own) { return which == 1 ? a.data() : which == 2 ? b.data() : own.data(); };
  T* dst = pick(dst_is, out);
  T* also = pick(also_is, extra);
  table.reduce_twice(DTypeOf<T>(), op, dst, also, a.data(), b.data(), count);
  for (size_t i = 0; i < count; ++i) {
    if (!SameBits(dst[i], expected[i]) || !SameBits(also[i], expected[i])) {
      return absl::StrCat(table.isa, " ", DTypeName(DTypeOf<T>()), " ", ReduceOpName(op), " count ", count, " dst ",
                          dst_is, " also ", also_is, ": element ", i, " differs");
    }
  }
  return "";
}

TEST_CASE("Host reduce_twice kernels write both copies, with dst or `also` an input", "[tensor][reduce]") {
  std::mt19937_64 rng(4321);
  // 0: its own array; 1: a; 2: b.
  const std::pair<int, int> placements[] = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {0, 2}, {1, 2}, {2, 1}};
  size_t cases = 0;
  for (const cpu_kernels::KernelTable* table : AvailableTables()) {
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : kAllReduceOps) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{33}, size_t{1000}, size_t{4097}}) {
          for (const auto& [dst_is, also_is] : placements) {
            const std::string failure = DispatchDType(dtype, [&](auto zero) {
              return CheckTwice<decltype(zero)>(*table, op, count, dst_is, also_is, rng);
            });
            INFO(failure);
            REQUIRE(failure.empty());
            ++cases;
          }
        }
      }
    }
  }
  CHECK(cases >= 8 * 5 * 6 * 7);
}

TEST_CASE("Host f16 kernels agree with the scalar conversions on every bit pattern", "[tensor][reduce][f16]") {
  // Hardware (F16C / AVX-512) and software conversions must give the same bits.
  std::vector<Half> all(65536), zeros(65536, Half{0}), out(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = Half{static_cast<uint16_t>(i)};
  for (const cpu_kernels::KernelTable* table : AvailableTables()) {
    table->reduce(DType::kF16, ReduceOp::kSum, out.data(), all.data(), zeros.data(), all.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      const Half expected = FloatToHalf(HalfToFloat(all[i]) + 0.0f);
      INFO(table->isa << " pattern " << i);
      REQUIRE(SameBits(out[i], expected));
    }
  }
}

template <typename T>
T ReferenceDivide(T value, int64_t divisor) {
  if constexpr (std::is_same_v<T, Half>) return FloatToHalf(HalfToFloat(value) / static_cast<float>(divisor));
  else if constexpr (std::is_same_v<T, BFloat16>) return FloatToBFloat16(BFloat16ToFloat(value) / static_cast<float>(divisor));
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<int64_t>(value) / divisor);
  else return value / static_cast<T>(divisor);
}

TEST_CASE("Host divide kernels match the scalar reference for every ISA and dtype", "[tensor][reduce]") {
  std::mt19937_64 rng(99);
  for (const cpu_kernels::KernelTable* table : AvailableTables()) {
    for (DType dtype : kAllDTypes) {
      for (size_t count : {size_t{1}, size_t{17}, size_t{4099}}) {
        for (int64_t divisor : {int64_t{3}, int64_t{4}, int64_t{7}}) {
          const std::string failure = DispatchDType(dtype, [&](auto zero) -> std::string {
            using T = decltype(zero);
            std::vector<T> values(count);
            for (size_t i = 0; i < count; ++i) values[i] = RandomValue<T>(rng, i);
            std::vector<T> expected(count);
            for (size_t i = 0; i < count; ++i) expected[i] = ReferenceDivide(values[i], divisor);
            table->divide(dtype, values.data(), count, divisor);
            for (size_t i = 0; i < count; ++i) {
              if (!SameBits(values[i], expected[i])) {
                return absl::StrCat(table->isa, " ", DTypeName(dtype), " / ", divisor, ": element ", i, " differs");
              }
            }
            return "";
          });
          INFO(failure);
          REQUIRE(failure.empty());
        }
      }
    }
  }
}

TEST_CASE("Host copies and stream copies equal memcpy for every ISA, size and alignment, touching nothing else",
          "[tensor][reduce]") {
  std::mt19937_64 rng(7);
  for (const cpu_kernels::KernelTable* table : AvailableTables()) {
    for (auto [name, copy] : {std::pair{"stream_copy", table->stream_copy}, std::pair{"copy", table->copy}}) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{31}, size_t{128}, size_t{1000}, size_t{65536 + 77}}) {
      for (size_t dst_offset : {0, 1, 17, 32}) {
        for (size_t src_offset : {0, 3}) {
          std::vector<uint8_t> src(bytes + 64), dst(bytes + 128, 0xAB);
          for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
          copy(dst.data() + dst_offset, src.data() + src_offset, bytes);
          INFO(table->isa << " " << name << ": " << bytes << " bytes, dst +" << dst_offset << ", src +" << src_offset);
          REQUIRE(std::memcmp(dst.data() + dst_offset, src.data() + src_offset, bytes) == 0);
          for (size_t i = 0; i < dst_offset; ++i) REQUIRE(dst[i] == 0xAB);
          for (size_t i = dst_offset + bytes; i < dst.size(); ++i) REQUIRE(dst[i] == 0xAB);
        }
      }
    }
    }
  }
  // HostCopy: the kernel where the ranges are apart, memmove where they overlap.
  std::vector<uint8_t> bytes(8192);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> before = bytes;
  auto span = [&](size_t at, size_t n) { return absl::MakeSpan(reinterpret_cast<std::byte*>(bytes.data()) + at, n); };
  HostCopy(span(100, 4000), span(0, 4000));  // forward overlap
  CHECK(std::memcmp(bytes.data() + 100, before.data(), 4000) == 0);
  HostCopy(span(4200, 3000), span(100, 3000));  // apart
  CHECK(std::memcmp(bytes.data() + 4200, before.data(), 3000) == 0);
  CHECK(bytes[0] == before[0]);
}

TEST_CASE("ReduceInto and DivideBy on tensors", "[tensor][reduce]") {
  auto a = Tensor::Empty({5}, DType::kI32);
  auto b = Tensor::Empty({5}, DType::kI32);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  for (int i = 0; i < 5; ++i) {
    a->span<int32_t>()[i] = i * 10 - 7;
    b->span<int32_t>()[i] = 3;
  }
  REQUIRE(ReduceInto(*a, *b, ReduceOp::kAvg).ok());
  REQUIRE(DivideBy(*a, 2).ok());
  // (-7+3)/2=-2, (3+3)/2=3, (13+3)/2=8, (23+3)/2=13, (33+3)/2=18: truncation toward zero.
  CHECK(std::vector<int32_t>(a->span<int32_t>().begin(), a->span<int32_t>().end()) ==
        std::vector<int32_t>{-2, 3, 8, 13, 18});

  auto out = Tensor::Empty({5}, DType::kI32);
  REQUIRE(out.ok());
  REQUIRE(ReduceInto(*out, *a, *b, ReduceOp::kMax).ok());
  CHECK(out->span<int32_t>()[0] == 3);

  auto h = Tensor::Empty({3}, DType::kF16);
  REQUIRE(h.ok());
  h->span<Half>()[0] = FloatToHalf(3.0f);
  h->span<Half>()[1] = FloatToHalf(-1.0f);
  h->span<Half>()[2] = FloatToHalf(1.0f);
  REQUIRE(DivideBy(*h, 3).ok());
  CHECK(h->span<Half>()[0].bits == FloatToHalf(1.0f).bits);
  CHECK(h->span<Half>()[2].bits == FloatToHalf(1.0f / 3.0f).bits);

  // Mismatches are errors, never silent.
  auto f = Tensor::Empty({5}, DType::kF32);
  REQUIRE(f.ok());
  CHECK(ReduceInto(*a, *f, ReduceOp::kSum).code() == absl::StatusCode::kInvalidArgument);
  auto shorter = Tensor::Empty({4}, DType::kI32);
  REQUIRE(shorter.ok());
  CHECK(ReduceInto(*a, *shorter, ReduceOp::kSum).code() == absl::StatusCode::kInvalidArgument);
  auto partly = a->Narrow(0, 1, 4);
  auto first4 = a->Narrow(0, 0, 4);
  REQUIRE(partly.ok());
  REQUIRE(first4.ok());
  CHECK(ReduceInto(*first4, *partly, ReduceOp::kSum).code() == absl::StatusCode::kInvalidArgument);
  CHECK(DivideBy(*a, 0).code() == absl::StatusCode::kInvalidArgument);
  CHECK(*ParseReduceOp("MAX") == ReduceOp::kMax);
  CHECK_FALSE(ParseReduceOp("xor").ok());
}

}  // namespace
}  // namespace braid
