// Store: the small key-value service that rendezvous and bootstrap stand on,
// shaped like PyTorch c10d's Store. Keys and values are arbitrary bytes. A key,
// once set, stays until it is deleted or overwritten; readers block on keys
// that do not exist yet (Get, Wait) with a deadline, never forever. Counters
// (Add) are ordinary keys whose value is decimal text, so Get reads them too.
//
// Store is an interface; TcpStore (store/tcp_store.h) is the client of
// a StoreServer over TCP, and PrefixStore (below) namespaces any Store.
// Every implementation is thread-safe: any thread may call any method, and
// every fallible call returns a Status (kDeadlineExceeded at a deadline,
// kUnavailable when the store cannot be reached), never throws.
#ifndef BRAID_STORE_STORE_H_
#define BRAID_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/deadline.h"

namespace braid {

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any old value, and wakes every Get/Wait
  // waiting for it. Does not block beyond one round trip. Any thread.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value of `key`, blocking until some client sets it. At the
  // deadline: kDeadlineExceeded naming the key. A deadline already passed
  // still returns a value that exists now. Any thread.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) = 0;

  // Atomically adds `delta` to the counter at `key` (created at 0 when
  // missing) and returns the new value. The value is stored as decimal text.
  // kFailedPrecondition if the key holds something that is not a decimal
  // int64; kOutOfRange on overflow. Does not block beyond one round trip.
  // Any thread.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Atomic compare-and-set, with c10d's semantics:
  //  - key missing and `expected` empty: sets `desired`, returns `desired`;
  //  - key missing and `expected` non-empty: sets nothing, returns `expected`
  //    (c10d's quirk; callers test "returned == desired" for success);
  //  - current value == `expected`: sets `desired`, returns `desired`;
  //  - otherwise: sets nothing, returns the current value.
  // Does not block beyond one round trip. Any thread.
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // A barrier of `count` clients at the counter `key`: adds one to it and
  // blocks until it reaches `count`; returns this client's arrival (1 for
  // the first). kDeadlineExceeded naming the key and the arrivals so far at
  // the deadline. This default takes three round trips (Add; the count-th
  // arrival Sets "<key>/all"; Wait for that); TcpStore's server does it in
  // one. Any thread.
  virtual absl::StatusOr<int64_t> Arrive(absl::string_view key, int64_t count, Deadline deadline);

  // Blocks until every key in `keys` exists (at the same moment or not: a key
  // deleted after it was seen still counts). kDeadlineExceeded naming the
  // missing keys at the deadline. Any thread.
  virtual absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) = 0;

  // Whether every key in `keys` exists now; never waits for them. Any thread.
  virtual absl::StatusOr<bool> Check(absl::Span<const std::string> keys) = 0;

  // Deletes `key`; returns whether it existed. Any thread.
  virtual absl::StatusOr<bool> Delete(absl::string_view key) = 0;

  // How many keys the store holds now. Any thread.
  virtual absl::StatusOr<int64_t> NumKeys() = 0;
};

// The value of `key` if it exists now, else nullopt; never waits for it
// (Check, then a Get with a deadline already passed). Any thread.
absl::StatusOr<std::optional<std::string>> GetIfSet(Store& store, absl::string_view key);

// A view of another Store in which every key is "prefix/key", so that groups,
// restarts or subsystems sharing one store cannot collide. Holds the base
// store by shared_ptr; thread-safe as the base store is. Every method blocks
// exactly as the base store's does.
class PrefixStore : public Store {
 public:
  // `base` must not be null.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, Deadline deadline) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<int64_t> Arrive(absl::string_view key, int64_t count, Deadline deadline) override;
  absl::Status Wait(absl::Span<const std::string> keys, Deadline deadline) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  // The BASE store's count: keys of every prefix, not just this one (the
  // store cannot count by prefix; c10d's PrefixStore does the same).
  absl::StatusOr<int64_t> NumKeys() override;

 private:
  std::string Prefixed(absl::string_view key) const;
  std::vector<std::string> Prefixed(absl::Span<const std::string> keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace braid

#endif  // BRAID_STORE_STORE_H_
