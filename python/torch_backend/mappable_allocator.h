// torch's CPU allocator, made to hand out braid_mem_alloc memory from a size
// up: tensors then lie in memory the shm peers map, so the backend's
// collectives on them (DDP's gradient buckets) reduce in the peers' pages
// with no kernel copy. Smaller tensors, and any the memfd cap refuses, come
// from the allocator that was there before. Process-wide, as torch's
// allocator is; tensors keep the deleter they were made with, so switching
// back is safe at any time. Freed blocks are kept for the next allocation of
// the same size (a caching allocator, as torch's CUDA one) until
// UseDefaultMemory.
#ifndef BRAID_PYTHON_TORCH_BACKEND_MAPPABLE_ALLOCATOR_H_
#define BRAID_PYTHON_TORCH_BACKEND_MAPPABLE_ALLOCATOR_H_

#include <cstddef>

namespace braid_torch {

// Installs the allocator (or changes its threshold): CPU allocations of at
// least `min_bytes` (> 0) are mappable from now on.
void UseMappableMemory(size_t min_bytes);
// Restores the allocator UseMappableMemory replaced and frees the kept
// blocks; nothing if none.
void UseDefaultMemory();

}  // namespace braid_torch

#endif  // BRAID_PYTHON_TORCH_BACKEND_MAPPABLE_ALLOCATOR_H_
