// Host memory that the job's other processes on this host can map: each
// allocation is a memfd of its own, mapped shared, and listed in a
// process-wide registry by address. A peer that learns an address (the shm
// transport's Sync publishes it) takes the descriptor with pidfd_getfd and
// maps the same pages: it then reads and writes them with plain loads and
// stores, with no kernel copy (see bench/RESULTS.md, "Memory both ranks
// map"). The descriptor stays open for the allocation's life, since a peer
// may take it at any time until then. A forked child gets a private copy of
// each buffer, as of private memory, and its copies are not mappable. At
// most a quarter of the process's descriptor limit (and 1,024) are memfds at
// once; beyond that AllocateMappable refuses.
//
// Thread-safe: any thread may allocate, free or look up.
#ifndef BRAID_TENSOR_MAPPABLE_MEMORY_H_
#define BRAID_TENSOR_MAPPABLE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

namespace braid {

// One mappable allocation as a peer needs it.
struct MappableRegion {
  const std::byte* base = nullptr;  // in this process
  size_t length = 0;                // bytes mapped (whole pages)
  int fd = -1;                      // this process's descriptor of the memfd
  uint64_t id = 0;                  // never reused within the process; 0: none
};

// `nbytes` (> 0) of zeroed memory in a fresh memfd, rounded up to whole
// pages. kResourceExhausted when the memfd or the mapping cannot be made
// (no descriptors left, say): callers fall back to private memory.
absl::StatusOr<std::byte*> AllocateMappable(size_t nbytes);

// Unmaps and closes what AllocateMappable returned. Peers that mapped it
// keep their pages until they unmap them.
void FreeMappable(std::byte* data);

// The allocation holding all of [data, data + bytes), if any.
std::optional<MappableRegion> FindMappable(const void* data, size_t bytes);

}  // namespace braid

#endif  // BRAID_TENSOR_MAPPABLE_MEMORY_H_
