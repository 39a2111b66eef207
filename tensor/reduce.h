// Element-wise reductions: the arithmetic inside every collective.
//
// ReduceInto(dst, src, op) computes dst = dst op src; the two-source form
// dst = a op b saves a copy in out-of-place collectives. Every dtype, ops
// sum, prod, min, max and avg. Semantics:
//   - avg reduces as sum; the collective divides the final sum once by the
//     number of ranks (DivideBy), as NCCL's ncclAvg and DDP do.
//   - f16 and bf16 are widened to f32, combined, and rounded back to nearest
//     even, so each combine rounds once.
//   - integers wrap on overflow (two's complement), never undefined behaviour;
//     integer avg divides with truncation toward zero.
//   - floating min/max propagate NaN (as torch.minimum / torch.maximum).
// CPU kernels are vectorized (AVX-512, AVX2+F16C or baseline x86-64, chosen
// at run time from the CPU; BRAID_CPU_ISA=generic|avx2|avx512 forces one).
// CUDA tensors use the CUDA kernels under --config=cuda.
//
// All functions block until done and may be called from any thread.
#ifndef BRAID_TENSOR_REDUCE_H_
#define BRAID_TENSOR_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace braid {

enum class ReduceOp : uint8_t { kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4 };
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                             ReduceOp::kAvg};

// "sum", "prod", "min", "max", "avg".
const char* ReduceOpName(ReduceOp op);
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// dst = dst op src. Same dtype, device and numel; both contiguous.
absl::Status ReduceInto(const Tensor& dst, const Tensor& src, ReduceOp op);
// dst = a op b. dst may be a or b itself, but must not partly overlap them.
absl::Status ReduceInto(const Tensor& dst, const Tensor& a, const Tensor& b, ReduceOp op);
// dst /= divisor (the last step of avg). divisor >= 1.
absl::Status DivideBy(const Tensor& dst, int64_t divisor);

// The host kernels behind the functions above, on raw contiguous bytes: the
// one place where the element type is erased. Sizes must be equal multiples
// of DTypeSize(dtype) (checked). dst may equal a or b; no partial overlap.
void HostReduce(DType dtype, ReduceOp op, absl::Span<std::byte> dst, absl::Span<const std::byte> a,
                absl::Span<const std::byte> b);
// HostReduce writing every result into `also` too (same size): one pass for
// two copies of the sum. `also` may be a or b exactly (not the one dst is),
// else overlaps nothing.
void HostReduceTwice(DType dtype, ReduceOp op, absl::Span<std::byte> dst, absl::Span<std::byte> also,
                     absl::Span<const std::byte> a, absl::Span<const std::byte> b);
void HostDivide(DType dtype, absl::Span<std::byte> data, int64_t divisor);
// dst = src converted, element by element, between the float dtypes (f32,
// f64, f16, bf16; round to nearest even). kInvalidArgument for any other
// pair or for sizes that are not the same number of elements.
absl::Status HostCast(DType dst_dtype, absl::Span<std::byte> dst, DType src_dtype, absl::Span<const std::byte> src);
// memcpy(dst, src) that writes around the caches (non-temporal stores, AVX2
// and up): for large outputs nobody reads soon, where it saves reading each
// destination line first. Slower than memcpy when dst is already cached.
// Sizes must be equal; no overlap.
void HostStreamCopy(absl::Span<std::byte> dst, absl::Span<const std::byte> src);
// memcpy(dst, src) for braid's data paths: in vector loads and stores (AVX2
// and up) from 1 KiB, where glibc takes `rep movsb`, which runs 15x slower on
// AMD Zen when dst lies a few bytes past src within a cache line
// (bench/RESULTS.md, "Copies at odd offsets"). Sizes must be equal; memmove
// where they overlap.
void HostCopy(absl::Span<std::byte> dst, absl::Span<const std::byte> src);

// The ISA the host kernels run on: "avx512", "avx2" or "generic".
const char* HostKernelIsa();

}  // namespace braid

#endif  // BRAID_TENSOR_REDUCE_H_
