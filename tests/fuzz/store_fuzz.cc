// libFuzzer target: the store server's protocol parser, through a real
// StoreServer on loopback. The first input byte picks a server with or
// without a job secret (so the handshake is fuzzed too); the rest goes down
// a fresh connection, which is then half-closed. Whatever arrives, the server
// must keep serving: a well-behaved client's round trip must still succeed.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "base/auth.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/socket.h"
#include "store/tcp_store.h"

namespace {

struct Server {
  std::unique_ptr<braid::StoreServer> server;
  std::unique_ptr<braid::TcpStore> member;
};

Server Start(bool with_secret) {
  braid::SetMinLogLevel(braid::LogLevel::kError);  // every refusal logs a warning
  braid::StoreServerOptions options;
  options.max_frame_bytes = 1 << 20;
  options.handshake_timeout = absl::Milliseconds(50);
  if (with_secret) options.secret = braid::JobSecret("fuzz-secret");
  Server s;
  s.server = *braid::StoreServer::Start("127.0.0.1", 0, options);
  s.member = *braid::TcpStore::Connect({"127.0.0.1", s.server->port()}, braid::DeadlineIn(absl::Seconds(10)),
                                       options.secret);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server plain = Start(false);
  static Server secret = Start(true);
  if (size == 0) return 0;
  Server& target = (data[0] & 1) ? secret : plain;
  absl::StatusOr<braid::UniqueFd> fd =
      braid::ConnectTcp({"127.0.0.1", target.server->port()}, braid::DeadlineIn(absl::Seconds(5)));
  if (!fd.ok()) std::abort();
  (void)braid::SendAll(fd->get(), absl::MakeConstSpan(reinterpret_cast<const std::byte*>(data + 1), size - 1),
                       braid::DeadlineIn(absl::Seconds(1)));
  ::shutdown(fd->get(), SHUT_WR);
  // Read what comes back for a moment (a parked Get may never answer).
  char buffer[4096];
  braid::Deadline until = braid::DeadlineIn(absl::Milliseconds(5));
  while (!braid::Expired(until)) {
    const ssize_t n = ::recv(fd->get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) break;
  }
  fd->Reset();
  if (!target.member->NumKeys().ok()) std::abort();  // the server must still serve the job
  return 0;
}
