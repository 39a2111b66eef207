// StoreServer: one thread, one epoll loop, non-blocking sockets.
//
// Life of a request: bytes are read into the connection's input buffer; each
// complete frame is parsed and answered at once, except a Get/Wait whose key
// is missing, which is "parked": registered under one missing key (and, when
// it has a timeout, in the deadline index) until a write creates that key or
// the timeout passes. A parked connection stays watched for input, which
// can only be its client hanging up (it sends nothing more until answered;
// anything else breaks the protocol and closes it), so at most one request
// per connection is ever outstanding and parking costs no epoll_ctl (each a
// system call, per waiter, twice: thousands at a rendezvous). A connection whose answer
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
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/deadline.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/socket.h"
#include "base/status.h"
#include "store/server_loop.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace braid {
namespace store_internal {
namespace {

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

}  // namespace

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
    // Not reading from it (output pending), and it hung up: the client is
    // gone and nobody is left to answer.
    BRAID_LOG(DEBUG) << "store server: " << conn.peer << " hung up"
                     << (conn.parked ? " while waiting" : "");
    Close(conn);
  }
}

void ServerLoop::ReadAvailable(Connection& conn) {
  if (conn.parked) {
    ReadWhileParked(conn);
    return;
  }
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
  want |= conn.out.empty() ? EPOLLIN : EPOLLOUT;
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
  conn.fd.Reset();  // closing the only descriptor of the socket takes it out of the epoll set
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
  // Every worker of a job connects at once: a queue as long as the kernel
  // allows (net.core.somaxconn), or the burst's tail waits for SYN
  // retransmits, a second and more each.
  absl::StatusOr<TcpListener> listener = TcpListener::Listen(host, port, store_internal::kListenBacklog);
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
