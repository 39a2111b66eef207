#include "collectives/transport/stream_transport.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/bytes.h"
#include "base/cpu.h"
#include "base/deadline.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"

namespace braid {
namespace {

BRAID_ENV_KNOB(kSpinKnob, "BRAID_SPIN_US", "",
               "How long a wait polls before it sleeps, in microseconds (default: shm 200, tcp 100). Polls pause "
               "briefly, then yield the core (at once when ranks outnumber cores). Longer: lower latency when "
               "cores are free; shorter: less CPU taken from busy ranks.");

// Polls Wait makes without a syscall before it starts yielding (about 10 us).
constexpr int kPausePolls = 256;

// An abort frame's text is short; longer is a corrupt stream.
constexpr size_t kMaxAbortText = 4096;

// A rank that comes back to a peer after this long may be past the peer's
// deadline (timeouts are seconds): its first receive looks for an abort notice
// behind the frame. Collectives back to back never pay for the look.
constexpr absl::Duration kPauseBeforeAbortCheck = absl::Milliseconds(100);

absl::Span<const std::byte> HeaderBytes(const FrameHeader& header) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(&header), sizeof(header));
}

}  // namespace

StreamTransport::StreamTransport(int rank, int size, absl::Duration spin, int ranks_on_host)
    : Transport(rank, size),
      spin_(spin),
      yield_while_spinning_(ranks_on_host <= 0 || ranks_on_host > UsableCpus()),
      peers_(static_cast<size_t>(size)) {}

StreamTransport::SpinWait::SpinWait(absl::Duration spin, bool yield) : spin_(spin), yield_(yield) {}

void StreamTransport::SpinWait::Progressed() {
  idle_polls_ = 0;
  timed_ = false;
}

bool StreamTransport::SpinWait::Idle() {
  ++idle_polls_;
  // The clock costs more than a poll: read it every 16th (the spin starts there).
  if (idle_polls_ % 16 == 0) {
    const absl::Time now = absl::Now();
    if (!timed_) {
      until_ = now + spin_;
      timed_ = true;
    } else if (now >= until_) {
      return false;
    }
  }
  // A peer on another core answers within a few polls; past those, or when
  // ranks may outnumber cores, give the core away: the peer we wait for may
  // need it (another job's build, say).
  if (!yield_ && idle_polls_ < kPausePolls) {
    CpuRelax();
  } else {
    sched_yield();
  }
  return true;
}

std::string StreamTransport::PeerName(int peer) const { return absl::StrCat("peer ", peer); }

absl::Status StreamTransport::CheckPeer(int peer) const {
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank(), ": ", name(),
                                                      " transport was aborted: ", aborted_.message()));
  }
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), ": no peer ", peer, " in a group of ", size()));
  }
  const Peer& state = peers_[static_cast<size_t>(peer)];
  if (!state.failure.ok()) return state.failure;
  return absl::OkStatus();
}

absl::StatusOr<OpId> StreamTransport::PostSend(int peer, FrameHeader header, absl::Span<const std::byte> payload) {
  return Post(/*is_send=*/true, peer, header, const_cast<std::byte*>(payload.data()), payload.size());
}

absl::StatusOr<OpId> StreamTransport::PostRecv(int peer, FrameHeader expected, absl::Span<std::byte> payload) {
  return Post(/*is_send=*/false, peer, expected, payload.data(), payload.size());
}

absl::StatusOr<std::optional<FrameHeader>> StreamTransport::PeekFrame(int peer) {
  BRAID_RETURN_IF_ERROR(CheckPeer(peer));
  Peer& state = peers_[static_cast<size_t>(peer)];
  if (!state.recvs.empty() || state.incoming_header_bytes != 0) return std::nullopt;  // a receive owns the stream
  FrameHeader header;
  absl::StatusOr<size_t> n = PeekSome(peer, AsWritableBytes(header));
  if (!n.ok()) {
    FailPeer(peer, Annotate(n.status(), absl::StrCat("rank ", rank(), ": ", name(), ": ", PeerName(peer),
                                                     " ended its stream")));
    return state.failure;  // kUnavailable, unless it left an abort notice
  }
  if (*n < sizeof(header)) return std::nullopt;
  if (TakeAbortNotice(peer, state, header, *n)) return state.failure;
  return header;
}

absl::StatusOr<OpId> StreamTransport::Post(bool is_send, int peer, FrameHeader header, std::byte* data, size_t bytes) {
  BRAID_RETURN_IF_ERROR(CheckPeer(peer));
  header.magic = FrameHeader::kMagic;
  header.bytes = bytes;
  const OpId id = ops_.Add(is_send, peer, header, data, bytes).first;
  Peer& state = peers_[static_cast<size_t>(peer)];
  (is_send ? state.sends : state.recvs).push_back(id);
  return id;
}

void StreamTransport::Complete(OpId id, absl::Status status) {
  Op& op = ops_.at(id);
  op.complete = true;
  op.status = std::move(status);
}

void StreamTransport::FailPeer(int peer, const absl::Status& status) {
  Peer& state = peers_[static_cast<size_t>(peer)];
  if (state.failure.ok()) state.failure = status;
  if (!state.sends.empty() && ops_.at(state.sends.front()).done > 0) state.send_cut = true;
  for (OpId id : state.sends) Complete(id, status);
  for (OpId id : state.recvs) Complete(id, status);
  state.sends.clear();
  state.recvs.clear();
}

void StreamTransport::FailAllPending(const absl::Status& status) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank()) FailPeer(peer, status);
  }
}

std::pair<absl::Span<const std::byte>, absl::Span<const std::byte>> StreamTransport::Unsent(const Op& op) {
  absl::Span<const std::byte> header = HeaderBytes(op.header);
  absl::Span<const std::byte> payload(op.data, op.bytes);
  if (op.done < kFrameHeaderBytes) {
    header.remove_prefix(op.done);
  } else {
    header = {};
    payload.remove_prefix(op.done - kFrameHeaderBytes);
  }
  return {header, payload};
}

bool StreamTransport::ProgressSends(int peer, Peer& state) {
  bool moved = false;
  while (!state.sends.empty()) {
    Op& op = ops_.at(state.sends.front());
    const size_t total = kFrameHeaderBytes + op.bytes;
    const auto [header, payload] = Unsent(op);
    absl::StatusOr<size_t> written = WriteSome(peer, header, payload);
    if (!written.ok()) {
      // A peer that aborted may have said why before its stream broke: take
      // in what it sent first (frames for pending receives, then its notice),
      // so the error names the first cause, not this broken connection.
      if (!state.recvs.empty()) ProgressRecvs(peer, state);
      if (!state.failure.ok()) return true;
      if (state.recvs.empty() && (CheckForAbortNotice(peer, state) || AbortNoticeBehindFrames(peer, state))) {
        return true;
      }
      FailPeer(peer, Annotate(written.status(), absl::StrCat("rank ", rank(), ": ", name(), ": send to ",
                                                             PeerName(peer), " of ", DescribeFrame(op.header))));
      return true;
    }
    if (*written == 0) break;
    moved = true;
    op.done += *written;
    if (op.done == total) {
      const OpId id = state.sends.front();
      state.sends.pop_front();
      Complete(id, absl::OkStatus());
    }
  }
  return moved;
}

void StreamTransport::HandleAbortFrame(int peer, Peer& state) {
  // Best effort: the text follows the header; take what is already there.
  std::string text(std::min<uint64_t>(state.incoming.bytes, kMaxAbortText), '\0');
  size_t got = 0;
  const Deadline until = DeadlineIn(absl::Milliseconds(200));
  while (got < text.size() && !Expired(until)) {
    absl::StatusOr<size_t> n = ReadSome(peer, absl::MakeSpan(reinterpret_cast<std::byte*>(text.data()) + got,
                                                             text.size() - got));
    if (!n.ok()) break;
    got += *n;
  }
  text.resize(got);
  FailPeer(peer, absl::AbortedError(absl::StrCat("rank ", rank(), ": ", PeerName(peer),
                                                 " aborted the communicator: ", text)));
}

void StreamTransport::FailReceive(int peer, const Op& op, const absl::Status& status) {
  FailPeer(peer, Annotate(status, absl::StrCat("rank ", rank(), ": ", name(), ": receive from ", PeerName(peer),
                                               " of ", DescribeFrame(op.header))));
}

bool StreamTransport::ProgressRecvs(int peer, Peer& state) {
  bool moved = false;
  while (!state.recvs.empty()) {
    Op& op = ops_.at(state.recvs.front());
    if (state.incoming_header_bytes < kFrameHeaderBytes) {
      auto* into = reinterpret_cast<std::byte*>(&state.incoming) + state.incoming_header_bytes;
      absl::StatusOr<size_t> n = ReadSome(peer, absl::MakeSpan(into, kFrameHeaderBytes - state.incoming_header_bytes));
      if (!n.ok()) {
        FailReceive(peer, op, n.status());
        return true;
      }
      if (*n == 0) {
        op.waited = true;
        break;
      }
      moved = true;
      state.incoming_header_bytes += *n;
      if (state.incoming_header_bytes < kFrameHeaderBytes) continue;
    }
    if (!state.header_checked) {
      if (state.incoming.magic == FrameHeader::kMagic && (state.incoming.flags & FrameHeader::kFlagAbort)) {
        HandleAbortFrame(peer, state);
        return true;
      }
      absl::Status match = CheckFrame(op.header, state.incoming, rank(), peer);
      if (!match.ok()) {
        // The stream cannot be resynchronized: fail everything with this peer.
        FailPeer(peer, match);
        return true;
      }
      state.header_checked = true;
    }
    if (op.done < op.bytes) {
      absl::StatusOr<size_t> n = ReadSome(peer, absl::MakeSpan(op.data + op.done, op.bytes - op.done));
      if (!n.ok()) {
        FailReceive(peer, op, n.status());
        return true;
      }
      if (*n == 0) {
        op.waited = true;
        break;
      }
      moved = true;
      op.done += *n;
    }
    if (op.done == op.bytes) {
      const OpId id = state.recvs.front();
      const bool was_waiting = op.waited;
      state.recvs.pop_front();
      state.incoming_header_bytes = 0;
      state.header_checked = false;
      const absl::Time now = CoarseNow();
      const bool after_a_pause = now - state.last_received > kPauseBeforeAbortCheck;
      state.last_received = now;
      // The whole frame was already here after this rank had been away: it
      // may be late, and the peer may have given up on the collective after
      // sending it (its deadline). Its abort notice then follows the frame,
      // and this receive fails with it instead of completing a collective
      // the peer failed. (Not after every receive: a peek is a system call.)
      if (!was_waiting && after_a_pause && state.recvs.empty() && AbortNoticeFollows(peer, state)) {
        Complete(id, state.failure);
        return true;
      }
      Complete(id, absl::OkStatus());
    }
  }
  return moved;
}

bool StreamTransport::AbortNoticeFollows(int peer, Peer& state) {
  FrameHeader header;
  absl::StatusOr<size_t> n = PeekSome(peer, AsWritableBytes(header));
  // A stream that ended (the peer finished and left) is no notice: the frame stands.
  return n.ok() && TakeAbortNotice(peer, state, header, *n);
}

bool StreamTransport::CheckForAbortNotice(int peer, Peer& state) {
  if (state.incoming_header_bytes != 0) return false;  // mid-frame: not an abort
  FrameHeader header;
  absl::StatusOr<size_t> n = PeekSome(peer, AsWritableBytes(header));
  if (!n.ok()) {
    FailPeer(peer, Annotate(n.status(), absl::StrCat("rank ", rank(), ": ", name(), ": ", PeerName(peer),
                                                     " ended its stream while this rank was sending to it")));
    return true;
  }
  return TakeAbortNotice(peer, state, header, *n);
}

bool StreamTransport::AbortNoticeBehindFrames(int peer, Peer& state) {
  constexpr size_t kMostSkipped = size_t{1} << 20;
  std::byte sink[4096];
  for (size_t skipped = 0; skipped < kMostSkipped && state.incoming_header_bytes == 0;) {
    FrameHeader header;
    absl::StatusOr<size_t> n = PeekSome(peer, AsWritableBytes(header));
    if (!n.ok() || *n < sizeof(header) || header.magic != FrameHeader::kMagic) return false;
    if (TakeAbortNotice(peer, state, header, *n)) return true;
    for (uint64_t left = kFrameHeaderBytes + header.bytes; left > 0;) {
      n = ReadSome(peer, absl::MakeSpan(sink, std::min<uint64_t>(left, sizeof(sink))));
      if (!n.ok() || *n == 0) return false;
      left -= *n;
      skipped += *n;
    }
  }
  return false;
}

bool StreamTransport::TakeAbortNotice(int peer, Peer& state, const FrameHeader& peeked, size_t peeked_bytes) {
  if (peeked_bytes < sizeof(peeked) || peeked.magic != FrameHeader::kMagic || !(peeked.flags & FrameHeader::kFlagAbort)) {
    return false;  // nothing, or a frame for a later receive
  }
  absl::StatusOr<size_t> taken = ReadSome(peer, AsWritableBytes(state.incoming));
  if (!taken.ok() || *taken != sizeof(peeked)) return false;
  HandleAbortFrame(peer, state);
  return true;
}

bool StreamTransport::Progress(int peer) {
  Peer& state = peers_[static_cast<size_t>(peer)];
  if (!state.failure.ok()) return false;
  const bool sent = ProgressSends(peer, state);
  const bool received = ProgressRecvs(peer, state);
  if (!sent && !received && state.recvs.empty() && !state.sends.empty()) return CheckForAbortNotice(peer, state);
  return sent || received;
}

std::string StreamTransport::DescribePending(absl::Span<const OpId> ops) const {
  return ops_.DescribePending(
      ops, [this](int peer) { return PeerName(peer); },
      [](const Op& op) {
        return absl::StrCat(" (", op.done, " of ", op.bytes + (op.is_send ? kFrameHeaderBytes : 0), " bytes moved)");
      });
}

absl::Status StreamTransport::Wait(absl::Span<const OpId> ops, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(ops_.CheckWaitable(ops, rank()));
  SpinWait spin = NewSpinWait();
  std::vector<Interest> interests;
  while (true) {
    bool moved = false;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      const Peer& state = peers_[static_cast<size_t>(peer)];
      if (state.sends.empty() && state.recvs.empty()) continue;
      moved |= Progress(peer);
    }
    // Done, or failed?
    if (std::optional<absl::Status> outcome = ops_.Collect(ops)) return *outcome;
    if (moved) {
      spin.Progressed();
      continue;
    }
    if (spin.Idle()) continue;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", rank(), ": ", name(),
                                                      ": deadline exceeded waiting for ", DescribePending(ops)));
    }
    interests.clear();
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      const Peer& state = peers_[static_cast<size_t>(peer)];
      if (!state.failure.ok() || (state.sends.empty() && state.recvs.empty())) continue;
      const FrameHeader* expected = state.recvs.empty() ? nullptr : &ops_.at(state.recvs.front()).header;
      interests.push_back({peer, !state.sends.empty(), !state.recvs.empty(), expected});
    }
    absl::Status ready = WaitReady(interests, deadline);
    if (!ready.ok()) return ready;
  }
}

void StreamTransport::Abort(const absl::Status& cause) {
  if (!aborted_.ok()) return;
  aborted_ = cause.ok() ? absl::CancelledError("aborted") : cause;
  // Tell each peer why, at a frame boundary: a frame half on the wire is
  // finished first (its payload is still the caller's, valid until this
  // returns), so the peer reads whole frames, then the notice. Best effort,
  // bounded in time; a peer that misses it sees the stream end instead.
  const std::string text(aborted_.message().substr(0, kMaxAbortText));
  FrameHeader header;
  header.flags = FrameHeader::kFlagAbort;
  header.bytes = text.size();
  std::string notice(reinterpret_cast<const char*>(&header), sizeof(header));
  notice += text;
  const Deadline until = DeadlineIn(absl::Milliseconds(100));
  // Writes `first` then `second` whole unless the stream breaks or time runs out.
  auto write_all = [&](int peer, absl::Span<const std::byte> first, absl::Span<const std::byte> second) {
    while (!(first.empty() && second.empty()) && !Expired(until)) {
      absl::StatusOr<size_t> n = WriteSome(peer, first, second);
      if (!n.ok()) return false;
      if (*n == 0) sched_yield();
      const size_t from_first = std::min(*n, first.size());
      first.remove_prefix(from_first);
      second.remove_prefix(*n - from_first);
    }
    return first.empty() && second.empty();
  };
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    Peer& state = peers_[static_cast<size_t>(peer)];
    // A peer that sent a mismatched or malformed frame still reads: it is the
    // one that most needs to hear why. A broken stream, or one cut mid-frame,
    // cannot carry the notice.
    const bool stream_intact = state.failure.ok() || state.failure.code() == absl::StatusCode::kInvalidArgument ||
                               state.failure.code() == absl::StatusCode::kDataLoss;
    if (!stream_intact || state.send_cut) continue;
    if (!state.sends.empty() && ops_.at(state.sends.front()).done > 0) {
      const auto [rest_of_header, rest_of_payload] = Unsent(ops_.at(state.sends.front()));
      if (!write_all(peer, rest_of_header, rest_of_payload)) continue;
    }
    write_all(peer, absl::MakeConstSpan(reinterpret_cast<const std::byte*>(notice.data()), notice.size()), {});
  }
  FailAllPending(absl::AbortedError(absl::StrCat("rank ", rank(), ": ", name(), " transport aborted: ",
                                                 aborted_.message())));
  CloseStreams(aborted_);
}

absl::StatusOr<absl::optional<absl::Duration>> SpinFromEnv() {
  if (!kSpinKnob.IsSet() || kSpinKnob.String().empty()) return absl::nullopt;
  BRAID_ASSIGN_OR_RETURN(int64_t micros, kSpinKnob.Int());
  return absl::Microseconds(std::max<int64_t>(0, micros));
}

}  // namespace braid
