#include "tensor/reduce.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"
#include "tensor/cpu_kernels.h"

#ifdef BRAID_WITH_CUDA
#include "tensor/cuda_kernels.h"
#endif

namespace braid {
namespace {

BRAID_ENV_KNOB(kCpuIsaKnob, "BRAID_CPU_ISA", "auto",
               "Host reduction kernels: auto (best the CPU has), avx512, avx2 or generic.");

const cpu_kernels::KernelTable& PickKernels() {
  const std::string wanted = absl::AsciiStrToLower(kCpuIsaKnob.String());
  if (wanted == "generic") return cpu_kernels::GenericKernels();
  if (wanted == "avx2" && cpu_kernels::CpuHasAvx2()) return cpu_kernels::Avx2Kernels();
  if ((wanted == "auto" || wanted == "avx512") && cpu_kernels::CpuHasAvx512()) return cpu_kernels::Avx512Kernels();
  if (cpu_kernels::CpuHasAvx2()) return cpu_kernels::Avx2Kernels();
  return cpu_kernels::GenericKernels();
}

const cpu_kernels::KernelTable& Kernels() {
  static const cpu_kernels::KernelTable& table = PickKernels();
  return table;
}

bool PartlyOverlaps(const void* x, const void* y, size_t bytes) {
  if (x == y || bytes == 0) return false;
  const auto* a = static_cast<const std::byte*>(x);
  const auto* b = static_cast<const std::byte*>(y);
  return a < b + bytes && b < a + bytes;
}

absl::Status CheckOperand(const Tensor& dst, const Tensor& operand, const char* what) {
  if (!operand.defined()) return absl::InvalidArgumentError(absl::StrCat("reduce: ", what, " is undefined"));
  if (operand.dtype() != dst.dtype() || operand.numel() != dst.numel() || operand.device() != dst.device()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce: ", what, " ", operand.DebugString(), " does not match ",
                                                   dst.DebugString(), " (dtype, element count and device)"));
  }
  if (!operand.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce: ", what, " ", operand.DebugString(), " is not contiguous"));
  }
  if (PartlyOverlaps(dst.data(), operand.data(), dst.nbytes())) {
    return absl::InvalidArgumentError(absl::StrCat("reduce: ", what, " partly overlaps the destination"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "invalid";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (ReduceOp op : kAllReduceOps) {
    if (lower == ReduceOpName(op)) return op;
  }
  if (lower == "mean") return ReduceOp::kAvg;
  if (lower == "product") return ReduceOp::kProd;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduction \"", name, "\" (expected sum, prod, min, max or avg)"));
}

const char* HostKernelIsa() { return Kernels().isa; }

void HostReduce(DType dtype, ReduceOp op, absl::Span<std::byte> dst, absl::Span<const std::byte> a,
                absl::Span<const std::byte> b) {
  // Element sizes are powers of two: a shift, not a division, per call.
  const int shift = __builtin_ctzll(DTypeSize(dtype));
  BRAID_CHECK(dst.size() == a.size() && dst.size() == b.size() && (dst.size() & ((size_t{1} << shift) - 1)) == 0)
      << "HostReduce on " << dst.size() << ", " << a.size() << ", " << b.size() << " bytes of " << DTypeName(dtype);
  if (dst.empty()) return;
  Kernels().reduce(dtype, op, dst.data(), a.data(), b.data(), dst.size() >> shift);
}

void HostReduceTwice(DType dtype, ReduceOp op, absl::Span<std::byte> dst, absl::Span<std::byte> also,
                     absl::Span<const std::byte> a, absl::Span<const std::byte> b) {
  const int shift = __builtin_ctzll(DTypeSize(dtype));
  BRAID_CHECK(dst.size() == a.size() && dst.size() == b.size() && dst.size() == also.size() &&
              (dst.size() & ((size_t{1} << shift) - 1)) == 0)
      << "HostReduceTwice on " << dst.size() << ", " << also.size() << ", " << a.size() << ", " << b.size()
      << " bytes of " << DTypeName(dtype);
  if (dst.empty()) return;
  Kernels().reduce_twice(dtype, op, dst.data(), also.data(), a.data(), b.data(), dst.size() >> shift);
}

void HostStreamCopy(absl::Span<std::byte> dst, absl::Span<const std::byte> src) {
  BRAID_CHECK(dst.size() == src.size()) << "HostStreamCopy of " << src.size() << " bytes into " << dst.size();
  if (!dst.empty()) Kernels().stream_copy(dst.data(), src.data(), dst.size());
}

void HostCopy(absl::Span<std::byte> dst, absl::Span<const std::byte> src) {
  BRAID_CHECK(dst.size() == src.size()) << "HostCopy of " << src.size() << " bytes into " << dst.size();
  const size_t bytes = dst.size();
  const bool apart = dst.data() + bytes <= src.data() || src.data() + bytes <= dst.data();
  if (bytes >= 1024 && apart) {
    Kernels().copy(dst.data(), src.data(), bytes);
  } else if (dst.data() != src.data() && bytes > 0) {
    std::memmove(dst.data(), src.data(), bytes);
  }
}

void HostDivide(DType dtype, absl::Span<std::byte> data, int64_t divisor) {
  const size_t item = DTypeSize(dtype);
  BRAID_CHECK(data.size() % item == 0 && divisor >= 1) << "HostDivide by " << divisor;
  if (data.empty() || divisor == 1) return;
  Kernels().divide(dtype, data.data(), data.size() / item, divisor);
}

namespace {

bool IsFloat(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// Element i of `bytes` as a double, and back (f16/bf16 round once, from f32).
double LoadFloat(DType dtype, const std::byte* bytes, size_t i) {
  switch (dtype) {
    case DType::kF64: return reinterpret_cast<const double*>(bytes)[i];
    case DType::kF16: return HalfToFloat(reinterpret_cast<const Half*>(bytes)[i]);
    case DType::kBF16: return BFloat16ToFloat(reinterpret_cast<const BFloat16*>(bytes)[i]);
    default: return reinterpret_cast<const float*>(bytes)[i];
  }
}
void StoreFloat(DType dtype, std::byte* bytes, size_t i, double value) {
  switch (dtype) {
    case DType::kF64: reinterpret_cast<double*>(bytes)[i] = value; break;
    case DType::kF16: reinterpret_cast<Half*>(bytes)[i] = FloatToHalf(static_cast<float>(value)); break;
    case DType::kBF16: reinterpret_cast<BFloat16*>(bytes)[i] = FloatToBFloat16(static_cast<float>(value)); break;
    default: reinterpret_cast<float*>(bytes)[i] = static_cast<float>(value); break;
  }
}

}  // namespace

absl::Status HostCast(DType dst_dtype, absl::Span<std::byte> dst, DType src_dtype, absl::Span<const std::byte> src) {
  if (!IsFloat(dst_dtype) || !IsFloat(src_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cast from ", DTypeName(src_dtype), " to ", DTypeName(dst_dtype), ": floats only"));
  }
  const size_t count = src.size() / DTypeSize(src_dtype);
  if (src.size() % DTypeSize(src_dtype) != 0 || dst.size() != count * DTypeSize(dst_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("cast of ", src.size(), " bytes of ", DTypeName(src_dtype),
                                                   " into ", dst.size(), " bytes of ", DTypeName(dst_dtype)));
  }
  for (size_t i = 0; i < count; ++i) StoreFloat(dst_dtype, dst.data(), i, LoadFloat(src_dtype, src.data(), i));
  return absl::OkStatus();
}

absl::Status ReduceInto(const Tensor& dst, const Tensor& a, const Tensor& b, ReduceOp op) {
  if (!dst.defined() || !dst.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce: destination ", dst.DebugString(),
                                                   " must be a defined contiguous tensor"));
  }
  BRAID_RETURN_IF_ERROR(CheckOperand(dst, a, "first operand"));
  BRAID_RETURN_IF_ERROR(CheckOperand(dst, b, "second operand"));
  if (dst.numel() == 0) return absl::OkStatus();
  if (dst.device().is_cuda()) {
#ifdef BRAID_WITH_CUDA
    return CudaReduce(dst.dtype(), op, dst.data(), a.data(), b.data(), static_cast<size_t>(dst.numel()),
                      /*stream=*/nullptr, /*synchronize=*/true);
#else
    return absl::FailedPreconditionError("reduce on a CUDA tensor: braid was built without --config=cuda");
#endif
  }
  HostReduce(dst.dtype(), op, dst.bytes(), a.bytes(), b.bytes());
  return absl::OkStatus();
}

absl::Status ReduceInto(const Tensor& dst, const Tensor& src, ReduceOp op) { return ReduceInto(dst, dst, src, op); }

absl::Status DivideBy(const Tensor& dst, int64_t divisor) {
  if (divisor < 1) return absl::InvalidArgumentError(absl::StrCat("DivideBy(", divisor, "): divisor must be >= 1"));
  if (!dst.defined() || !dst.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("DivideBy: ", dst.DebugString(), " must be contiguous"));
  }
  if (dst.numel() == 0 || divisor == 1) return absl::OkStatus();
  if (dst.device().is_cuda()) {
#ifdef BRAID_WITH_CUDA
    return CudaDivide(dst.dtype(), dst.data(), static_cast<size_t>(dst.numel()), divisor, /*stream=*/nullptr,
                      /*synchronize=*/true);
#else
    return absl::FailedPreconditionError("DivideBy on a CUDA tensor: braid was built without --config=cuda");
#endif
  }
  HostDivide(dst.dtype(), dst.bytes(), divisor);
  return absl::OkStatus();
}

namespace cpu_kernels {

bool CpuHasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
}

bool CpuHasAvx512() {
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

}  // namespace cpu_kernels
}  // namespace braid
