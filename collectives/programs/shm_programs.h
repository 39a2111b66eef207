// Internal to collectives/programs/: the shared-memory paths as Plans (see
// program.h for their ops). Each is one lane; MakePlan calls them for a
// group of two or more with something to move.
#ifndef BRAID_COLLECTIVES_PROGRAMS_SHM_PROGRAMS_H_
#define BRAID_COLLECTIVES_PROGRAMS_SHM_PROGRAMS_H_

#include "collectives/programs/program.h"

namespace braid {

// kInvalidArgument when the request has no window half to work in.
absl::StatusOr<Plan> WindowAllReducePlan(const PlanRequest& r);
absl::StatusOr<Plan> PeerAllReducePlan(const PlanRequest& r);
Plan PeerReduceScatterPlan(const PlanRequest& r);
Plan PeerAllGatherPlan(const PlanRequest& r);
Plan PeerAllToAllPlan(const PlanRequest& r);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_PROGRAMS_SHM_PROGRAMS_H_
