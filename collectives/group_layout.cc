#include "collectives/group_layout.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace braid {

int HostLayout::min_per_host() const {
  int least = 0;
  for (const auto& ranks : ranks_on) {
    if (least == 0 || static_cast<int>(ranks.size()) < least) least = static_cast<int>(ranks.size());
  }
  return least;
}

int HostLayout::max_per_host() const {
  int most = 0;
  for (const auto& ranks : ranks_on) most = std::max(most, static_cast<int>(ranks.size()));
  return most;
}

std::vector<int> HostLayout::CrossGroup(int rank) const {
  std::vector<int> group;
  for (int host = 0; host < hosts(); ++host) {
    const int peer = RankAt(host, local_rank_of[rank]);
    if (peer >= 0) group.push_back(peer);
  }
  return group;
}

int HostLayout::RankAt(int host, int local) const {
  const auto& ranks = ranks_on[host];
  return local < static_cast<int>(ranks.size()) ? ranks[local] : -1;
}

HostLayout MakeHostLayout(absl::Span<const std::string> host_names) {
  HostLayout layout;
  std::map<std::string, int> index;
  for (size_t r = 0; r < host_names.size(); ++r) {
    auto [it, added] = index.emplace(host_names[r], static_cast<int>(layout.ranks_on.size()));
    if (added) layout.ranks_on.emplace_back();
    layout.host_of.push_back(it->second);
    layout.local_rank_of.push_back(static_cast<int>(layout.ranks_on[it->second].size()));
    layout.ranks_on[it->second].push_back(static_cast<int>(r));
  }
  return layout;
}

absl::StatusOr<SplitPlan> PlanSplit(absl::Span<const SplitRequest> requests, int rank) {
  for (size_t r = 1; r < requests.size(); ++r) {
    if (requests[r].check != requests[0].check) {
      return absl::InvalidArgumentError(absl::StrCat("ranks 0 and ", r,
                                                     " asked for different subgroups (their lists of ranks differ)"));
    }
  }
  SplitPlan plan;
  const int64_t color = requests[rank].color;
  if (color < 0) return plan;
  std::vector<std::tuple<int64_t, int>> order;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (requests[r].color == color) order.emplace_back(requests[r].key, static_cast<int>(r));
  }
  std::sort(order.begin(), order.end());
  for (const auto& [key, member] : order) {
    if (member == rank) plan.rank = static_cast<int>(plan.members.size());
    plan.members.push_back(member);
  }
  return plan;
}

}  // namespace braid
