#include "tensor/dtype.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace braid {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kF64: return "float64";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "invalid";
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 || dtype == DType::kBF16;
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  struct Alias {
    const char* name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", DType::kF32}, {"float", DType::kF32},  {"f32", DType::kF32},
      {"float64", DType::kF64}, {"double", DType::kF64}, {"f64", DType::kF64},
      {"float16", DType::kF16}, {"half", DType::kF16},   {"f16", DType::kF16},
      {"bfloat16", DType::kBF16}, {"bf16", DType::kBF16},
      {"int8", DType::kI8},     {"char", DType::kI8},    {"i8", DType::kI8},
      {"uint8", DType::kU8},    {"u8", DType::kU8},
      {"int32", DType::kI32},   {"int", DType::kI32},    {"i32", DType::kI32},
      {"int64", DType::kI64},   {"i64", DType::kI64},
  };
  for (const Alias& alias : kAliases) {
    if (lower == alias.name) return alias.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype \"", name, "\" (expected float32, float64, float16, bfloat16, int8, uint8, int32 or int64)"));
}

}  // namespace braid
