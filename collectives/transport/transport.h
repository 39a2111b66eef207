// Transport: ordered point-to-point messages between the ranks of a group.
//
// A rank posts sends and receives, then waits for them:
//
//   BRAID_ASSIGN_OR_RETURN(OpId r, transport.PostRecv(left, header, incoming));
//   BRAID_ASSIGN_OR_RETURN(OpId s, transport.PostSend(right, header, outgoing));
//   BRAID_RETURN_IF_ERROR(transport.Wait({r, s}, deadline));
//
// Semantics every implementation keeps:
//  - Messages between two ranks arrive in the order they were posted, per
//    direction; receives from one peer match incoming frames in the order they
//    were posted. There is no wildcard matching: collectives are issued in the
//    same order everywhere, so order is the match.
//  - Every message is a frame: a FrameHeader (seq, kind, count, dtype, op,
//    root, step tag, byte count) and the payload. A receive names the header
//    it expects; a different one fails that receive (and the Wait) with both
//    sides' descriptions (kInvalidArgument), never mixing data.
//  - Posting never blocks; Wait drives progress for every pending operation
//    (so two ranks that both send first cannot deadlock on full buffers) and
//    returns at `deadline` with kDeadlineExceeded naming what is still pending.
//  - A peer that dies, or closes, fails the operations with it (kUnavailable
//    naming the peer) within seconds. A peer that aborts sends its reason, and
//    the operations with it fail kAborted quoting it.
//  - Payload memory belongs to the caller and must stay valid and unchanged
//    (sends) or untouched (receives) until the operation completes or the
//    transport is aborted/destroyed.
//
// Threads: a Transport is used by one thread at a time (the communicator's
// progress thread); it is not thread-safe.
#ifndef BRAID_COLLECTIVES_TRANSPORT_TRANSPORT_H_
#define BRAID_COLLECTIVES_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/deadline.h"
#include "collectives/transport/frame.h"

namespace braid {

class DeviceLink;
class NativeCollectives;

using OpId = uint64_t;

// What a rank lets its peers reach between two Syncs (SharedWindows): its
// collective's input, read with ReadPeer, and its output, written with
// WritePeer.
struct PeerBuffers {
  const std::byte* input = nullptr;
  std::byte* output = nullptr;
};

// Memory that every rank of a same-host group maps, and a barrier over it:
// how shared-memory collectives skip the per-message copies of a stream. Each
// rank owns a window split in two halves; any rank may read any window. A
// collective writes its own half, Syncs, then reads the peers'. Round r uses
// half r % 2, and consecutive rounds are separated by a Sync, so a rank
// refills a half only after every peer has finished reading it.
class SharedWindows {
 public:
  virtual ~SharedWindows() = default;

  size_t half_bytes() const { return half_bytes_; }
  // Starts the next round: its half of every rank's window, by rank.
  const std::vector<std::byte*>& NextRound() { return halves_[rounds_++ % 2]; }

  // A barrier: returns once every rank has called Sync as often as this one,
  // each with a `header` equal to this rank's (kInvalidArgument naming both
  // sides otherwise, as a stream's frame check). A peer that died or aborted,
  // one that sent this rank a collective's frame instead, or `deadline`,
  // fails it naming the peer. `published` is memory of this rank's own that
  // peers may read and write with ReadPeer and WritePeer until their next
  // Sync. `payload` (up to kSyncPayloadBytes) travels with the arrival
  // itself: every rank reads it with SyncPayload until its next Sync.
  static constexpr size_t kSyncPayloadBytes = 16;
  virtual absl::Status Sync(const FrameHeader& header, Deadline deadline, PeerBuffers published = {},
                            absl::Span<const std::byte> payload = {}) = 0;
  // The payload `rank` (this one too) sent with the last Sync this rank
  // completed.
  virtual const std::byte* SyncPayload(int rank) const = 0;

  // Whether ReadPeer and WritePeer work between every pair of ranks (one
  // kernel copy to or from a peer's private memory: Linux cross-memory
  // attach, probed at set-up).
  virtual bool CanAccessPeers() const { return false; }
  // What `peer` published with the last Sync this rank completed.
  virtual PeerBuffers Published(int peer) const = 0;
  // Where [at, at + bytes) of what `peer` published is mapped in this
  // process, to be read or written in place; null where it is not (the
  // peer's buffer is not mappable memory, or mapping it failed).
  virtual std::byte* MappedPeer(int peer, const std::byte* at, size_t bytes) { return nullptr; }
  // Copies `into.size()` bytes at `from` in `peer`'s memory into `into`.
  virtual absl::Status ReadPeer(int peer, const std::byte* from, absl::Span<std::byte> into) = 0;
  // Copies `from` to `to` in `peer`'s memory; with non-temporal stores if
  // `stream` and the copy is a plain one.
  virtual absl::Status WritePeer(int peer, absl::Span<const std::byte> from, std::byte* to, bool stream = false) = 0;

 protected:
  size_t half_bytes_ = 0;
  std::vector<std::byte*> halves_[2];  // [half][rank]
  uint64_t rounds_ = 0;                // rounds started; every rank counts alike
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // "tcp", "shm", ...
  virtual const char* name() const = 0;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Queues `payload` for `peer`, framed by `header` (its byte count is set
  // from the payload). kFailedPrecondition after Abort; kUnavailable if the
  // peer is already known dead; kInvalidArgument for a bad peer.
  virtual absl::StatusOr<OpId> PostSend(int peer, FrameHeader header, absl::Span<const std::byte> payload) = 0;
  // Queues a receive of the next frame from `peer`, which must match
  // `expected` (its byte count set from `payload`).
  virtual absl::StatusOr<OpId> PostRecv(int peer, FrameHeader expected, absl::Span<std::byte> payload) = 0;
  // Non-blocking: the header of the next frame `peer` has sent this rank, when
  // it has arrived and no receive from `peer` is pending; nullopt otherwise.
  // Nothing is consumed. What a receive from any source polls (an abort
  // notice from the peer fails it here). kUnimplemented where the engine
  // cannot look at a message before it is received.
  virtual absl::StatusOr<std::optional<FrameHeader>> PeekFrame(int peer) {
    (void)peer;
    return absl::UnimplementedError(absl::StrCat(name(), " cannot receive from any source"));
  }
  // Drives progress until every op in `ops` has completed, one failed (its
  // error is returned at once), or `deadline` passed. Each op id may be waited
  // for once; after an error the other ops in `ops` may still be pending.
  virtual absl::Status Wait(absl::Span<const OpId> ops, Deadline deadline) = 0;
  absl::Status Wait(std::initializer_list<OpId> ops, Deadline deadline) {
    return Wait(absl::MakeConstSpan(ops.begin(), ops.size()), deadline);
  }
  // Fails every pending and future operation with `cause`, tells the peers
  // (best effort, they fail kAborted quoting it) and releases the
  // connections. Idempotent: the first cause wins. Never blocks for long.
  virtual void Abort(const absl::Status& cause) = 0;
  // What the transport can do beyond point-to-point messages; the selector
  // (collectives/selection.h) decides from these what runs.
  // The group's shared windows, or nullptr where ranks share no memory.
  virtual SharedWindows* shared_windows() { return nullptr; }
  // The engine's own collectives (MPI's, NCCL's), or nullptr.
  virtual NativeCollectives* native_collectives() { return nullptr; }
  // True when payloads are device memory: the communicator then runs every
  // collective through device_link(), queued on streams.
  virtual bool device_memory_only() const { return false; }
  // Point to point on streams (device_link.h), for a transport of device
  // memory; nullptr otherwise.
  virtual DeviceLink* device_link() { return nullptr; }
  // The engine's own split (MPI_Comm_split, ncclCommSplit): collective over
  // every rank of this group, each with its color (negative: in no
  // subgroup, which gets nullptr) and key (the order within its subgroup,
  // ties by rank). kUnimplemented where the engine has none: the
  // communicator then builds the subgroup's transport over a SubsetBootstrap.
  virtual absl::StatusOr<std::unique_ptr<Transport>> Split(int color, int key, Deadline deadline) {
    (void)color, (void)key, (void)deadline;
    return absl::UnimplementedError(absl::StrCat(name(), " has no split of its own"));
  }

 protected:
  Transport(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_TRANSPORT_H_
