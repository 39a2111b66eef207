// RunPlanOnTransport: the host executor of Plans (program.h), the one way
// every scheduled collective runs on host memory over any Transport (the
// stream executor runs the same Plans over a DeviceLink).
//
// Lanes run kLaneWindow at a time, interleaved: in each round every lane of
// the window waits for the group it posted in the round before, runs its
// local ops (reductions, copies) and posts its next group, so one lane's
// reduction overlaps the other lanes' transfers. Finished lanes leave the
// window from the front and the next lanes enter at the back. The order of
// posts depends on the plan alone, never on timing, so every rank posts the
// messages between two ranks in the order the other expects (transports
// match by order). A frame's tag counts the messages of its lane between the
// two ranks, so a schedule that broke that order fails naming the frame
// rather than mixing data. Each lane in the window has its own scratch.
//
// The shared-memory plans (Plan::shared_windows) run their Syncs, rounds and
// peer copies over the transport's SharedWindows; one of them over a
// transport without windows fails with kFailedPrecondition.
//
// Errors: a failed transfer or the deadline (args.deadline) fails the call at
// once, the transport's error naming the peer and the frame.
#ifndef BRAID_COLLECTIVES_PROGRAMS_HOST_EXECUTOR_H_
#define BRAID_COLLECTIVES_PROGRAMS_HOST_EXECUTOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/programs/program.h"
#include "collectives/scratch.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

// Where a hierarchical plan's steps run (collectives/hierarchical.h): `step`
// of the collective `args` on its level, reading `input`, writing `output`.
class PlanLevels {
 public:
  virtual ~PlanLevels() = default;
  virtual absl::Status RunStep(const LevelStep& step, const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output) = 0;
};

// `levels`: for a plan with steps (Plan::levels); `transport` is then the
// whole group's.
absl::Status RunPlanOnTransport(const Plan& plan, Transport& transport, const CollectiveArgs& args,
                                absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                                PlanLevels* levels = nullptr);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_PROGRAMS_HOST_EXECUTOR_H_
