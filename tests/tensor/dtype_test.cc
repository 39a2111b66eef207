#include "tensor/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "catch2/catch.hpp"

namespace braid {
namespace {

uint16_t CompilerHalfBits(float value) {
  // GCC's _Float16 conversion (libgcc / F16C): an independent IEEE reference.
  const _Float16 h = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

float CompilerHalfToFloat(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof(bits));
  return static_cast<float>(h);
}

bool IsHalfNan(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }

// Reference bf16 rounding by comparing distances in double precision.
uint16_t ReferenceBFloat16(float value) {
  const uint32_t x = FloatBits(value);
  if (std::isnan(value)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t down = x & 0xffff0000u;
  const double exact = value;
  const double low = BitsToFloat(down);
  // The next bf16 away from zero; from the largest finite it is infinity.
  const uint32_t up_bits = down + 0x10000u;
  const double high = (up_bits & 0x7f800000u) == 0x7f800000u
                          ? std::copysign(std::ldexp(1.0, 128), exact)  // 2^128: the unbounded next value
                          : static_cast<double>(BitsToFloat(up_bits));
  const double below = std::fabs(exact - low);
  const double above = std::fabs(high - exact);
  if (below < above) return static_cast<uint16_t>(down >> 16);
  if (above < below) return static_cast<uint16_t>(up_bits >> 16);
  return static_cast<uint16_t>(((down >> 16) & 1u) ? (up_bits >> 16) : (down >> 16));
}

TEST_CASE("DType: names, sizes and parsing", "[tensor]") {
  CHECK(std::string(DTypeName(DType::kBF16)) == "bfloat16");
  CHECK(DTypeSize(DType::kF64) == 8);
  CHECK(DTypeSize(DType::kF16) == 2);
  CHECK(DTypeSize(DType::kI8) == 1);
  CHECK(DTypeSize(DType::kI32) == 4);
  for (DType dtype : kAllDTypes) {
    auto parsed = ParseDType(DTypeName(dtype));
    REQUIRE(parsed.ok());
    CHECK(*parsed == dtype);
    CHECK(DispatchDType(dtype, [](auto zero) { return sizeof(zero); }) == DTypeSize(dtype));
  }
  CHECK(*ParseDType("half") == DType::kF16);
  CHECK(*ParseDType("double") == DType::kF64);
  auto bad = ParseDType("float8");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("float8") != std::string::npos);
}

TEST_CASE("Half: every bit pattern widens exactly and round-trips", "[tensor][f16]") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float widened = HalfToFloat(Half{h});
    if (IsHalfNan(h)) {
      REQUIRE(std::isnan(widened));
      REQUIRE(std::signbit(widened) == ((h & 0x8000u) != 0));
      // Quiet NaN with the payload kept: narrowing gives back the quiet pattern.
      REQUIRE(FloatToHalf(widened).bits == (h | 0x0200u));
      continue;
    }
    REQUIRE(FloatBits(widened) == FloatBits(CompilerHalfToFloat(h)));
    REQUIRE(FloatToHalf(widened).bits == h);
  }
  CHECK(HalfToFloat(Half{0x0001}) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(HalfToFloat(Half{0x7bff}) == 65504.0f);                // largest finite
  CHECK(std::isinf(HalfToFloat(Half{0xfc00})));
}

TEST_CASE("Half: narrowing rounds to nearest even at every boundary", "[tensor][f16]") {
  // Around every half value: the midpoint to the next one and one float ulp
  // either side, where round-to-nearest-even decides.
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    const float low = HalfToFloat(Half{static_cast<uint16_t>(bits)});
    const float high = HalfToFloat(Half{static_cast<uint16_t>(bits + 1)});
    const float mid = static_cast<float>((static_cast<double>(low) + high) / 2);
    for (float probe : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), low, high}) {
      for (float value : {probe, -probe}) {
        REQUIRE(FloatToHalf(value).bits == CompilerHalfBits(value));
      }
    }
  }
  // A sweep across all float exponents, including overflow and float subnormals.
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    const float value = BitsToFloat(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    REQUIRE(FloatToHalf(value).bits == CompilerHalfBits(value));
  }
  CHECK(FloatToHalf(65519.0f).bits == 0x7bff);  // below the overflow midpoint
  CHECK(FloatToHalf(65520.0f).bits == 0x7c00);  // the midpoint rounds to even: infinity
  CHECK(FloatToHalf(std::nanf("")).bits == 0x7e00);
}

TEST_CASE("BFloat16: every bit pattern round-trips; narrowing rounds to nearest even", "[tensor][bf16]") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    const float widened = BFloat16ToFloat(BFloat16{b});
    REQUIRE(FloatBits(widened) == (bits << 16));
    const bool nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
    REQUIRE(FloatToBFloat16(widened).bits == (nan ? (b | 0x40u) : b));
    if (nan || (b & 0x7fffu) >= 0x7f7fu) continue;
    // Midpoint to the next value, and one float ulp either side.
    const uint32_t mid_bits = (bits << 16) + 0x8000u;
    for (uint32_t probe : {mid_bits, mid_bits - 1, mid_bits + 1}) {
      const float value = BitsToFloat(probe);
      REQUIRE(FloatToBFloat16(value).bits == ReferenceBFloat16(value));
    }
  }
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    const float value = BitsToFloat(static_cast<uint32_t>(bits));
    REQUIRE(FloatToBFloat16(value).bits == ReferenceBFloat16(value));
  }
  CHECK(FloatToBFloat16(3.4028235e38f).bits == 0x7f80);  // rounds up to infinity
}

}  // namespace
}  // namespace braid
