#include "collectives/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/cpu.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/shm/ring.h"
#include "collectives/transport/shm/segment.h"
#include "collectives/transport/shm/shm_windows.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kShmPeerAccessKnob, "BRAID_SHM_PEER_ACCESS", "1",
               "shm: 1 lets the peer-access collectives read peers' inputs and write their outputs with one kernel copy "
               "(process_vm_readv/writev) where a set-up probe finds both allowed; 0 always copies through the "
               "shared windows.");
BRAID_ENV_KNOB(kShmWindowKnob, "BRAID_SHM_WINDOW_KB", "",
               "shm: KiB in each half of a rank's shared window, the window all-reduce's round size (a multiple "
               "of 4; default 1024; 0 turns the windows off, and direct runs one-shot instead).");

}  // namespace

absl::StatusOr<ShmTransportOptions> ShmTransportOptionsFromEnv() {
  ShmTransportOptions options;
  BRAID_ASSIGN_OR_RETURN(absl::optional<absl::Duration> spin, SpinFromEnv());
  if (spin.has_value()) options.spin = *spin;
  options.peer_access = kShmPeerAccessKnob.String() != "0";
  if (kShmWindowKnob.IsSet() && !kShmWindowKnob.String().empty()) {
    BRAID_ASSIGN_OR_RETURN(int64_t kib, kShmWindowKnob.Int());
    if (kib < 0 || kib % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("BRAID_SHM_WINDOW_KB=", kib, ": must be 0 or a positive multiple of 4 (KiB, whole pages)"));
    }
    options.window_half_bytes = static_cast<size_t>(kib) << 10;
  }
  return options;
}

using shm_internal::Channel;
using shm_internal::Segment;
using shm_internal::ShmSegment;
using shm_internal::SyncsEntered;

namespace {

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(Bootstrap& bootstrap, Deadline deadline,
                                                                   ShmTransportOptions options) {
  if (options.ring_bytes < 4096 || (options.ring_bytes & (options.ring_bytes - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shm ring_bytes ", options.ring_bytes,
                                                   " must be a power of two >= 4096"));
  }
  if (options.window_half_bytes % shm_internal::kPageBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shm window_half_bytes ", options.window_half_bytes,
                                                   " must be a multiple of 4096"));
  }
  std::unique_ptr<ShmTransport> transport(new ShmTransport(bootstrap.rank(), bootstrap.size(), options.spin));
  BRAID_RETURN_IF_ERROR(Annotate(transport->SetUp(bootstrap, deadline, options),
                                 absl::StrCat("rank ", bootstrap.rank(), ": shm transport setup")));
  return transport;
}

ShmTransport::ShmTransport(int rank, int size, absl::Duration spin) : StreamTransport(rank, size, spin, size) {}

absl::Status ShmTransport::SetUp(Bootstrap& bootstrap, Deadline deadline, const ShmTransportOptions& options) {
  const int me = rank();
  const int n = size();
  ring_bytes_ = options.ring_bytes;
  const size_t bytes = shm_internal::SegmentBytes(n, ring_bytes_, options.window_half_bytes);
  segments_.resize(static_cast<size_t>(n));
  headers_.assign(static_cast<size_t>(n), nullptr);
  pids_.assign(static_cast<size_t>(n), 0);
  pidfds_.resize(static_cast<size_t>(n));

  std::random_device random;
  const std::string my_name = absl::StrCat("/braid-", getpid(), "-", me, "-", random());
  BRAID_ASSIGN_OR_RETURN(segments_[static_cast<size_t>(me)], ShmSegment::Create(my_name, bytes));
  headers_[static_cast<size_t>(me)] = segments_[static_cast<size_t>(me)].header();
  Segment* mine = SegmentOf(me);
  mine->magic = shm_internal::kMagic;
  mine->ring_bytes = ring_bytes_;
  mine->window_half_bytes = options.window_half_bytes;
  mine->size = n;
  mine->pid = getpid();

  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> names,
                         bootstrap.AllGather(absl::StrCat(my_name, " ", getpid()), deadline));
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    std::vector<std::string> parts = absl::StrSplit(names[static_cast<size_t>(peer)], ' ');
    int pid = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &pid)) {
      return absl::InvalidArgumentError(absl::StrCat("bad shm address from peer ", peer));
    }
    pids_[static_cast<size_t>(peer)] = pid;
    absl::StatusOr<ShmSegment> theirs = ShmSegment::Open(parts[0], bytes);
    if (!theirs.ok()) {
      return Annotate(theirs.status(), absl::StrCat("opening peer ", peer, "'s segment ", parts[0],
                                                    " (is every rank on this host? use the tcp transport otherwise)"));
    }
    segments_[static_cast<size_t>(peer)] = *std::move(theirs);
    headers_[static_cast<size_t>(peer)] = segments_[static_cast<size_t>(peer)].header();
    const Segment* segment = SegmentOf(peer);
    if (segment->magic != shm_internal::kMagic || segment->size != n || segment->ring_bytes != ring_bytes_ ||
        segment->window_half_bytes != options.window_half_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "peer ", peer, "'s segment ", parts[0], " has a different layout (size, ring or window bytes differ)"));
    }
    pidfds_[static_cast<size_t>(peer)] = UniqueFd(PidfdOpen(pid));
  }
  // Once everyone has mapped every segment the names can go.
  BRAID_RETURN_IF_ERROR(bootstrap.AllGather("mapped", deadline).status());
  segments_[static_cast<size_t>(me)].Unlink();
  if (options.window_half_bytes > 0) {
    const size_t offset = shm_internal::WindowOffset(n, ring_bytes_);
    std::vector<std::byte*> halves[2];
    for (int half = 0; half < 2; ++half) {
      for (const ShmSegment& segment : segments_) {
        halves[half].push_back(segment.base() + offset + static_cast<size_t>(half) * options.window_half_bytes);
      }
    }
    windows_ = std::make_unique<ShmWindows>(*this, options.window_half_bytes, halves);
    BRAID_RETURN_IF_ERROR(windows_->ProbePeerAccess(bootstrap, deadline, options.peer_access));
  }
  return absl::OkStatus();
}

ShmTransport::~ShmTransport() {
  FailAllPending(absl::CancelledError("shm transport destroyed"));
  CloseStreams(absl::OkStatus());
}

SharedWindows* ShmTransport::shared_windows() { return windows_.get(); }

Channel* ShmTransport::ChannelOf(int sender, int receiver) const {
  return segments_[static_cast<size_t>(receiver)].channel(sender, ring_bytes_);
}

std::byte* ShmTransport::RingOf(int sender, int receiver) const {
  return segments_[static_cast<size_t>(receiver)].ring(sender, ring_bytes_);
}

std::string ShmTransport::PeerName(int peer) const {
  if (peer >= 0 && static_cast<size_t>(peer) < pids_.size() && pids_[static_cast<size_t>(peer)] != 0) {
    return absl::StrCat("peer ", peer, " (pid ", pids_[static_cast<size_t>(peer)], ")");
  }
  return absl::StrCat("peer ", peer);
}

absl::Status ShmTransport::PeerState(int peer) const {
  // An abort notice outlives its writer: report it before the death it may be followed by.
  const Segment* segment = SegmentOf(peer);
  const bool closed = segment->closed.load(std::memory_order_acquire) != 0;
  if (closed && segment->abort_text[0] != '\0') {
    return absl::AbortedError(absl::StrCat(
        PeerName(peer), " aborted the communicator: ",
        std::string(segment->abort_text, strnlen(segment->abort_text, sizeof(segment->abort_text)))));
  }
  const UniqueFd& pidfd = pidfds_[static_cast<size_t>(peer)];
  bool dead = false;
  if (pidfd.valid()) {
    pollfd entry{pidfd.get(), POLLIN, 0};
    dead = poll(&entry, 1, 0) > 0;  // readable once the process has exited (even unreaped)
  } else {
    dead = kill(pids_[static_cast<size_t>(peer)], 0) < 0 && errno == ESRCH;
  }
  if (dead) return absl::UnavailableError("the peer process died");
  if (closed) return absl::UnavailableError("the peer closed its shared-memory streams (process exited?)");
  return absl::OkStatus();
}

absl::StatusOr<size_t> ShmTransport::WriteSome(int peer, absl::Span<const std::byte> first,
                                               absl::Span<const std::byte> second) {
  Channel* channel = ChannelOf(rank(), peer);
  if (shm_internal::RingSpace(channel, ring_bytes_) == 0) {
    if (SegmentOf(peer)->closed.load(std::memory_order_acquire) != 0) return PeerState(peer);
    return 0;
  }
  const size_t written = shm_internal::RingWrite(channel, RingOf(rank(), peer), ring_bytes_, first, second);
  if (written == 0) return 0;
  shm_internal::RingDoorbell(SegmentOf(peer));
  return written;
}

absl::StatusOr<size_t> ShmTransport::ReadSome(int peer, absl::Span<std::byte> data) {
  return CopyOut(peer, data, /*consume=*/true);
}

absl::StatusOr<size_t> ShmTransport::PeekSome(int peer, absl::Span<std::byte> data) {
  return CopyOut(peer, data, /*consume=*/false);
}

absl::StatusOr<size_t> ShmTransport::CopyOut(int peer, absl::Span<std::byte> data, bool consume) {
  if (data.empty()) return 0;
  Channel* channel = ChannelOf(peer, rank());
  if (shm_internal::RingAvailable(channel) == 0) {
    // Only a closed stream is an error here; liveness (a syscall) is WaitReady's job.
    if (SegmentOf(peer)->closed.load(std::memory_order_acquire) != 0) return PeerState(peer);
    return 0;
  }
  const size_t take = shm_internal::RingRead(channel, RingOf(peer, rank()), ring_bytes_, data, consume);
  if (consume) shm_internal::RingDoorbell(SegmentOf(peer));  // the sender may be waiting for space
  return take;
}

absl::Status ShmTransport::WaitReady(absl::Span<const Interest> interests, Deadline until) {
  auto can_move = [&](const Interest& interest) {
    if (interest.read && shm_internal::RingAvailable(ChannelOf(interest.peer, rank())) != 0) return true;
    if (interest.write && shm_internal::RingSpace(ChannelOf(rank(), interest.peer), ring_bytes_) != 0) return true;
    return false;
  };
  shm_internal::Doze(SegmentOf(rank()), until, [&] {
    for (const Interest& interest : interests) {
      if (can_move(interest)) return true;
    }
    return false;
  });
  // A peer that died cannot ring: look at each one we are stuck on. Bytes it
  // left (an abort notice, say) are read before its state counts.
  for (const Interest& interest : interests) {
    if (can_move(interest)) continue;
    absl::Status state = PeerState(interest.peer);
    if (!state.ok()) {
      return Annotate(state, absl::StrCat("rank ", rank(), ": shm: waiting for ", PeerName(interest.peer)));
    }
    if (interest.read && interest.expected != nullptr) {
      BRAID_RETURN_IF_ERROR(CheckPeerNotSyncing(interest.peer, *interest.expected));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmTransport::CheckPeerNotSyncing(int peer, const FrameHeader& expected) const {
  const Segment* segment = SegmentOf(peer);
  const uint64_t theirs = SyncsEntered(segment);
  if (theirs <= (windows_ ? windows_->synced() : 0)) return absl::OkStatus();
  // A peer sends its frames before it enters the next Sync: one that arrived
  // just before that Sync is visible now, and is no mismatch.
  if (shm_internal::RingAvailable(ChannelOf(peer, rank())) != 0) return absl::OkStatus();
  return CheckFrame(expected, segment->sync_slots[theirs % 2].header, rank(), peer);
}

void ShmTransport::CloseStreams(const absl::Status& reason) {
  if (closed_ || segments_.empty() || !segments_[static_cast<size_t>(rank())].mapped()) return;
  closed_ = true;
  Segment* mine = SegmentOf(rank());
  // Published out of band too: a peer stuck sending to us reads it from here.
  if (!reason.ok()) {
    const size_t length = std::min(reason.message().size(), sizeof(mine->abort_text) - 1);
    std::memcpy(mine->abort_text, reason.message().data(), length);
    mine->abort_text[length] = '\0';
  }
  mine->closed.store(1, std::memory_order_release);
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank() && segments_[static_cast<size_t>(peer)].mapped()) shm_internal::RingDoorbell(SegmentOf(peer));
  }
}

}  // namespace braid
