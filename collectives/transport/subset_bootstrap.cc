#include "collectives/transport/subset_bootstrap.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/transport/frame.h"

namespace braid {

SubsetBootstrap::SubsetBootstrap(Transport& parent, std::vector<int> members, uint64_t seq)
    : parent_(parent), members_(std::move(members)), seq_(seq) {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == parent_.rank()) rank_ = static_cast<int>(i);
  }
}

absl::StatusOr<std::vector<std::string>> SubsetBootstrap::AllGather(absl::string_view mine, Deadline deadline) {
  if (rank_ < 0) {
    return absl::InternalError(absl::StrCat("rank ", parent_.rank(), " is not a member of its own subgroup"));
  }
  const size_t n = members_.size();
  auto header = [&](uint32_t step, size_t bytes) {
    CollectiveArgs args;
    args.kind = CollectiveKind::kSplit;
    args.seq = seq_;
    args.dtype = DType::kU8;
    args.count = bytes;
    return CollectiveHeader(args, step);
  };
  // Round one: every member's length, as 8 bytes.
  const uint32_t lengths_step = ++step_;
  const uint32_t bytes_step = ++step_;
  std::vector<uint64_t> lengths(n, 0);
  lengths[rank_] = mine.size();
  std::vector<OpId> ops;
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) == rank_) continue;
    BRAID_ASSIGN_OR_RETURN(OpId r, parent_.PostRecv(members_[i], header(lengths_step, 8),
                                                    absl::MakeSpan(reinterpret_cast<std::byte*>(&lengths[i]), 8)));
    BRAID_ASSIGN_OR_RETURN(OpId s, parent_.PostSend(members_[i], header(lengths_step, 8),
                                                    absl::MakeConstSpan(reinterpret_cast<const std::byte*>(&lengths[rank_]), 8)));
    ops.push_back(r);
    ops.push_back(s);
  }
  BRAID_RETURN_IF_ERROR(parent_.Wait(ops, deadline));
  // Round two: the bytes.
  std::vector<std::string> all(n);
  all[rank_] = std::string(mine);
  ops.clear();
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) == rank_) continue;
    if (lengths[i] > (uint64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", parent_.rank(), ": peer ", members_[i], " announced ", lengths[i], " bootstrap bytes"));
    }
    all[i].resize(lengths[i]);
    BRAID_ASSIGN_OR_RETURN(OpId r, parent_.PostRecv(members_[i], header(bytes_step, lengths[i]),
                                                    absl::MakeSpan(reinterpret_cast<std::byte*>(all[i].data()),
                                                                   all[i].size())));
    BRAID_ASSIGN_OR_RETURN(OpId s, parent_.PostSend(members_[i], header(bytes_step, mine.size()),
                                                    absl::MakeConstSpan(reinterpret_cast<const std::byte*>(mine.data()),
                                                                        mine.size())));
    ops.push_back(r);
    ops.push_back(s);
  }
  BRAID_RETURN_IF_ERROR(parent_.Wait(ops, deadline));
  return all;
}

}  // namespace braid
