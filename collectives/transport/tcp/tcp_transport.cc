#include "collectives/transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/bytes.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"

namespace braid {

namespace {

BRAID_ENV_KNOB(kTcpAddrKnob, "BRAID_TCP_ADDR", "",
               "Address other ranks use to reach this one over tcp (default: the one routing to the store).");

std::string RemoteAddress(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  char text[INET6_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "an unknown peer";
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return absl::StrCat(text, ":", ntohs(v4->sin_port));
  }
  return "an IPv6 peer";
}

absl::Status SendText(int fd, const std::string& text, Deadline deadline) {
  return SendAll(fd, absl::MakeConstSpan(reinterpret_cast<const std::byte*>(text.data()), text.size()), deadline);
}

absl::StatusOr<std::string> RecvText(int fd, size_t bytes, Deadline deadline) {
  std::string text(bytes, '\0');
  BRAID_RETURN_IF_ERROR(RecvAll(fd, absl::MakeSpan(reinterpret_cast<std::byte*>(text.data()), bytes), deadline));
  return text;
}

// The connecting side of the job-secret handshake (base/auth.h): send a
// nonce, check the acceptor's proof, send ours. Mutual, so neither side can be
// impersonated; the secret itself never crosses the wire.
absl::Status ProveToAcceptor(int fd, const JobSecret& secret, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::string mine, JobSecret::Nonce());
  BRAID_RETURN_IF_ERROR(SendText(fd, mine, deadline));
  BRAID_ASSIGN_OR_RETURN(std::string theirs, RecvText(fd, JobSecret::kNonceBytes, deadline));
  BRAID_ASSIGN_OR_RETURN(std::string proof, RecvText(fd, JobSecret::kProofBytes, deadline));
  if (!secret.Verify("tcp-accept", mine, theirs, proof)) {
    return absl::PermissionDeniedError("the peer does not know this job's secret (BRAID_JOB_SECRET differs)");
  }
  return SendText(fd, secret.Prove("tcp-connect", theirs, mine), deadline);
}

// `attempt` (a connect or an accept) in slices up to `deadline`, asking
// bootstrap.CalledOff() between them: a peer that died after the address
// exchange must not hold the set-up until the deadline.
template <typename Attempt>
absl::StatusOr<UniqueFd> SlicedUntilCalledOff(Bootstrap& bootstrap, Deadline deadline, Attempt attempt) {
  return InSlices(deadline, absl::Milliseconds(200), attempt, [&] { return bootstrap.CalledOff(); });
}

absl::Status CheckConnector(int fd, const JobSecret& secret, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::string theirs, RecvText(fd, JobSecret::kNonceBytes, deadline));
  BRAID_ASSIGN_OR_RETURN(std::string mine, JobSecret::Nonce());
  BRAID_RETURN_IF_ERROR(SendText(fd, mine + secret.Prove("tcp-accept", theirs, mine), deadline));
  BRAID_ASSIGN_OR_RETURN(std::string proof, RecvText(fd, JobSecret::kProofBytes, deadline));
  if (!secret.Verify("tcp-connect", mine, theirs, proof)) return absl::PermissionDeniedError("wrong job secret");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(Bootstrap& bootstrap, Deadline deadline,
                                                                   TcpTransportOptions options) {
  std::unique_ptr<TcpTransport> transport(new TcpTransport(bootstrap.rank(), bootstrap.size(), options));
  BRAID_RETURN_IF_ERROR(Annotate(transport->SetUp(bootstrap, deadline, options),
                                 absl::StrCat("rank ", bootstrap.rank(), ": tcp transport setup")));
  return transport;
}

absl::Status TcpTransport::SetUp(Bootstrap& bootstrap, Deadline deadline, const TcpTransportOptions& options) {
  const int me = rank();
  const int n = size();
  sockets_.resize(static_cast<size_t>(n));
  epoll_events_.assign(static_cast<size_t>(n), 0);
  read_ahead_.resize(static_cast<size_t>(n));
  for (ReadAhead& ahead : read_ahead_) ahead.bytes.resize(kReadAheadBytes);
  BRAID_ASSIGN_OR_RETURN(TcpListener listener, TcpListener::Listen("", 0));
  const std::string mine = ToString(HostPort{options.advertise_host, listener.port()});
  BRAID_ASSIGN_OR_RETURN(addresses_, bootstrap.AllGather(mine, deadline));

  // Connect up, accept down: exactly one connection per pair.
  const JobSecret& secret = options.secret;
  for (int peer = me + 1; peer < n; ++peer) {
    BRAID_ASSIGN_OR_RETURN(HostPort address, ParseHostPort(addresses_[static_cast<size_t>(peer)], 0));
    BRAID_ASSIGN_OR_RETURN(UniqueFd fd, SlicedUntilCalledOff(bootstrap, deadline, [&](Deadline slice) {
                             return ConnectTcp(address, slice);
                           }));
    FrameHeader hello;
    hello.kind = CollectiveKind::kHandshake;
    hello.root = me;
    hello.count = static_cast<uint64_t>(n);
    BRAID_RETURN_IF_ERROR(SendAll(fd.get(), AsBytes(hello), deadline));
    if (secret.enabled()) {
      BRAID_RETURN_IF_ERROR(Annotate(ProveToAcceptor(fd.get(), secret, deadline),
                                     absl::StrCat("authenticating to ", PeerName(peer))));
    }
    sockets_[static_cast<size_t>(peer)] = std::move(fd);
  }
  for (int accepted = 0; accepted < me;) {
    BRAID_ASSIGN_OR_RETURN(UniqueFd fd, SlicedUntilCalledOff(bootstrap, deadline, [&](Deadline slice) {
                             return listener.Accept(slice);
                           }));
    // A stranger gets a few seconds, not the whole setup deadline.
    const Deadline handshake_deadline = std::min(deadline, DeadlineIn(absl::Seconds(5)));
    FrameHeader hello;
    absl::Status read = RecvAll(fd.get(), AsWritableBytes(hello), handshake_deadline);
    const int peer = hello.root;
    if (!read.ok() || hello.magic != FrameHeader::kMagic || hello.kind != CollectiveKind::kHandshake ||
        hello.count != static_cast<uint64_t>(n) || peer < 0 || peer >= me ||
        sockets_[static_cast<size_t>(peer)].valid()) {
      BRAID_LOG(WARNING) << "tcp: refused a connection from " << RemoteAddress(fd.get())
                         << " that is not a rank of this group ("
                         << (read.ok() ? "bad handshake" : std::string(read.message())) << ")";
      continue;
    }
    if (secret.enabled()) {
      if (absl::Status proven = CheckConnector(fd.get(), secret, handshake_deadline); !proven.ok()) {
        BRAID_LOG(WARNING) << "tcp: refused a connection from " << RemoteAddress(fd.get()) << " claiming rank "
                           << peer << ": " << proven.message();
        continue;
      }
    }
    sockets_[static_cast<size_t>(peer)] = std::move(fd);
    ++accepted;
  }

  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return ErrnoStatus(errno, "epoll_create1");
  return absl::OkStatus();
}

TcpTransport::~TcpTransport() {
  FailAllPending(absl::CancelledError("tcp transport destroyed"));
  // Read what peers sent that nobody will: closing a socket with unread data
  // resets the connection, and the reset can discard the abort notice this
  // rank queued for that peer before it read it. Bounded: 1 MiB a socket.
  std::byte sink[4096];
  for (UniqueFd& fd : sockets_) {
    for (int i = 0; fd.valid() && i < 256; ++i) {
      if (recv(fd.get(), sink, sizeof(sink), MSG_DONTWAIT) <= 0) break;
    }
  }
}

std::string TcpTransport::PeerName(int peer) const {
  if (peer >= 0 && static_cast<size_t>(peer) < addresses_.size()) {
    return absl::StrCat("peer ", peer, " (", addresses_[static_cast<size_t>(peer)], ")");
  }
  return absl::StrCat("peer ", peer);
}

absl::StatusOr<size_t> TcpTransport::WriteSome(int peer, absl::Span<const std::byte> first,
                                               absl::Span<const std::byte> second) {
  iovec parts[2];
  int count = 0;
  if (!first.empty()) parts[count++] = {const_cast<std::byte*>(first.data()), first.size()};
  if (!second.empty()) parts[count++] = {const_cast<std::byte*>(second.data()), second.size()};
  if (count == 0) return 0;
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = static_cast<size_t>(count);
  while (true) {
    const ssize_t n = sendmsg(sockets_[static_cast<size_t>(peer)].get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EPIPE || errno == ECONNRESET) {
      return absl::UnavailableError("the connection was closed by the peer (process exited or died?)");
    }
    return ErrnoStatus(errno, "sendmsg");
  }
}

absl::StatusOr<size_t> TcpTransport::Receive(int peer, absl::Span<std::byte> data, int flags) {
  while (true) {
    const ssize_t n = recv(sockets_[static_cast<size_t>(peer)].get(), data.data(), data.size(), flags | MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return absl::UnavailableError("the connection was closed by the peer (process exited or died?)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == ECONNRESET) return absl::UnavailableError("the connection was reset by the peer (process died?)");
    return ErrnoStatus(errno, (flags & MSG_PEEK) != 0 ? "recv(MSG_PEEK)" : "recv");
  }
}

absl::StatusOr<size_t> TcpTransport::ReadSome(int peer, absl::Span<std::byte> data) {
  if (data.empty()) return 0;
  ReadAhead& ahead = read_ahead_[static_cast<size_t>(peer)];
  if (ahead.end == ahead.begin) {
    // A large read goes straight into place; a small one (a frame's header)
    // takes what else has arrived with it, a small payload most often.
    if (data.size() >= kReadAheadBytes) return Receive(peer, data, 0);
    BRAID_ASSIGN_OR_RETURN(const size_t got, Receive(peer, absl::MakeSpan(ahead.bytes), 0));
    ahead.begin = 0;
    ahead.end = got;
  }
  const size_t n = std::min(data.size(), ahead.end - ahead.begin);
  std::memcpy(data.data(), ahead.bytes.data() + ahead.begin, n);
  ahead.begin += n;
  return n;
}

absl::Status TcpTransport::WaitReady(absl::Span<const Interest> interests, Deadline until) {
  // Only peers with pending work are registered: an idle socket whose peer
  // closed would otherwise report EPOLLHUP on every wait.
  for (const Interest& interest : interests) {
    const ReadAhead& ahead = read_ahead_[static_cast<size_t>(interest.peer)];
    if (interest.read && ahead.end != ahead.begin) return absl::OkStatus();  // read ahead: there already
  }
  std::vector<uint32_t> wanted(static_cast<size_t>(size()), 0);
  for (const Interest& interest : interests) {
    wanted[static_cast<size_t>(interest.peer)] =
        (interest.write ? EPOLLOUT : 0u) | (interest.read ? EPOLLIN : 0u) | EPOLLRDHUP;
  }
  for (int peer = 0; peer < size(); ++peer) {
    uint32_t& current = epoll_events_[static_cast<size_t>(peer)];
    const uint32_t events = wanted[static_cast<size_t>(peer)];
    if (current == events || !sockets_[static_cast<size_t>(peer)].valid()) continue;
    epoll_event event{};
    event.events = events;
    event.data.u32 = static_cast<uint32_t>(peer);
    const int op = current == 0 ? EPOLL_CTL_ADD : (events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD);
    if (epoll_ctl(epoll_.get(), op, sockets_[static_cast<size_t>(peer)].get(), &event) < 0) {
      return ErrnoStatus(errno, "epoll_ctl");
    }
    current = events;
  }
  epoll_event events[16];
  const int n = epoll_wait(epoll_.get(), events, 16, PollTimeoutMs(until));
  if (n < 0 && errno != EINTR) return ErrnoStatus(errno, "epoll_wait");
  return absl::OkStatus();
}

absl::StatusOr<size_t> TcpTransport::PeekSome(int peer, absl::Span<std::byte> data) {
  ReadAhead& ahead = read_ahead_[static_cast<size_t>(peer)];
  const size_t held = ahead.end - ahead.begin;
  if (held >= data.size()) {
    std::memcpy(data.data(), ahead.bytes.data() + ahead.begin, data.size());
    return data.size();
  }
  if (held == 0) return Receive(peer, data, MSG_PEEK);
  // What is held first, then whatever follows it on the socket, unread.
  std::memcpy(data.data(), ahead.bytes.data() + ahead.begin, held);
  absl::StatusOr<size_t> more = Receive(peer, data.subspan(held), MSG_PEEK);
  return held + (more.ok() ? *more : 0);  // a stream that ended after what is held: that much
}

void TcpTransport::CloseStreams(const absl::Status&) {
  // Half-close: the peers read our abort notices, then the end of the stream.
  // Closing outright while their data sits unread would reset the connection
  // and could discard the notice; the sockets close with the transport.
  for (UniqueFd& fd : sockets_) {
    if (fd.valid()) shutdown(fd.get(), SHUT_WR);
  }
}

absl::StatusOr<TcpTransportOptions> TcpTransportOptionsFromEnv(const HostPort& route) {
  TcpTransportOptions options;
  BRAID_ASSIGN_OR_RETURN(absl::optional<absl::Duration> spin, SpinFromEnv());
  if (spin.has_value()) options.spin = *spin;
  if (kTcpAddrKnob.IsSet()) {
    options.advertise_host = kTcpAddrKnob.String();
  } else {
    BRAID_ASSIGN_OR_RETURN(options.advertise_host, LocalAddressToward(route));
  }
  return options;
}

}  // namespace braid
