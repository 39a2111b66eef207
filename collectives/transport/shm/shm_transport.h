// The shm transport: ranks on one host exchange frames through POSIX shared
// memory. Each rank creates one segment holding its inbound rings, one per
// sender (single producer, single consumer, byte streams); a sender copies
// into the receiver's ring, the receiver copies out.
//
// Waiting: Wait spins briefly (small-message latency), then sleeps on a futex
// in its own segment (its "doorbell"), which every peer bumps after giving it
// data or space, so ranks that outnumber cores do not burn the CPU. Sleeps
// are bounded (50 ms) to check that the peers are alive (pidfd): a peer that
// dies fails the operations with it within that time, naming it.
//
// Each segment also holds the rank's shared window (two halves, after the
// rings), which the shared-memory collectives read across ranks: ShmWindows
// (shm_windows.h). The layout and its RAII mapping are in segment.h, the
// rings and doorbells in ring.h.
//
// Segments are unlinked as soon as every rank has mapped them, so a crash
// leaves nothing in /dev/shm.
#ifndef BRAID_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_
#define BRAID_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/fd.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/stream_transport.h"

namespace braid {

struct ShmTransportOptions {
  // Bytes in each inbound ring (a power of two).
  size_t ring_bytes = size_t{1} << 20;
  // How long Wait polls (yielding the core between polls when ranks outnumber
  // cores) before sleeping on the futex.
  absl::Duration spin = absl::Microseconds(200);
  // Bytes in each half of this rank's shared window (SharedWindows; a
  // multiple of 4096, 0 for none): the window all-reduce's round size.
  size_t window_half_bytes = size_t{1} << 20;
  // Let the peer-access collectives read the peers' inputs and write their
  // outputs with one kernel copy (process_vm_readv/writev) instead of copying
  // through the windows; used only where a set-up probe finds both work
  // between every pair (containers often forbid them). When they pay off is
  // the selector's call (collectives/selection.h).
  bool peer_access = true;
};

// ShmTransportOptions from the environment: BRAID_SPIN_US,
// BRAID_SHM_PEER_ACCESS, BRAID_SHM_WINDOW_KB (kInvalidArgument for a bad value).
absl::StatusOr<ShmTransportOptions> ShmTransportOptionsFromEnv();

class ShmWindows;
namespace shm_internal {
class ShmSegment;
struct Segment;
struct Channel;
}  // namespace shm_internal

class ShmTransport final : public StreamTransport {
 public:
  // Collective over `bootstrap`; every rank must be on this host.
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(Bootstrap& bootstrap, Deadline deadline,
                                                              ShmTransportOptions options = {});
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  // Null when the windows are off (window_half_bytes 0).
  SharedWindows* shared_windows() override;

 protected:
  absl::StatusOr<size_t> WriteSome(int peer, absl::Span<const std::byte> first,
                                   absl::Span<const std::byte> second) override;
  absl::StatusOr<size_t> ReadSome(int peer, absl::Span<std::byte> data) override;
  absl::Status WaitReady(absl::Span<const Interest> interests, Deadline until) override;
  absl::StatusOr<size_t> PeekSome(int peer, absl::Span<std::byte> data) override;
  void CloseStreams(const absl::Status& reason) override;
  std::string PeerName(int peer) const override;

 private:
  friend class ShmWindows;  // the segments, liveness and streams a Sync looks at

  // Every rank is on this host: size() ranks share its cores.
  ShmTransport(int rank, int size, absl::Duration spin);
  absl::Status SetUp(Bootstrap& bootstrap, Deadline deadline, const ShmTransportOptions& options);
  // Inline: a Sync asks it for every rank.
  shm_internal::Segment* SegmentOf(int rank) const { return headers_[static_cast<size_t>(rank)]; }
  // The ring `sender` writes and `receiver` reads (in the receiver's segment).
  shm_internal::Channel* ChannelOf(int sender, int receiver) const;
  std::byte* RingOf(int sender, int receiver) const;
  pid_t PidOf(int peer) const { return pids_[static_cast<size_t>(peer)]; }
  // The peer's pidfd, or -1 where pidfd_open is unavailable.
  int PidfdOf(int peer) const { return pidfds_[static_cast<size_t>(peer)].get(); }
  bool closed() const { return closed_; }
  // Copies up to data.size() bytes from `peer`'s ring; consumes them if `consume`.
  absl::StatusOr<size_t> CopyOut(int peer, absl::Span<std::byte> data, bool consume);
  // OK while the peer lives and has not closed.
  absl::Status PeerState(int peer) const;
  // For a receive stuck on `peer`: an error if the peer entered a Sync this
  // rank has not (it runs a collective over the windows instead).
  absl::Status CheckPeerNotSyncing(int peer, const FrameHeader& expected) const;

  size_t ring_bytes_ = 0;
  std::vector<shm_internal::ShmSegment> segments_;  // by rank; mine included
  std::vector<shm_internal::Segment*> headers_;      // segments_[rank].header()
  std::vector<pid_t> pids_;
  std::vector<UniqueFd> pidfds_;  // by peer; invalid where pidfd_open is unavailable
  std::unique_ptr<ShmWindows> windows_;  // null without windows
  bool closed_ = false;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_
