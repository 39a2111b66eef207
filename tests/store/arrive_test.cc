// Store::Arrive, the barrier: TcpStore's one-round-trip server op and the
// Store default (Add, Set, Wait) behind it for other stores, over real
// loopback sockets.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "store/store.h"
#include "store/tcp_store.h"

namespace braid {
namespace {

std::unique_ptr<StoreServer> StartServer() {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("127.0.0.1", 0, {});
  INFO(server.status());
  REQUIRE(server.ok());
  return *std::move(server);
}

HostPort AddressOf(const StoreServer& server) { return HostPort{"127.0.0.1", server.port()}; }

// Every call but Arrive forwarded: Arrive is Store's default.
class DefaultArriveStore : public Store {
 public:
  explicit DefaultArriveStore(std::unique_ptr<TcpStore> inner) : inner_(std::move(inner)) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override { return inner_->Set(key, value); }
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override {
    return inner_->Get(key, deadline);
  }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override { return inner_->Add(key, delta); }
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override {
    return inner_->CompareSet(key, expected, desired);
  }
  absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) override {
    return inner_->Wait(keys, deadline);
  }
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override { return inner_->Check(keys); }
  absl::StatusOr<bool> Delete(absl::string_view key) override { return inner_->Delete(key); }
  absl::StatusOr<int64_t> NumKeys() override { return inner_->NumKeys(); }

 private:
  std::unique_ptr<TcpStore> inner_;
};

// `n` clients, one thread and connection each, at one barrier: every one
// returns only after the last has arrived, each with its own arrival.
void CheckBarrier(int n, bool default_arrive) {
  auto server = StartServer();
  std::atomic<int> arrived{0};
  std::atomic<int> left_early{0};
  std::vector<int64_t> arrivals(n, 0);
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<std::unique_ptr<TcpStore>> tcp = TcpStore::Connect(AddressOf(*server), DeadlineIn(absl::Seconds(10)));
      if (!tcp.ok()) {
        statuses[i] = tcp.status();
        return;
      }
      std::unique_ptr<Store> store = default_arrive ? std::make_unique<DefaultArriveStore>(*std::move(tcp))
                                                    : std::unique_ptr<Store>(*std::move(tcp));
      PrefixStore job("job", std::shared_ptr<Store>(std::move(store)));
      if (i == 0) absl::SleepFor(absl::Milliseconds(200));  // the others wait for the last
      arrived.fetch_add(1);
      absl::StatusOr<int64_t> arrival = job.Arrive("barrier", n, DeadlineIn(absl::Seconds(20)));
      if (arrived.load() < n) left_early.fetch_add(1);
      statuses[i] = arrival.status();
      if (arrival.ok()) arrivals[i] = *arrival;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& status : statuses) {
    INFO(status);
    REQUIRE(status.ok());
  }
  CHECK(left_early.load() == 0);
  std::sort(arrivals.begin(), arrivals.end());
  for (int i = 0; i < n; ++i) CHECK(arrivals[i] == i + 1);
}

TEST_CASE("TcpStore: Arrive holds every client until the count has arrived, in one round trip", "[store]") {
  CheckBarrier(24, /*default_arrive=*/false);
}

TEST_CASE("Store: the default Arrive (Add, Set, Wait) is the same barrier", "[store]") {
  CheckBarrier(24, /*default_arrive=*/true);
}

TEST_CASE("TcpStore: Arrive times out naming the barrier and the arrivals, and is forgotten", "[store]") {
  auto server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(AddressOf(*server), DeadlineIn(absl::Seconds(10)));
  REQUIRE(store.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> alone = (*store)->Arrive("pair", 2, start + absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  INFO(alone.status());
  CHECK(alone.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(alone.status().message(), "\"pair\""));
  CHECK(absl::StrContains(alone.status().message(), "1 of 2 arrived"));
  CHECK(took >= absl::Milliseconds(295));
  CHECK(took < absl::Milliseconds(800));
  // The timed-out arrival still counts (an Add is not undone): a second
  // client completes the pair at once, and the first is answered nothing more.
  absl::StatusOr<std::unique_ptr<TcpStore>> other = TcpStore::Connect(AddressOf(*server), DeadlineIn(absl::Seconds(10)));
  REQUIRE(other.ok());
  CHECK((*other)->Arrive("pair", 2, DeadlineIn(absl::Seconds(5))).value() == 2);
  CHECK((*store)->Get("pair", DeadlineIn(absl::Seconds(5))).value() == "2");
  // A counter that is not a number is refused, as Add refuses it.
  REQUIRE((*store)->Set("text", "abc").ok());
  CHECK((*store)->Arrive("text", 2, DeadlineIn(absl::Seconds(5))).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("TcpStore: an Add that reaches the count releases the parked arrivals", "[store]") {
  auto server = StartServer();
  absl::StatusOr<std::unique_ptr<TcpStore>> waiter = TcpStore::Connect(AddressOf(*server), DeadlineIn(absl::Seconds(10)));
  absl::StatusOr<std::unique_ptr<TcpStore>> adder = TcpStore::Connect(AddressOf(*server), DeadlineIn(absl::Seconds(10)));
  REQUIRE(waiter.ok());
  REQUIRE(adder.ok());
  absl::StatusOr<int64_t> arrival = absl::UnknownError("not run");
  std::atomic<bool> returned{false};
  std::thread t([&] {
    arrival = (*waiter)->Arrive("late", 3, DeadlineIn(absl::Seconds(10)));
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  REQUIRE((*adder)->Add("late", 1).value() == 2);  // not yet
  absl::SleepFor(absl::Milliseconds(100));
  const bool returned_early = returned.load();
  REQUIRE((*adder)->Add("late", 1).value() == 3);
  t.join();
  CHECK_FALSE(returned_early);
  INFO(arrival.status());
  CHECK(arrival.value() == 1);
}

}  // namespace
}  // namespace braid
