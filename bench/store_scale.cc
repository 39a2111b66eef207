// store_scale: braid's store under thousands of real clients, in two roles
// that bench/store_scale.py starts as separate processes.
//
//   store_scale --serve --clients=N
//       Starts a StoreServer on a free port (max_connections N + 64), prints
//       "port P", waits until the key bench/shutdown is set, then prints what
//       serving cost since it started: "server cpu_s=... rss_kb=...
//       peak_rss_kb=... base_rss_kb=... fds_before=... fds_after=..."
//       (fds_after counts the descriptors once every client has gone: a
//       leak shows as fds_after > fds_before).
//   store_scale --connect=HOST:PORT --first=I --clients=N --total=T --go=FILE
//       Prints "ready", waits for FILE to exist, then runs clients I .. I+N-1
//       of T, one thread each, doing what rendezvous does: connect; Set its
//       record; wait at the join barrier (Arrive: the add and the wait in
//       one round trip); Get another client's record; then a barrier. Prints "ok N START_NS END_NS" (CLOCK_REALTIME) and the first
//       failure; exit 1 on any. With --connect-only, each client only
//       connects (one round trip, the client's probe) and hangs up: the
//       floor of threads and connections that any store's run pays.
//   store_scale --connect=HOST:PORT --stop
//       Sets bench/shutdown.
#include <dirent.h>
#include <unistd.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/deadline.h"
#include "base/flags.h"
#include "base/socket.h"
#include "base/status.h"
#include "store/tcp_store.h"

namespace braid {
namespace {

struct Options {
  bool serve = false;
  std::string connect;
  int first = 0;
  int clients = 1;
  int total = 1;
  double timeout_s = 120;
  std::string go;
  bool stop = false;
  bool connect_only = false;
};

int64_t NowNs() { return absl::ToUnixNanos(absl::Now()); }

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

int CountFds() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd"); dir != nullptr) {
    while (readdir(dir) != nullptr) ++count;
    closedir(dir);
  }
  return count - 2;  // . and ..
}

long StatusKb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::strtol(line.c_str() + std::string(field).size(), nullptr, 10);
  }
  return -1;
}

int Serve(const Options& o) {
  StoreServerOptions options;
  options.max_connections = o.clients + 64;
  const long base_rss = StatusKb("VmRSS:");
  const double cpu_start = CpuSeconds();
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("127.0.0.1", 0, options);
  if (!server.ok()) {
    std::fprintf(stderr, "store_scale: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::printf("port %d\n", (*server)->port());
  std::fflush(stdout);
  absl::StatusOr<std::unique_ptr<TcpStore>> control =
      TcpStore::Connect({"127.0.0.1", (*server)->port()}, DeadlineIn(absl::Seconds(10)));
  if (!control.ok()) return 1;
  const int fds_before = CountFds();  // the listener, the loop's own, this control connection
  absl::StatusOr<std::string> stop = (*control)->Get("bench/shutdown", DeadlineIn(absl::Hours(2)));
  // Once every client has gone, the server holds what it held at the start:
  // its listener, its eventfd and epoll, this control connection.
  const absl::Time settle = absl::Now() + absl::Seconds(10);
  int fds_after = CountFds();
  while (fds_after > fds_before && absl::Now() < settle) {
    absl::SleepFor(absl::Milliseconds(50));
    fds_after = CountFds();
  }
  std::printf("server cpu_s=%.3f rss_kb=%ld peak_rss_kb=%ld base_rss_kb=%ld fds_before=%d fds_after=%d\n",
              CpuSeconds() - cpu_start, StatusKb("VmRSS:"), StatusKb("VmHWM:"), base_rss, fds_before, fds_after);
  return stop.ok() ? 0 : 1;
}

// One client's rendezvous: what braidrun's agents and workers do with the store.
absl::Status Rendezvous(const HostPort& address, int id, int total, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Connect(address, deadline));
  BRAID_RETURN_IF_ERROR(store->Set(absl::StrCat("node/", id), absl::StrCat("10.0.", id / 256, ".", id % 256, ":29400")));
  BRAID_RETURN_IF_ERROR(store->Arrive("joined", total, deadline).status());
  BRAID_ASSIGN_OR_RETURN(std::string peer, store->Get(absl::StrCat("node/", (id + 1) % total), deadline));
  if (peer.empty()) return absl::DataLossError("an empty record");
  return store->Arrive("barrier", total, deadline).status();
}

int Connect(const Options& o) {
  absl::StatusOr<HostPort> address = ParseHostPort(o.connect, 0);
  if (!address.ok()) return 2;
  if (o.stop) {
    absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(*address, DeadlineIn(absl::Seconds(10)));
    return store.ok() && (*store)->Set("bench/shutdown", "1").ok() ? 0 : 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (const Deadline wait = DeadlineIn(absl::Seconds(600)); !o.go.empty() && access(o.go.c_str(), F_OK) != 0;) {
    if (absl::Now() > wait) return 1;
    absl::SleepFor(absl::Milliseconds(5));
  }
  const int64_t start_ns = NowNs();
  const Deadline deadline = DeadlineIn(absl::Seconds(o.timeout_s));
  std::atomic<int> ok{0};
  absl::Mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  threads.reserve(o.clients);
  for (int i = 0; i < o.clients; ++i) {
    threads.emplace_back([&, id = o.first + i] {
      const absl::Status status = o.connect_only ? TcpStore::Connect(*address, deadline).status()
                                                 : Rendezvous(*address, id, o.total, deadline);
      if (status.ok()) {
        ok.fetch_add(1);
        return;
      }
      absl::MutexLock lock(&mu);
      if (first_error.empty()) first_error = absl::StrCat("client ", id, ": ", status.ToString());
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf("ok %d %lld %lld\n", ok.load(), static_cast<long long>(start_ns), static_cast<long long>(NowNs()));
  if (!first_error.empty()) std::fprintf(stderr, "store_scale: %s\n", first_error.c_str());
  return ok.load() == o.clients ? 0 : 1;
}

int Main(int argc, char** argv) {
  Options o;
  auto integer = [](int* out) {
    return [out](absl::string_view v) {
      return absl::SimpleAtoi(v, out) && *out >= 0 ? absl::OkStatus() : absl::InvalidArgumentError(std::string(v));
    };
  };
  const std::vector<Flag> flags = {
      {0, "serve", "", "serve a store; stop when bench/shutdown is set",
       [&o](absl::string_view v) { return (o.serve = v == "true", absl::OkStatus()); }},
      {0, "connect", "HOST:PORT", "run clients against this store",
       [&o](absl::string_view v) { return (o.connect = std::string(v), absl::OkStatus()); }},
      {0, "first", "I", "the first client's id", integer(&o.first)},
      {0, "clients", "N", "clients here (threads), or the most the server admits", integer(&o.clients)},
      {0, "total", "T", "clients in the whole run", integer(&o.total)},
      {0, "go", "FILE", "start the clients once FILE exists",
       [&o](absl::string_view v) { return (o.go = std::string(v), absl::OkStatus()); }},
      {0, "connect-only", "", "clients only connect and hang up (the floor)",
       [&o](absl::string_view v) { return (o.connect_only = v == "true", absl::OkStatus()); }},
      {0, "stop", "", "set bench/shutdown (with --connect)",
       [&o](absl::string_view v) { return (o.stop = v == "true", absl::OkStatus()); }},
  };
  bool help = false;
  if (absl::Status s = ParseFlags(argc, argv, flags, &help); !s.ok()) {
    std::fprintf(stderr, "store_scale: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (help || o.serve == !o.connect.empty()) {
    std::printf("%s", Usage("store_scale", "braid's store under many clients (bench/store_scale.py)", flags).c_str());
    return help ? 0 : 2;
  }
  return o.serve ? Serve(o) : Connect(o);
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) { return braid::Main(argc, argv); }
