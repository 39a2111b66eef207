// Simulate: one collective of braid's, every rank running the very Plan the
// communicator would run (MakePlan, MakeHierarchicalPlan, and for each
// hierarchical step the level selector's algorithm and its Plan), over a
// modelled cluster (cluster.h). Discrete events in time order:
//
//   - A rank runs its plan's lanes as the host executor does: up to
//     kLaneWindow lanes at once, the next entering when one finishes; a
//     lane's ops in order.
//   - A Group posts its transfers at once and ends when all have: a send
//     when its bytes have left, a receive when its message has arrived.
//     Sends are eager; receives match a peer's sends in order, per lane
//     (per step of a hierarchy, as each level has its own transport).
//   - A message of B bytes holds each link of its route for B over that
//     link's bandwidth, hop after hop: a hop starts when the link is free
//     and the hop before has started, and ends no sooner than the hop
//     before (links serve messages first come, first served: how shared
//     links are contended; switches buffer what waits). It arrives the
//     route's latency after its last hop; its sender pays
//     message_overhead first.
//   - Reduce, Copy, Divide and Zero take a rank's compute for their bytes
//     over reduce_ or copy_bandwidth, one at a time; a Copy onto itself is
//     free.
//   - A Step runs the level's collective on the ranks of the rank's host
//     (or of its local index across hosts) before the lane goes on.
//
// Not simulated: the shared-memory plans (window, peer-access), which run
// over one host's shared windows, and the engines' native collectives. A
// plan that leaves a rank waiting forever fails naming the rank and what it
// waits for (a schedule error the simulator catches without a cluster).
#ifndef BRAID_SIM_SIMULATOR_H_
#define BRAID_SIM_SIMULATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "collectives/selection.h"
#include "collectives/transport/frame.h"
#include "sim/cluster.h"

namespace braid::sim {

struct SimRequest {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t count = 0;  // elements, as CollectiveArgs counts them
  DType dtype = DType::kF32;
  int root = 0;  // broadcast, reduce
  Algorithm algorithm = Algorithm::kAuto;  // auto: the selector's choice
  size_t segment_bytes = CollectiveArgs{}.segment_bytes;
};

struct SimResult {
  Algorithm algorithm = Algorithm::kAuto;  // what ran
  double seconds = 0;                      // until the last rank finished
  uint64_t messages = 0;
  uint64_t bytes_sent = 0;  // over all ranks
  uint64_t ops = 0;         // plan ops run, over all ranks
  double build_seconds = 0;  // wall clock: building the plans
  double run_seconds = 0;    // wall clock: the events
};

// What the selector sees for `ranks` ranks of `cluster`: its transport's
// table rows, its hosts, subgroups (hierarchical).
TransportCaps CapsFor(const Cluster& cluster, int ranks);

// The selector's algorithm for `request` on `ranks` ranks of `cluster`.
absl::StatusOr<Algorithm> Choose(const Cluster& cluster, int ranks, const SimRequest& request);

absl::StatusOr<SimResult> Simulate(const Cluster& cluster, int ranks, const SimRequest& request);

}  // namespace braid::sim

#endif  // BRAID_SIM_SIMULATOR_H_
