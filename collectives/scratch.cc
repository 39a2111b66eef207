#include "collectives/scratch.h"

#include <algorithm>
#include <cstring>

#include "base/status.h"

namespace braid {

absl::StatusOr<absl::Span<std::byte>> Scratch::Get(size_t bytes) {
  if (!storage_ || storage_->nbytes() < bytes) {
    // Grow geometrically so a sweep of sizes allocates a few times, not every call.
    const size_t grown = std::max(bytes, storage_ ? storage_->nbytes() * 2 : size_t{0});
    storage_.reset();
    BRAID_ASSIGN_OR_RETURN(storage_, Storage::Allocate(grown, Device::Cpu()));
    // First touch now, not inside a transfer. (A zero-byte storage may have
    // no memory at all: memset(nullptr, 0, 0) is undefined.)
    if (grown > 0) std::memset(storage_->data(), 0, grown);
  }
  return absl::MakeSpan(storage_->data(), bytes);
}

}  // namespace braid
