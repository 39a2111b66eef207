// One rank's shared-memory segment: its layout (a header with the doorbell,
// the abort notice and the Sync slots; one inbound ring per sender; the
// rank's window halves) and ShmSegment, the RAII mapping of it.
//
// Internal to the shm transport (collectives/transport/shm/).
#ifndef BRAID_COLLECTIVES_TRANSPORT_SHM_SEGMENT_H_
#define BRAID_COLLECTIVES_TRANSPORT_SHM_SEGMENT_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/shm/peer_mappings.h"
#include "collectives/transport/transport.h"

namespace braid::shm_internal {

inline constexpr uint64_t kMagic = 0x315f4d48535f4442;  // "BD_SHM_1"
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kPageBytes = 4096;

// A Sync's arrival and what it carries, in one cache line: a peer polling
// for the arrival gets the header and a small payload with the same miss.
struct alignas(kCacheLine) SyncSlot {
  std::atomic<uint64_t> entered;  // the Sync that filled this slot; stored last (release)
  FrameHeader header;
  std::byte payload[SharedWindows::kSyncPayloadBytes];
};
static_assert(sizeof(SyncSlot) == kCacheLine, "a Sync slot is one cache line");

// One rank's segment: this header, then one Channel + ring per sender.
struct Segment {
  uint64_t magic;
  uint64_t ring_bytes;
  uint64_t window_half_bytes;
  int32_t size;
  int32_t pid;
  alignas(kCacheLine) std::atomic<uint32_t> doorbell;  // futex word: bumped by whoever may unblock the owner
  alignas(kCacheLine) std::atomic<uint32_t> sleeping;  // the owner is in (or entering) futex_wait
  std::atomic<uint32_t> closed;                        // the owner closed its streams
  char abort_text[1024];                               // why, written before `closed`
  SyncSlot sync_slots[2];                              // Sync s in sync_slots[s % 2]
  uint64_t published_input[2];                         // Sync s's PeerBuffers, likewise
  uint64_t published_output[2];
  MappedBuffer published_maps[2][2];                   // likewise: [s % 2][input, output], where mappable
  uint64_t probe_address;                              // set-up: where the owner's probe value lies
  uint64_t probe_value;                                // and what it holds
  uint64_t probe_echoes_address;                       // where peer p writes it back, at index p
};

struct Channel {
  alignas(kCacheLine) std::atomic<uint64_t> head;  // bytes written (sender)
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // bytes read (receiver)
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");

constexpr size_t RoundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }
inline constexpr size_t kSegmentHeaderBytes = RoundUp(sizeof(Segment), kCacheLine);
inline constexpr size_t kChannelBytes = RoundUp(sizeof(Channel), kCacheLine);

inline size_t ChannelStride(size_t ring_bytes) { return kChannelBytes + ring_bytes; }
// Where the window starts: after the rings, on a page boundary.
inline size_t WindowOffset(int size, size_t ring_bytes) {
  return RoundUp(kSegmentHeaderBytes + static_cast<size_t>(size) * ChannelStride(ring_bytes), kPageBytes);
}
inline size_t SegmentBytes(int size, size_t ring_bytes, size_t window_half_bytes) {
  return WindowOffset(size, ring_bytes) + 2 * window_half_bytes;
}

// How many Syncs the owner of `segment` has entered.
inline uint64_t SyncsEntered(const Segment* segment) {
  return std::max(segment->sync_slots[0].entered.load(std::memory_order_acquire),
                  segment->sync_slots[1].entered.load(std::memory_order_acquire));
}

// A mapped segment: this rank's own (created under a fresh name, which stays
// until Unlink) or a peer's (opened by its name). Move-only; the destructor
// unmaps it and unlinks a name not yet unlinked.
class ShmSegment {
 public:
  // Creates `name` with `bytes` bytes, maps it and touches every page (first
  // touch costs ~10 us a page: never on the hot path).
  static absl::StatusOr<ShmSegment> Create(std::string name, size_t bytes);
  // Maps the existing segment `name` of `bytes` bytes.
  static absl::StatusOr<ShmSegment> Open(const std::string& name, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();

  // Removes the name (peers that mapped it keep their mappings).
  void Unlink();

  bool mapped() const { return base_ != nullptr; }
  std::byte* base() const { return base_; }
  Segment* header() const { return reinterpret_cast<Segment*>(base_); }
  // The inbound ring `sender` writes (this segment's owner reads).
  Channel* channel(int sender, size_t ring_bytes) const {
    return reinterpret_cast<Channel*>(base_ + kSegmentHeaderBytes + static_cast<size_t>(sender) * ChannelStride(ring_bytes));
  }
  std::byte* ring(int sender, size_t ring_bytes) const {
    return reinterpret_cast<std::byte*>(channel(sender, ring_bytes)) + kChannelBytes;
  }

 private:
  void Release();

  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;  // until unlinked; empty for a peer's
};

}  // namespace braid::shm_internal

#endif  // BRAID_COLLECTIVES_TRANSPORT_SHM_SEGMENT_H_
