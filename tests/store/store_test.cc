// Tests of store/: Store semantics through TcpStore and StoreServer over
// real loopback sockets (servers on port 0), blocking and deadlines, many
// concurrent clients (threads and forked processes), PrefixStore, hostile
// frames on the wire, server shutdown under a blocked client, and connecting
// to nothing. Worker threads never assert: they return a Status and the main
// thread checks it (Catch2 v2 is not thread-safe).
#include "store/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/bytes.h"
#include "base/deadline.h"
#include "base/fd.h"
#include "base/socket.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "store/tcp_store.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"
#include "tests/harness/stderr_capture.h"

namespace braid {
namespace {

using ::braid::testing::DescribeStatuses;


using ::braid::testing::RankContext;
using ::braid::testing::RankMode;
using ::braid::testing::RunRanks;

std::unique_ptr<StoreServer> StartServer(StoreServerOptions options = {}) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("127.0.0.1", 0, options);
  INFO(server.status());
  REQUIRE(server.ok());
  REQUIRE((*server)->port() != 0);
  return *std::move(server);
}

HostPort AddressOf(const StoreServer& server) { return HostPort{"127.0.0.1", server.port()}; }

std::unique_ptr<TcpStore> ConnectTo(const StoreServer& server) {
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(AddressOf(server), DeadlineIn(absl::Seconds(10)));
  INFO(store.status());
  REQUIRE(store.ok());
  return *std::move(store);
}

// Runs `fn(i)` on `n` threads and returns their statuses.
template <typename Fn>
std::vector<absl::Status> OnThreads(int n, Fn fn) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&statuses, &fn, i] { statuses[i] = fn(i); });
  }
  for (std::thread& thread : threads) thread.join();
  return statuses;
}

// ---- raw wire helpers (written from the protocol text in tcp_store.h) ----

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutI64(std::string& out, int64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(static_cast<uint64_t>(v) >> (8 * i)));
}
void PutStr(std::string& out, const std::string& s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out += s;
}
std::string Frame(const std::string& payload) {
  std::string frame;
  PutU32(frame, static_cast<uint32_t>(payload.size()));
  return frame + payload;
}
// A request payload: version, opcode, then `fields` as already encoded.
std::string Payload(uint8_t version, uint8_t opcode, const std::string& fields = "") {
  std::string payload;
  payload.push_back(static_cast<char>(version));
  payload.push_back(static_cast<char>(opcode));
  return payload + fields;
}

absl::Span<const std::byte> Bytes(const std::string& text) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(text.data()), text.size());
}

UniqueFd RawConnect(const StoreServer& server) {
  absl::StatusOr<UniqueFd> fd = ConnectTcp(AddressOf(server), DeadlineIn(absl::Seconds(10)));
  INFO(fd.status());
  REQUIRE(fd.ok());
  return *std::move(fd);
}

std::string LocalAddress(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
  return absl::StrCat("127.0.0.1:", ntohs(v4->sin_port));
}

// Reads the exact response frame payload.
std::string ReadResponse(int fd) {
  uint32_t length = 0;
  REQUIRE(RecvAll(fd, AsWritableBytes(length), DeadlineIn(absl::Seconds(10))).ok());
  std::string payload(length, '\0');
  REQUIRE(RecvAll(fd, absl::MakeSpan(reinterpret_cast<std::byte*>(payload.data()), length),
                  DeadlineIn(absl::Seconds(10)))
              .ok());
  return payload;
}

// True when the server closed `fd` (EOF or reset) within `timeout`; any bytes
// it sent first are discarded.
bool ClosedByServer(int fd, absl::Duration timeout) {
  const Deadline deadline = DeadlineIn(timeout);
  char buffer[256];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) return true;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return true;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    if (Expired(deadline)) return false;
    if (n < 0) {
      pollfd entry{fd, POLLIN, 0};
      ::poll(&entry, 1, PollTimeoutMs(deadline));
    }
  }
}

// ---------------------------------------------------------------------------

TEST_CASE("TcpStore: Set then Get returns the value; Set overwrites", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  REQUIRE(store->Set("alpha", "one").ok());
  CHECK(store->Get("alpha", deadline).value() == "one");
  REQUIRE(store->Set("alpha", "two").ok());
  CHECK(store->Get("alpha", deadline).value() == "two");
  // Keys and values are bytes: empty, NUL, high bytes.
  const std::string key("k\0\xff", 3);
  const std::string value("\0v\x80\n", 4);
  REQUIRE(store->Set(key, value).ok());
  CHECK(store->Get(key, deadline).value() == value);
  REQUIRE(store->Set("empty", "").ok());
  CHECK(store->Get("empty", deadline).value().empty());
  // Another client sees the same table.
  auto other = ConnectTo(*server);
  CHECK(other->Get("alpha", deadline).value() == "two");
}

TEST_CASE("TcpStore: a Get whose deadline has passed still returns an existing key", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  REQUIRE(store->Set("here", "yes").ok());
  CHECK(store->Get("here", absl::Now() - absl::Seconds(1)).value() == "yes");
  // Long past (more than the client's grace): still the server's answer.
  CHECK(store->Get("here", absl::InfinitePast()).value() == "yes");
  const absl::StatusOr<std::string> missing = store->Get("absent", absl::Now() - absl::Seconds(1));
  CHECK(missing.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(missing.status().message(), "\"absent\""));
  // The connection stays usable after a server-side timeout.
  CHECK(store->Get("here", DeadlineIn(absl::Seconds(5))).value() == "yes");
}

TEST_CASE("GetIfSet: the value of a key that exists, nullopt for one that does not, never waiting", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  REQUIRE(store->Set("here", "yes").ok());
  REQUIRE(store->Set("empty", "").ok());
  CHECK(GetIfSet(*store, "here").value() == std::optional<std::string>("yes"));
  CHECK(GetIfSet(*store, "empty").value() == std::optional<std::string>(""));
  const absl::Time start = absl::Now();
  CHECK_FALSE(GetIfSet(*store, "absent").value().has_value());
  CHECK(absl::Now() - start < absl::Seconds(1));
}

TEST_CASE("TcpStore: Add creates at 0, counts, and stores decimal text", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  CHECK(store->Add("counter", 5).value() == 5);
  CHECK(store->Add("counter", -7).value() == -2);
  CHECK(store->Add("counter", 0).value() == -2);
  CHECK(store->Get("counter", deadline).value() == "-2");
  REQUIRE(store->Set("counter", "40").ok());
  CHECK(store->Add("counter", 2).value() == 42);

  REQUIRE(store->Set("word", "forty-two").ok());
  const absl::StatusOr<int64_t> not_a_number = store->Add("word", 1);
  CHECK(not_a_number.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(not_a_number.status().message(), "\"word\""));
  CHECK(store->Get("word", deadline).value() == "forty-two");  // untouched

  REQUIRE(store->Set("big", absl::StrCat(INT64_MAX)).ok());
  CHECK(store->Add("big", 1).status().code() == absl::StatusCode::kOutOfRange);
  CHECK(store->Get("big", deadline).value() == absl::StrCat(INT64_MAX));
  // Errors are answers, not broken connections.
  CHECK(store->Add("counter", 1).value() == 43);
}

TEST_CASE("TcpStore: CompareSet follows c10d's semantics", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  // Missing key, expected non-empty: nothing set, `expected` returned.
  CHECK(store->CompareSet("k", "old", "new").value() == "old");
  CHECK(store->Check({"k"}).value() == false);
  // Missing key, expected empty: set.
  CHECK(store->CompareSet("k", "", "first").value() == "first");
  CHECK(store->Get("k", deadline).value() == "first");
  // Mismatch: unchanged, current value returned.
  CHECK(store->CompareSet("k", "wrong", "second").value() == "first");
  CHECK(store->Get("k", deadline).value() == "first");
  // Match: swapped.
  CHECK(store->CompareSet("k", "first", "second").value() == "second");
  CHECK(store->Get("k", deadline).value() == "second");
  // An existing empty value matches an empty `expected`.
  REQUIRE(store->Set("e", "").ok());
  CHECK(store->CompareSet("e", "", "filled").value() == "filled");
}

TEST_CASE("TcpStore: Delete, NumKeys and Check", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  CHECK(store->NumKeys().value() == 0);
  CHECK(store->Check({}).value() == true);
  REQUIRE(store->Set("a", "1").ok());
  REQUIRE(store->Set("b", "2").ok());
  CHECK(store->Add("c", 3).value() == 3);
  CHECK(store->NumKeys().value() == 3);
  CHECK(store->Check({"a", "b", "c"}).value() == true);
  CHECK(store->Check({"a", "zzz"}).value() == false);
  CHECK(store->Delete("b").value() == true);
  CHECK(store->Delete("b").value() == false);
  CHECK(store->NumKeys().value() == 2);
  CHECK(store->Check({"a", "b"}).value() == false);
  const absl::StatusOr<std::string> gone = store->Get("b", DeadlineIn(absl::Milliseconds(50)));
  CHECK(gone.status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("TcpStore: Get blocks until another thread sets the key", "[store]") {
  auto server = StartServer();
  auto reader = ConnectTo(*server);
  auto writer = ConnectTo(*server);
  absl::StatusOr<std::string> got;
  absl::Time returned;
  std::thread waiter([&] {
    got = reader->Get("late", DeadlineIn(absl::Seconds(10)));
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time set_at = absl::Now();
  const absl::Status set = writer->Set("late", "finally");
  waiter.join();
  REQUIRE(set.ok());
  INFO(got.status());
  REQUIRE(got.ok());
  CHECK(*got == "finally");
  CHECK(returned >= set_at);
  CHECK(returned - set_at < absl::Seconds(2));
}

TEST_CASE("TcpStore: Get blocks until another process sets the key", "[store]") {
  const std::vector<absl::Status> statuses = RunRanks(
      2, RankMode::kProcesses,
      [](RankContext& ctx) -> absl::Status {
        std::unique_ptr<StoreServer> server;
        if (ctx.rank() == 0) {
          BRAID_ASSIGN_OR_RETURN(server, StoreServer::Start("127.0.0.1", 0));
        }
        BRAID_ASSIGN_OR_RETURN(auto ports,
                               ctx.AllGather(server ? absl::StrCat(server->port()) : ""));
        int port = 0;
        if (!absl::SimpleAtoi(ports[0], &port)) return absl::InternalError("bad port");
        BRAID_ASSIGN_OR_RETURN(
            auto store,
            TcpStore::Connect(HostPort{"127.0.0.1", static_cast<uint16_t>(port)}, ctx.deadline()));
        if (ctx.rank() == 0) {
          BRAID_RETURN_IF_ERROR(store->Get("waiting", ctx.deadline()).status());
          absl::SleepFor(absl::Milliseconds(300));  // let rank 1 block in Get
          BRAID_RETURN_IF_ERROR(store->Set("key", "from rank 0"));
        } else {
          BRAID_RETURN_IF_ERROR(store->Set("waiting", "1"));
          const absl::Time start = absl::Now();
          BRAID_ASSIGN_OR_RETURN(std::string value, store->Get("key", ctx.deadline()));
          if (value != "from rank 0") return absl::InternalError("got \"" + value + "\"");
          if (absl::Now() - start < absl::Milliseconds(200)) {
            return absl::InternalError("Get returned before the key was set");
          }
        }
        return ctx.Barrier();  // rank 0's server outlives rank 1's use of it
      },
      {.timeout = absl::Seconds(15)});
  CHECK_ALL_OK(statuses);
}

TEST_CASE("TcpStore: Wait returns once every key exists", "[store]") {
  auto server = StartServer();
  auto waiter_store = ConnectTo(*server);
  auto writer = ConnectTo(*server);
  REQUIRE(writer->Set("w0", "x").ok());
  absl::Status waited = absl::UnknownError("not run");
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    waited = waiter_store->Wait({"w0", "w1", "w2"}, DeadlineIn(absl::Seconds(10)));
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  REQUIRE(writer->Set("w2", "x").ok());
  absl::SleepFor(absl::Milliseconds(100));
  const bool done_early = done.load();
  REQUIRE(writer->Add("w1", 1).ok());
  waiter.join();
  CHECK_FALSE(done_early);
  INFO(waited);
  CHECK(waited.ok());
  // All present already: returns at once.
  CHECK(waiter_store->Wait({"w0", "w1"}, DeadlineIn(absl::Seconds(1))).ok());
  CHECK(waiter_store->Wait({}, DeadlineIn(absl::Seconds(1))).ok());
}

TEST_CASE("TcpStore: Get and Wait time out with kDeadlineExceeded naming the key", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  REQUIRE(store->Set("present", "1").ok());
  const absl::Duration timeout = absl::Milliseconds(300);

  absl::Time start = absl::Now();
  const absl::StatusOr<std::string> got = store->Get("never", start + timeout);
  absl::Duration took = absl::Now() - start;
  INFO(got.status());
  CHECK(got.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(got.status().message(), "\"never\""));
  CHECK(absl::StrContains(got.status().message(), ToString(AddressOf(*server))));
  CHECK(took >= timeout - absl::Milliseconds(5));
  CHECK(took < timeout + absl::Milliseconds(500));

  start = absl::Now();
  const absl::Status waited = store->Wait({"present", "missing-1", "missing-2"}, start + timeout);
  took = absl::Now() - start;
  INFO(waited);
  CHECK(waited.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(waited.message(), "\"missing-1\""));
  CHECK(absl::StrContains(waited.message(), "\"missing-2\""));
  CHECK(took >= timeout - absl::Milliseconds(5));
  CHECK(took < timeout + absl::Milliseconds(500));

  // The same client carries on, and the parked waiters are gone: setting the
  // keys now answers nobody by mistake.
  REQUIRE(store->Set("never", "now").ok());
  CHECK(store->Get("never", DeadlineIn(absl::Seconds(5))).value() == "now");
}

TEST_CASE("TcpStore: 32 clients on 32 threads x 200 Adds total exactly 6400", "[store]") {
  auto server = StartServer();
  constexpr int kThreads = 32;
  constexpr int kAdds = 200;
  const HostPort address = AddressOf(*server);
  const std::vector<absl::Status> statuses = OnThreads(kThreads, [&](int i) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(auto store, TcpStore::Connect(address, DeadlineIn(absl::Seconds(10))));
    for (int j = 0; j < kAdds; ++j) {
      BRAID_RETURN_IF_ERROR(store->Add("counter", 1).status());
    }
    return store->Set(absl::StrCat("done/", i), "1");
  });
  REQUIRE_ALL_OK(statuses);
  auto store = ConnectTo(*server);
  CHECK(store->Get("counter", DeadlineIn(absl::Seconds(5))).value() == "6400");
  CHECK(store->NumKeys().value() == kThreads + 1);
}

TEST_CASE("TcpStore: one client shared by many threads serializes their requests", "[store]") {
  auto server = StartServer();
  auto shared = ConnectTo(*server);
  constexpr int kThreads = 8;
  constexpr int kAdds = 100;
  const std::vector<absl::Status> statuses = OnThreads(kThreads, [&](int i) -> absl::Status {
    for (int j = 0; j < kAdds; ++j) {
      BRAID_RETURN_IF_ERROR(shared->Add("counter", 1).status());
      const std::string key = absl::StrCat("t", i, "/", j % 4);
      BRAID_RETURN_IF_ERROR(shared->Set(key, absl::StrCat(j)));
      BRAID_ASSIGN_OR_RETURN(std::string value, shared->Get(key, DeadlineIn(absl::Seconds(10))));
      if (value != absl::StrCat(j)) return absl::InternalError("read another thread's answer");
    }
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(statuses);
  CHECK(shared->Add("counter", 0).value() == kThreads * kAdds);
}

TEST_CASE("TcpStore: a shared client whose server goes away fails every thread cleanly",
          "[store]") {
  auto server = StartServer();
  std::shared_ptr<TcpStore> shared = ConnectTo(*server);
  constexpr int kThreads = 4;
  std::atomic<int> started{0};
  std::vector<absl::Status> statuses(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ++started;
      // Each blocks in Get in turn (requests are serialized) until the server
      // goes; the first sees the connection drop, the rest see it broken.
      statuses[i] = shared->Get(absl::StrCat("never/", i), DeadlineIn(absl::Seconds(20))).status();
    });
  }
  while (started.load() < kThreads) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time shutdown_at = absl::Now();
  server->Shutdown();
  for (std::thread& thread : threads) thread.join();
  INFO(DescribeStatuses(statuses));
  for (const absl::Status& status : statuses) {
    CHECK(status.code() == absl::StatusCode::kUnavailable);
  }
  CHECK(absl::Now() - shutdown_at < absl::Seconds(2));
}

TEST_CASE("TcpStore: forked processes add to one counter hosted by rank 0", "[store]") {
  constexpr int kRanks = 4;
  constexpr int kAdds = 200;
  const std::vector<absl::Status> statuses = RunRanks(
      kRanks, RankMode::kProcesses,
      [](RankContext& ctx) -> absl::Status {
        std::unique_ptr<StoreServer> server;
        if (ctx.rank() == 0) {
          BRAID_ASSIGN_OR_RETURN(server, StoreServer::Start("127.0.0.1", 0));
        }
        BRAID_ASSIGN_OR_RETURN(auto ports,
                               ctx.AllGather(server ? absl::StrCat(server->port()) : ""));
        int port = 0;
        if (!absl::SimpleAtoi(ports[0], &port)) return absl::InternalError("bad port");
        BRAID_ASSIGN_OR_RETURN(
            auto store,
            TcpStore::Connect(HostPort{"127.0.0.1", static_cast<uint16_t>(port)}, ctx.deadline()));
        for (int j = 0; j < kAdds; ++j) BRAID_RETURN_IF_ERROR(store->Add("counter", 1).status());
        // Rendezvous through the store itself: everyone arrives, then reads.
        BRAID_RETURN_IF_ERROR(store->Set(absl::StrCat("arrived/", ctx.rank()), "1"));
        std::vector<std::string> arrived;
        for (int r = 0; r < ctx.size(); ++r) arrived.push_back(absl::StrCat("arrived/", r));
        BRAID_RETURN_IF_ERROR(store->Wait(arrived, ctx.deadline()));
        BRAID_ASSIGN_OR_RETURN(std::string total, store->Get("counter", ctx.deadline()));
        if (total != absl::StrCat(kRanks * kAdds)) {
          return absl::InternalError(absl::StrCat("counter is ", total));
        }
        return ctx.Barrier();
      },
      {.timeout = absl::Seconds(15)});
  CHECK_ALL_OK(statuses);
}

TEST_CASE("PrefixStore: namespaces are isolated", "[store]") {
  auto server = StartServer();
  std::shared_ptr<Store> base = ConnectTo(*server);
  PrefixStore a("groupA", base);
  PrefixStore b("groupB", base);
  const Deadline deadline = DeadlineIn(absl::Seconds(10));
  REQUIRE(a.Set("key", "from A").ok());
  REQUIRE(b.Set("key", "from B").ok());
  CHECK(a.Get("key", deadline).value() == "from A");
  CHECK(b.Get("key", deadline).value() == "from B");
  CHECK(base->Get("groupA/key", deadline).value() == "from A");
  CHECK(a.Add("n", 2).value() == 2);
  CHECK(b.Add("n", 5).value() == 5);
  CHECK(a.Check({"key", "n"}).value() == true);
  CHECK(a.Check({"only-b"}).value() == false);
  REQUIRE(b.Set("only-b", "x").ok());
  CHECK(a.Check({"only-b"}).value() == false);
  CHECK(a.Wait({"only-b"}, DeadlineIn(absl::Milliseconds(100))).code() ==
        absl::StatusCode::kDeadlineExceeded);
  CHECK(b.Wait({"only-b", "key"}, deadline).ok());
  CHECK(a.CompareSet("key", "from A", "swapped").value() == "swapped");
  CHECK(b.Get("key", deadline).value() == "from B");
  CHECK(a.Delete("key").value() == true);
  CHECK(b.Check({"key"}).value() == true);
  // Nested prefixes compose; NumKeys counts the whole base store.
  auto inner = std::make_shared<PrefixStore>("outer", base);
  PrefixStore nested("inner", inner);
  REQUIRE(nested.Set("k", "v").ok());
  CHECK(base->Get("outer/inner/k", deadline).value() == "v");
  CHECK(nested.NumKeys().value() == base->NumKeys().value());
}

// One hostile or broken frame: its bytes, whether the sender then half-closes,
// and what the server's warning must say.
struct BadFrame {
  const char* name;
  std::string bytes;
  bool half_close;
  const char* logged;
};

std::vector<BadFrame> BadFrames() {
  std::string set_fields;
  PutStr(set_fields, "key");
  PutStr(set_fields, "value");
  std::string truncated_fields;
  PutU32(truncated_fields, 100);  // claims a 100-byte key
  truncated_fields += "abc";
  std::string huge_wait;
  PutU32(huge_wait, 0xffffffffu);  // claims 4 billion keys, sends none
  PutI64(huge_wait, 1000);
  std::string four_gib;
  PutU32(four_gib, 0xffffffffu);
  four_gib += "some bytes";
  std::string truncated_frame;
  PutU32(truncated_frame, 100);
  truncated_frame += Payload(1, 1, "0123456789").substr(0, 10);
  return {
      {"an HTTP request", "GET / HTTP/1.1\r\nHost: store\r\n\r\n", false,
       "exceeds max_frame_bytes"},
      {"random bytes", std::string("\x05\x00\x00\x00\xde\xad\xbe\xef\x01", 9), false,
       "unsupported protocol version 222"},
      {"a wrong version byte", Frame(Payload(2, 1, set_fields)), false,
       "unsupported protocol version 2"},
      {"an unknown opcode", Frame(Payload(1, 99, set_fields)), false, "unknown opcode 99"},
      {"a handshake to a store without a secret", Frame(Payload(1, 0)), false,
       "authentication is off on this store"},
      {"a length of 4 GiB", four_gib, false, "exceeds max_frame_bytes"},
      {"truncated fields", Frame(Payload(1, 1, truncated_fields)), false, "truncated Set request"},
      {"a key count with no keys", Frame(Payload(1, 5, huge_wait)), false,
       "truncated Wait request"},
      {"trailing bytes", Frame(Payload(1, 8, "xx")), false, "2 trailing bytes after a NumKeys"},
      {"a frame too short for a request", Frame(std::string(1, '\x01')), false, "too short"},
      {"a truncated frame followed by close", truncated_frame, true, "truncated frame"},
      {"a partial header followed by close", std::string("\x10\x00", 2), true,
       "2 bytes of a frame header"},
  };
}

TEST_CASE("StoreServer: a malformed frame closes only its connection", "[store][wire]") {
  const std::vector<BadFrame> cases = BadFrames();
  const size_t index = GENERATE_COPY(range(size_t{0}, cases.size()));
  const BadFrame& bad = cases[index];
  CAPTURE(bad.name);
  auto server = StartServer();
  auto good = ConnectTo(*server);
  REQUIRE(good->Set("before", "1").ok());
  // A good client parked in Wait must survive the bad one too.
  auto parked = ConnectTo(*server);
  absl::Status waited = absl::UnknownError("not run");
  std::thread waiter([&] { waited = parked->Wait({"after"}, DeadlineIn(absl::Seconds(10))); });

  StderrCapture capture;
  UniqueFd raw = RawConnect(*server);
  const std::string peer = LocalAddress(raw.get());
  REQUIRE(SendAll(raw.get(), Bytes(bad.bytes), DeadlineIn(absl::Seconds(5))).ok());
  if (bad.half_close) ::shutdown(raw.get(), SHUT_WR);
  const bool closed = ClosedByServer(raw.get(), absl::Seconds(5));
  const std::string log = capture.Finish();
  CHECK(closed);
  INFO("server log: " << log);
  CHECK(absl::StrContains(log, peer));
  CHECK(absl::StrContains(log, bad.logged));

  REQUIRE(good->Set("after", "2").ok());
  waiter.join();
  CHECK(waited.ok());
  CHECK(good->Get("before", DeadlineIn(absl::Seconds(5))).value() == "1");
  CHECK(good->Add("n", 1).value() == 1);
  auto fresh = ConnectTo(*server);
  CHECK(fresh->NumKeys().value() == 3);
}

TEST_CASE("StoreServer: frames over max_frame_bytes are refused; under it, served",
          "[store][wire]") {
  auto server = StartServer({.max_frame_bytes = 4096});
  auto store = ConnectTo(*server);
  const std::string fits(4000, 'v');
  REQUIRE(store->Set("fits", fits).ok());
  CHECK(store->Get("fits", DeadlineIn(absl::Seconds(5))).value() == fits);
  // A Set has no answer: the server closes the connection over it, and the
  // client's next call fails with kUnavailable naming the server and that
  // Set; the client stays broken.
  REQUIRE(store->Set("too-big", std::string(5000, 'v')).ok());
  const absl::Status next = store->NumKeys().status();
  INFO(next);
  CHECK(next.code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(next.message(), ToString(AddressOf(*server))));
  CHECK(absl::StrContains(next.message(), "after Set(\"too-big\"), sent without an answer"));
  CHECK(store->NumKeys().status().code() == absl::StatusCode::kUnavailable);
  auto fresh = ConnectTo(*server);
  CHECK(fresh->NumKeys().value() == 1);
}

TEST_CASE("TcpStore: large values cross intact", "[store]") {
  auto server = StartServer();
  auto writer = ConnectTo(*server);
  auto reader = ConnectTo(*server);
  std::string value(8 << 20, '\0');
  uint32_t x = 12345;
  for (char& c : value) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  REQUIRE(writer->Set("blob", value).ok());
  const absl::StatusOr<std::string> got = reader->Get("blob", DeadlineIn(absl::Seconds(10)));
  REQUIRE(got.ok());
  CHECK(*got == value);
}

TEST_CASE("StoreServer: the wire format is as documented", "[store][wire]") {
  auto server = StartServer();
  UniqueFd raw = RawConnect(*server);
  auto send = [&](const std::string& frame) {
    REQUIRE(SendAll(raw.get(), Bytes(frame), DeadlineIn(absl::Seconds(5))).ok());
  };
  std::string fields;
  PutStr(fields, "key");
  PutStr(fields, "value");
  send(Frame(Payload(1, 1, fields)));  // Set
  CHECK(ReadResponse(raw.get()) == std::string(1, '\0'));

  fields.clear();
  PutStr(fields, "key");
  PutI64(fields, 1000);
  send(Frame(Payload(1, 2, fields)));  // Get
  std::string want(1, '\0');
  PutStr(want, "value");
  CHECK(ReadResponse(raw.get()) == want);

  fields.clear();
  PutStr(fields, "n");
  PutI64(fields, -3);
  send(Frame(Payload(1, 3, fields)));  // Add
  want.assign(1, '\0');
  PutI64(want, -3);
  CHECK(ReadResponse(raw.get()) == want);

  fields.clear();
  PutStr(fields, "key");
  PutI64(fields, 0);
  send(Frame(Payload(1, 3, fields)));  // Add to "value": an error answer
  const std::string error = ReadResponse(raw.get());
  REQUIRE(error.size() > 5);
  CHECK(static_cast<uint8_t>(error[0]) ==
        static_cast<uint8_t>(absl::StatusCode::kFailedPrecondition));

  fields.clear();
  PutU32(fields, 2);
  PutStr(fields, "key");
  PutStr(fields, "n");
  send(Frame(Payload(1, 6, fields)));  // Check
  CHECK(ReadResponse(raw.get()) == std::string("\0\x01", 2));

  // Two requests in one write are both answered, in order.
  std::string two = Frame(Payload(1, 8));
  fields.clear();
  PutStr(fields, "n");
  two += Frame(Payload(1, 7, fields));  // Delete
  send(two);
  want.assign(1, '\0');
  PutI64(want, 2);
  CHECK(ReadResponse(raw.get()) == want);
  CHECK(ReadResponse(raw.get()) == std::string("\0\x01", 2));

  // A Put has no answer; a Get after it in the same write sees its value.
  std::string put_get;
  fields.clear();
  PutStr(fields, "put");
  PutStr(fields, "quiet");
  put_get += Frame(Payload(1, 10, fields));  // Put
  fields.clear();
  PutStr(fields, "put");
  PutI64(fields, 1000);
  put_get += Frame(Payload(1, 2, fields));  // Get
  send(put_get);
  want.assign(1, '\0');
  PutStr(want, "quiet");
  CHECK(ReadResponse(raw.get()) == want);

  fields.clear();
  PutStr(fields, "n");
  PutI64(fields, 2);
  PutI64(fields, 1000);
  send(Frame(Payload(1, 9, fields)));  // Arrive: the counter ("n", deleted above) reaches 1 of 2...
  fields.clear();
  PutStr(fields, "n");
  PutI64(fields, 1);
  UniqueFd other = RawConnect(*server);
  REQUIRE(SendAll(other.get(), Bytes(Frame(Payload(1, 3, fields))), DeadlineIn(absl::Seconds(5))).ok());  // Add
  want.assign(1, '\0');
  PutI64(want, 2);
  CHECK(ReadResponse(other.get()) == want);
  want.assign(1, '\0');
  PutI64(want, 1);  // ...and is answered with its own arrival once another client's Add makes it 2
  CHECK(ReadResponse(raw.get()) == want);
}

TEST_CASE("StoreServer: a client that hangs up while waiting is forgotten", "[store]") {
  auto server = StartServer();
  {
    UniqueFd raw = RawConnect(*server);
    std::string fields;
    PutStr(fields, "later");
    PutI64(fields, 60000);
    REQUIRE(
        SendAll(raw.get(), Bytes(Frame(Payload(1, 2, fields))), DeadlineIn(absl::Seconds(5))).ok());
    absl::SleepFor(absl::Milliseconds(100));  // parked by now
  }                                           // closed
  absl::SleepFor(absl::Milliseconds(100));
  auto store = ConnectTo(*server);
  REQUIRE(store->Set("later", "x").ok());  // wakes nobody, crashes nothing
  CHECK(store->Get("later", DeadlineIn(absl::Seconds(5))).value() == "x");
}

TEST_CASE("StoreServer: a request sent while another waits breaks the protocol: closed, logged", "[store]") {
  auto server = StartServer();
  StderrCapture capture;
  UniqueFd raw = RawConnect(*server);
  std::string fields;
  PutStr(fields, "later");
  PutI64(fields, 60000);
  REQUIRE(SendAll(raw.get(), Bytes(Frame(Payload(1, 2, fields))), DeadlineIn(absl::Seconds(5))).ok());
  absl::SleepFor(absl::Milliseconds(100));  // parked by now
  REQUIRE(SendAll(raw.get(), Bytes(Frame(Payload(1, 8))), DeadlineIn(absl::Seconds(5))).ok());  // NumKeys
  CHECK(ClosedByServer(raw.get(), absl::Seconds(5)));
  CHECK(absl::StrContains(capture.Finish(), "a request sent before the answer to the one waiting"));
  auto store = ConnectTo(*server);  // everyone else is served on
  REQUIRE(store->Set("later", "x").ok());
  CHECK(store->Get("later", DeadlineIn(absl::Seconds(5))).value() == "x");
}

TEST_CASE("StoreServer: connections beyond max_connections are refused", "[store]") {
  auto server = StartServer({.max_connections = 2});
  auto first = ConnectTo(*server);
  auto second = ConnectTo(*server);
  REQUIRE(first->Set("k", "v").ok());
  REQUIRE(second->NumKeys().ok());
  StderrCapture capture;
  // The kernel accepts; the server then closes it, which Connect's first round trip sees.
  const absl::StatusOr<std::unique_ptr<TcpStore>> third =
      TcpStore::Connect(AddressOf(*server), DeadlineIn(absl::Seconds(5)));
  const std::string log = capture.Finish();
  CHECK(third.status().code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(log, "max_connections"));
  first.reset();
  absl::SleepFor(absl::Milliseconds(100));
  auto fourth = ConnectTo(*server);
  CHECK(fourth->Get("k", DeadlineIn(absl::Seconds(5))).value() == "v");
}

TEST_CASE("StoreServer: Shutdown wakes a client blocked in Get with kUnavailable", "[store]") {
  auto server = StartServer();
  auto store = ConnectTo(*server);
  const std::string address = ToString(AddressOf(*server));
  absl::StatusOr<std::string> got;
  absl::Time returned;
  std::thread waiter([&] {
    got = store->Get("never", DeadlineIn(absl::Seconds(30)));
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time shutdown_at = absl::Now();
  server->Shutdown();
  waiter.join();
  INFO(got.status());
  CHECK(got.status().code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(got.status().message(), address));
  CHECK(returned - shutdown_at < absl::Seconds(1));
  // The client is broken for good; Shutdown is idempotent; so is destruction.
  CHECK(store->Set("k", "v").code() == absl::StatusCode::kUnavailable);
  server->Shutdown();
  server.reset();
}

TEST_CASE("TcpStore: a listener that is not a store fails Connect by the deadline plus the grace", "[store]") {
  // A listener that accepts nothing: the kernel completes the handshake, no
  // one ever answers (another program on the port, or a wedged server).
  absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
  REQUIRE(listener.ok());
  for (bool with_secret : {false, true}) {
    const absl::Time start = absl::Now();
    const absl::StatusOr<std::unique_ptr<TcpStore>> store =
        TcpStore::Connect({"127.0.0.1", listener->port()}, start + absl::Milliseconds(100),
                          with_secret ? JobSecret("s3cret") : JobSecret());
    const absl::Duration took = absl::Now() - start;
    INFO(store.status());
    CHECK(store.status().code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(absl::StrContains(store.status().message(),
                            absl::StrCat("whatever listens on 127.0.0.1:", listener->port(),
                                         " does not answer as braid's store")));
    CHECK(took >= absl::Milliseconds(100) + TcpStore::kServerGrace - absl::Milliseconds(5));
    CHECK(took < absl::Milliseconds(100) + TcpStore::kServerGrace + absl::Seconds(1));
  }
}

TEST_CASE("TcpStore: Connect to a dead port fails with kDeadlineExceeded", "[store]") {
  uint16_t port = 0;
  {
    absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
    REQUIRE(listener.ok());
    port = listener->port();
  }  // closed: nothing listens there now
  const absl::Time start = absl::Now();
  const absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect({"127.0.0.1", port}, DeadlineIn(absl::Milliseconds(300)));
  const absl::Duration took = absl::Now() - start;
  INFO(store.status());
  CHECK(store.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(store.status().message(), absl::StrCat("127.0.0.1:", port)));
  CHECK(took < absl::Seconds(2));
}

TEST_CASE("TcpStore: Connect retries until the server comes up", "[store]") {
  uint16_t port = 0;
  {
    absl::StatusOr<TcpListener> listener = TcpListener::Listen("127.0.0.1", 0);
    REQUIRE(listener.ok());
    port = listener->port();
  }
  absl::StatusOr<std::unique_ptr<TcpStore>> store = absl::UnknownError("not run");
  std::thread client([&] {
    store = TcpStore::Connect({"127.0.0.1", port}, DeadlineIn(absl::Seconds(10)));
  });
  absl::SleepFor(absl::Milliseconds(300));
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("127.0.0.1", port);
  client.join();
  if (!server.ok()) {
    WARN("port " << port << " was taken meanwhile: " << server.status());
    return;
  }
  INFO(store.status());
  REQUIRE(store.ok());
  CHECK((*store)->Set("k", "v").ok());
}

TEST_CASE("StoreServer: Start on a port in use fails naming it", "[store]") {
  auto server = StartServer();
  const absl::StatusOr<std::unique_ptr<StoreServer>> second =
      StoreServer::Start("127.0.0.1", server->port());
  INFO(second.status());
  // Abseil maps EADDRINUSE to kFailedPrecondition.
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(second.status().message(), absl::StrCat(":", server->port())));
}

TEST_CASE("StoreServer: Start rejects bad options", "[store]") {
  CHECK(StoreServer::Start("127.0.0.1", 0, {.max_frame_bytes = 1}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(StoreServer::Start("127.0.0.1", 0, {.max_connections = 0}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Authentication (base/auth.h): the HMAC handshake

std::unique_ptr<StoreServer> StartSecretServer(const std::string& secret, absl::Duration handshake_timeout) {
  StoreServerOptions options;
  options.secret = JobSecret(secret);
  options.handshake_timeout = handshake_timeout;
  return StartServer(options);
}

absl::StatusOr<std::unique_ptr<TcpStore>> ConnectWith(const StoreServer& server, const std::string& secret) {
  return TcpStore::Connect(AddressOf(server), DeadlineIn(absl::Seconds(10)),
                           secret.empty() ? JobSecret() : JobSecret(secret));
}

TEST_CASE("StoreServer with a secret: the right secret is served, strangers are refused and logged", "[store][auth]") {
  auto server = StartSecretServer("s3cret", absl::Seconds(10));
  absl::StatusOr<std::unique_ptr<TcpStore>> member = ConnectWith(*server, "s3cret");
  INFO(member.status());
  REQUIRE(member.ok());
  REQUIRE((*member)->Set("k", "v").ok());

  StderrCapture capture;
  // No secret: the first request (Connect's) is refused with a reason, and logged.
  absl::StatusOr<std::unique_ptr<TcpStore>> stranger = ConnectWith(*server, "");
  CHECK(stranger.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(stranger.status().message(), "BRAID_JOB_SECRET"));
  // A wrong secret: the server's proof does not verify.
  absl::StatusOr<std::unique_ptr<TcpStore>> wrong = ConnectWith(*server, "guess");
  CHECK(wrong.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(absl::StrContains(wrong.status().message(), "does not know this job's secret"));
  // A client that ignores the server's proof and answers with garbage.
  UniqueFd raw = RawConnect(*server);
  const std::string peer = LocalAddress(raw.get());
  std::string nonce_field;
  PutStr(nonce_field, std::string(JobSecret::kNonceBytes, 'n'));
  REQUIRE(SendAll(raw.get(), Bytes(Frame(Payload(1, 0, nonce_field))), DeadlineIn(absl::Seconds(5))).ok());
  CHECK(ReadResponse(raw.get())[0] == 0);  // nonce and proof
  std::string proof_field;
  PutStr(proof_field, std::string(JobSecret::kProofBytes, 'p'));
  REQUIRE(SendAll(raw.get(), Bytes(Frame(Payload(1, 0, proof_field))), DeadlineIn(absl::Seconds(5))).ok());
  CHECK(ReadResponse(raw.get())[0] == static_cast<char>(absl::StatusCode::kPermissionDenied));
  CHECK(ClosedByServer(raw.get(), absl::Seconds(5)));
  const std::string log = capture.Finish();
  INFO("server log: " << log);
  CHECK(absl::StrContains(log, "before the handshake"));
  CHECK(absl::StrContains(log, absl::StrCat("refused ", peer, ": wrong job secret")));

  // The member never noticed.
  CHECK((*member)->Get("k", DeadlineIn(absl::Seconds(5))).value() == "v");
}

TEST_CASE("StoreServer with a secret: a silent stranger is closed after the handshake timeout", "[store][auth]") {
  auto server = StartSecretServer("s3cret", absl::Milliseconds(200));
  StderrCapture capture;
  UniqueFd raw = RawConnect(*server);
  CHECK(ClosedByServer(raw.get(), absl::Seconds(5)));
  CHECK(absl::StrContains(capture.Finish(), "no handshake within 200ms"));
  absl::StatusOr<std::unique_ptr<TcpStore>> member = ConnectWith(*server, "s3cret");
  REQUIRE(member.ok());
  CHECK((*member)->Add("n", 2).value() == 2);
}

TEST_CASE("TcpStore with a secret against a store without one: a clear error", "[store][auth]") {
  auto server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> client = ConnectWith(*server, "s3cret");
  CHECK(client.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(client.status().message(), "authentication is off on this store"));
}

}  // namespace
}  // namespace braid
