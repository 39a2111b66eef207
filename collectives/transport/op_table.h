// OpTable: the point-to-point operations a transport has posted and not yet
// handed back through Wait, for every transport (stream, mpi, nccl). It
// gives out the ids, holds the fields every op has (OpRecord; a transport
// derives its own record with what its engine needs), checks the ids Wait is
// given, collects finished ops for Wait, and lists what is still pending
// for a deadline's message.
#ifndef BRAID_COLLECTIVES_TRANSPORT_OP_TABLE_H_
#define BRAID_COLLECTIVES_TRANSPORT_OP_TABLE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

struct OpRecord {
  bool is_send = false;
  int peer = 0;
  FrameHeader header;         // sent, or expected
  std::byte* data = nullptr;  // the caller's payload (only read for a send)
  size_t bytes = 0;           // payload bytes
  bool complete = false;
  absl::Status status;
};

// kStableAddresses: records never move while in the table (an engine holds
// pointers into them, as MPI's requests do); otherwise a flat map, cheaper.
template <typename Op, bool kStableAddresses = false>
class OpTable {
  static_assert(std::is_base_of_v<OpRecord, Op>, "an op record derives from OpRecord");

 public:
  // A new op's id and record, the common fields filled in.
  std::pair<OpId, Op&> Add(bool is_send, int peer, const FrameHeader& header, std::byte* data, size_t bytes) {
    const OpId id = next_id_++;
    Op& op = ops_[id];
    op.is_send = is_send;
    op.peer = peer;
    op.header = header;
    op.data = data;
    op.bytes = bytes;
    return {id, op};
  }
  Op& at(OpId id) { return ops_.at(id); }
  const Op& at(OpId id) const { return ops_.at(id); }
  // Null once handed back (or never posted).
  Op* Find(OpId id) {
    auto it = ops_.find(id);
    return it == ops_.end() ? nullptr : &it->second;
  }
  void Erase(OpId id) { ops_.erase(id); }
  void Clear() { ops_.clear(); }
  auto begin() { return ops_.begin(); }
  auto end() { return ops_.end(); }

  // Wait's first step: every id was posted and not yet waited for.
  absl::Status CheckWaitable(absl::Span<const OpId> ids, int rank) const {
    for (OpId id : ids) {
      if (!ops_.contains(id)) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": Wait on unknown or already waited op ", id));
      }
    }
    return absl::OkStatus();
  }

  // Once every op in `ids` has completed (OK), or one has failed, forgets the
  // completed ones and returns that outcome (the first failure wins);
  // otherwise nullopt and nothing is forgotten.
  std::optional<absl::Status> Collect(absl::Span<const OpId> ids) {
    bool all_complete = true;
    for (OpId id : ids) {
      const Op& op = ops_.at(id);
      if (op.complete && !op.status.ok()) {
        absl::Status status = op.status;
        for (OpId other : ids) {
          if (ops_.at(other).complete) ops_.erase(other);
        }
        return status;
      }
      all_complete &= op.complete;
    }
    if (!all_complete) return std::nullopt;
    for (OpId id : ids) ops_.erase(id);
    return absl::OkStatus();
  }

  // "send to peer 1 of allreduce seq 3 (...)<detail>; ..." for the unfinished
  // ops of `ids`, at most four; `peer_name(peer)` names a peer and
  // `detail(op)` says how far the op got.
  template <typename PeerName, typename Detail>
  std::string DescribePending(absl::Span<const OpId> ids, PeerName peer_name, Detail detail) const {
    std::string text;
    int listed = 0;
    for (OpId id : ids) {
      auto it = ops_.find(id);
      if (it == ops_.end() || it->second.complete) continue;
      const Op& op = it->second;
      if (listed++ == 4) {
        absl::StrAppend(&text, "; ...");
        break;
      }
      absl::StrAppend(&text, listed > 1 ? "; " : "", op.is_send ? "send to " : "receive from ", peer_name(op.peer),
                      " of ", DescribeFrame(op.header), detail(op));
    }
    return text;
  }

 private:
  OpId next_id_ = 1;
  std::conditional_t<kStableAddresses, absl::node_hash_map<OpId, Op>, absl::flat_hash_map<OpId, Op>> ops_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_OP_TABLE_H_
