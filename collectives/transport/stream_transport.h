// StreamTransport: the Transport semantics over one reliable byte stream per
// peer and direction (a TCP connection, a shared-memory ring). It owns the
// per-peer FIFO queues, the framing (header, then payload), the header check,
// abort frames and Wait's progress loop: spin briefly (small messages), then
// block in the subclass's WaitReady. Subclasses only move bytes.
#ifndef BRAID_COLLECTIVES_TRANSPORT_STREAM_TRANSPORT_H_
#define BRAID_COLLECTIVES_TRANSPORT_STREAM_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "collectives/transport/op_table.h"
#include "collectives/transport/transport.h"

namespace braid {

// BRAID_SPIN_US, for shm and tcp: how long a wait polls before it sleeps;
// nullopt when unset or empty (each transport's own default).
absl::StatusOr<absl::optional<absl::Duration>> SpinFromEnv();

class StreamTransport : public Transport {
 public:
  absl::StatusOr<OpId> PostSend(int peer, FrameHeader header, absl::Span<const std::byte> payload) override;
  absl::StatusOr<OpId> PostRecv(int peer, FrameHeader expected, absl::Span<std::byte> payload) override;
  absl::StatusOr<std::optional<FrameHeader>> PeekFrame(int peer) override;
  absl::Status Wait(absl::Span<const OpId> ops, Deadline deadline) override;
  void Abort(const absl::Status& cause) override;

 protected:
  // What WaitReady should wait for on one peer.
  struct Interest {
    int peer;
    bool write;                   // a send is pending
    bool read;                    // a receive is pending
    const FrameHeader* expected;  // the frame that receive expects (when read)
  };

  // A wait loop's idle policy (Wait's, and subclasses' own waits): Idle()
  // pauses or yields and returns true while polling should go on, false once
  // the spin time has passed without Progressed() (time to block, and to
  // look at the deadline: spinning never outlasts it by more than the spin).
  class SpinWait {
   public:
    SpinWait(absl::Duration spin, bool yield);
    void Progressed();
    bool Idle();

   private:
    absl::Duration spin_;
    bool yield_;
    absl::Time until_;
    bool timed_ = false;  // until_ is set
    int idle_polls_ = 0;
  };
  SpinWait NewSpinWait() const { return SpinWait(spin_, yield_while_spinning_); }

  // spin: how long Wait polls without blocking before it calls WaitReady.
  // ranks_on_host: how many ranks share this host's cores (0: unknown). When
  // they may outnumber the cores, each poll yields the core (the peer we wait
  // for may need it); otherwise polls only pause the pipeline, no syscall.
  StreamTransport(int rank, int size, absl::Duration spin, int ranks_on_host);

  // Non-blocking: moves some of `first` then `second` into the stream to
  // `peer`; returns the bytes taken (0 = would block). An error means the
  // stream is broken (the peer is gone).
  virtual absl::StatusOr<size_t> WriteSome(int peer, absl::Span<const std::byte> first,
                                           absl::Span<const std::byte> second) = 0;
  // Non-blocking: reads up to data.size() bytes from `peer`'s stream; 0 =
  // nothing yet. An error means the stream is broken.
  virtual absl::StatusOr<size_t> ReadSome(int peer, absl::Span<std::byte> data) = 0;
  // Blocks until some interest may be ready, or `until`. Spurious returns are
  // fine. An error names a peer that is gone.
  virtual absl::Status WaitReady(absl::Span<const Interest> interests, Deadline until) = 0;
  // Non-blocking: copies up to data.size() bytes of `peer`'s stream without
  // consuming them; 0 = nothing yet; an error when the stream has ended.
  virtual absl::StatusOr<size_t> PeekSome(int peer, absl::Span<std::byte> data) = 0;
  // Ends every stream after Abort (the abort frames already sent stay
  // readable); `reason` is the abort's cause, for transports that can also
  // publish it out of band.
  virtual void CloseStreams(const absl::Status& reason) = 0;
  // "peer 3 (pid 1234)": how errors name a peer.
  virtual std::string PeerName(int peer) const;

  // Must be called by the subclass destructor's owner before streams go away:
  // fails whatever is still pending.
  void FailAllPending(const absl::Status& status);

 private:
  struct Op : OpRecord {
    size_t done = 0;      // bytes moved (a send counts its header too)
    bool waited = false;  // a receive found its stream empty at some point
  };
  struct Peer {
    std::deque<OpId> sends;        // in posting order; front is on the wire
    std::deque<OpId> recvs;
    FrameHeader incoming;          // header being read
    size_t incoming_header_bytes = 0;
    bool header_checked = false;   // incoming header matched the front receive
    absl::Status failure;          // set once the stream to this peer broke
    bool send_cut = false;         // a frame to this peer was failed mid-way: nothing can follow it
    absl::Time last_received;      // when a receive from this peer last completed (CoarseNow)
  };

  // The part of a send's frame (header, payload) not yet on the wire.
  static std::pair<absl::Span<const std::byte>, absl::Span<const std::byte>> Unsent(const Op& op);
  absl::Status CheckPeer(int peer) const;
  absl::StatusOr<OpId> Post(bool is_send, int peer, FrameHeader header, std::byte* data, size_t bytes);
  // Moves bytes for one peer until it would block; returns whether anything moved.
  bool Progress(int peer);
  bool ProgressSends(int peer, Peer& state);
  bool ProgressRecvs(int peer, Peer& state);
  // Reads an abort frame's text after its header arrived; fails the peer.
  void HandleAbortFrame(int peer, Peer& state);
  // With sends but no receives pending for `peer`, nothing reads its stream:
  // look there for an abort notice (or its end). Returns whether it failed the peer.
  bool CheckForAbortNotice(int peer, Peer& state);
  // `peer`'s stream broke under a send: skip the frames it sent for
  // receives this rank has not posted (they can never complete now) to
  // find the abort notice behind them. Returns whether it found one.
  bool AbortNoticeBehindFrames(int peer, Peer& state);
  // After a receive that never waited: whether an abort notice is next in
  // `peer`'s stream (read and handled: the peer is failed with it).
  bool AbortNoticeFollows(int peer, Peer& state);
  // Reads and handles the abort notice `peeked` (the first `peeked_bytes` of
  // `peer`'s stream) when it is one; returns whether it was.
  bool TakeAbortNotice(int peer, Peer& state, const FrameHeader& peeked, size_t peeked_bytes);
  void FailPeer(int peer, const absl::Status& status);
  // A receive from `peer` hit a broken stream: fail the peer, naming the frame.
  void FailReceive(int peer, const Op& op, const absl::Status& status);
  void Complete(OpId id, absl::Status status);
  std::string DescribePending(absl::Span<const OpId> ops) const;

  absl::Duration spin_;
  bool yield_while_spinning_;
  OpTable<Op> ops_;
  std::vector<Peer> peers_;
  absl::Status aborted_;  // non-OK once Abort ran
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_STREAM_TRANSPORT_H_
