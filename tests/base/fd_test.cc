// Tests of base/fd.h with real sockets and pipes: UniqueFd, ParseHostPort,
// TcpListener, ConnectTcp, SendAll/RecvAll and their deadlines and errors.
#include "base/fd.h"
#include "base/socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "tests/harness/statuses.h"

namespace braid {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

absl::Span<const std::byte> Bytes(const std::string& text) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(text.data()), text.size());
}
absl::Span<std::byte> WritableBytes(std::string& text) {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(text.data()), text.size());
}

std::string Pattern(size_t bytes, uint32_t seed) {
  std::string text(bytes, '\0');
  uint32_t x = seed;
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 1664525u + 1013904223u;
    text[i] = static_cast<char>(x >> 24);
  }
  return text;
}

// A connected pair of loopback TCP sockets.
struct TcpPair {
  UniqueFd client;
  UniqueFd server;
};

TcpPair Connected() {
  absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
  REQUIRE(listener.ok());
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  absl::StatusOr<UniqueFd> client = ConnectTcp({"127.0.0.1", listener->port()}, deadline);
  REQUIRE(client.ok());
  absl::StatusOr<UniqueFd> server = listener->Accept(deadline);
  REQUIRE(server.ok());
  return TcpPair{*std::move(client), *std::move(server)};
}

TEST_CASE("UniqueFd closes on destruction and Reset, not after Release", "[base][fd]") {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const int read_end = pipe_fds[0];
  const int write_end = pipe_fds[1];
  {
    UniqueFd fd(read_end);
    CHECK(fd.valid());
    CHECK(fd.get() == read_end);
    UniqueFd moved = std::move(fd);
    CHECK_FALSE(fd.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
    CHECK(moved.get() == read_end);
    CHECK(IsOpen(read_end));
  }
  CHECK_FALSE(IsOpen(read_end));

  UniqueFd writer(write_end);
  const int raw = writer.Release();
  CHECK_FALSE(writer.valid());
  CHECK(IsOpen(raw));
  writer.Reset(raw);
  writer.Reset();
  CHECK_FALSE(IsOpen(raw));

  UniqueFd empty;
  CHECK_FALSE(empty.valid());
  CHECK(empty.get() == -1);
}

TEST_CASE("ParseHostPort", "[base][fd]") {
  struct Good {
    const char* text;
    const char* host;
    uint16_t port;
  };
  for (const Good& good : {
           Good{"127.0.0.1:29500", "127.0.0.1", 29500},
           Good{"node-7.cluster:1", "node-7.cluster", 1},
           Good{"localhost", "localhost", 4242},
           Good{"host:65535", "host", 65535},
           Good{"host:0", "host", 0},
           Good{"[::1]:8080", "::1", 8080},
           Good{"[fe80::1%eth0]:22", "fe80::1%eth0", 22},
           Good{"[::1]", "::1", 4242},
           Good{"::1", "::1", 4242},  // a bare IPv6 address has no port
           Good{"2001:db8::7", "2001:db8::7", 4242},
       }) {
    CAPTURE(good.text);
    absl::StatusOr<HostPort> parsed = ParseHostPort(good.text, 4242);
    REQUIRE(parsed.ok());
    CHECK(parsed->host == good.host);
    CHECK(parsed->port == good.port);
  }
  for (const char* bad : {"", ":80", "host:abc", "host:65536", "host:-1", "host:99999999999",
                          "host:80x", "[::1", "[::1]x", "[::1]:http", "[]:80"}) {
    CAPTURE(bad);
    absl::StatusOr<HostPort> parsed = ParseHostPort(bad, 4242);
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    if (!parsed.ok()) CHECK(absl::StrContains(parsed.status().message(), bad));
  }
}

TEST_CASE("ToString brackets IPv6 hosts and round-trips through ParseHostPort", "[base][fd]") {
  CHECK(ToString({"127.0.0.1", 80}) == "127.0.0.1:80");
  CHECK(ToString({"::1", 8080}) == "[::1]:8080");
  for (const HostPort& address : {HostPort{"10.0.0.2", 29500}, HostPort{"::1", 1}, HostPort{"db", 5}}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(ToString(address), 7);
    REQUIRE(parsed.ok());
    CHECK(parsed->host == address.host);
    CHECK(parsed->port == address.port);
  }
}

TEST_CASE("TcpListener on port 0 picks a port; Accept gives a tuned socket", "[base][fd]") {
  absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
  REQUIRE(listener.ok());
  CHECK(listener->port() != 0);
  CHECK(listener->fd() >= 0);

  // A second listener on port 0 gets another port.
  absl::StatusOr<TcpListener> other = TcpListener::Listen("", 0);
  REQUIRE(other.ok());
  CHECK(other->port() != listener->port());

  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  absl::StatusOr<UniqueFd> client = ConnectTcp({"127.0.0.1", listener->port()}, deadline);
  REQUIRE(client.ok());
  absl::StatusOr<UniqueFd> server = listener->Accept(deadline);
  REQUIRE(server.ok());
  for (int fd : {client->get(), server->get()}) {
    CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    int nodelay = 0;
    socklen_t length = sizeof(nodelay);
    REQUIRE(::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &length) == 0);
    CHECK(nodelay != 0);
  }
}

TEST_CASE("TcpListener::Accept with nobody connecting is kDeadlineExceeded", "[base][fd]") {
  absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
  REQUIRE(listener.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<UniqueFd> accepted = listener->Accept(DeadlineIn(absl::Milliseconds(100)));
  const absl::Duration elapsed = absl::Now() - start;
  CHECK(accepted.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(elapsed >= absl::Milliseconds(100));
  CHECK(elapsed < absl::Seconds(2));
}

TEST_CASE("TcpListener::Listen on a taken port fails", "[base][fd]") {
  absl::StatusOr<TcpListener> first = TcpListener::Listen("127.0.0.1", 0);
  REQUIRE(first.ok());
  absl::StatusOr<TcpListener> second = TcpListener::Listen("127.0.0.1", first->port());
  CHECK_FALSE(second.ok());
  CHECK(absl::StrContains(second.status().message(), absl::StrCat(first->port())));
}

TEST_CASE("SendAll/RecvAll move 64 MiB both ways at once without deadlock", "[base][fd]") {
  constexpr size_t kBytes = size_t{64} << 20;
  TcpPair pair = Connected();
  const std::string to_server = Pattern(kBytes, 1);
  const std::string to_client = Pattern(kBytes, 2);
  std::string at_server(kBytes, '\0');
  std::string at_client(kBytes, '\0');
  const Deadline deadline = DeadlineIn(absl::Seconds(60));

  // Both ends send and receive at the same time; with either side only
  // sending, socket buffers fill and a single-threaded exchange would stall.
  std::vector<absl::Status> statuses(4);
  {
    std::vector<std::thread> threads;
    threads.emplace_back([&] { statuses[0] = SendAll(pair.client.get(), Bytes(to_server), deadline); });
    threads.emplace_back([&] { statuses[1] = SendAll(pair.server.get(), Bytes(to_client), deadline); });
    threads.emplace_back([&] { statuses[2] = RecvAll(pair.server.get(), WritableBytes(at_server), deadline); });
    threads.emplace_back([&] { statuses[3] = RecvAll(pair.client.get(), WritableBytes(at_client), deadline); });
    for (std::thread& thread : threads) thread.join();
  }
  CHECK_ALL_OK(statuses);
  CHECK(at_server == to_server);
  CHECK(at_client == to_client);
}

TEST_CASE("RecvAll with nothing coming is kDeadlineExceeded at its deadline", "[base][fd]") {
  TcpPair pair = Connected();
  std::string buffer(16, '\0');
  const absl::Time start = absl::Now();
  const absl::Status status =
      RecvAll(pair.client.get(), WritableBytes(buffer), DeadlineIn(absl::Milliseconds(100)));
  const absl::Duration elapsed = absl::Now() - start;
  CHECK(status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(elapsed >= absl::Milliseconds(100));
  CHECK(elapsed < absl::Seconds(2));

  // Part of a message, then silence: still the deadline, not a hang.
  REQUIRE(SendAll(pair.server.get(), Bytes("abc"), DeadlineIn(absl::Seconds(5))).ok());
  CHECK(RecvAll(pair.client.get(), WritableBytes(buffer), DeadlineIn(absl::Milliseconds(50))).code() ==
        absl::StatusCode::kDeadlineExceeded);

  // An expired deadline with data ready still reads it.
  std::string three(3, '\0');
  REQUIRE(SendAll(pair.server.get(), Bytes("xyz"), DeadlineIn(absl::Seconds(5))).ok());
  absl::SleepFor(absl::Milliseconds(20));
  CHECK(RecvAll(pair.client.get(), WritableBytes(three), absl::Now()).ok());
  CHECK(three == "xyz");
}

TEST_CASE("SendAll into a full socket is kDeadlineExceeded at its deadline", "[base][fd]") {
  TcpPair pair = Connected();
  const std::string big = Pattern(size_t{64} << 20, 3);  // more than any socket buffer
  const absl::Time start = absl::Now();
  const absl::Status status = SendAll(pair.client.get(), Bytes(big), DeadlineIn(absl::Milliseconds(200)));
  CHECK(status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::Now() - start < absl::Seconds(3));
}

TEST_CASE("A peer that closes gives kUnavailable", "[base][fd]") {
  SECTION("before any byte") {
    TcpPair pair = Connected();
    pair.server.Reset();
    std::string buffer(8, '\0');
    const absl::Status status =
        RecvAll(pair.client.get(), WritableBytes(buffer), DeadlineIn(absl::Seconds(5)));
    CHECK(status.code() == absl::StatusCode::kUnavailable);
    CHECK(absl::StrContains(status.message(), "closed"));
  }
  SECTION("in the middle of a message") {
    TcpPair pair = Connected();
    REQUIRE(SendAll(pair.server.get(), Bytes("0123456789"), DeadlineIn(absl::Seconds(5))).ok());
    pair.server.Reset();
    std::string buffer(100, '\0');
    const absl::Status status =
        RecvAll(pair.client.get(), WritableBytes(buffer), DeadlineIn(absl::Seconds(5)));
    CHECK(status.code() == absl::StatusCode::kUnavailable);
    CHECK(absl::StrContains(status.message(), "after 10 of 100 bytes"));
  }
  SECTION("while sending") {
    TcpPair pair = Connected();
    pair.server.Reset();
    const std::string big = Pattern(size_t{16} << 20, 4);
    const absl::Status status = SendAll(pair.client.get(), Bytes(big), DeadlineIn(absl::Seconds(5)));
    CHECK(status.code() == absl::StatusCode::kUnavailable);
  }
}

TEST_CASE("SendAll/RecvAll work on pipes too", "[base][fd]") {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) == 0);
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  const std::string data = Pattern(size_t{1} << 20, 5);  // more than a pipe holds
  std::string received(data.size(), '\0');
  absl::Status sent;
  std::thread writer([&] { sent = SendAll(write_end.get(), Bytes(data), DeadlineIn(absl::Seconds(10))); });
  const absl::Status got = RecvAll(read_end.get(), WritableBytes(received), DeadlineIn(absl::Seconds(10)));
  writer.join();
  CHECK(sent.ok());
  CHECK(got.ok());
  CHECK(received == data);
}

TEST_CASE("SendAll to a pipe whose reader is gone is kUnavailable, not SIGPIPE", "[base][fd]") {
  // In a child with SIGPIPE at its default action, as in most programs: if
  // SendAll let the signal through, the child would die of it.
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_NONBLOCK) != 0) ::_exit(10);
    ::close(pipe_fds[0]);
    const absl::Status status = SendAll(pipe_fds[1], Bytes("hello"), DeadlineIn(absl::Seconds(5)));
    ::_exit(status.code() == absl::StatusCode::kUnavailable ? 0 : 11);
  }
  int wait_status = 0;
  REQUIRE(::waitpid(pid, &wait_status, 0) == pid);
  INFO("wait status " << wait_status << (WIFSIGNALED(wait_status) ? " (signal)" : ""));
  CHECK_FALSE(WIFSIGNALED(wait_status));
  CHECK(WIFEXITED(wait_status));
  CHECK(WEXITSTATUS(wait_status) == 0);
}

TEST_CASE("ConnectTcp to a closed port gives kDeadlineExceeded naming the address", "[base][fd]") {
  uint16_t port = 0;
  {
    absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
    REQUIRE(listener.ok());
    port = listener->port();
  }  // closed: connecting is refused now
  const absl::Duration timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<UniqueFd> fd = ConnectTcp({"127.0.0.1", port}, DeadlineIn(timeout));
  const absl::Duration elapsed = absl::Now() - start;
  CAPTURE(fd.status());
  CHECK(fd.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(fd.status().message(), absl::StrCat("127.0.0.1:", port)));
  CHECK(absl::StrContains(fd.status().message(), "refused"));
  CHECK(elapsed >= timeout);
  CHECK(elapsed < timeout + absl::Seconds(1));
}

TEST_CASE("ConnectTcp retries until the listener appears", "[base][fd]") {
  // Reserve a port, free it, and start listening on it a little later.
  uint16_t port = 0;
  {
    absl::StatusOr<TcpListener> probe = TcpListener::Listen("127.0.0.1", 0);
    REQUIRE(probe.ok());
    port = probe->port();
  }
  absl::StatusOr<UniqueFd> client;
  std::thread connector(
      [&] { client = ConnectTcp({"127.0.0.1", port}, DeadlineIn(absl::Seconds(10))); });
  absl::SleepFor(absl::Milliseconds(100));
  absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", port);
  if (!listener.ok()) {
    connector.join();
    WARN("port " << port << " was taken meanwhile; skipping: " << listener.status());
    return;
  }
  absl::StatusOr<UniqueFd> server = listener->Accept(DeadlineIn(absl::Seconds(10)));
  connector.join();
  REQUIRE(client.ok());
  REQUIRE(server.ok());
  REQUIRE(SendAll(client->get(), Bytes("ping"), DeadlineIn(absl::Seconds(5))).ok());
  std::string buffer(4, '\0');
  REQUIRE(RecvAll(server->get(), WritableBytes(buffer), DeadlineIn(absl::Seconds(5))).ok());
  CHECK(buffer == "ping");
}

TEST_CASE("ConnectTcp and Listen over IPv6 loopback", "[base][fd]") {
  absl::StatusOr<TcpListener> listener = TcpListener::Listen("::1", 0);
  if (!listener.ok()) {
    WARN("no IPv6 loopback here; skipping: " << listener.status());
    return;
  }
  absl::StatusOr<HostPort> address = ParseHostPort(absl::StrCat("[::1]:", listener->port()), 0);
  REQUIRE(address.ok());
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  absl::StatusOr<UniqueFd> client = ConnectTcp(*address, deadline);
  REQUIRE(client.ok());
  absl::StatusOr<UniqueFd> server = listener->Accept(deadline);
  REQUIRE(server.ok());
}

}  // namespace
}  // namespace braid
