#include "launcher/node_liveness.h"

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"

namespace braid {
namespace {

std::string AliveKey(int round, int node) { return RoundKey(round, absl::StrCat("alive_", node)); }
std::string GenKey(int round, int node) { return RoundKey(round, absl::StrCat("gen_", node)); }
std::string LostKey(int round, int node, int gen) { return RoundKey(round, absl::StrCat("lost_", node, "_", gen)); }
std::string ClaimKey(int round, int node, int gen) { return RoundKey(round, absl::StrCat("claim_", node, "_", gen)); }

// A counter key's value; 0 while unset.
absl::StatusOr<int64_t> Counter(Store& store, const std::string& key) {
  BRAID_ASSIGN_OR_RETURN(const std::optional<std::string> text, GetIfSet(store, key));
  int64_t value = 0;
  if (text.has_value() && !absl::SimpleAtoi(*text, &value)) {
    return absl::DataLossError(absl::StrCat("rendezvous: key ", key, " holds '", *text, "', not a number"));
  }
  return value;
}

absl::StatusOr<int> IncarnationOf(Store& store, int round, int node) {
  BRAID_ASSIGN_OR_RETURN(const int64_t gen, Counter(store, GenKey(round, node)));
  return static_cast<int>(gen);
}

absl::StatusOr<bool> LostAt(Store& store, int round, int node, int gen) {
  return store.Check({LostKey(round, node, gen)});
}

}  // namespace

std::string RoundKey(int round, absl::string_view name) { return absl::StrCat("r", round, "/", name); }

NodeLiveness::NodeLiveness(std::shared_ptr<Store> rdzv_store, int round, int nodes, int self, int incarnation,
                           std::vector<std::string> addrs, KeepAlive keep_alive)
    : store_(std::move(rdzv_store)),
      round_(round),
      self_(self),
      incarnation_(incarnation),
      addrs_(std::move(addrs)),
      keep_alive_(keep_alive),
      seen_(static_cast<size_t>(nodes)) {}

absl::StatusOr<int> NodeLiveness::Incarnation(int node) { return IncarnationOf(*store_, round_, node); }

absl::StatusOr<bool> NodeLiveness::Vacant(int node) {
  BRAID_ASSIGN_OR_RETURN(const int gen, Incarnation(node));
  return LostAt(*store_, round_, node, gen);
}

absl::StatusOr<std::vector<LostNode>> NodeLiveness::Tick() {
  std::vector<LostNode> declared;
  const absl::Time now = absl::Now();
  if (now < next_tick_) return declared;
  next_tick_ = now + keep_alive_.interval;
  BRAID_ASSIGN_OR_RETURN(const std::optional<std::string> lost,
                         GetIfSet(*store_, LostKey(round_, self_, incarnation_)));
  if (lost.has_value()) {
    return absl::CancelledError(absl::StrCat("the other nodes declared this node (node ", self_, ") lost: ", *lost));
  }
  BRAID_RETURN_IF_ERROR(store_->Add(AliveKey(round_, self_), 1).status());
  const absl::Duration window = keep_alive_.interval * keep_alive_.max_missed;
  for (int node = 0; node < static_cast<int>(seen_.size()); ++node) {
    if (node == self_) continue;
    BRAID_ASSIGN_OR_RETURN(const int gen, Incarnation(node));
    BRAID_ASSIGN_OR_RETURN(const bool vacant, LostAt(*store_, round_, node, gen));
    if (vacant) continue;
    BRAID_ASSIGN_OR_RETURN(const int64_t beats, Counter(*store_, AliveKey(round_, node)));
    Seen& seen = seen_[static_cast<size_t>(node)];
    if (seen.incarnation != gen || seen.beats != beats) {
      seen = Seen{gen, beats, now};  // the first look starts the window too
      continue;
    }
    if (now - seen.moved < window) continue;
    const std::string why = absl::StrCat("node ", node, " (", addrs_[static_cast<size_t>(node)], ") missed ",
                                         keep_alive_.max_missed, " heartbeats (no beat for ",
                                         absl::FormatDuration(now - seen.moved), "; seen by node ", self_, ")");
    BRAID_ASSIGN_OR_RETURN(const std::string stands, store_->CompareSet(LostKey(round_, node, gen), "", why));
    if (stands == why) declared.push_back({node, why});
  }
  return declared;
}

absl::StatusOr<std::optional<ClaimedSlot>> ClaimVacantSlot(Store& rdzv_store, int round,
                                                           const std::vector<int>& candidates) {
  for (int node : candidates) {
    BRAID_ASSIGN_OR_RETURN(const int gen, IncarnationOf(rdzv_store, round, node));
    BRAID_ASSIGN_OR_RETURN(const bool vacant, LostAt(rdzv_store, round, node, gen));
    if (!vacant) continue;
    BRAID_ASSIGN_OR_RETURN(const int64_t claims, rdzv_store.Add(ClaimKey(round, node, gen), 1));
    if (claims != 1) continue;  // another agent took it
    BRAID_RETURN_IF_ERROR(rdzv_store.Set(GenKey(round, node), absl::StrCat(gen + 1)));
    return ClaimedSlot{node, gen + 1};
  }
  return std::nullopt;
}

}  // namespace braid
