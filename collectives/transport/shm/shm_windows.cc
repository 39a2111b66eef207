#include "collectives/transport/shm/shm_windows.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/cpu.h"
#include "base/status.h"
#include "collectives/transport/shm/ring.h"
#include "collectives/transport/shm/segment.h"
#include "collectives/transport/shm/shm_transport.h"
#include "tensor/mappable_memory.h"
#include "tensor/reduce.h"

namespace braid {

using shm_internal::Segment;
using shm_internal::SyncsEntered;

ShmWindows::ShmWindows(ShmTransport& transport, size_t half_bytes, std::vector<std::byte*> halves[2])
    : transport_(transport),
      peer_maps_(static_cast<size_t>(transport.size())),
      mappings_(transport.size()) {
  half_bytes_ = half_bytes;
  halves_[0] = std::move(halves[0]);
  halves_[1] = std::move(halves[1]);
}

absl::Status ShmWindows::CheckSyncPeer(int peer, const FrameHeader& header, uint64_t sync) {
  absl::Status state = transport_.PeerState(peer);
  // A peer stores its arrival before it can finish and close: one that
  // arrived, passed this Sync and exited is no failure of it.
  if (!state.ok() && SyncsEntered(transport_.SegmentOf(peer)) >= sync) return absl::OkStatus();
  BRAID_RETURN_IF_ERROR(Annotate(state, absl::StrCat("rank ", transport_.rank(), ": shm: ", DescribeFrame(header),
                                                     ": waiting for ", transport_.PeerName(peer))));
  // Nothing of this rank's reads the streams during a Sync: a frame waiting
  // there is the peer's next message. A collective's frame means the peer
  // runs another collective (a point-to-point one may precede the Sync).
  FrameHeader got;
  absl::StatusOr<size_t> peeked =
      transport_.PeekSome(peer, absl::MakeSpan(reinterpret_cast<std::byte*>(&got), sizeof(got)));
  if (!peeked.ok() || *peeked < sizeof(got)) return absl::OkStatus();
  if (got.kind == CollectiveKind::kSendRecv || (got.flags & FrameHeader::kFlagAbort) != 0) return absl::OkStatus();
  // The peer may have passed this Sync since we looked and sent its next
  // collective's first frame: it entered the Sync before sending, so that
  // shows now.
  if (SyncsEntered(transport_.SegmentOf(peer)) >= sync) return absl::OkStatus();
  return CheckFrame(header, got, transport_.rank(), peer);
}

PeerBuffers ShmWindows::Published(int peer) const {
  const Segment* theirs = transport_.SegmentOf(peer);
  return {reinterpret_cast<const std::byte*>(theirs->published_input[synced_ % 2]),
          reinterpret_cast<std::byte*>(theirs->published_output[synced_ % 2])};
}

const std::byte* ShmWindows::SyncPayload(int rank) const {
  return transport_.SegmentOf(rank)->sync_slots[synced_ % 2].payload;
}

namespace {

// What peers need to map the mappable buffer at `data`, if it is one.
shm_internal::MappedBuffer Mappable(const std::byte* data) {
  shm_internal::MappedBuffer buffer;
  if (data == nullptr) return buffer;
  std::optional<MappableRegion> region = FindMappable(data, 1);
  if (!region.has_value()) return buffer;
  buffer.base = reinterpret_cast<uint64_t>(region->base);
  buffer.length = region->length;
  buffer.id = region->id;
  buffer.fd = region->fd;
  return buffer;
}

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

absl::Status ShmWindows::PeerCopyFailed(int peer, const char* call, size_t bytes) const {
  const int error = errno;
  const int me = transport_.rank();
  BRAID_RETURN_IF_ERROR(
      Annotate(transport_.PeerState(peer), absl::StrCat("rank ", me, ": shm: ", call, " with ", transport_.PeerName(peer))));
  return ErrnoStatus(error, absl::StrCat("rank ", me, ": shm: ", call, " of ", bytes, " bytes with ",
                                         transport_.PeerName(peer)));
}

std::byte* ShmWindows::MappedPeer(int peer, const std::byte* at, size_t bytes) {
  for (const shm_internal::MappedBuffer& buffer : peer_maps_[static_cast<size_t>(peer)]) {
    std::byte* mapped =
        mappings_.Resolve(peer, transport_.PidfdOf(peer), buffer, reinterpret_cast<uint64_t>(at), bytes);
    if (mapped != nullptr) return mapped;
  }
  return nullptr;
}

absl::Status ShmWindows::ReadPeer(int peer, const std::byte* from, absl::Span<std::byte> into) {
  if (const std::byte* mapped = MappedPeer(peer, from, into.size())) {
    HostCopy(into, absl::MakeConstSpan(mapped, into.size()));
    return absl::OkStatus();
  }
  const pid_t pid = transport_.PidOf(peer);
  if (CopyAcross(into.data(), const_cast<std::byte*>(from), into.size(), [pid](iovec* here, iovec* there) {
        return process_vm_readv(pid, here, 1, there, 1, 0);
      }) < 0) {
    return PeerCopyFailed(peer, "process_vm_readv", into.size());
  }
  return absl::OkStatus();
}

absl::Status ShmWindows::WritePeer(int peer, absl::Span<const std::byte> from, std::byte* to, bool stream) {
  if (std::byte* mapped = MappedPeer(peer, to, from.size())) {
    if (stream) {
      HostStreamCopy(absl::MakeSpan(mapped, from.size()), from);
    } else {
      HostCopy(absl::MakeSpan(mapped, from.size()), from);
    }
    return absl::OkStatus();
  }
  const pid_t pid = transport_.PidOf(peer);
  if (CopyAcross(const_cast<std::byte*>(from.data()), to, from.size(), [pid](iovec* here, iovec* there) {
        return process_vm_writev(pid, here, 1, there, 1, 0);
      }) < 0) {
    return PeerCopyFailed(peer, "process_vm_writev", from.size());
  }
  return absl::OkStatus();
}

absl::Status ShmWindows::ProbePeerAccess(Bootstrap& bootstrap, Deadline deadline, bool wanted) {
  const int me = transport_.rank();
  const int n = transport_.size();
  std::random_device random;
  probe_ = (static_cast<uint64_t>(random()) << 32) | random() | 1;
  probe_echoes_.assign(static_cast<size_t>(n), 0);
  Segment* mine = transport_.SegmentOf(me);
  mine->probe_value = probe_;
  mine->probe_address = reinterpret_cast<uint64_t>(&probe_);
  mine->probe_echoes_address = reinterpret_cast<uint64_t>(probe_echoes_.data());
  BRAID_RETURN_IF_ERROR(bootstrap.AllGather("probe", deadline).status());
  bool all_reached = wanted;
  for (int peer = 0; peer < n && all_reached; ++peer) {
    if (peer == me) continue;
    uint64_t got = 0;
    const Segment* theirs = transport_.SegmentOf(peer);
    absl::Status read = ReadPeer(peer, reinterpret_cast<const std::byte*>(theirs->probe_address),
                                 absl::MakeSpan(reinterpret_cast<std::byte*>(&got), sizeof(got)));
    all_reached = read.ok() && got == theirs->probe_value &&
                  WritePeer(peer, absl::MakeConstSpan(reinterpret_cast<const std::byte*>(&got), sizeof(got)),
                            reinterpret_cast<std::byte*>(theirs->probe_echoes_address) +
                                static_cast<size_t>(me) * sizeof(uint64_t))
                      .ok();
  }
  // Every peer's echo has landed (or failed) once all have passed this.
  BRAID_RETURN_IF_ERROR(bootstrap.AllGather("probed", deadline).status());
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me && probe_echoes_[static_cast<size_t>(peer)] != probe_) all_reached = false;
  }
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> verdicts, bootstrap.AllGather(all_reached ? "1" : "0", deadline));
  can_access_peers_ = std::all_of(verdicts.begin(), verdicts.end(), [](const std::string& v) { return v == "1"; });
  return absl::OkStatus();
}

void ShmWindows::KeepPeerMaps(uint64_t sync) {
  for (int peer = 0; peer < transport_.size(); ++peer) {
    std::array<shm_internal::MappedBuffer, 2>& theirs = peer_maps_[static_cast<size_t>(peer)];
    theirs[0] = transport_.SegmentOf(peer)->published_maps[sync % 2][0];
    theirs[1] = transport_.SegmentOf(peer)->published_maps[sync % 2][1];
  }
}

absl::Status ShmWindows::Sync(const FrameHeader& header, Deadline deadline, PeerBuffers published,
                              absl::Span<const std::byte> payload) {
  const int me = transport_.rank();
  const int n = transport_.size();
  if (transport_.closed()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", me, ": shm: ", DescribeFrame(header), ": the transport was aborted"));
  }
  Segment* mine = transport_.SegmentOf(me);
  if (payload.size() > kSyncPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", me, ": shm: ", DescribeFrame(header),
                                                   ": a Sync carries at most ", kSyncPayloadBytes, " bytes, not ",
                                                   payload.size()));
  }
  const uint64_t sync = ++synced_;
  shm_internal::SyncSlot& slot = mine->sync_slots[sync % 2];
  slot.header = header;
  if (!payload.empty()) std::memcpy(slot.payload, payload.data(), payload.size());
  mine->published_input[sync % 2] = reinterpret_cast<uint64_t>(published.input);
  mine->published_output[sync % 2] = reinterpret_cast<uint64_t>(published.output);
  const bool publishing = published.input != nullptr || published.output != nullptr;
  if (publishing) {
    mine->published_maps[sync % 2][0] = Mappable(published.input);
    mine->published_maps[sync % 2][1] = Mappable(published.output);
  }
  slot.entered.store(sync, std::memory_order_release);
  absl::InlinedVector<int, 16> waiting;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) waiting.push_back(peer);
  }
  // A peer's slot for this Sync stays as it is until every rank,
  // this one included, has entered the next Sync.
  auto arrived = [&](int peer) {
    return transport_.SegmentOf(peer)->sync_slots[sync % 2].entered.load(std::memory_order_acquire) >= sync;
  };
  auto spin = transport_.NewSpinWait();
  while (true) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (!arrived(*it)) {
        ++it;
        continue;
      }
      BRAID_RETURN_IF_ERROR(CheckFrame(header, transport_.SegmentOf(*it)->sync_slots[sync % 2].header, me, *it));
      it = waiting.erase(it);
      spin.Progressed();
    }
    if (waiting.empty()) {
      // Only the last rank to arrive ends the peers' waits, and it finds
      // them all arrived at its first look: the doorbells are rung now, not
      // on arrival, so that the first ranks to arrive skip the fence's wait
      // for their store (the peers poll its line).
      FullFence();
      for (int peer = 0; peer < n; ++peer) {
        if (peer != me) shm_internal::WakeIfSleeping(transport_.SegmentOf(peer));
      }
      if (publishing) KeepPeerMaps(sync);  // every rank publishes at the same Syncs
      return absl::OkStatus();
    }
    if (spin.Idle()) continue;
    if (absl::Now() >= deadline) {
      // Withdraw this rank's arrival, so a peer that comes later waits for it
      // (and finds the abort notice that follows) instead of completing the
      // collective this rank failed. A peer arriving within the same
      // instant may still have seen it: only a further round could settle that.
      slot.entered.store(sync - 1, std::memory_order_release);
      return absl::DeadlineExceededError(absl::StrCat("rank ", me, ": shm: deadline exceeded in ",
                                                      DescribeFrame(header), " waiting for ",
                                                      transport_.PeerName(waiting[0]),
                                                      waiting.size() > 1 ? " and others" : ""));
    }
    for (int peer : waiting) BRAID_RETURN_IF_ERROR(CheckSyncPeer(peer, header, sync));
    shm_internal::Doze(mine, deadline, [&] { return arrived(waiting[0]); });
  }
}

}  // namespace braid
