// Programs: braid's scheduled collective algorithms written once, as data,
// so that every executor runs the same steps: the host one over any
// Transport (host_executor.h: how every one of them runs on host memory)
// and the stream one over a DeviceLink, queued on streams without a host
// round trip per step (collectives/device/stream_executor.h).
//
// A Plan is one rank's part of one collective: independent `lanes`, each a
// list of Ops over element regions of the collective's input, output and
// the lane's own scratch. A lane is one pipeline segment: ring, tree, chain
// and the ring reduce-scatter / all-gather cut every chunk into segments as
// topology.h says, and segment j of every chunk forms lane j, so each
// element meets the same operands in the same order on every executor
// (results bit-identical). Every lane of a plan has the
// same shape (the same ops at the same index; only sizes differ, and an
// empty transfer is skipped on both sides), which is what lets the
// executors interleave lanes and still match messages in order.
//
//   Group     sends and receives that progress together (a DeviceLink group)
//   Reduce    dst = a op b (the collective's op; avg reduces as sum)
//   Copy      dst = a (skipped when they are the same memory; `stream`:
//             around the cache, for a large output of its own)
//   Divide    dst /= group size (avg's one division, where the result is final)
//
// The shared-memory paths (window, peer-access) are Plans of one lane over
// the transport's SharedWindows, with regions in every rank's window half
// and ops of their own:
//   Sync      the windows' barrier; it may carry a small region (`a`) every
//             rank reads as kSyncPayload afterwards, publish this rank's input
//             and output for peer access, and carry this rank's Vote
//   NextRound the next window half (every rank's, as kWindow regions)
//   ReadPeer  dst = a, where a is a peer's published buffer (kernel copy)
//   Reduce    may write its result into a peer's published output (`also`)
//             as well: in one pass where that peer's memory is mapped
//   WritePeer dst = a, where dst is a peer's published buffer
// A Sync with votes picks one path for every rank, the strongest vote
// cast: kWindow over kThroughWindows over kDirect. Ops whose `when` names a
// path run only on it, and kIfWindowSplit ops only on the window path where
// some rank voted otherwise. The peer all-reduce goes through the windows
// when any rank has a large output of its own, and runs the whole window
// all-reduce when any rank's memory wants it (Selector::WantsWindow): what
// only the ranks together know.
//
// A hierarchical collective (hierarchical_program.h) is a Plan of one lane
// whose steps are collectives of their own on one level of the hierarchy:
//   Step      dst = the step's collective of a, on the intra-host or the
//             inter-host group (the level's selector picks its algorithm,
//             whose own Plan runs it)
//   Zero      dst = 0 (padding)
#ifndef BRAID_COLLECTIVES_PROGRAMS_PROGRAM_H_
#define BRAID_COLLECTIVES_PROGRAMS_PROGRAM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/selection.h"
#include "collectives/transport/frame.h"

namespace braid {

enum class Buffer : uint8_t {
  kInput,
  kOutput,
  kScratch,
  kWindow,       // `rank`'s half of its window in this round
  kSyncPayload,  // what `rank` sent with the last Sync
  kPeerInput,    // `rank`'s published input (ReadPeer only)
  kPeerOutput,   // `rank`'s published output (WritePeer only)
};

// Elements [begin, begin + count) of a buffer (of `rank`'s, for the shared ones).
struct Region {
  Buffer buffer = Buffer::kOutput;
  size_t begin = 0;
  size_t count = 0;
  int rank = -1;
};

struct Transfer {
  bool send = false;
  int peer = -1;
  Region region;
};

// What a Step runs: `kind` of `count` elements (as CollectiveArgs counts
// them) on `level`, with `root` a rank of that level's group.
struct LevelStep {
  enum Level : uint8_t { kIntraHost, kInterHost };
  Level level = kIntraHost;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t count = 0;
  int root = -1;
};

struct Op {
  enum class Kind : uint8_t { kGroup, kReduce, kCopy, kDivide, kSync, kNextRound, kReadPeer, kWritePeer, kStep, kZero };
  // A Sync's contribution to the choice of path, and the path an op belongs to.
  enum class Vote : uint8_t { kNone, kDirect, kThroughWindows, kWindow };
  enum class When : uint8_t { kAlways, kIfDirect, kIfThroughWindows, kIfWindow, kIfWindowSplit };
  Kind kind = Kind::kGroup;
  When when = When::kAlways;
  std::vector<Transfer> transfers;  // kGroup
  Region dst;                       // kReduce, kCopy, kDivide, kReadPeer, kWritePeer, kStep, kZero
  Region a;                         // kReduce, kCopy, kReadPeer, kWritePeer, kStep; kSync's payload
  Region b;                         // kReduce
  Region also;                      // kReduce: a peer's output written the result too (count 0: none)
  bool stream = false;              // kCopy, kWritePeer: non-temporal stores
  uint32_t tag = 0;                 // kSync: checked alike on every rank
  bool publish = false;             // kSync
  Vote vote = Vote::kNone;          // kSync
  LevelStep step;                   // kStep
};

// How many of a plan's lanes an executor runs at once, unless the plan asks
// for more (a deep tree keeps a segment in flight on every level).
inline constexpr size_t kLaneWindow = 8;

struct Plan {
  std::vector<std::vector<Op>> lanes;
  // Scratch elements each lane needs (the largest over lanes).
  size_t scratch_elements = 0;
  // Lanes run at once: kLaneWindow, or more where the plan asks.
  size_t lane_window = kLaneWindow;
  // Runs over the transport's SharedWindows (the shared-memory paths), or
  // steps on the levels of a hierarchy: the host executor only.
  bool shared_windows = false;
  bool levels = false;
};

// What a plan is made from: the collective (kind, count as CollectiveArgs
// has it, dtype, op, root, segment_bytes) and this rank's place.
struct PlanRequest {
  Algorithm algorithm = Algorithm::kRing;
  CollectiveArgs args;
  int rank = 0;
  int size = 1;
  // The shared-memory paths only: the window half's size, the thresholds,
  // whether this rank's output is its own and large (written around the
  // cache), and whether its input and output are memory the peers map
  // (tensor/mappable_memory.h), which they write with streaming stores
  // themselves; else a large output goes through the windows. Peer
  // all-reduce: whether this rank votes for the whole window all-reduce.
  size_t window_half_bytes = 0;
  WindowPlan window;
  bool stream_out = false;
  bool peers_map = false;
  bool window_vote = false;
};

// The plan of `request`: ring (all-reduce, reduce-scatter, all-gather), tree,
// rhd and one-shot (all-reduce), chain (broadcast, reduce), pairwise
// (all-to-all), dissemination (barrier), window (all-reduce) and peer-access
// (all-reduce, reduce-scatter, all-gather, all-to-all); p2p is not a plan.
// kInvalidArgument for a pair the programs do not have. A group of one or
// zero elements gives a plan with the local copy only (or nothing).
absl::StatusOr<Plan> MakePlan(const PlanRequest& request);

// MakePlan, remembered: the calling thread's last few plans of a few
// hundred lanes or less are kept (a plan depends on its request alone), so
// a collective issued again skips building it. Valid until this thread's
// next call.
absl::StatusOr<const Plan*> CachedPlan(const PlanRequest& request);

// Which algorithms have programs for `kind`.
bool HasProgram(Algorithm algorithm, CollectiveKind kind);

// "lane 0: group{send 1 out[0,4) recv 3 scratch[0,4)} reduce ..." for tests.
std::string DescribePlan(const Plan& plan);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_PROGRAMS_PROGRAM_H_
