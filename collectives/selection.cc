#include "collectives/selection.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace braid {
namespace {

// The all-reduce selection table measured by braid_bench --tune (bench/tune.sh),
// with the machine each group came from in its comments.
struct TunedRange {
  const char* transport;
  int world_size;
  uint64_t max_bytes;  // 0: no bound
  const char* algorithm;
};
constexpr TunedRange kTunedRanges[] = {
#include "collectives/allreduce_tuning.inc"
    {nullptr, 0, 0, nullptr},  // the end (and what keeps the array non-empty)
};

constexpr Algorithm kRequestable[] = {Algorithm::kAuto,       Algorithm::kRing,   Algorithm::kTree,
                                      Algorithm::kDoubleTree, Algorithm::kRhd,    Algorithm::kOneShot,
                                      Algorithm::kWindow,     Algorithm::kPeerAccess, Algorithm::kDirect,
                                      Algorithm::kNative,     Algorithm::kHierarchical};

// Whether the transport has what `algorithm` needs.
bool Available(Algorithm algorithm, const TransportCaps& caps) {
  switch (algorithm) {
    case Algorithm::kWindow: return caps.shared_windows;
    case Algorithm::kPeerAccess: return caps.peer_access;
    case Algorithm::kNative: return caps.native;
    case Algorithm::kHierarchical: return caps.subgroups;
    default: return true;
  }
}

absl::Status Missing(Algorithm algorithm, CollectiveKind kind, const TransportCaps& caps) {
  const char* needs = algorithm == Algorithm::kNative ? "a transport with its own collectives (mpi)"
                      : algorithm == Algorithm::kWindow ? "shared windows (shm)"
                      : algorithm == Algorithm::kHierarchical
                          ? "a communicator that can make subgroups (a process group's, or one created with a "
                            "subgroup transport factory)"
                                                        : "ranks that can reach each other's memory (shm, where "
                                                          "cross-memory attach is allowed)";
  return absl::UnimplementedError(absl::StrCat(AlgorithmName(algorithm), " ", CollectiveKindName(kind), " needs ",
                                               needs, "; this communicator runs over ", caps.name));
}

}  // namespace

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kDoubleTree: return "double-tree";
    case Algorithm::kRhd: return "rhd";
    case Algorithm::kOneShot: return "one-shot";
    case Algorithm::kWindow: return "window";
    case Algorithm::kPeerAccess: return "peer-access";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kNative: return "native";
    case Algorithm::kChain: return "chain";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kDissemination: return "dissemination";
    case Algorithm::kP2p: return "p2p";
    case Algorithm::kHierarchical: return "hierarchical";
  }
  return "invalid";
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (Algorithm a : kRequestable) {
    if (lower == AlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown algorithm \"", name,
                                                 "\" (expected auto, ring, tree, double-tree, rhd, one-shot, "
                                                 "window, peer-access, direct, native or hierarchical)"));
}

Selector::Selector(TransportCaps caps, SelectionThresholds thresholds)
    : caps_(std::move(caps)), thresholds_(thresholds) {
  for (const TunedRange& range : kTunedRanges) {
    if (range.transport == nullptr || caps_.name != range.transport || caps_.size != range.world_size) continue;
    absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(range.algorithm);
    // A table naming an algorithm this build or transport lacks is ignored,
    // never half-used.
    if (!algorithm.ok() || *algorithm == Algorithm::kAuto || !Available(*algorithm, caps_) ||
        *algorithm == Algorithm::kNative || *algorithm == Algorithm::kHierarchical) {
      tuned_.clear();
      break;
    }
    tuned_.emplace_back(range.max_bytes, *algorithm);
  }
}

Algorithm Selector::ResolveDirect(size_t count, size_t element_size, PeerMemory memory) const {
  if (!caps_.shared_windows) return Algorithm::kOneShot;
  // Every rank decides alike: same size, same collective probe verdict.
  const size_t slice_bytes = count / static_cast<size_t>(caps_.size) * element_size;
  const size_t from = memory == PeerMemory::kMapped ? std::min(thresholds_.peer_access_mapped_min_slice_bytes,
                                                              thresholds_.peer_access_min_slice_bytes)
                                                    : thresholds_.peer_access_min_slice_bytes;
  if (caps_.peer_access && slice_bytes >= from) return Algorithm::kPeerAccess;
  return Algorithm::kWindow;
}

Algorithm Selector::AutoAllReduce(size_t count, size_t element_size, PeerMemory memory) const {
  const size_t bytes = count * element_size;
  for (const auto& [max_bytes, algorithm] : tuned_) {
    if (max_bytes == 0 || bytes <= max_bytes) {
      return algorithm == Algorithm::kDirect ? ResolveDirect(count, element_size, memory) : algorithm;
    }
  }
  // Ranks that share memory: the direct paths won every size here.
  if (caps_.shared_windows) return ResolveDirect(count, element_size, memory);
  return UntunedAllReduce(bytes);
}

Algorithm Selector::UntunedAllReduce(size_t bytes) const {
  const size_t ring_from =
      std::max(thresholds_.small_allreduce_bytes, static_cast<size_t>(caps_.size) * thresholds_.ring_min_chunk_bytes);
  return bytes <= ring_from ? Algorithm::kRhd : Algorithm::kRing;
}

bool Selector::Hierarchical(CollectiveKind kind, size_t bytes, Algorithm requested) const {
  if (!caps_.subgroups) return false;
  const bool needs_even = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather;
  if (needs_even && caps_.min_per_host != caps_.max_per_host) return false;
  if (requested == Algorithm::kHierarchical) return true;
  // Auto: only where some host has several ranks, across hosts, and the
  // bytes saved on the links outweigh the extra intra-host steps.
  return requested == Algorithm::kAuto && caps_.hosts > 1 && caps_.max_per_host > 1 &&
         bytes >= thresholds_.hierarchical_min_bytes;
}

Algorithm Selector::SelectAllReduce(size_t count, size_t element_size, Algorithm requested,
                                    PeerMemory memory) const {
  if (Hierarchical(CollectiveKind::kAllReduce, count * element_size, requested)) return Algorithm::kHierarchical;
  if (requested != Algorithm::kAuto && requested != Algorithm::kDirect) return requested;  // asked for by name
  const Algorithm chosen = requested == Algorithm::kDirect ? ResolveDirect(count, element_size, memory)
                                                           : AutoAllReduce(count, element_size, memory);
  return chosen == Algorithm::kPeerAccess && memory == PeerMemory::kSlow ? Algorithm::kWindow : chosen;
}

absl::StatusOr<Algorithm> Selector::SelectDevice(CollectiveKind kind, size_t count, size_t element_size,
                                                 Algorithm requested) const {
  if (requested == Algorithm::kNative) {
    if (!caps_.device_native) {
      return absl::UnimplementedError(absl::StrCat("native ", CollectiveKindName(kind), ": the ", caps_.name,
                                                   " device link has no collectives of its own"));
    }
    return requested;
  }
  const bool all_reduce = kind == CollectiveKind::kAllReduce;
  const bool named = requested != Algorithm::kAuto && requested != Algorithm::kDirect;
  if (named && all_reduce) {
    if (requested == Algorithm::kRing || requested == Algorithm::kTree || requested == Algorithm::kRhd) {
      return requested;
    }
    // The stream executor runs lanes of one shape; a double tree's differ.
    return absl::UnimplementedError(absl::StrCat(AlgorithmName(requested), " does not run on device memory (",
                                                 caps_.name, "): ring, tree, rhd or native"));
  }
  if (named && requested == Algorithm::kRing &&
      (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather)) {
    return requested;
  }
  if (caps_.device_native && requested == Algorithm::kAuto) return Algorithm::kNative;
  switch (kind) {
    case CollectiveKind::kAllReduce: return UntunedAllReduce(count * element_size);
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: return Algorithm::kRing;
    case CollectiveKind::kAllToAll: return Algorithm::kPairwise;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce: return Algorithm::kChain;
    case CollectiveKind::kBarrier: return Algorithm::kDissemination;
    default: return absl::InvalidArgumentError(absl::StrCat("no device algorithm for ", CollectiveKindName(kind)));
  }
}

bool Selector::WantsWindow(size_t count, size_t element_size, Algorithm requested, PeerMemory memory) const {
  return SelectAllReduce(count, element_size, requested, memory) == Algorithm::kWindow;
}

absl::StatusOr<Algorithm> Selector::Select(CollectiveKind kind, size_t count, size_t element_size,
                                           Algorithm requested) const {
  if (kind == CollectiveKind::kSendRecv) return Algorithm::kP2p;
  if (kind == CollectiveKind::kSplit) return Algorithm::kRing;
  if (caps_.device_link) return SelectDevice(kind, count, element_size, requested);
  if (caps_.device_memory_only) return Algorithm::kNative;
  if (kind == CollectiveKind::kAllReduce) {
    bool requestable = false;
    for (Algorithm a : kRequestable) requestable = requestable || a == requested;
    if (!requestable) {
      return absl::InvalidArgumentError(
          absl::StrCat(AlgorithmName(requested), " is not an all-reduce algorithm"));
    }
    if (!Available(requested, caps_)) return Missing(requested, kind, caps_);
    // The most peer access any rank's memory would take.
    return SelectAllReduce(count, element_size, requested, PeerMemory::kMapped);
  }
  const bool has_peer_path = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather ||
                             kind == CollectiveKind::kAllToAll;
  if (requested == Algorithm::kNative || (requested == Algorithm::kPeerAccess && has_peer_path)) {
    if (!Available(requested, caps_)) return Missing(requested, kind, caps_);
    return requested;
  }
  const bool has_hierarchical = has_peer_path || kind == CollectiveKind::kBroadcast;
  if (requested == Algorithm::kHierarchical && has_hierarchical && !Available(requested, caps_)) {
    return Missing(requested, kind, caps_);
  }
  if (has_hierarchical && kind != CollectiveKind::kAllToAll) {
    // A rank's whole buffer: the blocks of every rank for reduce-scatter and all-gather.
    const size_t per_rank = kind == CollectiveKind::kBroadcast ? 1 : static_cast<size_t>(caps_.size);
    if (Hierarchical(kind, count * element_size * per_rank, requested)) return Algorithm::kHierarchical;
  }
  const bool peer_copies = caps_.peer_access && count * element_size >= thresholds_.peer_access_min_slice_bytes;
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: return peer_copies ? Algorithm::kPeerAccess : Algorithm::kRing;
    case CollectiveKind::kAllToAll: return peer_copies ? Algorithm::kPeerAccess : Algorithm::kPairwise;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce: return Algorithm::kChain;
    case CollectiveKind::kBarrier: return Algorithm::kDissemination;
    default: return absl::InvalidArgumentError(absl::StrCat("no algorithm for ", CollectiveKindName(kind)));
  }
}

}  // namespace braid
