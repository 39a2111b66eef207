#include "base/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"

namespace braid {

std::string ToString(const HostPort& address) {
  if (address.host.find(':') != std::string::npos) {
    return absl::StrCat("[", address.host, "]:", address.port);
  }
  return absl::StrCat(address.host, ":", address.port);
}

absl::StatusOr<HostPort> ParseHostPort(const std::string& text, uint16_t default_port) {
  HostPort result;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad address \"", text, "\": missing ']'"));
    }
    result.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') {
        return absl::InvalidArgumentError(absl::StrCat("bad address \"", text, "\""));
      }
      port_text = text.substr(close + 2);
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon != std::string::npos && text.find(':') == colon) {
      result.host = text.substr(0, colon);
      port_text = text.substr(colon + 1);
    } else {
      result.host = text;  // a bare name, or a bare IPv6 address
    }
  }
  if (result.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("bad address \"", text, "\": no host"));
  }
  result.port = default_port;
  if (!port_text.empty()) {
    uint32_t port = 0;
    if (!absl::SimpleAtoi(port_text, &port) || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("bad port in \"", text, "\""));
    }
    result.port = static_cast<uint16_t>(port);
  }
  return result;
}

namespace {

// A connected socket (made non-blocking when created, SOCK_NONBLOCK: no
// fcntl round trips per connection) sends small frames at once.
absl::Status TuneConnectedSocket(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
    return ErrnoStatus(errno, "setsockopt(TCP_NODELAY)");
  }
  return absl::OkStatus();
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoPtr> Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve \"", host, "\": ", ::gai_strerror(rc)));
  }
  return AddrInfoPtr(result);
}

}  // namespace

absl::StatusOr<std::string> LocalAddressToward(const HostPort& remote) {
  BRAID_ASSIGN_OR_RETURN(AddrInfoPtr info, Resolve(remote.host, remote.port == 0 ? 9 : remote.port, false));
  for (addrinfo* ai = info.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid() || ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) < 0) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* address = local.ss_family == AF_INET6
                              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, address, text, sizeof(text)) != nullptr) return std::string(text);
  }
  return absl::UnavailableError(absl::StrCat("no local address routes to ", ToString(remote)));
}

absl::StatusOr<TcpListener> TcpListener::Listen(const std::string& host, uint16_t port, int backlog) {
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  BRAID_ASSIGN_OR_RETURN(AddrInfoPtr info, Resolve(bind_host, port, /*passive=*/true));
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* ai = info.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoStatus(errno, "socket");
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) < 0) {
      last = ErrnoStatus(errno, absl::StrCat("bind ", ToString({bind_host, port})));
      continue;
    }
    if (::listen(fd.get(), backlog) < 0) {
      last = ErrnoStatus(errno, "listen");
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) < 0) {
      return ErrnoStatus(errno, "getsockname");
    }
    const uint16_t bound_port =
        bound.ss_family == AF_INET6
            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    BRAID_RETURN_IF_ERROR(SetNonBlocking(fd.get()));
    return TcpListener(std::move(fd), bound_port);
  }
  return last;
}

absl::StatusOr<UniqueFd> TcpListener::Accept(Deadline deadline) const {
  while (true) {
    UniqueFd fd(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.valid()) {
      BRAID_RETURN_IF_ERROR(TuneConnectedSocket(fd.get()));
      return fd;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      BRAID_RETURN_IF_ERROR(PollOne(fd_.get(), POLLIN, deadline,
                                    absl::StrCat("accept on port ", port_).c_str()));
      continue;
    }
    return ErrnoStatus(errno, "accept");
  }
}

absl::StatusOr<UniqueFd> ConnectTcp(const HostPort& address, Deadline deadline) {
  absl::Duration backoff = absl::Milliseconds(1);
  absl::Status last = absl::UnavailableError("no attempt made");
  while (true) {
    absl::StatusOr<AddrInfoPtr> info = Resolve(address.host, address.port, /*passive=*/false);
    if (!info.ok()) {
      last = info.status();
    } else {
      for (addrinfo* ai = info->get(); ai != nullptr; ai = ai->ai_next) {
        UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                             ai->ai_protocol));
        if (!fd.valid()) {
          last = ErrnoStatus(errno, "socket");
          continue;
        }
        int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
        if (rc < 0 && errno == EINPROGRESS) {
          absl::Status ready = PollOne(fd.get(), POLLOUT, deadline, "connect");
          if (!ready.ok()) {
            last = ready;
            continue;
          }
          int error = 0;
          socklen_t length = sizeof(error);
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
          rc = error == 0 ? 0 : -1;
          errno = error;
        }
        if (rc == 0) {
          BRAID_RETURN_IF_ERROR(TuneConnectedSocket(fd.get()));
          return fd;
        }
        last = ErrnoStatus(errno, "connect");
      }
    }
    if (Expired(deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "connect to ", ToString(address), " gave up at its deadline; last error: ", last.message()));
    }
    // The peer may not be listening yet: back off, bounded by the deadline.
    absl::SleepFor(std::min(backoff, std::max(absl::ZeroDuration(), deadline - absl::Now())));
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace braid
