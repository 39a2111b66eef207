#include "launcher/rendezvous.h"

#include <algorithm>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace braid {
namespace {

constexpr absl::Duration kSlice = absl::Milliseconds(200);

absl::StatusOr<int> ParseCount(const std::string& key, const std::string& text) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::DataLossError(absl::StrCat("rendezvous: key ", key, " holds '", text, "', not a number"));
  }
  return value;
}

}  // namespace

int RendezvousResult::world_size() const {
  int total = 0;
  for (const NodeInfo& node : nodes) total += node.nproc;
  return total;
}

int RendezvousResult::first_global_rank() const {
  int first = 0;
  for (int i = 0; i < node_rank; ++i) first += nodes[i].nproc;
  return first;
}

Rendezvous::Rendezvous(std::shared_ptr<Store> store, RendezvousSpec spec)
    : store_(std::make_shared<PrefixStore>(absl::StrCat("braidrun/", spec.run_id), std::move(store))),
      spec_(std::move(spec)) {}

absl::Status Rendezvous::WaitFor(const std::vector<std::string>& keys, Deadline deadline) {
  return InSlices(
      deadline, kSlice, [&](Deadline until) { return store_->Wait(keys, until); },
      [&] {
        if (!spec_.interrupted || !spec_.interrupted()) return absl::OkStatus();
        return absl::CancelledError(absl::StrCat("rendezvous '", spec_.run_id, "': interrupted by a signal"));
      });
}

absl::StatusOr<std::string> Rendezvous::GetWithin(const std::string& key, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(WaitFor({key}, deadline));
  return store_->Get(key, absl::InfinitePast());
}

absl::StatusOr<int> Rendezvous::CurrentRound() {
  // The first agent ever creates the key; CompareSet returns what is there.
  BRAID_ASSIGN_OR_RETURN(std::string round, store_->CompareSet("round", "", "0"));
  return ParseCount("round", round);
}

absl::Status Rendezvous::AdvancePast(int round) {
  // Moves "round" from `round` to round+1 unless someone already moved it.
  return store_->CompareSet("round", absl::StrCat(round), absl::StrCat(round + 1)).status();
}

absl::Status Rendezvous::MarkLate(int round) {
  BRAID_RETURN_IF_ERROR(store_->Add(RoundKey(round, "waiting"), 1).status());
  return AdvancePast(round);
}

absl::StatusOr<RendezvousResult> Rendezvous::Join(int after_round) {
  const Deadline deadline = DeadlineIn(spec_.join_timeout);
  if (after_round >= 0) BRAID_RETURN_IF_ERROR(AdvancePast(after_round));
  while (true) {
    BRAID_ASSIGN_OR_RETURN(int round, CurrentRound());
    if (round <= after_round) {  // another agent has not advanced yet: impossible after AdvancePast
      BRAID_RETURN_IF_ERROR(AdvancePast(round));
      continue;
    }
    BRAID_ASSIGN_OR_RETURN(bool closed, store_->Check({RoundKey(round, "closed")}));
    if (closed && spec_.take_vacant_slot) {
      BRAID_ASSIGN_OR_RETURN(std::optional<RendezvousResult> taken, TakeVacantSlot(round, deadline));
      if (taken.has_value()) return *std::move(taken);
    }
    if (closed) {
      // Late: tell the running agents, then wait in the next round.
      BRAID_RETURN_IF_ERROR(MarkLate(round));
      continue;
    }

    int slot = 0;
    if (spec_.static_node_rank >= 0) {
      slot = spec_.static_node_rank + 1;
    } else {
      BRAID_ASSIGN_OR_RETURN(int64_t taken, store_->Add(RoundKey(round, "count"), 1));
      slot = static_cast<int>(taken);
      if (slot > spec_.max_nodes) {
        BRAID_RETURN_IF_ERROR(MarkLate(round));
        continue;
      }
    }
    BRAID_RETURN_IF_ERROR(
        store_->Set(RoundKey(round, absl::StrCat("node_", slot)), absl::StrCat(spec_.self.addr, " ", spec_.self.nproc)));
    BRAID_RETURN_IF_ERROR(store_->Set(RoundKey(round, absl::StrCat("joined_", slot)), ""));

    const bool closer = spec_.static_node_rank >= 0 ? spec_.static_node_rank == 0 : slot == 1;
    if (closer) {
      absl::Status arrived = WaitForMinimum(round, deadline);
      if (absl::IsDeadlineExceeded(arrived)) {
        absl::StatusOr<std::string> count = store_->Get(RoundKey(round, "count"), absl::InfinitePast());
        return absl::DeadlineExceededError(absl::StrCat(
            "rendezvous '", spec_.run_id, "' round ", round, ": timed out after ",
            absl::FormatDuration(spec_.join_timeout), " (--rdzv-conf join_timeout) with ",
            count.ok() ? *count : std::string("?"), " of ", spec_.min_nodes, " required nodes"));
      }
      BRAID_RETURN_IF_ERROR(arrived);
      if (spec_.max_nodes > spec_.min_nodes) {
        // The last-call window: more nodes may still come, up to max_nodes.
        const std::vector<std::string> max_key = {RoundKey(round, absl::StrCat("joined_", spec_.max_nodes))};
        absl::Status full = WaitFor(max_key, std::min(deadline, DeadlineIn(spec_.last_call_timeout)));
        if (!full.ok() && !absl::IsDeadlineExceeded(full)) return full;
      }
      int members = spec_.max_nodes;
      if (spec_.static_node_rank < 0) {
        BRAID_ASSIGN_OR_RETURN(std::string count, store_->Get(RoundKey(round, "count"), deadline));
        BRAID_ASSIGN_OR_RETURN(members, ParseCount("count", count));
        members = std::min(members, spec_.max_nodes);
      }
      BRAID_RETURN_IF_ERROR(store_->CompareSet(RoundKey(round, "closed"), "", absl::StrCat(members)).status());
    }
    absl::StatusOr<std::string> closed_count = GetWithin(RoundKey(round, "closed"), deadline);
    if (absl::IsDeadlineExceeded(closed_count.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous '", spec_.run_id, "' round ", round, ": the round did not close within ",
          absl::FormatDuration(spec_.join_timeout), " (--rdzv-conf join_timeout); node slot ", slot,
          " is here, ", spec_.static_node_rank >= 0 ? "the node with --node-rank=0" : "the first node",
          " never closed it"));
    }
    BRAID_RETURN_IF_ERROR(closed_count.status());
    BRAID_ASSIGN_OR_RETURN(int members, ParseCount("closed", *closed_count));
    if (slot > members) {
      BRAID_RETURN_IF_ERROR(MarkLate(round));
      continue;
    }
    return Members(round, slot, members, deadline);
  }
}

absl::Status Rendezvous::WaitForMinimum(int round, Deadline deadline) {
  // c10d slots are taken in order, so the min_nodes-th joined means all
  // before it did; static slots are node ranks, arriving in any order.
  std::vector<std::string> keys = {RoundKey(round, absl::StrCat("joined_", spec_.min_nodes))};
  if (spec_.static_node_rank >= 0) {
    keys.clear();
    for (int slot = 1; slot <= spec_.max_nodes; ++slot) keys.push_back(RoundKey(round, absl::StrCat("joined_", slot)));
  }
  return WaitFor(keys, deadline);
}

absl::StatusOr<std::optional<RendezvousResult>> Rendezvous::TakeVacantSlot(int round, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(const std::string count, store_->Get(RoundKey(round, "closed"), deadline));
  BRAID_ASSIGN_OR_RETURN(const int members, ParseCount("closed", count));
  BRAID_ASSIGN_OR_RETURN(RendezvousResult result, Members(round, /*slot=*/1, members, deadline));
  std::vector<int> candidates;  // the slots this agent could fill
  for (int node = 0; node < members; ++node) {
    const bool own_rank = spec_.static_node_rank < 0 || spec_.static_node_rank == node;
    if (own_rank && result.nodes[static_cast<size_t>(node)].nproc == spec_.self.nproc) candidates.push_back(node);
  }
  BRAID_ASSIGN_OR_RETURN(const std::optional<ClaimedSlot> claimed, ClaimVacantSlot(*store_, round, candidates));
  if (!claimed.has_value()) return std::nullopt;
  result.node_rank = claimed->node;
  result.nodes[static_cast<size_t>(claimed->node)].addr = spec_.self.addr;
  result.incarnation = claimed->incarnation;
  return result;
}

absl::StatusOr<RendezvousResult> Rendezvous::Members(int round, int slot, int count, Deadline deadline) {
  RendezvousResult result;
  result.round = round;
  result.node_rank = slot - 1;
  for (int i = 1; i <= count; ++i) {
    const std::string key = RoundKey(round, absl::StrCat("node_", i));
    absl::StatusOr<std::string> value = GetWithin(key, deadline);
    if (absl::IsDeadlineExceeded(value.status())) {
      return absl::DeadlineExceededError(absl::StrCat("rendezvous '", spec_.run_id, "' round ", round, ": node ",
                                                      i - 1, " never arrived (timed out after ",
                                                      absl::FormatDuration(spec_.join_timeout), ")"));
    }
    BRAID_RETURN_IF_ERROR(value.status());
    std::pair<std::string, std::string> parts = absl::StrSplit(*value, absl::MaxSplits(' ', 1));
    NodeInfo node;
    node.addr = parts.first;
    BRAID_ASSIGN_OR_RETURN(node.nproc, ParseCount(key, parts.second));
    result.nodes.push_back(std::move(node));
  }
  return result;
}

absl::StatusOr<std::string> Rendezvous::RestartReason(int round) {
  const std::string key = RoundKey(round, "restart");
  BRAID_ASSIGN_OR_RETURN(bool ended, store_->Check({key}));
  if (!ended) return std::string();
  return store_->Get(key, absl::InfinitePast());
}

absl::StatusOr<std::string> Rendezvous::RequestRestart(int round, const std::string& reason) {
  return store_->CompareSet(RoundKey(round, "restart"), "", reason);
}

absl::StatusOr<bool> Rendezvous::NodesWaiting(int round) { return store_->Check({RoundKey(round, "waiting")}); }

absl::Status Rendezvous::PublishMaster(int round, const std::string& addr_port) {
  return store_->Set(RoundKey(round, "master"), addr_port);
}

absl::StatusOr<std::string> Rendezvous::Master(int round) {
  return GetWithin(RoundKey(round, "master"), DeadlineIn(spec_.join_timeout));
}

absl::Status Rendezvous::RecordFailure(int round, const FailureRecord& failure) {
  BRAID_ASSIGN_OR_RETURN(int64_t index, store_->Add(RoundKey(round, "failures"), 1));
  return store_->Set(RoundKey(round, absl::StrCat("failure_", index)),
                     absl::StrCat(absl::ToUnixNanos(failure.time), "\t", failure.global_rank, "\t",
                                  failure.local_rank, "\t", failure.host, "\t", failure.how, "\t", failure.tail));
}

absl::StatusOr<std::vector<FailureRecord>> Rendezvous::Failures(int round) {
  std::vector<FailureRecord> failures;
  BRAID_ASSIGN_OR_RETURN(bool any, store_->Check({RoundKey(round, "failures")}));
  if (!any) return failures;
  BRAID_ASSIGN_OR_RETURN(std::string count_text, store_->Get(RoundKey(round, "failures"), absl::InfinitePast()));
  BRAID_ASSIGN_OR_RETURN(int count, ParseCount("failures", count_text));
  for (int i = 1; i <= count; ++i) {
    // A record is set right after its index is taken; wait briefly for it.
    absl::StatusOr<std::string> text = store_->Get(RoundKey(round, absl::StrCat("failure_", i)), DeadlineIn(absl::Seconds(2)));
    if (!text.ok()) continue;
    std::vector<std::string> f = absl::StrSplit(*text, absl::MaxSplits('\t', 5));
    if (f.size() != 6) continue;
    FailureRecord record;
    int64_t nanos = 0;
    if (!absl::SimpleAtoi(f[0], &nanos) || !absl::SimpleAtoi(f[1], &record.global_rank) ||
        !absl::SimpleAtoi(f[2], &record.local_rank)) {
      continue;
    }
    record.time = absl::FromUnixNanos(nanos);
    record.host = f[3];
    record.how = f[4];
    record.tail = f[5];
    failures.push_back(std::move(record));
  }
  std::sort(failures.begin(), failures.end(),
            [](const FailureRecord& a, const FailureRecord& b) { return a.time < b.time; });
  return failures;
}

absl::Status Rendezvous::MarkDone(int round, int node_rank) {
  return store_->Set(RoundKey(round, absl::StrCat("done_", node_rank)), "");
}

absl::Status Rendezvous::WaitAllDone(const RendezvousResult& result, NodeLiveness& liveness,
                                     const std::function<absl::Status()>& watch, Deadline deadline) {
  while (true) {
    BRAID_ASSIGN_OR_RETURN(std::string reason, RestartReason(result.round));
    if (!reason.empty()) return absl::AbortedError(reason);
    // Beats on, so that the others do not take this node for lost; a node
    // lost (and not taken over) is not waited for.
    BRAID_RETURN_IF_ERROR(watch());
    std::vector<std::string> keys;
    for (int i = 0; i < static_cast<int>(result.nodes.size()); ++i) {
      BRAID_ASSIGN_OR_RETURN(const bool vacant, liveness.Vacant(i));
      if (!vacant) keys.push_back(RoundKey(result.round, absl::StrCat("done_", i)));
    }
    absl::Status all = store_->Wait(keys, std::min(deadline, DeadlineIn(kSlice)));
    if (!absl::IsDeadlineExceeded(all) || Expired(deadline)) return all;
  }
}

}  // namespace braid
