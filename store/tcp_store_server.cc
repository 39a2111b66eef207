// StoreServer: one thread, one epoll loop, non-blocking sockets.
//
// Life of a request: bytes are read into the connection's input buffer; each
// complete frame is parsed and answered at once, except a Get/Wait whose key
// is missing, which is "parked": registered under one missing key (and, when
// it has a timeout, in the deadline index) until a write creates that key or
// the timeout passes. A parked connection is not read from (its client sends
// nothing more until answered; we still watch for it hanging up), so at most
// one request per connection is ever outstanding. A connection whose answer
// could not be written in full is not read from either until it drains: the
// server never buffers more than one answer per client.
//
// Everything here runs on the server thread only; StoreServer touches the
// loop just to start it, wake it (eventfd) and destroy it after the join.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/deadline.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/mutex.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace braid {
namespace store_internal {
namespace {

// epoll data for the two non-connection fds; connections count up from 2.
constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;
constexpr uint64_t kFirstConnectionId = 2;

constexpr size_t kReadChunkBytes = 64 << 10;
// Reads per readiness event on one connection, so one busy client cannot
// starve the rest.
constexpr int kMaxReadsPerEvent = 16;
// After accept fails for lack of fds, the listener rests this long.
constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);


std::string Quoted(absl::string_view key) {
  return absl::StrCat("\"", absl::CHexEscape(key), "\"");
}

std::string QuotedList(const std::vector<std::string>& keys) {
  return absl::StrJoin(keys, ", ", [](std::string* out, const std::string& key) {
    absl::StrAppend(out, Quoted(key));
  });
}

std::string PeerName(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return ToString(HostPort{text, ntohs(v4->sin_port)});
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return ToString(HostPort{text, ntohs(v6->sin6_port)});
  }
  return "an unknown peer";
}

// Where a connection stands in its protocol. With a job secret a connection
// starts in kAwaitingHello and must finish the HMAC handshake (see
// tcp_store.h) within options.handshake_timeout; until then only Opcode::kHello is
// accepted, anything else refuses and closes the connection.
enum class Phase { kAwaitingHello, kAwaitingProof, kServing };

// A Get or Wait waiting for its keys.
struct Parked {
  Opcode op = Opcode::kGet;
  std::vector<std::string> keys;  // Get: one key
  std::string waiting_on;         // the missing key it is registered under
  Deadline deadline = absl::InfiniteFuture();
  int64_t timeout_ms = -1;
};

struct Connection {
  uint64_t id = 0;
  UniqueFd fd;
  std::string peer;
  Phase phase = Phase::kServing;
  std::string client_nonce, server_nonce;  // the handshake's, while in it
  std::string in;  // received bytes; in[in_pos..] not yet parsed
  size_t in_pos = 0;
  std::string out;  // answer bytes; out[out_pos..] not yet sent
  size_t out_pos = 0;
  uint32_t events = 0;  // epoll interest registered now
  bool closed = false;  // closed; erased from the table at the end of the turn
  std::optional<Parked> parked;
};

}  // namespace

class ServerLoop {
 public:
  static absl::StatusOr<std::unique_ptr<ServerLoop>> Create(TcpListener listener, int wake_fd,
                                                            StoreServerOptions options);
  uint16_t port() const { return port_; }
  // Serves until the wake fd becomes readable, then closes every connection
  // and the listener. Runs on the server thread.
  void Run();

 private:
  ServerLoop(TcpListener listener, UniqueFd epoll_fd, int wake_fd, StoreServerOptions options)
      : listener_(std::move(listener)),
        port_(listener_->port()),
        epoll_fd_(std::move(epoll_fd)),
        wake_fd_(wake_fd),
        options_(options),
        read_buffer_(kReadChunkBytes) {}

  int NextTimeoutMs() const;
  void AcceptAll();
  void PauseListener();
  void MaybeResumeListener();
  Connection* Find(uint64_t id);
  void HandleEvents(Connection& conn, uint32_t events);
  void ReadAvailable(Connection& conn);
  void OnEof(Connection& conn);
  void ProcessFrames(Connection& conn);
  void HandleRequest(Connection& conn, absl::string_view payload);
  void HandleHandshake(Connection& conn, uint8_t opcode, FieldReader& reader);
  void Refuse(Connection& conn, absl::StatusCode code, absl::string_view why);
  void ExpireHandshakes();
  void Park(Connection& conn, Parked parked);
  void Unpark(Connection& conn);
  void WakeKey(const std::string& key);
  void ExpireWaiters();
  void DrainReady();
  void Respond(Connection& conn, std::string frame);
  void RespondError(Connection& conn, absl::StatusCode code, absl::string_view message);
  void Flush(Connection& conn);
  void UpdateInterest(Connection& conn);
  void Reject(Connection& conn, absl::string_view why);
  void Close(Connection& conn);
  void Reap();
  void CloseAll();
  bool HasAll(const std::vector<std::string>& keys, std::string* first_missing) const;

  std::optional<TcpListener> listener_;
  const uint16_t port_;
  UniqueFd epoll_fd_;
  const int wake_fd_;  // owned by StoreServer
  const StoreServerOptions options_;
  std::vector<char> read_buffer_;

  absl::flat_hash_map<std::string, std::string> table_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> connections_;
  int open_connections_ = 0;
  uint64_t next_id_ = kFirstConnectionId;
  bool listener_paused_ = false;
  absl::Time listener_resume_at_;
  // Parked connections by the key they wait for, and by deadline.
  absl::flat_hash_map<std::string, std::vector<uint64_t>> waiters_;
  std::set<std::pair<absl::Time, uint64_t>> deadlines_;
  // Connections still in the handshake, by when they must finish it.
  std::set<std::pair<absl::Time, uint64_t>> handshake_deadlines_;
  // Connections that may have whole frames buffered and were not able to
  // process them (just unparked, or just drained their output).
  std::deque<uint64_t> ready_;
  std::vector<uint64_t> closed_;
};

absl::StatusOr<std::unique_ptr<ServerLoop>> ServerLoop::Create(TcpListener listener, int wake_fd,
                                                               StoreServerOptions options) {
  UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) return ErrnoStatus(errno, "epoll_create1");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kListenerId;
  if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, listener.fd(), &event) < 0) {
    return ErrnoStatus(errno, "epoll_ctl(listener)");
  }
  event.data.u64 = kWakeId;
  if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, wake_fd, &event) < 0) {
    return ErrnoStatus(errno, "epoll_ctl(eventfd)");
  }
  return std::unique_ptr<ServerLoop>(
      new ServerLoop(std::move(listener), std::move(epoll_fd), wake_fd, options));
}

void ServerLoop::Run() {
  std::vector<epoll_event> events(64);
  bool stop = false;
  while (!stop) {
    const int n = ::epoll_wait(epoll_fd_.get(), events.data(), static_cast<int>(events.size()),
                               NextTimeoutMs());
    if (n < 0) {
      if (errno == EINTR) continue;
      BRAID_LOG(ERROR) << "store server on port " << port_ << ": epoll_wait failed ("
                       << std::strerror(errno) << "); stopping";
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        stop = true;
      } else if (id == kListenerId) {
        AcceptAll();
      } else if (Connection* conn = Find(id)) {
        HandleEvents(*conn, events[i].events);
      }
    }
    ExpireWaiters();
    ExpireHandshakes();
    DrainReady();
    Reap();
    MaybeResumeListener();
  }
  CloseAll();
}

int ServerLoop::NextTimeoutMs() const {
  Deadline next = absl::InfiniteFuture();
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  if (!handshake_deadlines_.empty()) next = std::min(next, handshake_deadlines_.begin()->first);
  if (listener_paused_) next = std::min(next, listener_resume_at_);
  return PollTimeoutMs(next);
}

Connection* ServerLoop::Find(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end() || it->second->closed) return nullptr;
  return it->second.get();
}

void ServerLoop::AcceptAll() {
  while (true) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    UniqueFd fd(::accept4(listener_->fd(), reinterpret_cast<sockaddr*>(&address), &length,
                          SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of fds or memory: the listener stays readable, so stop watching
      // it for a while rather than spin.
      BRAID_LOG(WARNING) << "store server on port " << port_ << ": accept failed ("
                         << std::strerror(errno) << "); pausing new connections for "
                         << kAcceptBackoff;
      PauseListener();
      return;
    }
    const std::string peer = PeerName(address);
    if (open_connections_ >= options_.max_connections) {
      BRAID_LOG(WARNING) << "store server on port " << port_ << ": refusing connection from "
                         << peer << ": " << open_connections_
                         << " connections open, max_connections is " << options_.max_connections;
      continue;  // `fd` closes
    }
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto conn = std::make_unique<Connection>();
    conn->id = next_id_++;
    conn->fd = std::move(fd);
    conn->peer = peer;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.u64 = conn->id;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, conn->fd.get(), &event) < 0) {
      BRAID_LOG(WARNING) << "store server on port " << port_ << ": dropping connection from "
                         << peer << ": epoll_ctl failed (" << std::strerror(errno) << ")";
      continue;
    }
    conn->events = event.events;
    if (options_.secret.enabled()) {
      conn->phase = Phase::kAwaitingHello;
      handshake_deadlines_.emplace(absl::Now() + options_.handshake_timeout, conn->id);
    }
    BRAID_LOG(DEBUG) << "store server on port " << port_ << ": connection from " << peer;
    ++open_connections_;
    connections_.emplace(conn->id, std::move(conn));
  }
}

void ServerLoop::PauseListener() {
  if (listener_paused_) return;
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listener_->fd(), nullptr);
  listener_paused_ = true;
  listener_resume_at_ = absl::Now() + kAcceptBackoff;
}

void ServerLoop::MaybeResumeListener() {
  if (!listener_paused_ || absl::Now() < listener_resume_at_) return;
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kListenerId;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listener_->fd(), &event) < 0) {
    listener_resume_at_ = absl::Now() + kAcceptBackoff;
    return;
  }
  listener_paused_ = false;
}

void ServerLoop::HandleEvents(Connection& conn, uint32_t events) {
  if (events & EPOLLERR) {
    BRAID_LOG(DEBUG) << "store server: socket error on connection from " << conn.peer;
    Close(conn);
    return;
  }
  if (events & EPOLLOUT) {
    Flush(conn);
    if (conn.closed) return;
    if (conn.out.empty()) ready_.push_back(conn.id);  // may have frames waiting
  }
  if (events & EPOLLIN) {
    ReadAvailable(conn);
  } else if (events & (EPOLLHUP | EPOLLRDHUP)) {
    // Not reading from it (parked, or output pending), and it hung up: the
    // client is gone and nobody is left to answer.
    BRAID_LOG(DEBUG) << "store server: " << conn.peer << " hung up"
                     << (conn.parked ? " while waiting" : "");
    Close(conn);
  }
}

void ServerLoop::ReadAvailable(Connection& conn) {
  for (int i = 0; i < kMaxReadsPerEvent; ++i) {
    if (conn.closed || conn.parked || !conn.out.empty()) break;
    const ssize_t n = ::read(conn.fd.get(), read_buffer_.data(), read_buffer_.size());
    if (n > 0) {
      conn.in.append(read_buffer_.data(), static_cast<size_t>(n));
      ProcessFrames(conn);
      continue;
    }
    if (n == 0) {
      OnEof(conn);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    BRAID_LOG(DEBUG) << "store server: read from " << conn.peer
                     << " failed: " << std::strerror(errno);
    Close(conn);
    return;
  }
  if (!conn.closed) UpdateInterest(conn);
}

void ServerLoop::OnEof(Connection& conn) {
  const size_t pending = conn.in.size() - conn.in_pos;
  if (pending == 0) {
    BRAID_LOG(DEBUG) << "store server: " << conn.peer << " disconnected";
    Close(conn);
    return;
  }
  if (pending < kFrameHeaderBytes) {
    Reject(conn, absl::StrCat("connection closed after ", pending, " bytes of a frame header"));
  } else {
    const uint32_t length = DecodeU32(conn.in.data() + conn.in_pos);
    Reject(conn, absl::StrCat("connection closed mid-frame: truncated frame, ",
                              pending - kFrameHeaderBytes, " of ", length, " payload bytes"));
  }
}

void ServerLoop::ProcessFrames(Connection& conn) {
  while (!conn.closed && !conn.parked && conn.out.empty()) {
    const size_t available = conn.in.size() - conn.in_pos;
    if (available < kFrameHeaderBytes) break;
    const uint32_t length = DecodeU32(conn.in.data() + conn.in_pos);
    // Checked before waiting for (let alone allocating) the payload.
    if (length > options_.max_frame_bytes) {
      Reject(conn, absl::StrCat("frame of ", length, " bytes exceeds max_frame_bytes (",
                                options_.max_frame_bytes, ")"));
      return;
    }
    if (length < 2) {
      Reject(conn, absl::StrCat("frame of ", length, " bytes is too short for a request"));
      return;
    }
    if (available - kFrameHeaderBytes < length) break;
    const absl::string_view payload(conn.in.data() + conn.in_pos + kFrameHeaderBytes, length);
    conn.in_pos += kFrameHeaderBytes + length;
    HandleRequest(conn, payload);  // `payload` stays valid: `in` is not touched meanwhile
  }
  if (conn.closed) return;
  if (conn.in_pos == conn.in.size()) {
    conn.in.clear();
    conn.in_pos = 0;
  } else if (conn.in_pos > 0) {
    conn.in.erase(0, conn.in_pos);
    conn.in_pos = 0;
  }
}

bool ServerLoop::HasAll(const std::vector<std::string>& keys, std::string* first_missing) const {
  for (const std::string& key : keys) {
    if (!table_.contains(key)) {
      if (first_missing != nullptr) *first_missing = key;
      return false;
    }
  }
  return true;
}

void ServerLoop::HandleRequest(Connection& conn, absl::string_view payload) {
  FieldReader reader(payload);
  uint8_t version = 0;
  uint8_t opcode = 0;
  reader.U8(&version);  // a payload has at least 2 bytes (checked by the caller)
  reader.U8(&opcode);
  if (version != kProtocolVersion) {
    Reject(conn, absl::StrCat("unsupported protocol version ", version, " (this server speaks ",
                              kProtocolVersion, ")"));
    return;
  }
  if (conn.phase != Phase::kServing) {
    HandleHandshake(conn, opcode, reader);
    return;
  }
  const std::string name = OpcodeName(opcode);
  // Reads the request's fields; false (after rejecting the frame) when they
  // are truncated or followed by trailing bytes.
  auto fields_ok = [&](bool parsed) {
    if (!parsed) {
      Reject(conn,
             absl::StrCat("truncated ", name, " request (", payload.size(), "-byte payload)"));
      return false;
    }
    if (reader.remaining() != 0) {
      Reject(conn, absl::StrCat(reader.remaining(), " trailing bytes after a ", name, " request"));
      return false;
    }
    return true;
  };
  // Timeouts arrive as "ms left"; < 0 means none.
  auto deadline_after = [](int64_t timeout_ms) {
    return timeout_ms < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(timeout_ms);
  };

  switch (static_cast<Opcode>(opcode)) {
    case Opcode::kSet: {
      std::string key, value;
      if (!fields_ok(reader.String(&key) && reader.String(&value))) return;
      const bool created = table_.insert_or_assign(key, std::move(value)).second;
      Respond(conn, std::move(FrameWriter().U8(0)).Finish());
      if (created) WakeKey(key);
      return;
    }
    case Opcode::kGet: {
      std::string key;
      int64_t timeout_ms = 0;
      if (!fields_ok(reader.String(&key) && reader.I64(&timeout_ms))) return;
      if (auto it = table_.find(key); it != table_.end()) {
        Respond(conn, std::move(FrameWriter().U8(0).String(it->second)).Finish());
      } else if (timeout_ms == 0) {
        RespondError(conn, absl::StatusCode::kDeadlineExceeded,
                     absl::StrCat("timed out waiting for key ", Quoted(key)));
      } else {
        Park(conn, Parked{Opcode::kGet, {key}, key, deadline_after(timeout_ms), timeout_ms});
      }
      return;
    }
    case Opcode::kAdd: {
      std::string key;
      int64_t delta = 0;
      if (!fields_ok(reader.String(&key) && reader.I64(&delta))) return;
      int64_t current = 0;
      auto it = table_.find(key);
      if (it != table_.end() && !absl::SimpleAtoi(it->second, &current)) {
        RespondError(conn, absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("cannot add to key ", Quoted(key),
                                  ": its value is not a decimal integer: ",
                                  Quoted(absl::string_view(it->second).substr(0, 40)),
                                  it->second.size() > 40 ? "..." : ""));
        return;
      }
      int64_t sum = 0;
      if (__builtin_add_overflow(current, delta, &sum)) {
        RespondError(conn, absl::StatusCode::kOutOfRange,
                     absl::StrCat("adding ", delta, " to key ", Quoted(key), " (", current,
                                  ") overflows int64"));
        return;
      }
      const bool created = it == table_.end();
      if (created) {
        table_.emplace(key, absl::StrCat(sum));
      } else {
        it->second = absl::StrCat(sum);
      }
      Respond(conn, std::move(FrameWriter().U8(0).I64(sum)).Finish());
      if (created) WakeKey(key);
      return;
    }
    case Opcode::kCompareSet: {
      std::string key, expected, desired;
      if (!fields_ok(reader.String(&key) && reader.String(&expected) && reader.String(&desired))) {
        return;
      }
      auto it = table_.find(key);
      if (it == table_.end()) {
        if (!expected.empty()) {
          // c10d's answer for a missing key: `expected`, nothing set.
          Respond(conn, std::move(FrameWriter().U8(0).String(expected)).Finish());
          return;
        }
        table_.emplace(key, desired);
        Respond(conn, std::move(FrameWriter().U8(0).String(desired)).Finish());
        WakeKey(key);
        return;
      }
      if (it->second == expected) it->second = std::move(desired);
      Respond(conn, std::move(FrameWriter().U8(0).String(it->second)).Finish());
      return;
    }
    case Opcode::kWait:
    case Opcode::kCheck: {
      uint32_t count = 0;
      bool parsed = reader.U32(&count);
      std::vector<std::string> keys;
      // No reserve(count): the count is the client's claim; every key read
      // below is backed by bytes really received.
      for (uint32_t i = 0; parsed && i < count; ++i) {
        std::string key;
        parsed = reader.String(&key);
        if (parsed) keys.push_back(std::move(key));
      }
      int64_t timeout_ms = 0;
      const bool is_wait = static_cast<Opcode>(opcode) == Opcode::kWait;
      if (is_wait) parsed = parsed && reader.I64(&timeout_ms);
      if (!fields_ok(parsed)) return;
      std::string missing;
      const bool all = HasAll(keys, &missing);
      if (!is_wait) {
        Respond(conn, std::move(FrameWriter().U8(0).U8(all ? 1 : 0)).Finish());
      } else if (all) {
        Respond(conn, std::move(FrameWriter().U8(0)).Finish());
      } else if (timeout_ms == 0) {
        RespondError(conn, absl::StatusCode::kDeadlineExceeded,
                     absl::StrCat("timed out waiting for keys ", QuotedList(keys)));
      } else {
        Park(conn, Parked{Opcode::kWait, std::move(keys), missing, deadline_after(timeout_ms),
                          timeout_ms});
      }
      return;
    }
    case Opcode::kDelete: {
      std::string key;
      if (!fields_ok(reader.String(&key))) return;
      const bool existed = table_.erase(key) > 0;
      Respond(conn, std::move(FrameWriter().U8(0).U8(existed ? 1 : 0)).Finish());
      return;
    }
    case Opcode::kNumKeys: {
      if (!fields_ok(true)) return;
      Respond(conn,
              std::move(FrameWriter().U8(0).I64(static_cast<int64_t>(table_.size()))).Finish());
      return;
    }
    case Opcode::kHello:
      Refuse(conn, absl::StatusCode::kFailedPrecondition,
             conn.server_nonce.empty() ? "authentication is off on this store (it was started without a job secret)"
                                       : "handshake already done");
      return;
  }
  Reject(conn, absl::StrCat("unknown opcode ", opcode));
}

void ServerLoop::HandleHandshake(Connection& conn, uint8_t opcode, FieldReader& reader) {
  if (opcode != static_cast<uint8_t>(Opcode::kHello)) {
    Refuse(conn, absl::StatusCode::kUnauthenticated,
           absl::StrCat("this store admits only processes that know the job secret (BRAID_JOB_SECRET); got ",
                        OpcodeName(opcode), " before the handshake"));
    return;
  }
  std::string field;
  if (!reader.String(&field) || reader.remaining() != 0) {
    Refuse(conn, absl::StatusCode::kUnauthenticated, "malformed handshake");
    return;
  }
  if (conn.phase == Phase::kAwaitingHello) {
    absl::StatusOr<std::string> nonce = JobSecret::Nonce();
    if (field.size() != JobSecret::kNonceBytes || !nonce.ok()) {
      Refuse(conn, absl::StatusCode::kUnauthenticated, "malformed handshake nonce");
      return;
    }
    conn.client_nonce = std::move(field);
    conn.server_nonce = *std::move(nonce);
    conn.phase = Phase::kAwaitingProof;
    Respond(conn, std::move(FrameWriter()
                                .U8(0)
                                .String(conn.server_nonce)
                                .String(options_.secret.Prove("store-server", conn.client_nonce, conn.server_nonce)))
                      .Finish());
    return;
  }
  if (!options_.secret.Verify("store-client", conn.server_nonce, conn.client_nonce, field)) {
    Refuse(conn, absl::StatusCode::kPermissionDenied, "wrong job secret");
    return;
  }
  conn.phase = Phase::kServing;
  for (auto it = handshake_deadlines_.begin(); it != handshake_deadlines_.end(); ++it) {
    if (it->second == conn.id) {
      handshake_deadlines_.erase(it);
      break;
    }
  }
  Respond(conn, std::move(FrameWriter().U8(0)).Finish());
}

void ServerLoop::Refuse(Connection& conn, absl::StatusCode code, absl::string_view why) {
  RespondError(conn, code, why);  // best effort: the client learns why
  BRAID_LOG(WARNING) << "store server on port " << port_ << ": refused " << conn.peer << ": " << why;
  Close(conn);
}

void ServerLoop::ExpireHandshakes() {
  const absl::Time now = absl::Now();
  while (!handshake_deadlines_.empty() && handshake_deadlines_.begin()->first <= now) {
    const uint64_t id = handshake_deadlines_.begin()->second;
    handshake_deadlines_.erase(handshake_deadlines_.begin());
    if (Connection* conn = Find(id); conn != nullptr && conn->phase != Phase::kServing) {
      Refuse(*conn, absl::StatusCode::kDeadlineExceeded,
             absl::StrCat("no handshake within ", absl::FormatDuration(options_.handshake_timeout)));
    }
  }
}

void ServerLoop::Park(Connection& conn, Parked parked) {
  waiters_[parked.waiting_on].push_back(conn.id);
  if (parked.deadline != absl::InfiniteFuture()) deadlines_.emplace(parked.deadline, conn.id);
  conn.parked = std::move(parked);
  UpdateInterest(conn);
}

void ServerLoop::Unpark(Connection& conn) {
  if (!conn.parked) return;
  const Parked& parked = *conn.parked;
  if (parked.deadline != absl::InfiniteFuture()) deadlines_.erase({parked.deadline, conn.id});
  if (auto it = waiters_.find(parked.waiting_on); it != waiters_.end()) {
    std::vector<uint64_t>& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), conn.id), ids.end());
    if (ids.empty()) waiters_.erase(it);
  }
  conn.parked.reset();
  // The caller answers (or closes) next; then the connection may read again.
  ready_.push_back(conn.id);
}

void ServerLoop::WakeKey(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const std::vector<uint64_t> ids = std::move(it->second);
  waiters_.erase(it);
  for (uint64_t id : ids) {
    Connection* conn = Find(id);
    if (conn == nullptr || !conn->parked || conn->parked->waiting_on != key) continue;
    Parked& parked = *conn->parked;
    std::string missing;
    if (parked.op == Opcode::kWait && !HasAll(parked.keys, &missing)) {
      // Another key is still missing: wait for that one now.
      parked.waiting_on = missing;
      waiters_[missing].push_back(id);
      continue;
    }
    const Opcode op = parked.op;
    Unpark(*conn);
    if (op == Opcode::kGet) {
      Respond(*conn, std::move(FrameWriter().U8(0).String(table_.at(key))).Finish());
    } else {
      Respond(*conn, std::move(FrameWriter().U8(0)).Finish());
    }
  }
}

void ServerLoop::ExpireWaiters() {
  const absl::Time now = absl::Now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    Connection* conn = Find(id);
    if (conn == nullptr || !conn->parked) {  // cannot happen: Close unparks
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    const Parked parked = *conn->parked;  // a copy: Unpark clears the original
    Unpark(*conn);
    std::string message;
    if (parked.op == Opcode::kGet) {
      message = absl::StrCat("timed out after ", parked.timeout_ms, " ms waiting for key ",
                             Quoted(parked.keys[0]));
    } else {
      std::vector<std::string> missing;
      for (const std::string& key : parked.keys) {
        if (!table_.contains(key)) missing.push_back(key);
      }
      message = absl::StrCat("timed out after ", parked.timeout_ms, " ms waiting for keys ",
                             QuotedList(parked.keys), " (missing ", QuotedList(missing), ")");
    }
    RespondError(*conn, absl::StatusCode::kDeadlineExceeded, message);
  }
}

void ServerLoop::DrainReady() {
  while (!ready_.empty()) {
    const uint64_t id = ready_.front();
    ready_.pop_front();
    Connection* conn = Find(id);
    if (conn == nullptr) continue;
    ProcessFrames(*conn);
    if (!conn->closed) UpdateInterest(*conn);
  }
}

void ServerLoop::Respond(Connection& conn, std::string frame) {
  if (conn.closed) return;
  if (conn.out.empty()) {
    conn.out = std::move(frame);
    conn.out_pos = 0;
  } else {
    conn.out.append(frame);
  }
  Flush(conn);
}

void ServerLoop::RespondError(Connection& conn, absl::StatusCode code, absl::string_view message) {
  Respond(conn, std::move(FrameWriter().U8(static_cast<uint8_t>(code)).String(message)).Finish());
}

void ServerLoop::Flush(Connection& conn) {
  while (conn.out_pos < conn.out.size()) {
    const ssize_t n = ::send(conn.fd.get(), conn.out.data() + conn.out_pos,
                             conn.out.size() - conn.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      conn.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    BRAID_LOG(DEBUG) << "store server: send to " << conn.peer
                     << " failed: " << std::strerror(errno);
    Close(conn);
    return;
  }
  if (conn.out_pos == conn.out.size()) {
    conn.out.clear();
    conn.out_pos = 0;
  }
  UpdateInterest(conn);
}

void ServerLoop::UpdateInterest(Connection& conn) {
  uint32_t want = EPOLLRDHUP;
  if (!conn.out.empty()) {
    want |= EPOLLOUT;
  } else if (!conn.parked) {
    want |= EPOLLIN;
  }
  if (want == conn.events) return;
  epoll_event event{};
  event.events = want;
  event.data.u64 = conn.id;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, conn.fd.get(), &event) < 0) {
    BRAID_LOG(WARNING) << "store server: dropping connection from " << conn.peer
                       << ": epoll_ctl failed (" << std::strerror(errno) << ")";
    Close(conn);
    return;
  }
  conn.events = want;
}

void ServerLoop::Reject(Connection& conn, absl::string_view why) {
  BRAID_LOG(WARNING) << "store server on port " << port_ << ": closing connection from "
                     << conn.peer << ": " << why;
  Close(conn);
}

void ServerLoop::Close(Connection& conn) {
  if (conn.closed) return;
  Unpark(conn);
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, conn.fd.get(), nullptr);
  conn.fd.Reset();
  conn.closed = true;
  --open_connections_;
  closed_.push_back(conn.id);
}

void ServerLoop::Reap() {
  for (uint64_t id : closed_) connections_.erase(id);
  closed_.clear();
}

void ServerLoop::CloseAll() {
  // Closing the sockets is what tells blocked clients (kUnavailable).
  connections_.clear();
  waiters_.clear();
  deadlines_.clear();
  ready_.clear();
  closed_.clear();
  open_connections_ = 0;
  listener_.reset();
  table_.clear();
}

}  // namespace store_internal

StoreServer::StoreServer(uint16_t port, UniqueFd wake_fd,
                         std::unique_ptr<store_internal::ServerLoop> loop)
    : port_(port), wake_fd_(std::move(wake_fd)), loop_(std::move(loop)) {
  store_internal::ServerLoop* raw = loop_.get();
  thread_ = std::thread([raw] {
    ::pthread_setname_np(::pthread_self(), "braid-store");
    raw->Run();
  });
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host,
                                                                uint16_t port,
                                                                StoreServerOptions options) {
  if (options.max_frame_bytes < 2 ||
      options.max_frame_bytes > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store server: max_frame_bytes must be in [2, 2^32); got ", options.max_frame_bytes));
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store server: max_connections must be at least 1; got ", options.max_connections));
  }
  absl::StatusOr<TcpListener> listener = TcpListener::Listen(host, port);
  if (!listener.ok()) {
    return Annotate(listener.status(),
                    absl::StrCat("store server: cannot listen on ", ToString({host, port})));
  }
  UniqueFd wake_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd.valid()) return ErrnoStatus(errno, "store server: eventfd");
  BRAID_ASSIGN_OR_RETURN(
      std::unique_ptr<store_internal::ServerLoop> loop,
      store_internal::ServerLoop::Create(*std::move(listener), wake_fd.get(), options));
  const uint16_t bound_port = loop->port();
  BRAID_LOG(INFO) << "store server listening on " << ToString({host, bound_port});
  return std::unique_ptr<StoreServer>(
      new StoreServer(bound_port, std::move(wake_fd), std::move(loop)));
}

StoreServer::~StoreServer() { Shutdown(); }

void StoreServer::Shutdown() {
  MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  const uint64_t one = 1;
  // An eventfd write fails only if the counter would overflow: it is then
  // readable anyway.
  [[maybe_unused]] const ssize_t written = ::write(wake_fd_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  loop_.reset();
  wake_fd_.Reset();
}

}  // namespace braid
