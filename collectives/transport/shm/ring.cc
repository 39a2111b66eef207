#include "collectives/transport/shm/ring.h"

#include "tensor/reduce.h"

namespace braid::shm_internal {

size_t RingWrite(Channel* channel, std::byte* ring, size_t ring_bytes, absl::Span<const std::byte> first,
                 absl::Span<const std::byte> second) {
  const uint64_t head = channel->head.load(std::memory_order_relaxed);
  size_t space = RingSpace(channel, ring_bytes);
  size_t written = 0;
  uint64_t position = head;
  for (absl::Span<const std::byte> part : {first, second}) {
    const size_t take = std::min(space, part.size());
    size_t copied = 0;
    while (copied < take) {
      const size_t offset = static_cast<size_t>(position & (ring_bytes - 1));
      const size_t chunk = std::min(take - copied, ring_bytes - offset);
      HostCopy(absl::MakeSpan(ring + offset, chunk), part.subspan(copied, chunk));
      copied += chunk;
      position += chunk;
    }
    written += take;
    space -= take;
    if (take < part.size()) break;
  }
  if (written > 0) channel->head.store(position, std::memory_order_release);
  return written;
}

size_t RingRead(Channel* channel, const std::byte* ring, size_t ring_bytes, absl::Span<std::byte> data,
                bool consume) {
  const uint64_t tail = channel->tail.load(std::memory_order_relaxed);
  const size_t take = std::min(RingAvailable(channel), data.size());
  size_t copied = 0;
  uint64_t position = tail;
  while (copied < take) {
    const size_t offset = static_cast<size_t>(position & (ring_bytes - 1));
    const size_t chunk = std::min(take - copied, ring_bytes - offset);
    HostCopy(data.subspan(copied, chunk), absl::MakeConstSpan(ring + offset, chunk));
    copied += chunk;
    position += chunk;
  }
  if (consume && take > 0) channel->tail.store(position, std::memory_order_release);
  return take;
}

}  // namespace braid::shm_internal
