#include "tests/harness/run_ranks.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/bytes.h"
#include "base/logging.h"
#include "base/status.h"

namespace braid::testing {
namespace {

// The wire between a rank and the hub: a 16-byte header, then `length` bytes.
//   rank -> hub: kAllGather / kBarrier (aux = the rank's exchange number,
//                payload = its contribution), then one kResult (aux = status
//                code, payload = status message) when `fn` has returned.
//   hub -> rank: one kGathered (payload = n x (u64 length, bytes)) or one
//                kError (aux = status code, payload = message) per exchange.
// Both ends are on this machine, so fields are in host byte order.
enum FrameType : uint32_t {
  kAllGatherFrame = 1,
  kBarrierFrame = 2,
  kResultFrame = 3,
  kGatheredFrame = 4,
  kErrorFrame = 5,
};

struct FrameHeader {
  uint32_t type = 0;
  uint32_t aux = 0;
  uint64_t length = 0;
};
static_assert(sizeof(FrameHeader) == 16);

// Sanity bound on one frame: test exchanges are small; a larger length means
// a corrupted stream, not a real message.
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 32;

// After the deadline, ranks blocked in an exchange are told so and get this
// long to report before they too are killed (processes) or abandoned (threads).
constexpr absl::Duration kGrace = absl::Milliseconds(500);

// While children are alive the hub polls with at most this timeout, to notice
// one that died while a grandchild keeps its socket open.
constexpr int kReapPollMs = 10;

const char* OpName(uint32_t op) { return op == kBarrierFrame ? "Barrier" : "AllGather"; }

std::string EncodeFrame(uint32_t type, uint32_t aux, absl::string_view payload) {
  FrameHeader header;
  header.type = type;
  header.aux = aux;
  header.length = payload.size();
  std::string frame(sizeof(header) + payload.size(), '\0');
  std::memcpy(frame.data(), &header, sizeof(header));
  if (!payload.empty()) std::memcpy(frame.data() + sizeof(header), payload.data(), payload.size());
  return frame;
}

absl::StatusCode CodeFromWire(uint32_t code) {
  return code <= static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)
             ? static_cast<absl::StatusCode>(code)
             : absl::StatusCode::kUnknown;
}

absl::Span<const std::byte> BytesOf(absl::string_view text) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(text.data()), text.size());
}

std::string Shorten(absl::string_view text, size_t max = 200) {
  if (text.size() <= max) return std::string(text);
  return absl::StrCat(text.substr(0, max), "...");
}

}  // namespace

// Friend of RankContext: builds contexts and runs a rank's body.
class RankRunner {
 public:
  static RankContext Make(int rank, int size, RankMode mode, Deadline deadline, UniqueFd hub) {
    return RankContext(rank, size, mode, deadline, std::move(hub));
  }

  // Runs `fn` as this rank, reports its Status to the hub and closes the
  // rank's end of the socket (the hub takes that EOF as "this rank is done").
  static void Run(RankContext& ctx, const std::function<absl::Status(RankContext&)>& fn) {
    absl::Status status;
    try {
      status = fn(ctx);
    } catch (const std::exception& e) {
      status = absl::InternalError(
          absl::StrCat("rank ", ctx.rank(), ": uncaught C++ exception: ", e.what()));
    } catch (...) {
      status = absl::InternalError(
          absl::StrCat("rank ", ctx.rank(), ": uncaught C++ exception of unknown type"));
    }
    if (ctx.hub_.valid()) {
      const std::string frame =
          EncodeFrame(kResultFrame, static_cast<uint32_t>(status.code()), status.message());
      // If the hub is gone (a threads-mode straggler), nobody is listening.
      SendAll(ctx.hub_.get(), BytesOf(frame), ctx.deadline_ + kGrace).IgnoreError();
      ctx.hub_.Reset();
    }
  }
};

absl::string_view RankModeName(RankMode mode) {
  return mode == RankMode::kThreads ? "threads" : "processes";
}

std::ostream& operator<<(std::ostream& os, RankMode mode) { return os << RankModeName(mode); }

std::string SignalName(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  if (abbrev == nullptr) return absl::StrCat("signal ", signal_number);
  return absl::StrCat("SIG", abbrev);
}

absl::Status RankContext::Exchange(uint32_t op, absl::string_view mine,
                                   std::vector<std::string>* gathered) {
  const int64_t sequence = sequence_++;
  const std::string what = absl::StrCat("rank ", rank_, ": ", OpName(op), " #", sequence);
  if (!hub_.valid()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": no connection to the hub"));
  }
  // The hub answers ranks blocked in an exchange at the deadline itself; wait a
  // little longer so its message (which names the missing ranks) wins.
  const Deadline wait_until = deadline_ + kGrace / 2;
  auto hub_lost = [&](const absl::Status& cause) {
    if (absl::IsDeadlineExceeded(cause)) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": no answer from the RunRanks hub by the deadline"));
    }
    return absl::UnavailableError(absl::StrCat(
        what, ": lost the RunRanks hub (has the run ended?): ", cause.message()));
  };
  auto malformed = [&](absl::string_view why) {
    return absl::InternalError(absl::StrCat(what, ": malformed reply from the hub: ", why));
  };
  auto recv_string = [&](std::string& text, uint64_t length) {
    text.resize(length);
    return RecvAll(hub_.get(),
                   absl::MakeSpan(reinterpret_cast<std::byte*>(text.data()), text.size()),
                   wait_until);
  };

  FrameHeader header;
  header.type = op;
  header.aux = static_cast<uint32_t>(sequence);
  header.length = mine.size();
  absl::Status sent = SendAll(hub_.get(), AsBytes(header), wait_until);
  if (sent.ok()) sent = SendAll(hub_.get(), BytesOf(mine), wait_until);
  if (!sent.ok()) return hub_lost(sent);

  FrameHeader reply;
  absl::Status got = RecvAll(hub_.get(), AsWritableBytes(reply), wait_until);
  if (!got.ok()) return hub_lost(got);
  if (reply.length > kMaxFrameBytes) return malformed(absl::StrCat("length ", reply.length));
  if (reply.type == kErrorFrame) {
    std::string message;
    got = recv_string(message, reply.length);
    if (!got.ok()) return hub_lost(got);
    return absl::Status(CodeFromWire(reply.aux), message);
  }
  if (reply.type != kGatheredFrame) return malformed(absl::StrCat("frame type ", reply.type));
  if (gathered == nullptr) {
    return reply.length == 0 ? absl::OkStatus() : malformed("a Barrier reply with data");
  }
  // Read each rank's bytes straight into its own string: no staging copy.
  gathered->assign(size_, std::string());
  uint64_t left = reply.length;
  for (std::string& bytes : *gathered) {
    uint64_t length = 0;
    if (left < sizeof(length)) return malformed("short");
    got = RecvAll(hub_.get(), AsWritableBytes(length), wait_until);
    if (!got.ok()) return hub_lost(got);
    left -= sizeof(length);
    if (left < length) return malformed("short");
    got = recv_string(bytes, length);
    if (!got.ok()) return hub_lost(got);
    left -= length;
  }
  if (left != 0) return malformed("long");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RankContext::AllGather(absl::string_view mine) {
  std::vector<std::string> all;
  BRAID_RETURN_IF_ERROR(Exchange(kAllGatherFrame, mine, &all));
  return all;
}

absl::Status RankContext::Barrier() { return Exchange(kBarrierFrame, "", nullptr); }

namespace {

// A reply queued for one rank; replies to an AllGather share one buffer.
struct Outgoing {
  std::shared_ptr<const std::string> bytes;
  size_t offset = 0;
};

// The hub's view of one rank.
struct Slot {
  int rank = 0;
  UniqueFd fd;  // the hub's end; reset at EOF

  // The frame being read.
  FrameHeader header;
  size_t header_have = 0;
  std::string payload;
  size_t payload_have = 0;

  std::deque<Outgoing> out;

  bool eof = false;                       // the rank's end is closed
  std::optional<absl::Status> result;     // what `fn` returned
  std::optional<absl::Status> failure;    // never started / broke the protocol

  // The rank's contribution to the current exchange, if it has joined it.
  bool pending = false;
  uint32_t pending_op = 0;
  uint32_t pending_sequence = 0;
  std::string contribution;

  // kProcesses.
  pid_t pid = -1;
  bool reaped = false;
  bool reap_lost = false;  // someone else collected the exit status
  int wait_status = 0;
  bool killed = false;  // by us, at the deadline

  // kThreads.
  std::thread thread;
  bool abandoned = false;  // still running at the deadline; detached

  bool left() const { return eof || result.has_value() || failure.has_value(); }
};

class Hub {
 public:
  Hub(int n, RankMode mode, absl::Duration timeout)
      : mode_(mode), timeout_(timeout), deadline_(DeadlineIn(timeout)), slots_(n) {
    for (int r = 0; r < n; ++r) slots_[r].rank = r;
  }

  ~Hub() {
    // Finish() has joined or detached every thread; this is a backstop so a
    // std::thread is never destroyed joinable (which would terminate).
    for (Slot& slot : slots_) {
      if (slot.thread.joinable()) slot.thread.detach();
    }
  }

  Deadline deadline() const { return deadline_; }

  // Creates one socketpair per rank; returns the ranks' ends.
  absl::StatusOr<std::vector<UniqueFd>> Connect() {
    std::vector<UniqueFd> rank_ends(slots_.size());
    for (size_t r = 0; r < slots_.size(); ++r) {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) {
        return ErrnoStatus(errno, "socketpair");
      }
      slots_[r].fd.Reset(pair[0]);
      rank_ends[r].Reset(pair[1]);
      BRAID_RETURN_IF_ERROR(SetNonBlocking(pair[0]));
      BRAID_RETURN_IF_ERROR(SetNonBlocking(pair[1]));
    }
    return rank_ends;
  }

  void StartProcesses(std::vector<UniqueFd> rank_ends,
                      const std::function<absl::Status(RankContext&)>& fn) {
    // Whatever sits in the parent's stdio buffers would otherwise be written
    // once more by every child that flushes.
    std::fflush(nullptr);
    std::cout.flush();
    std::cerr.flush();
    const pid_t parent = ::getpid();
    const int n = static_cast<int>(slots_.size());
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      if (pid < 0) {
        const absl::Status error = ErrnoStatus(errno, absl::StrCat("rank ", r, ": fork"));
        for (int s = r; s < n; ++s) NeverStarted(slots_[s], error);
        return;
      }
      if (pid == 0) ChildMain(r, parent, rank_ends, fn);  // never returns
      slots_[r].pid = pid;
      rank_ends[r].Reset();
    }
  }

  void StartThreads(std::vector<UniqueFd> rank_ends,
                    const std::function<absl::Status(RankContext&)>& fn) {
    const int n = static_cast<int>(slots_.size());
    for (int r = 0; r < n; ++r) {
      RankContext ctx = RankRunner::Make(r, n, mode_, deadline_, std::move(rank_ends[r]));
      try {
        // The thread owns its context and its copy of fn: a straggler that
        // outlives RunRanks touches nothing of the hub's.
        slots_[r].thread = std::thread([ctx = std::move(ctx), fn]() mutable {
          RankRunner::Run(ctx, fn);
        });
      } catch (const std::system_error& e) {
        // The lambda (and the rank's socket end) is gone: the hub sees EOF.
        NeverStarted(slots_[r], absl::InternalError(
                                    absl::StrCat("rank ", r, ": cannot start thread: ", e.what())));
      }
    }
  }

  // Relays exchanges until every rank is done or the deadline (+ grace) passes.
  void Loop() {
    bool past_deadline = false;
    const Deadline hard_deadline = deadline_ + kGrace;
    std::vector<pollfd> fds;
    std::vector<Slot*> polled;
    while (!AllDone()) {
      if (!past_deadline && Expired(deadline_)) {
        past_deadline = true;
        OnDeadline();
        continue;
      }
      if (past_deadline && Expired(hard_deadline)) break;

      fds.clear();
      polled.clear();
      for (Slot& slot : slots_) {
        if (!slot.fd.valid()) continue;
        const short events = static_cast<short>(POLLIN | (slot.out.empty() ? 0 : POLLOUT));
        fds.push_back(pollfd{slot.fd.get(), events, 0});
        polled.push_back(&slot);
      }
      int timeout_ms = PollTimeoutMs(past_deadline ? hard_deadline : deadline_);
      if (mode_ == RankMode::kProcesses && AnyUnreaped()) {
        timeout_ms = timeout_ms < 0 ? kReapPollMs : std::min(timeout_ms, kReapPollMs);
      }
      const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0) {
        BRAID_CHECK(errno == EINTR) << "RunRanks hub: poll: " << std::strerror(errno);
        continue;
      }
      for (size_t i = 0; i < fds.size() && ready > 0; ++i) {
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ReadFrom(*polled[i]);
        if ((fds[i].revents & POLLOUT) && polled[i]->fd.valid()) WriteTo(*polled[i]);
      }
      if (mode_ == RankMode::kProcesses) ReapExited();
      Progress();
      for (Slot& slot : slots_) {
        if (!slot.out.empty()) WriteTo(slot);
      }
    }
  }

  // Kills and reaps what is left (processes) or joins/detaches (threads).
  void Finish() {
    for (Slot& slot : slots_) {
      if (mode_ == RankMode::kProcesses) {
        if (slot.pid > 0 && !slot.reaped) {
          if (!slot.result.has_value()) slot.killed = true;
          ::kill(slot.pid, SIGKILL);
          Reap(slot, /*block=*/true);
        }
        // The child is gone: whatever it wrote is in the socket already.
        if (slot.fd.valid()) ReadFrom(slot);
      } else if (slot.thread.joinable()) {
        if (slot.eof) {
          slot.thread.join();
        } else {
          slot.abandoned = true;
          slot.thread.detach();
        }
      }
      slot.fd.Reset();
      slot.out.clear();
    }
  }

  std::vector<absl::Status> Statuses() const {
    std::vector<absl::Status> statuses;
    statuses.reserve(slots_.size());
    for (const Slot& slot : slots_) statuses.push_back(StatusOf(slot));
    return statuses;
  }

 private:
  [[noreturn]] void ChildMain(int rank, pid_t parent, std::vector<UniqueFd>& rank_ends,
                              const std::function<absl::Status(RankContext&)>& fn) {
    // Die with the test process rather than linger (the parent may already be
    // gone by the time the request is made).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // Catch2 (and a sanitizer) catch fatal signals to report them as the
    // *parent's* test failure; in a rank, a crash must kill the child so the
    // parent reports it against this rank.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGINT, SIGTERM}) {
      ::signal(sig, SIG_DFL);
    }
    // Keep only this rank's end: another rank's end held here would hide that
    // rank's EOF from the hub.
    for (Slot& slot : slots_) slot.fd.Reset();
    for (size_t s = 0; s < rank_ends.size(); ++s) {
      if (static_cast<int>(s) != rank) rank_ends[s].Reset();
    }
    SetLogRank(rank);
    RankContext ctx = RankRunner::Make(rank, static_cast<int>(slots_.size()), mode_, deadline_,
                                       std::move(rank_ends[rank]));
    RankRunner::Run(ctx, fn);
    std::cout.flush();
    std::fflush(nullptr);
    ::_exit(0);  // no atexit handlers, no static destructors, no Catch2
  }

  void NeverStarted(Slot& slot, const absl::Status& error) {
    slot.failure = error;
    slot.fd.Reset();
    slot.eof = true;
    slot.reaped = true;
  }

  bool Done(const Slot& slot) const {
    if (slot.abandoned) return true;
    if (mode_ == RankMode::kProcesses) return slot.eof && (slot.reaped || slot.pid < 0);
    return slot.eof;
  }

  bool AllDone() const {
    return std::all_of(slots_.begin(), slots_.end(), [this](const Slot& s) { return Done(s); });
  }

  bool AnyUnreaped() const {
    return std::any_of(slots_.begin(), slots_.end(),
                       [](const Slot& s) { return s.pid > 0 && !s.reaped; });
  }

  void Reap(Slot& slot, bool block) {
    while (true) {
      int wait_status = 0;
      const pid_t pid = ::waitpid(slot.pid, &wait_status, block ? 0 : WNOHANG);
      if (pid == slot.pid) {
        slot.reaped = true;
        slot.wait_status = wait_status;
        return;
      }
      if (pid == 0) return;  // still running
      if (errno == EINTR) continue;
      // ECHILD: someone else waited for it (or SIGCHLD is ignored).
      slot.reaped = true;
      slot.reap_lost = true;
      return;
    }
  }

  void ReapExited() {
    for (Slot& slot : slots_) {
      if (slot.pid <= 0 || slot.reaped) continue;
      Reap(slot, /*block=*/false);
      // A dead child's frames are all in the socket buffer; a grandchild may
      // still hold its end open, so do not wait for EOF.
      if (slot.reaped && slot.fd.valid()) {
        ReadFrom(slot);
        MarkEof(slot);
      }
    }
  }

  void MarkEof(Slot& slot) {
    slot.fd.Reset();
    slot.eof = true;
    slot.out.clear();
  }

  void ProtocolError(Slot& slot, absl::string_view what) {
    slot.failure = absl::InternalError(
        absl::StrCat("rank ", slot.rank, ": malformed frame to the RunRanks hub: ", what));
    MarkEof(slot);
  }

  // Reads everything available on the slot's socket, handling whole frames.
  void ReadFrom(Slot& slot) {
    while (slot.fd.valid()) {
      ssize_t n;
      if (slot.header_have < sizeof(slot.header)) {
        n = ::read(slot.fd.get(), reinterpret_cast<char*>(&slot.header) + slot.header_have,
                   sizeof(slot.header) - slot.header_have);
      } else {
        n = ::read(slot.fd.get(), slot.payload.data() + slot.payload_have,
                   slot.payload.size() - slot.payload_have);
      }
      if (n == 0) {
        MarkEof(slot);
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        MarkEof(slot);  // ECONNRESET and the like: the rank is gone
        return;
      }
      if (slot.header_have < sizeof(slot.header)) {
        slot.header_have += static_cast<size_t>(n);
        if (slot.header_have < sizeof(slot.header)) continue;
        if (slot.header.length > kMaxFrameBytes) {
          ProtocolError(slot, absl::StrCat("length ", slot.header.length));
          return;
        }
        slot.payload.assign(slot.header.length, '\0');
        slot.payload_have = 0;
      } else {
        slot.payload_have += static_cast<size_t>(n);
      }
      if (slot.payload_have == slot.payload.size()) {
        slot.header_have = 0;
        HandleFrame(slot, slot.header, std::move(slot.payload));
        slot.payload.clear();
        slot.payload_have = 0;
      }
    }
  }

  void HandleFrame(Slot& slot, const FrameHeader& header, std::string payload) {
    switch (header.type) {
      case kAllGatherFrame:
      case kBarrierFrame:
        if (slot.pending || slot.result.has_value()) {
          ProtocolError(slot, "a contribution while one is pending or after the result");
          return;
        }
        if (!broken_.has_value() && header.aux != static_cast<uint32_t>(completed_)) {
          ProtocolError(slot, absl::StrCat("contribution to exchange #", header.aux,
                                           " while the group is at #", completed_));
          return;
        }
        slot.pending = true;
        slot.pending_op = header.type;
        slot.pending_sequence = header.aux;
        slot.contribution = std::move(payload);
        return;
      case kResultFrame:
        if (header.aux == 0) {
          slot.result = absl::OkStatus();
        } else {
          slot.result = absl::Status(CodeFromWire(header.aux), payload);
        }
        return;
      default:
        ProtocolError(slot, absl::StrCat("unknown frame type ", header.type));
    }
  }

  void WriteTo(Slot& slot) {
    while (!slot.out.empty() && slot.fd.valid()) {
      Outgoing& next = slot.out.front();
      const ssize_t n = ::send(slot.fd.get(), next.bytes->data() + next.offset,
                               next.bytes->size() - next.offset, MSG_NOSIGNAL);
      if (n > 0) {
        next.offset += static_cast<size_t>(n);
        if (next.offset == next.bytes->size()) slot.out.pop_front();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      slot.out.clear();  // EPIPE / ECONNRESET: the rank is gone; its EOF follows
      return;
    }
  }

  void QueueFrame(Slot& slot, std::shared_ptr<const std::string> frame) {
    if (slot.fd.valid()) slot.out.push_back(Outgoing{std::move(frame), 0});
  }

  // Completes the current exchange, or fails it, when that is decided.
  void Progress() {
    if (broken_.has_value()) {
      for (Slot& slot : slots_) {
        if (slot.pending) FailPending(slot);
      }
      return;
    }
    const int n = static_cast<int>(slots_.size());
    const int joined = static_cast<int>(
        std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pending; }));
    if (joined == 0) return;  // nobody waits; a rank that left fails the next one
    if (joined == n) {
      Complete();
      return;
    }
    for (Slot& slot : slots_) {
      if (!slot.pending && slot.left()) {
        Break(absl::StatusCode::kAborted, HowItLeft(slot));
        return;
      }
    }
  }

  void Complete() {
    const uint32_t op = slots_[0].pending_op;
    bool same = true;
    for (const Slot& slot : slots_) same = same && slot.pending_op == op;
    if (!same) {
      std::vector<std::string> calls;
      for (const Slot& slot : slots_) {
        calls.push_back(absl::StrCat("rank ", slot.rank, " ", OpName(slot.pending_op)));
      }
      Break(absl::StatusCode::kInvalidArgument,
            absl::StrCat("ranks called different exchanges: ", absl::StrJoin(calls, ", ")));
      return;
    }
    // One buffer, shared by every rank's queue: header, then for AllGather
    // each contribution with its length.
    FrameHeader header;
    header.type = kGatheredFrame;
    header.aux = static_cast<uint32_t>(completed_);
    if (op == kAllGatherFrame) {
      for (const Slot& slot : slots_) header.length += sizeof(uint64_t) + slot.contribution.size();
    }
    auto frame = std::make_shared<std::string>();
    frame->reserve(sizeof(header) + header.length);
    frame->append(reinterpret_cast<const char*>(&header), sizeof(header));
    if (op == kAllGatherFrame) {
      for (const Slot& slot : slots_) {
        const uint64_t length = slot.contribution.size();
        frame->append(reinterpret_cast<const char*>(&length), sizeof(length));
        frame->append(slot.contribution);
      }
    }
    for (Slot& slot : slots_) {
      slot.pending = false;
      std::string().swap(slot.contribution);
      QueueFrame(slot, frame);
    }
    ++completed_;
  }

  // The group cannot complete another exchange: fail the waiting ranks now and
  // every later contribution on arrival.
  void Break(absl::StatusCode code, std::string cause) {
    broken_ = absl::Status(code, cause);
    for (Slot& slot : slots_) {
      if (slot.pending) FailPending(slot);
    }
  }

  void FailPending(Slot& slot) {
    const std::string message =
        absl::StrCat(OpName(slot.pending_op), " #", slot.pending_sequence, " failed: ",
                     broken_->message(), " (seen by rank ", slot.rank, ")");
    QueueFrame(slot, std::make_shared<const std::string>(EncodeFrame(
                         kErrorFrame, static_cast<uint32_t>(broken_->code()), message)));
    slot.pending = false;
    std::string().swap(slot.contribution);
  }

  std::string HowItLeft(Slot& slot) {
    const std::string who = absl::StrCat("rank ", slot.rank);
    if (slot.failure.has_value()) {
      return absl::StrCat(who, " failed without joining it: ", Shorten(slot.failure->message()));
    }
    if (slot.result.has_value()) {
      if (slot.result->ok()) return absl::StrCat(who, " returned OK without joining it");
      return absl::StrCat(who, " returned without joining it: ",
                          Shorten(slot.result->ToString()));
    }
    if (mode_ == RankMode::kProcesses && slot.pid > 0) {
      // The child closed its socket: it is (almost surely) exiting. Give it a
      // moment to become a zombie so the message can say how it died.
      for (int i = 0; i < 50 && !slot.reaped; ++i) {
        Reap(slot, /*block=*/false);
        if (!slot.reaped) absl::SleepFor(absl::Milliseconds(1));
      }
      if (slot.reaped && !slot.reap_lost) {
        return absl::StrCat(who, " died without joining it: ", ExitDescription(slot.wait_status));
      }
    }
    return absl::StrCat(who, " closed its connection to the hub without joining it");
  }

  static std::string ExitDescription(int wait_status) {
    if (WIFSIGNALED(wait_status)) {
      const int sig = WTERMSIG(wait_status);
      const char* description = sigdescr_np(sig);
      return absl::StrCat("killed by signal ", SignalName(sig),
                          description != nullptr ? absl::StrCat(" (", description, ")") : "");
    }
    if (WIFEXITED(wait_status)) {
      return absl::StrCat("exited with code ", WEXITSTATUS(wait_status), " without reporting a status");
    }
    return absl::StrCat("ended with wait status ", wait_status);
  }

  void OnDeadline() {
    const std::string within = absl::StrCat("within ", absl::FormatDuration(timeout_));
    std::vector<int> missing;
    bool anyone_waiting = false;
    for (const Slot& slot : slots_) {
      if (slot.pending) {
        anyone_waiting = true;
      } else {
        missing.push_back(slot.rank);
      }
    }
    // Ranks neither waiting on the hub nor finished are the stragglers.
    for (Slot& slot : slots_) {
      if (slot.pending || slot.left() || Done(slot)) continue;
      if (mode_ == RankMode::kProcesses) {
        if (slot.pid > 0) {
          ::kill(slot.pid, SIGKILL);
          slot.killed = true;
        }
      } else {
        slot.abandoned = true;
      }
    }
    if (!broken_.has_value()) {
      Break(absl::StatusCode::kDeadlineExceeded,
            anyone_waiting
                ? absl::StrCat("not complete ", within, "; never joined by rank(s) ",
                               absl::StrJoin(missing, ", "))
                : absl::StrCat("the run's deadline (", absl::FormatDuration(timeout_), ") passed"));
    } else {
      for (Slot& slot : slots_) {
        if (slot.pending) FailPending(slot);
      }
    }
  }

  absl::Status StatusOf(const Slot& slot) const {
    if (slot.result.has_value()) return *slot.result;
    if (slot.failure.has_value()) return *slot.failure;
    const std::string who = absl::StrCat("rank ", slot.rank);
    const std::string within = absl::FormatDuration(timeout_);
    if (mode_ == RankMode::kProcesses) {
      if (slot.killed) {
        return absl::DeadlineExceededError(
            absl::StrCat(who, " did not finish within ", within, "; killed"));
      }
      if (slot.reap_lost) {
        return absl::InternalError(absl::StrCat(
            who, " ended without reporting a status (its exit status was collected elsewhere)"));
      }
      return absl::InternalError(absl::StrCat(who, " ", ExitDescription(slot.wait_status)));
    }
    if (slot.abandoned) {
      return absl::DeadlineExceededError(absl::StrCat(
          who, " did not finish within ", within,
          "; its thread is left running (threads cannot be killed; use processes for hang tests)"));
    }
    return absl::InternalError(absl::StrCat(who, " ended without reporting a status"));
  }

  const RankMode mode_;
  const absl::Duration timeout_;
  const Deadline deadline_;
  std::vector<Slot> slots_;
  int64_t completed_ = 0;               // exchanges completed
  std::optional<absl::Status> broken_;  // why no further exchange can complete
};

}  // namespace

std::vector<absl::Status> RunRanks(int n, RankMode mode,
                                   std::function<absl::Status(RankContext&)> fn,
                                   RunRanksOptions options) {
  BRAID_CHECK(n >= 1) << "RunRanks needs at least one rank, got " << n;
  BRAID_CHECK(fn != nullptr) << "RunRanks needs a function";
  Hub hub(n, mode, options.timeout);
  absl::StatusOr<std::vector<UniqueFd>> rank_ends = hub.Connect();
  if (!rank_ends.ok()) {
    return std::vector<absl::Status>(
        n, Annotate(rank_ends.status(), "RunRanks: cannot connect ranks to the hub"));
  }
  if (mode == RankMode::kProcesses) {
    hub.StartProcesses(*std::move(rank_ends), fn);
  } else {
    hub.StartThreads(*std::move(rank_ends), fn);
  }
  hub.Loop();
  hub.Finish();
  return hub.Statuses();
}

}  // namespace braid::testing
