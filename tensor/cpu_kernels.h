// Internal to tensor/: the host reduction kernels, compiled once per
// instruction set (cpu_kernels_impl.inc included by cpu_kernels_*.cc with
// different -m flags). reduce.cc picks one table at run time.
#ifndef BRAID_TENSOR_CPU_KERNELS_H_
#define BRAID_TENSOR_CPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace braid {
enum class ReduceOp : uint8_t;

namespace cpu_kernels {

struct KernelTable {
  const char* isa;
  // dst[i] = a[i] op b[i] for i < count; dst may equal a or b.
  void (*reduce)(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);
  // reduce, and the same results into `also` too; `also` may be a or b
  // exactly (not the one dst is), else overlaps nothing.
  void (*reduce_twice)(DType dtype, ReduceOp op, void* dst, void* also, const void* a, const void* b,
                       size_t count);
  // data[i] /= divisor.
  void (*divide)(DType dtype, void* data, size_t count, int64_t divisor);
  // memcpy with non-temporal stores where the ISA has them (see HostStreamCopy).
  void (*stream_copy)(void* dst, const void* src, size_t bytes);
  // memcpy in vector loads and stores where the ISA has them (see HostCopy).
  void (*copy)(void* dst, const void* src, size_t bytes);
};

const KernelTable& GenericKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();
// Whether this CPU can run each table.
bool CpuHasAvx2();
bool CpuHasAvx512();

}  // namespace cpu_kernels
}  // namespace braid

#endif  // BRAID_TENSOR_CPU_KERNELS_H_
