// RunPlanOnTransport: runs a Plan (program.h) over any braid Transport on
// host memory, each step posted then waited for: the host executor of the
// programs, beside StreamExecutor. It is how CI runs every program across
// real processes over tcp and shm and checks it against the tuned host
// algorithms (ring.cc, tree.cc, ...), which the communicator keeps for
// host memory: they overlap receives and reductions within one thread,
// which a post-then-wait executor cannot. Frames carry the collective's
// header, its tag the number of messages between the two ranks before it,
// so mismatches are caught as everywhere else.
#ifndef BRAID_COLLECTIVES_DEVICE_HOST_EXECUTOR_H_
#define BRAID_COLLECTIVES_DEVICE_HOST_EXECUTOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/device/program.h"
#include "collectives/scratch.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

absl::Status RunPlanOnTransport(const Plan& plan, Transport& transport, const CollectiveArgs& args,
                                absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_DEVICE_HOST_EXECUTOR_H_
