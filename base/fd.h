// RAII file descriptors and the TCP socket helpers every network layer uses:
// listen on port 0, connect with retry until a deadline, send/recv all bytes
// with a deadline. Sockets are non-blocking; waits are poll(2) with the time
// left until the deadline, so nothing here can block forever.
#ifndef BRAID_BASE_FD_H_
#define BRAID_BASE_FD_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/deadline.h"

namespace braid {

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

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

// Sends every byte of `data` on a non-blocking socket or pipe, waiting with
// poll until `deadline`. kUnavailable if the peer closed; kDeadlineExceeded.
absl::Status SendAll(int fd, absl::Span<const std::byte> data, Deadline deadline);

// Receives exactly data.size() bytes. A clean EOF before the first byte or in
// the middle is kUnavailable ("peer closed the connection").
absl::Status RecvAll(int fd, absl::Span<std::byte> data, Deadline deadline);

// The local address this host uses to reach `remote` (routing decides; no
// packet is sent): what to advertise so that peers on that network reach us.
absl::StatusOr<std::string> LocalAddressToward(const HostPort& remote);

// This host's name (gethostname), or "unknown".
std::string HostName();

// Sets O_NONBLOCK.
absl::Status SetNonBlocking(int fd);

// Views of trivially copyable objects as bytes, for SendAll/RecvAll.
template <typename T>
absl::Span<const std::byte> AsBytes(const T& value) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(&value), sizeof(T));
}
template <typename T>
absl::Span<std::byte> AsWritableBytes(T& value) {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(&value), sizeof(T));
}

}  // namespace braid

#endif  // BRAID_BASE_FD_H_
