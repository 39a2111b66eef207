// Pure arithmetic of groups inside a group (no I/O; tests/collectives/
// group_layout_test.cc): which ranks share a host, the intra-host and
// inter-host groups a hierarchical collective runs on, and what a split
// makes of every rank's color and key.
#ifndef BRAID_COLLECTIVES_GROUP_LAYOUT_H_
#define BRAID_COLLECTIVES_GROUP_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace braid {

// Where each rank of a group runs. Hosts are numbered in the order their
// first rank appears; a host's ranks are in rank order.
struct HostLayout {
  std::vector<int> host_of;                 // per rank
  std::vector<std::vector<int>> ranks_on;   // per host
  std::vector<int> local_rank_of;           // per rank: its index on its host

  int hosts() const { return static_cast<int>(ranks_on.size()); }
  int min_per_host() const;
  int max_per_host() const;
  // Every host runs the same number of ranks.
  bool even() const { return min_per_host() == max_per_host(); }
  // The ranks on `rank`'s host, in rank order (its intra-host group).
  const std::vector<int>& LocalGroup(int rank) const { return ranks_on[host_of[rank]]; }
  // The ranks with `rank`'s local index, one per host that has one, in host
  // order (its inter-host group).
  std::vector<int> CrossGroup(int rank) const;
  // The rank with local index `local` on `host`, or -1.
  int RankAt(int host, int local) const;
};

// From every rank's host name, by rank.
HostLayout MakeHostLayout(absl::Span<const std::string> host_names);

// What a rank asks of a split, as every rank sends it.
struct SplitRequest {
  int64_t color = -1;  // negative: in no subgroup
  int64_t key = 0;
  uint64_t check = 0;  // must be equal on every rank (NewGroup's list of ranks)
};

// `rank`'s subgroup: the ranks of its color ordered by (key, rank), and its
// place among them (-1 when its color is negative). kInvalidArgument when the
// requests' checks differ, naming the first rank that disagrees with rank 0.
struct SplitPlan {
  std::vector<int> members;
  int rank = -1;
};
absl::StatusOr<SplitPlan> PlanSplit(absl::Span<const SplitRequest> requests, int rank);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_GROUP_LAYOUT_H_
