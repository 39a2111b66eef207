// Hierarchical collectives as Plans: an intra-host step over the ranks that
// share a host (shared memory) and an inter-host step among the ranks of one
// local index, one per host (tcp or mpi), so that each host's link carries
// only what must leave the host and every rank of a host drives a share of
// it. Each step is an Op of kind kStep (program.h), run by the host executor
// on the level's transport with the algorithm the level's selector picks
// (collectives/hierarchical.h).
//
//   all-reduce       reduce-scatter within the host (a rank gets 1/L of the
//                    vector, padded with zeros to L equal blocks), all-reduce
//                    of that slice across hosts, all-gather within the host.
//                    Hosts with different numbers of ranks: reduce to each
//                    host's first rank, all-reduce among those, broadcast
//                    within the host.
//   reduce-scatter   within the host, then across hosts (every host alike)
//   all-gather       across hosts, then within the host (every host alike)
//   broadcast        across hosts among the root's local index, then within
//                    each host (through each host's first rank where some
//                    host has no rank of the root's index)
//
// The steps reduce as sum; avg's one division, by the whole group's size,
// comes where the result is final.
#ifndef BRAID_COLLECTIVES_PROGRAMS_HIERARCHICAL_PROGRAM_H_
#define BRAID_COLLECTIVES_PROGRAMS_HIERARCHICAL_PROGRAM_H_

#include "absl/status/statusor.h"
#include "collectives/group_layout.h"
#include "collectives/programs/program.h"

namespace braid {

// `rank`'s Plan of `args` (all-reduce, reduce-scatter, all-gather,
// broadcast) over `layout`. kInvalidArgument for another kind, and for a
// reduce-scatter or all-gather where hosts run different numbers of ranks.
absl::StatusOr<Plan> MakeHierarchicalPlan(const CollectiveArgs& args, const HostLayout& layout, int rank);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_PROGRAMS_HIERARCHICAL_PROGRAM_H_
