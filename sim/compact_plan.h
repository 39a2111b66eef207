// A Plan as the simulator needs it: per op its kind and bytes, per transfer
// its direction, peer and bytes; regions' places dropped (they cost nothing
// to simulate). Peers are kept relative to the rank (peer - rank mod size),
// so that ranks whose plans differ only by their place in the group (every
// rank of a ring) share one CompactPlan: PlanStore keeps one of each.
#ifndef BRAID_SIM_COMPACT_PLAN_H_
#define BRAID_SIM_COMPACT_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "collectives/programs/program.h"

namespace braid::sim {

struct CompactTransfer {
  uint32_t offset = 0;  // the peer: (rank + offset) mod size
  bool send = false;
  uint64_t bytes = 0;
  bool operator==(const CompactTransfer&) const = default;
};

struct CompactOp {
  Op::Kind kind = Op::Kind::kGroup;
  uint32_t transfers = 0;  // kGroup: how many, from `first`
  uint32_t first = 0;      // kGroup: the first transfer; kStep: the step
  uint64_t bytes = 0;      // the local ops
  bool operator==(const CompactOp&) const = default;
};

struct CompactPlan {
  std::vector<CompactOp> ops;         // every lane's, lane after lane
  std::vector<uint32_t> lane_begin;   // lanes + 1 entries
  std::vector<CompactTransfer> transfers;
  std::vector<LevelStep> steps;
  size_t lane_window = kLaneWindow;  // Plan::lane_window
  size_t lanes() const { return lane_begin.size() - 1; }
  bool operator==(const CompactPlan& other) const;
};

// `plan` of `rank` in a group of `size`, elements of `element_size` bytes.
// Empty transfers and copies onto themselves are left out, as the
// executors skip them.
CompactPlan Compact(const Plan& plan, int rank, int size, size_t element_size);

// One CompactPlan for every distinct plan added.
class PlanStore {
 public:
  std::shared_ptr<const CompactPlan> Add(CompactPlan plan);
  size_t distinct() const { return distinct_; }

 private:
  absl::flat_hash_map<uint64_t, std::vector<std::shared_ptr<const CompactPlan>>> by_hash_;
  size_t distinct_ = 0;
};

}  // namespace braid::sim

#endif  // BRAID_SIM_COMPACT_PLAN_H_
