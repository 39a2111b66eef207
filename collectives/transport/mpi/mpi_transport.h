// MpiTransport: the Transport semantics over Open MPI point-to-point, so every
// braid algorithm runs over MPI unchanged, plus MPI's own collectives as
// Algorithm::kNative.
//
// Frames: each PostSend is one MPI_Isend of the 40-byte FrameHeader, with the
// payload in the same message when it is small (at most
// MpiTransportOptions::inline_bytes, copied through a staging buffer: one
// eager message), else followed by the payload as its own message(s) straight
// from the caller's memory. A receive first takes the header message (sized
// for the largest inline frame, so any frame's header can be read and
// compared); only when it matches the expected header is the payload
// received, straight into the caller's memory. A mismatch fails the receive
// with both sides' descriptions (CheckFrame): never mixed data. Headers,
// payloads and abort notices travel on three tags of the transport's own
// duplicate of MPI_COMM_WORLD; MPI keeps messages between two ranks on one
// tag in order, which is the Transport's ordering.
//
// Failures and time: the communicator has MPI_ERRORS_RETURN; Wait polls with
// MPI_Testsome (which drives Open MPI's progress), yielding and then sleeping
// when nothing moves (see mpi_runtime.h), and returns kDeadlineExceeded at
// the deadline naming each pending op's peer and frame. Abort sends every
// peer a notice (their pending and later operations with this rank fail
// kAborted quoting it), cancels the pending receives (waiting at most 100 ms
// for each cancellation) and frees the sends. What Open MPI 4.1 cannot do:
// notice a dead peer by itself (mpirun kills the whole job when a rank dies,
// which is the practical failure signal), or cancel a send or a collective.
//
// Native collectives (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Iallgather, MPI_Ibcast, MPI_Ireduce, MPI_Ibarrier, MPI_Ialltoall: the
// nonblocking forms, so that the deadline holds; at 2 ranks they time the
// same as the blocking calls here). dtype/op mapping: f32, f64, i32 and i64
// use MPI's built-in ops; f16 and bf16 (no MPI type) and i8/u8 (Open MPI
// 4.1's AVX op saturates 8-bit sums instead of wrapping) use user-defined
// MPI ops that run braid's own kernels; avg is MPI_SUM then a local division.
// Before each native collective the communicator checks, through
// NativeGatherHeaders (one small MPI_Iallgather), that every rank issued the
// same one (collectives/agreement.h; BRAID_DEBUG=off skips it). A native collective that passes
// its deadline cannot be cancelled: MPI may still write its output if the
// missing ranks join later, which is why the communicator aborts.
//
// Threads: one at a time (the communicator's progress thread or its inline
// caller), as every Transport.
#ifndef BRAID_COLLECTIVES_TRANSPORT_MPI_MPI_TRANSPORT_H_
#define BRAID_COLLECTIVES_TRANSPORT_MPI_MPI_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/mpi/mpi_runtime.h"
#include "collectives/transport/native_collectives.h"
#include "collectives/transport/op_table.h"
#include "collectives/transport/transport.h"

namespace braid {

struct MpiTransportOptions {
  // Payloads up to this size travel inside the header's message (4 KiB in
  // all: Open MPI's shared-memory eager limit, so one copy-in, one copy-out).
  size_t inline_bytes = 4096 - kFrameHeaderBytes;
};

class MpiTransport final : public Transport, public NativeCollectives {
 public:
  // Starts MPI if needed (EnsureMpiInitialized: kFailedPrecondition outside
  // mpirun) and duplicates MPI_COMM_WORLD, whose ranks must be the
  // bootstrap's (kInvalidArgument otherwise: the launcher's RANK disagrees
  // with mpirun's). Collective over every rank; blocks until `deadline`.
  static absl::StatusOr<std::unique_ptr<MpiTransport>> Create(Bootstrap& bootstrap, Deadline deadline,
                                                              MpiTransportOptions options = {});
  // Cancels what is pending and frees the communicator.
  ~MpiTransport() override;

  const char* name() const override { return "mpi"; }
  absl::StatusOr<OpId> PostSend(int peer, FrameHeader header, absl::Span<const std::byte> payload) override;
  absl::StatusOr<OpId> PostRecv(int peer, FrameHeader expected, absl::Span<std::byte> payload) override;
  // MPI_Improbe and MPI_Mrecv of the peer's next frame message, held for the receive that follows.
  absl::StatusOr<std::optional<FrameHeader>> PeekFrame(int peer) override;
  absl::Status Wait(absl::Span<const OpId> ops, Deadline deadline) override;
  void Abort(const absl::Status& cause) override;
  NativeCollectives* native_collectives() override { return this; }
  // MPI_Comm_split of this transport's communicator. It is blocking (MPI 3
  // has no nonblocking split): the communicator calls it only after every
  // rank's color arrived in a deadline-bounded all-gather, so every rank is
  // known to be in it.
  absl::StatusOr<std::unique_ptr<Transport>> Split(int color, int key, Deadline deadline) override;

  const char* native_name() const override { return "MPI"; }
  absl::Status NativeGatherHeaders(const CollectiveArgs& args, const FrameHeader& mine,
                                   absl::Span<FrameHeader> all) override;
  absl::Status NativeAllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output) override;
  absl::Status NativeReduceScatter(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                   absl::Span<std::byte> output) override;
  absl::Status NativeAllGather(const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output) override;
  absl::Status NativeBroadcast(const CollectiveArgs& args, absl::Span<std::byte> buffer) override;
  absl::Status NativeReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                            absl::Span<std::byte> output) override;
  absl::Status NativeBarrier(const CollectiveArgs& args) override;
  absl::Status NativeAllToAll(const CollectiveArgs& args, absl::Span<const std::byte> input,
                              absl::Span<std::byte> output) override;

 private:
  // MPI tags on the transport's own communicator.
  static constexpr int kFrameTag = 1;    // a header, with an inline payload
  static constexpr int kPayloadTag = 2;  // a large payload, after its header
  static constexpr int kAbortTag = 3;    // an abort notice: the sender's error text
  // An abort notice's text is at most this long (one eager message).
  static constexpr size_t kMaxAbortText = 4000;
  // A large payload travels in messages of at most this size (MPI counts are int).
  static constexpr size_t kMaxMessageBytes = size_t{1} << 30;

  struct Op : OpRecord {
    std::vector<std::byte> staging;    // the header message (and an inline payload)
    MPI_Request first = MPI_REQUEST_NULL;
    std::vector<MPI_Request> payload;  // a large payload's messages
    int first_bytes = -1;              // receive: the header message's size once it arrived
    bool header_checked = false;       // receive: header matched, payload posted or copied
  };
  // Where a request polled by Testsome belongs.
  struct Slot {
    OpId id;      // 0: the abort-notice receive
    int payload;  // -1: the op's first message, else its payload message index
  };

  MpiTransport(int rank, int size, MPI_Comm comm, MpiTransportOptions options);
  // A transport over `comm` (owned from here on): its user ops and abort receive.
  static absl::StatusOr<std::unique_ptr<MpiTransport>> Over(MPI_Comm comm, MpiTransportOptions options,
                                                            const std::string& who);
  absl::Status CheckPeer(int peer) const;
  absl::Status PostAbortReceive();
  // One MPI_Testsome over everything pending, then the state machines.
  // Returns whether anything completed (mpi_progress.cc).
  absl::StatusOr<bool> Progress();
  // Every active request into poll_requests_, with its slot.
  void CollectPending();
  void AdvanceReceives(int peer);
  void Complete(OpId id, absl::Status status);
  void FailPeer(int peer, const absl::Status& status);
  void FailAllPending(const absl::Status& status);
  std::string DescribePending(absl::Span<const OpId> ops) const;
  // Cancels (receives) or frees (sends) the op's active requests, keeping
  // staging memory alive for MPI.
  void ReleaseRequests(Op& op, Deadline until);

  // Native helpers (mpi_native.cc).
  // The user-defined ops for the dtypes and ops MPI lacks or gets wrong.
  absl::Status CreateUserOps();
  absl::StatusOr<MPI_Datatype> NativeType(const CollectiveArgs& args) const;
  absl::StatusOr<MPI_Op> NativeOp(const CollectiveArgs& args) const;
  // kFailedPrecondition once aborted.
  absl::Status CheckUsable() const;
  absl::Status WaitNative(MPI_Request* request, int rc, const CollectiveArgs& args, const char* call);
  absl::Status FinishAvg(const CollectiveArgs& args, absl::Span<std::byte> result) const;
  std::string NativeWhat(const CollectiveArgs& args) const;

  MPI_Comm comm_;
  const MpiTransportOptions options_;
  // Stable: MPI writes each request's completion into the record.
  OpTable<Op, /*kStableAddresses=*/true> ops_;
  std::vector<std::deque<OpId>> sends_;  // per peer, posting order
  std::vector<std::deque<OpId>> recvs_;
  std::vector<absl::Status> peer_failure_;
  // Per peer: a frame message PeekFrame received, for the next PostRecv.
  std::vector<std::vector<std::byte>> held_;
  absl::Status aborted_;  // non-OK once Abort ran
  MPI_Request abort_recv_ = MPI_REQUEST_NULL;
  std::shared_ptr<std::vector<char>> abort_buffer_;
  // User-defined ops for dtypes MPI cannot reduce correctly, [dtype][op].
  std::vector<std::vector<MPI_Op>> user_ops_;
  // Scratch for Testsome.
  std::vector<MPI_Request> poll_requests_;
  std::vector<Slot> poll_slots_;
  std::vector<int> poll_indices_;
  std::vector<MPI_Status> poll_statuses_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_MPI_MPI_TRANSPORT_H_
