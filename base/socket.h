// The TCP socket helpers every network layer uses: addresses ("host:port"),
// listening on port 0, connecting with retry until a deadline, the local
// address toward a peer, and this host's name. Sockets are non-blocking,
// with TCP_NODELAY; their waits are base/fd.h's.
#ifndef BRAID_BASE_SOCKET_H_
#define BRAID_BASE_SOCKET_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/deadline.h"
#include "base/fd.h"

namespace braid {

// A host and port; `host` is a numeric address or a name getaddrinfo resolves.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
std::string ToString(const HostPort& address);
// Parses "host:port", "[v6]:port" or "host" (then port = default_port).
absl::StatusOr<HostPort> ParseHostPort(const std::string& text, uint16_t default_port);

// A listening TCP socket. Port 0 picks a free port; port() tells which.
class TcpListener {
 public:
  // Binds `host` ("" or "0.0.0.0" = every IPv4 interface) and listens.
  static absl::StatusOr<TcpListener> Listen(const std::string& host, uint16_t port,
                                            int backlog = 128);
  uint16_t port() const { return port_; }
  int fd() const { return fd_.get(); }
  // Waits for one connection until `deadline`; the socket returned is
  // non-blocking with TCP_NODELAY. kDeadlineExceeded when none came.
  absl::StatusOr<UniqueFd> Accept(Deadline deadline) const;

 private:
  TcpListener(UniqueFd fd, uint16_t port) : fd_(std::move(fd)), port_(port) {}
  UniqueFd fd_;
  uint16_t port_ = 0;
};

// Connects to `address`, retrying refused/unreachable attempts with backoff
// (the peer may not be listening yet) until `deadline`. The socket returned is
// non-blocking with TCP_NODELAY. The error names the address and the last cause.
absl::StatusOr<UniqueFd> ConnectTcp(const HostPort& address, Deadline deadline);

// The local address this host uses to reach `remote` (routing decides; no
// packet is sent): what to advertise so that peers on that network reach us.
absl::StatusOr<std::string> LocalAddressToward(const HostPort& remote);

// This host's name (gethostname), or "unknown".
std::string HostName();

}  // namespace braid

#endif  // BRAID_BASE_SOCKET_H_
