// The shm transport's single-producer single-consumer byte rings and its
// doorbells. A ring is a Channel (head advanced by the sender, tail by the
// receiver, each with a release store) and `ring_bytes` (a power of two) of
// data in the receiver's segment. A doorbell is the futex word in each
// segment: whoever may unblock its owner bumps it, if the owner sleeps.
//
// Internal to the shm transport (collectives/transport/shm/).
#ifndef BRAID_COLLECTIVES_TRANSPORT_SHM_RING_H_
#define BRAID_COLLECTIVES_TRANSPORT_SHM_RING_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/cpu.h"
#include "base/deadline.h"
#include "collectives/transport/shm/segment.h"

namespace braid::shm_internal {

// Bytes the sender may still write.
inline size_t RingSpace(const Channel* channel, size_t ring_bytes) {
  return ring_bytes - static_cast<size_t>(channel->head.load(std::memory_order_relaxed) -
                                          channel->tail.load(std::memory_order_acquire));
}
// Bytes the receiver may read.
inline size_t RingAvailable(const Channel* channel) {
  return static_cast<size_t>(channel->head.load(std::memory_order_acquire) -
                             channel->tail.load(std::memory_order_relaxed));
}

// Sender: copies as much of `first`, then `second`, as fits; publishes it
// (head, release) and returns the bytes written.
size_t RingWrite(Channel* channel, std::byte* ring, size_t ring_bytes, absl::Span<const std::byte> first,
                 absl::Span<const std::byte> second);
// Receiver: copies up to data.size() available bytes; frees them (tail,
// release) when `consume`. Returns the bytes copied.
size_t RingRead(Channel* channel, const std::byte* ring, size_t ring_bytes, absl::Span<std::byte> data,
                bool consume);

inline long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// Rings `owner`'s doorbell if it sleeps; the caller issued a full fence
// after its last store.
inline void WakeIfSleeping(Segment* owner) {
  if (owner->sleeping.load(std::memory_order_relaxed) == 0) return;
  owner->doorbell.fetch_add(1, std::memory_order_seq_cst);
  Futex(&owner->doorbell, FUTEX_WAKE, 1, nullptr);
}

// After a change `owner` may wait for: only a sleeper needs the doorbell (an
// awake owner sees the ring change itself). The fence pairs with Doze's:
// either this load sees `sleeping`, or the owner's re-check after setting
// it sees our change. (A read-modify-write on every transfer cost more than
// the copy at 8 B.)
inline void RingDoorbell(Segment* owner) {
  FullFence();
  WakeIfSleeping(owner);
}

// A sleep lasts at most this long, so that a waiter looks at its peers'
// liveness (pidfd) that often: a peer that dies cannot ring.
inline constexpr absl::Duration kLivenessInterval = absl::Milliseconds(50);

// Sleeps on `mine`'s doorbell until rung, `until`, or kLivenessInterval,
// unless `ready()` holds once the sleep is announced.
template <typename Ready>
void Doze(Segment* mine, Deadline until, Ready ready) {
  const uint32_t seen = mine->doorbell.load(std::memory_order_seq_cst);
  mine->sleeping.store(1, std::memory_order_seq_cst);
  FullFence();
  // Re-check after announcing the sleep: a peer that changed a ring but did
  // not see `sleeping` is seen here; one that saw it bumps the doorbell past
  // `seen`, so the futex wait returns at once.
  if (!ready()) {
    const absl::Duration left = std::min(until - absl::Now(), kLivenessInterval);
    if (left > absl::ZeroDuration()) {
      const timespec timeout = absl::ToTimespec(left);
      Futex(&mine->doorbell, FUTEX_WAIT, seen, &timeout);
    }
  }
  mine->sleeping.store(0, std::memory_order_relaxed);
}

}  // namespace braid::shm_internal

#endif  // BRAID_COLLECTIVES_TRANSPORT_SHM_RING_H_
