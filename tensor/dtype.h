// Element types. DType names the eight element types braid moves and reduces;
// Half and BFloat16 are their 16-bit storage types, with conversions to and
// from float that are exact to the bit: round-to-nearest-even, infinities,
// subnormals, and NaN kept NaN (quiet, sign and high payload bits kept), as
// the F16C / CUDA hardware conversions behave.
#ifndef BRAID_TENSOR_DTYPE_H_
#define BRAID_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace braid {

enum class DType : uint8_t {
  kF32 = 0,
  kF64 = 1,
  kF16 = 2,
  kBF16 = 3,
  kI8 = 4,
  kU8 = 5,
  kI32 = 6,
  kI64 = 7,
};
inline constexpr int kNumDTypes = 8;
inline constexpr DType kAllDTypes[kNumDTypes] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                                 DType::kI8,  DType::kU8,  DType::kI32, DType::kI64};

// "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64".
const char* DTypeName(DType dtype);
// Inline: every collective asks it several times per call.
constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI8:
    case DType::kU8: return 1;
  }
  return 0;
}
bool IsFloatingPoint(DType dtype);
// Accepts the names above and the short ones nccl-tests uses: float, double,
// half, bfloat16, int8, uint8, int32, int64 (and f32, f16, bf16, ...).
absl::StatusOr<DType> ParseDType(absl::string_view name);

// IEEE 754 binary16, stored as bits.
struct Half {
  uint16_t bits;
};
// bfloat16: the upper half of a float32, stored as bits.
struct BFloat16 {
  uint16_t bits;
};

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
inline float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline float HalfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) {
    // Infinity, or NaN made quiet (bit 22) with its payload kept.
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return BitsToFloat(sign | FloatBits(magnitude));
  }
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline Half FloatToHalf(float value) {
  uint32_t x = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x47800000u) {  // |value| >= 65536: infinity, NaN, or overflow
    if (x > 0x7f800000u) {
      return Half{static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu))};
    }
    return Half{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (x < 0x38800000u) {
    // Result is subnormal or zero: adding 0.5f aligns the mantissa so the FPU
    // rounds to nearest-even at exactly the half-subnormal quantum (2^-24).
    const uint32_t magic = 0x3f000000u;
    const uint32_t rounded = FloatBits(BitsToFloat(x) + BitsToFloat(magic)) - magic;
    return Half{static_cast<uint16_t>(sign | rounded)};
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest-even.
  const uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;  // (15 - 127) << 23, plus the rounding bias
  return Half{static_cast<uint16_t>(sign | (x >> 13))};  // carry into 0x7c00 = overflow to inf
}

inline float BFloat16ToFloat(BFloat16 b) { return BitsToFloat(static_cast<uint32_t>(b.bits) << 16); }

inline BFloat16 FloatToBFloat16(float value) {
  const uint32_t x = FloatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return BFloat16{static_cast<uint16_t>((x >> 16) | 0x0040u)};  // NaN stays NaN, made quiet
  }
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // nearest, ties to even
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

// Maps a C++ element type to its DType (DTypeOf<float>() == DType::kF32).
template <typename T>
constexpr DType DTypeOf();
template <> constexpr DType DTypeOf<float>() { return DType::kF32; }
template <> constexpr DType DTypeOf<double>() { return DType::kF64; }
template <> constexpr DType DTypeOf<Half>() { return DType::kF16; }
template <> constexpr DType DTypeOf<BFloat16>() { return DType::kBF16; }
template <> constexpr DType DTypeOf<int8_t>() { return DType::kI8; }
template <> constexpr DType DTypeOf<uint8_t>() { return DType::kU8; }
template <> constexpr DType DTypeOf<int32_t>() { return DType::kI32; }
template <> constexpr DType DTypeOf<int64_t>() { return DType::kI64; }

// Calls fn(T{}) with T the element type of `dtype`: the one place a runtime
// dtype becomes a static type.
template <typename Fn>
decltype(auto) DispatchDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kF16: return fn(Half{});
    case DType::kBF16: return fn(BFloat16{});
    case DType::kI8: return fn(int8_t{});
    case DType::kU8: return fn(uint8_t{});
    case DType::kI32: return fn(int32_t{});
    case DType::kI64: return fn(int64_t{});
  }
  __builtin_unreachable();
}

}  // namespace braid

#endif  // BRAID_TENSOR_DTYPE_H_
