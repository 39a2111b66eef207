// Bootstrap over the rendezvous store: each exchange is a round of keys
// "<prefix>bootstrap/<round>/<rank>"; every rank sets its own and reads the
// others' (blocking until they exist, bounded by the deadline).
#ifndef BRAID_RUNTIME_STORE_BOOTSTRAP_H_
#define BRAID_RUNTIME_STORE_BOOTSTRAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/transport/bootstrap.h"
#include "store/store.h"

namespace braid {

class StoreBootstrap final : public Bootstrap {
 public:
  // `store` must outlive this object.
  StoreBootstrap(Store& store, int rank, int size) : store_(store), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline deadline) override;

 private:
  // "rank 3" / "ranks 2, 5": who has not set its key of `round` (never blocks long).
  std::string MissingRanks(const std::string& round);

  Store& store_;
  int rank_;
  int size_;
  int64_t round_ = 0;
};

}  // namespace braid

#endif  // BRAID_RUNTIME_STORE_BOOTSTRAP_H_
