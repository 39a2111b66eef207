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
//   Copy      dst = a (skipped when they are the same memory)
//   Divide    dst /= group size (avg's one division, where the result is final)
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

enum class Buffer : uint8_t { kInput, kOutput, kScratch };

// Elements [begin, begin + count) of a buffer.
struct Region {
  Buffer buffer = Buffer::kOutput;
  size_t begin = 0;
  size_t count = 0;
};

struct Transfer {
  bool send = false;
  int peer = -1;
  Region region;
};

struct Op {
  enum class Kind : uint8_t { kGroup, kReduce, kCopy, kDivide };
  Kind kind = Kind::kGroup;
  std::vector<Transfer> transfers;  // kGroup
  Region dst;                       // kReduce, kCopy, kDivide
  Region a;                         // kReduce, kCopy
  Region b;                         // kReduce
};

struct Plan {
  std::vector<std::vector<Op>> lanes;
  // Scratch elements each lane needs (the largest over lanes).
  size_t scratch_elements = 0;
};

// What a plan is made from: the collective (kind, count as CollectiveArgs
// has it, dtype, op, root, segment_bytes) and this rank's place.
struct PlanRequest {
  Algorithm algorithm = Algorithm::kRing;
  CollectiveArgs args;
  int rank = 0;
  int size = 1;
};

// The plan of `request`: ring (all-reduce, reduce-scatter, all-gather), tree,
// rhd and one-shot (all-reduce), chain (broadcast, reduce), pairwise
// (all-to-all), dissemination (barrier); p2p is not a plan.
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
