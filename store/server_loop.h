// Internal to store/: the StoreServer's loop (tcp_store_server.cc: sockets,
// epoll, reading and writing; server_requests.cc: what each request does to
// the table, parking and waking waiters, the handshake). See
// tcp_store_server.cc for the life of a request.
#ifndef BRAID_STORE_SERVER_LOOP_H_
#define BRAID_STORE_SERVER_LOOP_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/fd.h"
#include "base/socket.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace braid {
namespace store_internal {

// epoll data for the two non-connection fds; connections count up from 2.
inline constexpr uint64_t kListenerId = 0;
inline constexpr uint64_t kWakeId = 1;
inline constexpr uint64_t kFirstConnectionId = 2;

inline constexpr size_t kReadChunkBytes = 64 << 10;
// Reads per readiness event on one connection, so one busy client cannot
// starve the rest.
inline constexpr int kMaxReadsPerEvent = 16;
// After accept fails for lack of fds, the listener rests this long.
inline constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);
// listen(2) caps it at net.core.somaxconn.
inline constexpr int kListenBacklog = 65535;

// Where a connection stands in its protocol. With a job secret a connection
// starts in kAwaitingHello and must finish the HMAC handshake (see
// tcp_store.h) within options.handshake_timeout; until then only Opcode::kHello is
// accepted, anything else refuses and closes the connection.
enum class Phase { kAwaitingHello, kAwaitingProof, kServing };

// A Get or Wait waiting for its keys, or an Arrive for its count.
struct Parked {
  Opcode op = Opcode::kGet;
  std::vector<std::string> keys;  // Get: one key
  std::string waiting_on;         // the missing key it is registered under; Arrive: the counter
  Deadline deadline = absl::InfiniteFuture();
  int64_t timeout_ms = -1;
  int64_t count = 0;    // Arrive: what the counter must reach
  int64_t arrival = 0;  // Arrive: the counter after this client's add, its answer
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
  // A parked connection readable: its client hung up, or broke the protocol.
  void ReadWhileParked(Connection& conn);
  void OnEof(Connection& conn);
  void ProcessFrames(Connection& conn);
  void HandleRequest(Connection& conn, absl::string_view payload);
  void HandleHandshake(Connection& conn, uint8_t opcode, FieldReader& reader);
  // One request being served: its connection, its fields, its name for errors.
  struct Request {
    Connection& conn;
    FieldReader& reader;
    std::string name;
    size_t payload_bytes;
  };
  // Whether the request's fields were read whole with nothing after them;
  // false after rejecting the frame.
  bool FieldsOk(Request& r, bool parsed);
  // Put is a Set without `answer`.
  void Set(Request& r, bool answer);
  void Get(Request& r);
  void Add(Request& r);
  void Arrive(Request& r);
  // Adds `delta` to the counter at `key` into *sum, waking what waits on
  // it; false after answering the error (not a number, overflow).
  bool AddToCounter(Request& r, const std::string& key, int64_t delta, int64_t* sum);
  // Answers the Arrives parked on counter `key` whose count `value` reaches.
  void ReleaseArrivals(const std::string& key, int64_t value);
  void CompareSet(Request& r);
  void WaitOrCheck(Request& r, bool is_wait);
  void Delete(Request& r);
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
  // Parked Arrives by counter, ordered by the count each waits for.
  absl::flat_hash_map<std::string, std::set<std::pair<int64_t, uint64_t>>> arrivals_;
  std::set<std::pair<absl::Time, uint64_t>> deadlines_;
  // Connections still in the handshake, by when they must finish it.
  std::set<std::pair<absl::Time, uint64_t>> handshake_deadlines_;
  // Connections that may have whole frames buffered and were not able to
  // process them (just unparked, or just drained their output).
  std::deque<uint64_t> ready_;
  std::vector<uint64_t> closed_;
};

}  // namespace store_internal
}  // namespace braid

#endif  // BRAID_STORE_SERVER_LOOP_H_
