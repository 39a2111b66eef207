// Host reduction kernels for the avx512 instruction set (flags in BUILD.bazel).
#define BRAID_KERNEL_ISA avx512
#define BRAID_KERNEL_ISA_NAME "avx512"
#define BRAID_KERNEL_TABLE Avx512Kernels
#include "tensor/cpu_kernels_impl.inc"
