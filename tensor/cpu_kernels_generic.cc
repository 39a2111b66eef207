// Host reduction kernels for the generic instruction set (flags in BUILD.bazel).
#define BRAID_KERNEL_ISA generic
#define BRAID_KERNEL_ISA_NAME "generic"
#define BRAID_KERNEL_TABLE GenericKernels
#include "tensor/cpu_kernels_impl.inc"
