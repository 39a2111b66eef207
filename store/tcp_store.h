// The TCP key-value store: StoreServer serves one in-memory table to many
// clients; TcpStore is the client, a Store over one connection. This is what
// rendezvous and bootstrap use (PyTorch's TCPStore in role), with deadlines on
// every wait and absl::Status errors instead of exceptions.
//
// The server runs one thread: an epoll loop over non-blocking sockets. It
// never blocks on a client. A Get or Wait for a key that does not exist yet
// (an Arrive for a counter short of its count) is parked on the server and
// answered when the key appears (the count is reached) or when the timeout
// carried in the request runs out (then the server itself answers
// kDeadlineExceeded), so a waiting client costs nothing but its socket.
// A client that sends a malformed or oversized frame loses its connection (the
// server logs a warning naming the peer and the fault); everyone else is
// served on.
//
// Wire protocol, version 1. Every message is a frame:
//     u32 payload_length (little-endian) | payload[payload_length]
// Request payload:   u8 version (=1) | u8 opcode | fields
// Response payload:  u8 code (absl::StatusCode; 0 = OK) | fields if OK,
//                    else str message
// Fields: str = u32 length (LE) + bytes; i64 = 8 bytes LE two's complement;
// u8 bool = 0/1. timeout_ms is the time the client has left, in ms; < 0 means
// no timeout. Requests and their response fields:
//     1 Set         str key, str value                -> (nothing)
//     2 Get         str key, i64 timeout_ms           -> str value
//     3 Add         str key, i64 delta                -> i64 new value
//     4 CompareSet  str key, str expected, str desired -> str value now stored
//     5 Wait        u32 n, str key * n, i64 timeout_ms -> (nothing)
//     6 Check       u32 n, str key * n                -> u8 all exist
//     7 Delete      str key                           -> u8 existed
//     8 NumKeys     (nothing)                         -> i64 count
//     9 Arrive      str key, i64 count, i64 timeout_ms -> i64 arrival (once the counter >= count)
//    10 Put         str key, str value                -> no answer (Set, as TcpStore sends it)
//     0 Hello       str client_nonce                  -> str server_nonce, str server_proof
//     0 Hello       str client_proof                  -> (nothing)
// Authentication: a server started with a job secret (base/auth.h) admits a
// connection only after the Hello pair, the client's first two requests:
// server_proof = HMAC(secret, "store-server" | client_nonce | server_nonce),
// client_proof = HMAC(secret, "store-client" | server_nonce | client_nonce),
// 32-byte nonces; each side checks the other's proof, so the secret never
// crosses the wire. Any other request first, a wrong proof, or no handshake
// within StoreServerOptions::handshake_timeout: an error answer (kUnauthenticated / kPermissionDenied), a
// warning in the server's log naming the peer, and the connection closed.
// Hello to a server without a secret is kFailedPrecondition. A frame with another
// version, an unknown opcode, truncated fields or trailing bytes, or a length
// over max_frame_bytes closes that connection; the length is checked before
// anything is allocated for the payload. A client sends one request and waits
// for its response before the next (a Put has none: the next follows it).
#ifndef BRAID_STORE_TCP_STORE_H_
#define BRAID_STORE_TCP_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/auth.h"
#include "base/deadline.h"
#include "base/fd.h"
#include "base/socket.h"
#include "store/store.h"

namespace braid {

struct StoreServerOptions {
  // Frames (requests) with a longer payload close their connection. This also
  // bounds a value's size.
  size_t max_frame_bytes = 64 << 20;
  // Connections beyond this many are accepted and closed at once, with a warning.
  int max_connections = 1024;
  // When enabled, only clients that prove the secret are served; a
  // connection that has not within handshake_timeout is closed, so strangers
  // cannot hold connection slots.
  JobSecret secret;
  absl::Duration handshake_timeout = absl::Seconds(10);
};

namespace store_internal {
class ServerLoop;
}  // namespace store_internal

// The store's server. Owns the table, the listening socket and the thread that
// serves it. Thread-safe: any thread may call port() and Shutdown().
class StoreServer {
 public:
  // Listens on host:port (port 0 = a free port; "" or "0.0.0.0" = every IPv4
  // interface) and starts serving on a new thread; returns once it listens.
  // Errors: kInvalidArgument for bad options; bind/listen failures with the
  // code Abseil maps errno to (a port in use is kFailedPrecondition), naming
  // host:port.
  // Any thread.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const std::string& host, uint16_t port,
                                                            StoreServerOptions options = {});

  // Shuts down (see Shutdown).
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // The port the server listens on (the one picked when Start got port 0).
  uint16_t port() const { return port_; }

  // Stops serving: closes the listener and every connection (clients blocked
  // in Get/Wait see kUnavailable at once), drops the table and joins the
  // server thread. Blocks until the thread has exited (milliseconds).
  // Idempotent; any thread (a second concurrent call waits for the first).
  void Shutdown();

 private:
  StoreServer(uint16_t port, UniqueFd wake_fd, std::unique_ptr<store_internal::ServerLoop> loop);

  const uint16_t port_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // eventfd the server thread polls; written by Shutdown to stop it.
  UniqueFd wake_fd_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<store_internal::ServerLoop> loop_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

// A Store client over one TCP connection to a StoreServer. Thread-safe: any
// thread may call any method, but requests are serialized on the one
// connection, so a Get blocked waiting for a key holds up the other threads'
// calls on the same TcpStore until it returns (give each waiting thread its
// own TcpStore when that matters).
//
// Deadlines: Get, Wait and Arrive send the time left to the server, which answers
// kDeadlineExceeded itself at the deadline; the client also stops waiting
// at its deadline plus kServerGrace. The other calls use the default timeout
// (BRAID_TIMEOUT_SEC) for the round trip.
//
// If the connection breaks during a request (server gone, shut down, or
// silent past the deadline) the call returns kUnavailable (kDeadlineExceeded
// for a silent server) naming the server's address, and the TcpStore is
// broken: later calls return kUnavailable at once. It does not reconnect,
// because a request already sent may have been applied (an Add, say);
// connect a new TcpStore instead.
class TcpStore : public Store {
 public:
  // How long past a request's deadline the client waits for the server's
  // own "timed out" answer before giving up on the connection.
  static constexpr absl::Duration kServerGrace = absl::Seconds(2);
  // Responses longer than this are treated as a broken server.
  static constexpr size_t kMaxResponseBytes = size_t{1} << 30;

  // Connects to a StoreServer at `address`, retrying while nothing listens
  // there yet, until `deadline`: kDeadlineExceeded naming the address then.
  // A first round trip (the Hello handshake, or NumKeys without a secret)
  // must be answered by `deadline`: a listener that is not a store fails
  // here, the message saying so. With an enabled `secret`, the handshake:
  // kPermissionDenied when the server does not prove the same secret (or
  // refuses ours), kFailedPrecondition when it has none. Blocks. Any thread.
  static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(const HostPort& address, Deadline deadline,
                                                           const JobSecret& secret = JobSecret());

  // Closes the connection. Must not run while another thread is in a call.
  ~TcpStore() override = default;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  const HostPort& address() const { return address_; }

  // Store: each is one round trip, blocking the calling thread until the
  // server answers; see Store for the semantics. Set excepted: it returns
  // once the request is sent (a Put, as c10d's TCPStore sends a set), and
  // the server applies it before this client's next request. It has no
  // answer: a Set the server refused (a frame over its max_frame_bytes) or
  // lost with the connection fails the client's next call, naming why.
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<int64_t> Arrive(absl::string_view key, int64_t count, Deadline deadline) override;
  absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;

 private:
  TcpStore(HostPort address, UniqueFd fd, absl::Duration io_timeout);

  // Sends one request frame and returns the response's fields (the payload
  // after an OK code), or the server's error, or the connection's.
  // `what` names the call for messages ("Get(\"key\")"). `wait_deadline` is
  // how long to wait for the answer (before the grace is added).
  absl::Status Authenticate(const JobSecret& secret, Deadline deadline);
  // Without a secret: one NumKeys round trip, so that Connect knows a store answers.
  absl::Status Probe(Deadline deadline);
  // Sends one request that has no answer (a Put).
  absl::Status SendOnly(const std::string& what, std::string frame);
  // Sends `frame` on the connection unless it is broken; `where` names the call.
  absl::Status Send(const std::string& where, const std::string& frame) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the connection for good after `cause`; the error to return.
  absl::Status Fail(const std::string& where, const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> RoundTrip(const std::string& what, std::string frame,
                                        Deadline wait_deadline);

  const HostPort address_;
  const absl::Duration io_timeout_;
  absl::Mutex mu_;
  UniqueFd fd_ ABSL_GUARDED_BY(mu_);
  // Why the connection is unusable, once it is.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // The last request sent without an answer since the last answer ("Set(\"k\")").
  std::string unanswered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace braid

#endif  // BRAID_STORE_TCP_STORE_H_
