#include "collectives/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/cpu.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"
#include "collectives/transport/frame.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kShmPeerAccessKnob, "BRAID_SHM_PEER_ACCESS", "1",
               "shm: 1 lets the direct collectives read peers' inputs and write their outputs with one kernel copy "
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

namespace shm_internal {

constexpr uint64_t kMagic = 0x315f4d48535f4442;  // "BD_SHM_1"
constexpr size_t kCacheLine = 64;

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
constexpr size_t kSegmentHeaderBytes = RoundUp(sizeof(Segment), kCacheLine);
constexpr size_t kChannelBytes = RoundUp(sizeof(Channel), kCacheLine);
constexpr size_t kPageBytes = 4096;

size_t ChannelStride(size_t ring_bytes) { return kChannelBytes + ring_bytes; }
// Where the window starts: after the rings, on a page boundary.
size_t WindowOffset(int size, size_t ring_bytes) {
  return RoundUp(kSegmentHeaderBytes + static_cast<size_t>(size) * ChannelStride(ring_bytes), kPageBytes);
}
size_t SegmentBytes(int size, size_t ring_bytes, size_t window_half_bytes) {
  return WindowOffset(size, ring_bytes) + 2 * window_half_bytes;
}

// How many Syncs the owner of `segment` has entered.
uint64_t SyncsEntered(const Segment* segment) {
  return std::max(segment->sync_slots[0].entered.load(std::memory_order_acquire),
                  segment->sync_slots[1].entered.load(std::memory_order_acquire));
}

}  // namespace shm_internal

using shm_internal::Channel;
using shm_internal::Segment;
using shm_internal::SyncsEntered;

namespace {

constexpr absl::Duration kLivenessInterval = absl::Milliseconds(50);

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

absl::StatusOr<std::byte*> MapSegment(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return ErrnoStatus(errno, "mmap of a shared-memory segment");
  return static_cast<std::byte*>(base);
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

absl::Status ShmTransport::SetUp(Bootstrap& bootstrap, Deadline deadline, const ShmTransportOptions& options) {
  const int me = rank();
  const int n = size();
  ring_bytes_ = options.ring_bytes;
  const size_t bytes = shm_internal::SegmentBytes(n, ring_bytes_, options.window_half_bytes);
  mappings_.resize(static_cast<size_t>(n));
  pids_.assign(static_cast<size_t>(n), 0);
  pidfds_.resize(static_cast<size_t>(n));

  std::random_device random;
  my_name_ = absl::StrCat("/braid-", getpid(), "-", me, "-", random());
  {
    UniqueFd fd(shm_open(my_name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("shm_open(", my_name_, ")"));
    if (ftruncate(fd.get(), static_cast<off_t>(bytes)) < 0) {
      const int error = errno;
      shm_unlink(my_name_.c_str());
      return ErrnoStatus(error, absl::StrCat("ftruncate(", my_name_, ", ", bytes, ") (is /dev/shm big enough?)"));
    }
    absl::StatusOr<std::byte*> base = MapSegment(fd.get(), bytes);
    if (!base.ok()) {
      shm_unlink(my_name_.c_str());
      return base.status();
    }
    mappings_[static_cast<size_t>(me)] = {*base, bytes};
  }
  // Touch every page now: first touch costs ~10 us a page, never on the hot path.
  std::memset(mappings_[static_cast<size_t>(me)].base, 0, bytes);
  Segment* mine = SegmentOf(me);
  mine->magic = shm_internal::kMagic;
  mine->ring_bytes = ring_bytes_;
  mine->window_half_bytes = options.window_half_bytes;
  mine->size = n;
  mine->pid = getpid();

  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> names,
                         bootstrap.AllGather(absl::StrCat(my_name_, " ", getpid()), deadline));
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    std::vector<std::string> parts = absl::StrSplit(names[static_cast<size_t>(peer)], ' ');
    int pid = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &pid)) {
      return absl::InvalidArgumentError(absl::StrCat("bad shm address from peer ", peer));
    }
    pids_[static_cast<size_t>(peer)] = pid;
    UniqueFd fd(shm_open(parts[0].c_str(), O_RDWR | O_CLOEXEC, 0));
    if (!fd.valid()) {
      return ErrnoStatus(errno, absl::StrCat("opening peer ", peer, "'s segment ", parts[0],
                                             " (is every rank on this host? use the tcp transport otherwise)"));
    }
    BRAID_ASSIGN_OR_RETURN(std::byte * base, MapSegment(fd.get(), bytes));
    mappings_[static_cast<size_t>(peer)] = {base, bytes};
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
  shm_unlink(my_name_.c_str());
  my_name_.clear();
  if (options.window_half_bytes > 0) {
    BRAID_RETURN_IF_ERROR(ProbePeerAccess(bootstrap, deadline, options.peer_access));
    half_bytes_ = options.window_half_bytes;
    const size_t offset = shm_internal::WindowOffset(n, ring_bytes_);
    for (int half = 0; half < 2; ++half) {
      for (const Mapping& mapping : mappings_) {
        halves_[half].push_back(mapping.base + offset + static_cast<size_t>(half) * half_bytes_);
      }
    }
  }
  return absl::OkStatus();
}

ShmTransport::~ShmTransport() {
  FailAllPending(absl::CancelledError("shm transport destroyed"));
  CloseStreams(absl::OkStatus());
  for (const Mapping& mapping : mappings_) {
    if (mapping.base != nullptr) munmap(mapping.base, mapping.bytes);
  }
  if (!my_name_.empty()) shm_unlink(my_name_.c_str());
}

Segment* ShmTransport::SegmentOf(int r) const {
  return reinterpret_cast<Segment*>(mappings_[static_cast<size_t>(r)].base);
}

Channel* ShmTransport::ChannelOf(int sender, int receiver) const {
  std::byte* base = mappings_[static_cast<size_t>(receiver)].base + shm_internal::kSegmentHeaderBytes +
                    static_cast<size_t>(sender) * shm_internal::ChannelStride(ring_bytes_);
  return reinterpret_cast<Channel*>(base);
}

std::byte* ShmTransport::RingOf(int sender, int receiver) const {
  return reinterpret_cast<std::byte*>(ChannelOf(sender, receiver)) + shm_internal::kChannelBytes;
}

std::string ShmTransport::PeerName(int peer) const {
  if (peer >= 0 && static_cast<size_t>(peer) < pids_.size() && pids_[static_cast<size_t>(peer)] != 0) {
    return absl::StrCat("peer ", peer, " (pid ", pids_[static_cast<size_t>(peer)], ")");
  }
  return absl::StrCat("peer ", peer);
}

void ShmTransport::Ring(int r) {
  // Only a sleeper needs the doorbell: an awake owner sees the ring change
  // itself. The fence pairs with WaitReady's: either this load sees
  // `sleeping`, or the owner's re-check after setting it sees our change.
  // (A read-modify-write on every transfer cost more than the copy at 8 B.)
  FullFence();
  WakeIfSleeping(r);
}

void ShmTransport::WakeIfSleeping(int r) {
  Segment* segment = SegmentOf(r);
  if (segment->sleeping.load(std::memory_order_relaxed) == 0) return;
  segment->doorbell.fetch_add(1, std::memory_order_seq_cst);
  Futex(&segment->doorbell, FUTEX_WAKE, 1, nullptr);
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
  std::byte* ring = RingOf(rank(), peer);
  const uint64_t head = channel->head.load(std::memory_order_relaxed);
  const uint64_t tail = channel->tail.load(std::memory_order_acquire);
  size_t space = ring_bytes_ - static_cast<size_t>(head - tail);
  if (space == 0) {
    if (SegmentOf(peer)->closed.load(std::memory_order_acquire) != 0) return PeerState(peer);
    return 0;
  }
  size_t written = 0;
  uint64_t position = head;
  for (absl::Span<const std::byte> part : {first, second}) {
    const size_t take = std::min(space, part.size());
    size_t copied = 0;
    while (copied < take) {
      const size_t offset = static_cast<size_t>(position & (ring_bytes_ - 1));
      const size_t chunk = std::min(take - copied, ring_bytes_ - offset);
      std::memcpy(ring + offset, part.data() + copied, chunk);
      copied += chunk;
      position += chunk;
    }
    written += take;
    space -= take;
    if (take < part.size()) break;
  }
  if (written == 0) return 0;
  channel->head.store(position, std::memory_order_release);
  Ring(peer);
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
  const std::byte* ring = RingOf(peer, rank());
  const uint64_t tail = channel->tail.load(std::memory_order_relaxed);
  const uint64_t head = channel->head.load(std::memory_order_acquire);
  const size_t available = static_cast<size_t>(head - tail);
  if (available == 0) {
    // Only a closed stream is an error here; liveness (a syscall) is WaitReady's job.
    if (SegmentOf(peer)->closed.load(std::memory_order_acquire) != 0) return PeerState(peer);
    return 0;
  }
  const size_t take = std::min(available, data.size());
  size_t copied = 0;
  uint64_t position = tail;
  while (copied < take) {
    const size_t offset = static_cast<size_t>(position & (ring_bytes_ - 1));
    const size_t chunk = std::min(take - copied, ring_bytes_ - offset);
    std::memcpy(data.data() + copied, ring + offset, chunk);
    copied += chunk;
    position += chunk;
  }
  if (!consume) return take;
  channel->tail.store(position, std::memory_order_release);
  Ring(peer);  // the sender may be waiting for space
  return take;
}

template <typename Ready>
void ShmTransport::Doze(Deadline until, Ready ready) {
  Segment* mine = SegmentOf(rank());
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

absl::Status ShmTransport::WaitReady(absl::Span<const Interest> interests, Deadline until) {
  auto can_move = [&](const Interest& interest) {
    if (interest.read) {
      const Channel* in = ChannelOf(interest.peer, rank());
      if (in->head.load(std::memory_order_acquire) != in->tail.load(std::memory_order_relaxed)) return true;
    }
    if (interest.write) {
      const Channel* out = ChannelOf(rank(), interest.peer);
      if (out->head.load(std::memory_order_relaxed) - out->tail.load(std::memory_order_acquire) < ring_bytes_) {
        return true;
      }
    }
    return false;
  };
  Doze(until, [&] {
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
  if (theirs <= synced_) return absl::OkStatus();
  // A peer sends its frames before it enters the next Sync: one that arrived
  // just before that Sync is visible now, and is no mismatch.
  const Channel* in = ChannelOf(peer, rank());
  if (in->head.load(std::memory_order_acquire) != in->tail.load(std::memory_order_relaxed)) return absl::OkStatus();
  return CheckFrame(expected, segment->sync_slots[theirs % 2].header, rank(), peer);
}

absl::Status ShmTransport::CheckSyncPeer(int peer, const FrameHeader& header, uint64_t sync) {
  absl::Status state = PeerState(peer);
  // A peer stores its arrival before it can finish and close: one that
  // arrived, passed this Sync and exited is no failure of it.
  if (!state.ok() && SyncsEntered(SegmentOf(peer)) >= sync) return absl::OkStatus();
  BRAID_RETURN_IF_ERROR(Annotate(
      state, absl::StrCat("rank ", rank(), ": shm: ", DescribeFrame(header), ": waiting for ", PeerName(peer))));
  // Nothing of this rank's reads the streams during a Sync: a frame waiting
  // there is the peer's next message. A collective's frame means the peer
  // runs another collective (a point-to-point one may precede the Sync).
  FrameHeader got;
  absl::StatusOr<size_t> peeked = PeekSome(peer, absl::MakeSpan(reinterpret_cast<std::byte*>(&got), sizeof(got)));
  if (!peeked.ok() || *peeked < sizeof(got)) return absl::OkStatus();
  if (got.kind == CollectiveKind::kSendRecv || (got.flags & FrameHeader::kFlagAbort) != 0) return absl::OkStatus();
  // The peer may have passed this Sync since we looked and sent its next
  // collective's first frame: it entered the Sync before sending, so that
  // shows now.
  if (SyncsEntered(SegmentOf(peer)) >= sync) return absl::OkStatus();
  return CheckFrame(header, got, rank(), peer);
}

PeerBuffers ShmTransport::Published(int peer) const {
  const Segment* theirs = SegmentOf(peer);
  return {reinterpret_cast<const std::byte*>(theirs->published_input[synced_ % 2]),
          reinterpret_cast<std::byte*>(theirs->published_output[synced_ % 2])};
}

const std::byte* ShmTransport::SyncPayload(int rank) const {
  return SegmentOf(rank)->sync_slots[synced_ % 2].payload;
}

namespace {

// One cross-memory copy, resumed after partial transfers. `Copy` moves what
// it can between `local` and `remote` and returns the bytes moved, or -1.
template <typename Copy>
ssize_t CopyAcross(std::byte* local, std::byte* remote, size_t bytes, Copy copy) {
  size_t done = 0;
  while (done < bytes) {
    iovec here{local + done, bytes - done};
    iovec there{remote + done, bytes - done};
    const ssize_t moved = copy(&here, &there);
    if (moved < 0) return -1;
    if (moved == 0) {
      errno = EFAULT;
      return -1;
    }
    done += static_cast<size_t>(moved);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

absl::Status ShmTransport::PeerCopyFailed(int peer, const char* call, size_t bytes) const {
  const int error = errno;
  BRAID_RETURN_IF_ERROR(Annotate(PeerState(peer), absl::StrCat("rank ", rank(), ": shm: ", call, " with ", PeerName(peer))));
  return ErrnoStatus(error, absl::StrCat("rank ", rank(), ": shm: ", call, " of ", bytes, " bytes with ", PeerName(peer)));
}

absl::Status ShmTransport::ReadPeer(int peer, const std::byte* from, absl::Span<std::byte> into) {
  const pid_t pid = pids_[static_cast<size_t>(peer)];
  if (CopyAcross(into.data(), const_cast<std::byte*>(from), into.size(), [pid](iovec* here, iovec* there) {
        return process_vm_readv(pid, here, 1, there, 1, 0);
      }) < 0) {
    return PeerCopyFailed(peer, "process_vm_readv", into.size());
  }
  return absl::OkStatus();
}

absl::Status ShmTransport::WritePeer(int peer, absl::Span<const std::byte> from, std::byte* to) {
  const pid_t pid = pids_[static_cast<size_t>(peer)];
  if (CopyAcross(const_cast<std::byte*>(from.data()), to, from.size(), [pid](iovec* here, iovec* there) {
        return process_vm_writev(pid, here, 1, there, 1, 0);
      }) < 0) {
    return PeerCopyFailed(peer, "process_vm_writev", from.size());
  }
  return absl::OkStatus();
}

absl::Status ShmTransport::ProbePeerAccess(Bootstrap& bootstrap, Deadline deadline, bool wanted) {
  std::random_device random;
  probe_ = (static_cast<uint64_t>(random()) << 32) | random() | 1;
  probe_echoes_.assign(static_cast<size_t>(size()), 0);
  Segment* mine = SegmentOf(rank());
  mine->probe_value = probe_;
  mine->probe_address = reinterpret_cast<uint64_t>(&probe_);
  mine->probe_echoes_address = reinterpret_cast<uint64_t>(probe_echoes_.data());
  BRAID_RETURN_IF_ERROR(bootstrap.AllGather("probe", deadline).status());
  bool all_reached = wanted;
  for (int peer = 0; peer < size() && all_reached; ++peer) {
    if (peer == rank()) continue;
    uint64_t got = 0;
    const Segment* theirs = SegmentOf(peer);
    absl::Status read = ReadPeer(peer, reinterpret_cast<const std::byte*>(theirs->probe_address),
                                 absl::MakeSpan(reinterpret_cast<std::byte*>(&got), sizeof(got)));
    all_reached = read.ok() && got == theirs->probe_value &&
                  WritePeer(peer, absl::MakeConstSpan(reinterpret_cast<const std::byte*>(&got), sizeof(got)),
                            reinterpret_cast<std::byte*>(theirs->probe_echoes_address) +
                                static_cast<size_t>(rank()) * sizeof(uint64_t))
                      .ok();
  }
  // Every peer's echo has landed (or failed) once all have passed this.
  BRAID_RETURN_IF_ERROR(bootstrap.AllGather("probed", deadline).status());
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank() && probe_echoes_[static_cast<size_t>(peer)] != probe_) all_reached = false;
  }
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> verdicts, bootstrap.AllGather(all_reached ? "1" : "0", deadline));
  can_access_peers_ = std::all_of(verdicts.begin(), verdicts.end(), [](const std::string& v) { return v == "1"; });
  return absl::OkStatus();
}

absl::Status ShmTransport::Sync(const FrameHeader& header, Deadline deadline, PeerBuffers published,
                                absl::Span<const std::byte> payload) {
  if (closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank(), ": shm: ", DescribeFrame(header), ": the transport was aborted"));
  }
  Segment* mine = SegmentOf(rank());
  if (payload.size() > kSyncPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), ": shm: ", DescribeFrame(header),
                                                   ": a Sync carries at most ", kSyncPayloadBytes, " bytes, not ",
                                                   payload.size()));
  }
  const uint64_t sync = ++synced_;
  shm_internal::SyncSlot& slot = mine->sync_slots[sync % 2];
  slot.header = header;
  if (!payload.empty()) std::memcpy(slot.payload, payload.data(), payload.size());
  mine->published_input[sync % 2] = reinterpret_cast<uint64_t>(published.input);
  mine->published_output[sync % 2] = reinterpret_cast<uint64_t>(published.output);
  slot.entered.store(sync, std::memory_order_release);
  absl::InlinedVector<int, 16> waiting;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank()) waiting.push_back(peer);
  }
  // A peer's slot for this Sync stays as it is until every rank,
  // this one included, has entered the next Sync.
  auto arrived = [&](int peer) {
    return SegmentOf(peer)->sync_slots[sync % 2].entered.load(std::memory_order_acquire) >= sync;
  };
  SpinWait spin = NewSpinWait();
  while (true) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (!arrived(*it)) {
        ++it;
        continue;
      }
      BRAID_RETURN_IF_ERROR(CheckFrame(header, SegmentOf(*it)->sync_slots[sync % 2].header, rank(), *it));
      it = waiting.erase(it);
      spin.Progressed();
    }
    if (waiting.empty()) {
      // Only the last rank to arrive ends the peers' waits, and it finds
      // them all arrived at its first look: the doorbells are rung now, not
      // on arrival, so that the first ranks to arrive skip the fence's wait
      // for their store (the peers poll its line).
      FullFence();
      for (int peer = 0; peer < size(); ++peer) {
        if (peer != rank()) WakeIfSleeping(peer);
      }
      return absl::OkStatus();
    }
    if (spin.Idle()) continue;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", rank(), ": shm: deadline exceeded in ",
                                                      DescribeFrame(header), " waiting for ", PeerName(waiting[0]),
                                                      waiting.size() > 1 ? " and others" : ""));
    }
    for (int peer : waiting) BRAID_RETURN_IF_ERROR(CheckSyncPeer(peer, header, sync));
    Doze(deadline, [&] { return arrived(waiting[0]); });
  }
}

void ShmTransport::CloseStreams(const absl::Status& reason) {
  if (closed_ || mappings_.empty() || mappings_[static_cast<size_t>(rank())].base == nullptr) return;
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
    if (peer != rank() && mappings_[static_cast<size_t>(peer)].base != nullptr) Ring(peer);
  }
}

}  // namespace braid
