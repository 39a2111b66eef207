// SubsetBootstrap: a Bootstrap among some ranks of a group, over that group's
// own transport. A subgroup's transport (a split, a hierarchical
// collective's intra-host and inter-host levels) finds its peers this way:
// no store, no new rendezvous round. Its frames are kSplit frames carrying
// the sequence number of the parent collective that makes the subgroup, one
// step per AllGather, so they can never be taken for another collective's.
//
// Used by the parent's progress thread only, while it runs that collective
// (the parent transport is not thread-safe).
#ifndef BRAID_COLLECTIVES_TRANSPORT_SUBSET_BOOTSTRAP_H_
#define BRAID_COLLECTIVES_TRANSPORT_SUBSET_BOOTSTRAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/deadline.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/transport.h"

namespace braid {

class SubsetBootstrap final : public Bootstrap {
 public:
  // `members`: the parent's ranks in the subgroup's rank order; the parent's
  // own rank must be among them. `seq`: the parent collective's.
  SubsetBootstrap(Transport& parent, std::vector<int> members, uint64_t seq);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  // Two exchanges with every other member: the lengths, then the bytes.
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view mine, Deadline deadline) override;

 private:
  Transport& parent_;
  const std::vector<int> members_;
  const uint64_t seq_;
  int rank_ = -1;
  uint32_t step_ = 0;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_SUBSET_BOOTSTRAP_H_
