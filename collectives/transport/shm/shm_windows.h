// ShmWindows: the shm transport's SharedWindows. Each rank's window halves
// lie in its segment after the rings; Sync is a barrier of flags in the
// segments (each rank posts its arrival, the collective's header and a
// small payload in one cache line, and the last to arrive rings the
// others' doorbells); ReadPeer and WritePeer are plain copies where the
// peer's buffer is mappable memory (PeerMappings), else cross-memory copies
// (process_vm_readv/writev), allowed only where the set-up probe found them
// working between every pair.
//
// Owned by its ShmTransport, whose segments, liveness checks and streams it
// uses (a Sync stuck on a peer looks at the peer's stream for a collective
// it runs instead). Internal to the shm transport.
#ifndef BRAID_COLLECTIVES_TRANSPORT_SHM_SHM_WINDOWS_H_
#define BRAID_COLLECTIVES_TRANSPORT_SHM_SHM_WINDOWS_H_

#include <cstddef>
#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/shm/peer_mappings.h"
#include "collectives/transport/transport.h"

namespace braid {

class ShmTransport;

class ShmWindows final : public SharedWindows {
 public:
  // `halves[h][r]`: rank r's half h, each `half_bytes` long.
  ShmWindows(ShmTransport& transport, size_t half_bytes, std::vector<std::byte*> halves[2]);

  // Each rank publishes its header and a count of Syncs in its segment, then
  // waits for every peer's count (spin, then the futex doorbell).
  absl::Status Sync(const FrameHeader& header, Deadline deadline, PeerBuffers published = {},
                    absl::Span<const std::byte> payload = {}) override;
  const std::byte* SyncPayload(int rank) const override;
  bool CanAccessPeers() const override { return can_access_peers_; }
  PeerBuffers Published(int peer) const override;
  std::byte* MappedPeer(int peer, const std::byte* at, size_t bytes) override;
  absl::Status ReadPeer(int peer, const std::byte* from, absl::Span<std::byte> into) override;
  absl::Status WritePeer(int peer, absl::Span<const std::byte> from, std::byte* to, bool stream = false) override;

  // Probes cross-memory attach, reads and writes, between every pair
  // (collective, even on a rank that does not want it: its "no" is part of
  // the verdict, so ranks with different options agree).
  absl::Status ProbePeerAccess(Bootstrap& bootstrap, Deadline deadline, bool wanted);

  // Syncs this rank has entered.
  uint64_t synced() const { return synced_; }

 private:
  // For Sync number `sync` stuck on `peer`: an error if it died, aborted, or
  // sent this rank a collective's frame without entering that Sync (so it
  // runs something else than `header`).
  absl::Status CheckSyncPeer(int peer, const FrameHeader& header, uint64_t sync);
  // What the peers published of their mappable buffers with Sync `sync`.
  void KeepPeerMaps(uint64_t sync);
  // The error for a failed cross-memory `call` with `peer` (errno set).
  absl::Status PeerCopyFailed(int peer, const char* call, size_t bytes) const;

  ShmTransport& transport_;
  uint64_t synced_ = 0;
  // What each peer published of its mappable buffers with the last
  // publishing Sync ([input, output]), and this rank's mappings of them.
  std::vector<std::array<shm_internal::MappedBuffer, 2>> peer_maps_;
  shm_internal::PeerMappings mappings_;
  bool can_access_peers_ = false;
  // Set-up: every peer reads probe_ and writes it back into its slot of
  // probe_echoes_: can it reach this process's memory both ways?
  uint64_t probe_ = 0;
  std::vector<uint64_t> probe_echoes_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_SHM_SHM_WINDOWS_H_
