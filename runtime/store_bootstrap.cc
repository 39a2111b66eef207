#include "runtime/store_bootstrap.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace braid {

std::string StoreBootstrap::MissingRanks(const std::string& round) {
  std::vector<int> missing;
  for (int peer = 0; peer < size_; ++peer) {
    absl::StatusOr<bool> there = store_.Check({absl::StrCat(round, peer)});
    if (!there.ok() || !*there) missing.push_back(peer);
  }
  if (missing.empty()) return "no rank";  // they arrived just now
  return absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "));
}

absl::StatusOr<std::vector<std::string>> StoreBootstrap::AllGather(absl::string_view mine, Deadline deadline) {
  const std::string round = absl::StrCat("bootstrap/", round_++, "/");
  BRAID_RETURN_IF_ERROR(store_.Set(absl::StrCat(round, rank_), mine));
  std::vector<std::string> all(static_cast<size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) {
      all[static_cast<size_t>(peer)] = std::string(mine);
      continue;
    }
    absl::StatusOr<std::string> value = store_.Get(absl::StrCat(round, peer), deadline);
    if (!value.ok()) {
      return Annotate(value.status(), absl::StrCat("rank ", rank_, ": bootstrap: ", MissingRanks(round),
                                                   " never arrived"));
    }
    all[static_cast<size_t>(peer)] = std::move(*value);
  }
  return all;
}

}  // namespace braid
