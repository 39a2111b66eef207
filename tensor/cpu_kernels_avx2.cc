// Host reduction kernels for the avx2 instruction set (flags in BUILD.bazel).
#define BRAID_KERNEL_ISA avx2
#define BRAID_KERNEL_ISA_NAME "avx2"
#define BRAID_KERNEL_TABLE Avx2Kernels
#include "tensor/cpu_kernels_impl.inc"
