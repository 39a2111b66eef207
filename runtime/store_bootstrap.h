// Bootstrap over the rendezvous store: each exchange is a round of keys
// "<prefix>bootstrap/<round>/<rank>"; every rank sets its own and reads the
// others' (blocking until they exist, bounded by the deadline).
#ifndef BRAID_RUNTIME_STORE_BOOTSTRAP_H_
#define BRAID_RUNTIME_STORE_BOOTSTRAP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/transport/bootstrap.h"
#include "store/store.h"

namespace braid {

class StoreBootstrap final : public Bootstrap {
 public:
  // `store` must outlive this object. `called_off`: CalledOff's answer (null: never).
  StoreBootstrap(Store& store, int rank, int size, std::function<absl::Status()> called_off = nullptr)
      : store_(store), rank_(rank), size_(size), called_off_(std::move(called_off)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline deadline) override;
  absl::Status CalledOff() override { return called_off_ ? called_off_() : absl::OkStatus(); }

 private:
  // "rank 3" / "ranks 2, 5": who has not set its key of `round` (never blocks long).
  std::string MissingRanks(const std::string& round);

  Store& store_;
  int rank_;
  int size_;
  int64_t round_ = 0;
  std::function<absl::Status()> called_off_;
};

}  // namespace braid

#endif  // BRAID_RUNTIME_STORE_BOOTSTRAP_H_
