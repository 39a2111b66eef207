// The tcp transport: one TCP connection per pair of ranks, non-blocking
// sockets with TCP_NODELAY, progress through epoll. Works across hosts.
//
// Connection setup (Create): every rank listens on a free port, the
// addresses go around through the Bootstrap, then each rank connects to every
// higher rank and accepts from every lower one; the connecting side sends a
// handshake frame naming its rank and the group size, so a stray or
// mismatched connection is refused; with a job secret both sides then prove
// they know it (HMAC over fresh nonces), so a stranger is refused too.
#ifndef BRAID_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_
#define BRAID_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/auth.h"
#include "base/fd.h"
#include "base/socket.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/stream_transport.h"

namespace braid {

struct TcpTransportOptions {
  // The address other ranks use to reach this one (this host's address on
  // the network the job uses). Listening is on every interface.
  std::string advertise_host = "127.0.0.1";
  // How long Wait polls before blocking in epoll.
  absl::Duration spin = absl::Microseconds(100);
  // Ranks sharing this host's cores (LOCAL_WORLD_SIZE); 0 = unknown. Polls
  // yield the core when they may outnumber the cores (see StreamTransport).
  int ranks_on_host = 0;
  // When enabled, every connection runs the job-secret handshake after the
  // rank handshake; a stranger is refused and logged (base/auth.h).
  JobSecret secret;
};

// TcpTransportOptions from the environment: BRAID_SPIN_US, and
// BRAID_TCP_ADDR as the advertised address (default: this host's address on
// the route toward `route`, e.g. the store). The secret and ranks_on_host are
// the caller's.
absl::StatusOr<TcpTransportOptions> TcpTransportOptionsFromEnv(const HostPort& route);

class TcpTransport final : public StreamTransport {
 public:
  // Collective over `bootstrap`: every rank calls it. Blocks until every
  // connection is up, or `deadline`.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(Bootstrap& bootstrap, Deadline deadline,
                                                              TcpTransportOptions options = {});
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }

 protected:
  absl::StatusOr<size_t> WriteSome(int peer, absl::Span<const std::byte> first,
                                   absl::Span<const std::byte> second) override;
  absl::StatusOr<size_t> ReadSome(int peer, absl::Span<std::byte> data) override;
  absl::Status WaitReady(absl::Span<const Interest> interests, Deadline until) override;
  absl::StatusOr<size_t> PeekSome(int peer, absl::Span<std::byte> data) override;
  void CloseStreams(const absl::Status& reason) override;
  std::string PeerName(int peer) const override;

 private:
  TcpTransport(int rank, int size, const TcpTransportOptions& options)
      : StreamTransport(rank, size, options.spin, options.ranks_on_host) {}
  absl::Status SetUp(Bootstrap& bootstrap, Deadline deadline, const TcpTransportOptions& options);

  // recv without waiting; 0 when nothing is there (MSG_PEEK in `flags`: unread).
  absl::StatusOr<size_t> Receive(int peer, absl::Span<std::byte> data, int flags);

  // Bytes taken from a peer's socket before they were asked for: a small read
  // takes up to kReadAheadBytes, so a frame's header and a small payload cost
  // one system call, not two. ReadSome and PeekSome serve them first.
  static constexpr size_t kReadAheadBytes = 4096;
  struct ReadAhead {
    std::vector<std::byte> bytes;  // kReadAheadBytes
    size_t begin = 0;              // [begin, end) not yet read
    size_t end = 0;
  };

  UniqueFd epoll_;
  std::vector<ReadAhead> read_ahead_;   // by peer
  std::vector<UniqueFd> sockets_;       // by peer; invalid for self
  std::vector<uint32_t> epoll_events_;  // events registered per peer
  std::vector<std::string> addresses_;  // "host:port" per rank, for messages
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_TCP_TCP_TRANSPORT_H_
