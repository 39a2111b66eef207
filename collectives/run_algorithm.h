// One of braid's algorithms (not the engine's native ones) by its name, over
// any transport: what the communicator runs for a collective, and what a
// hierarchical collective runs on each of its levels.
#ifndef BRAID_COLLECTIVES_RUN_ALGORITHM_H_
#define BRAID_COLLECTIVES_RUN_ALGORITHM_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/scratch.h"
#include "collectives/selection.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

// `algorithm` for `args.kind` (as the selector named it; the sizes of
// algorithms.h). Not send and receive (p2p), which name a peer.
// `window_vote`: a peer all-reduce where this rank votes for the window
// (Selector::WantsWindow).
absl::Status RunAlgorithm(Transport& transport, Algorithm algorithm, const CollectiveArgs& args,
                          absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                          const WindowPlan& plan, bool window_vote = false);

// A ring all-gather whose frames carry args.kind (the communicator's own
// exchanges: the cross-check of a collective's arguments, straggler windows).
absl::Status GatherFromAll(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch);

// What `transport` can do, as the selector takes it (the group's layout and
// subgroups are the communicator's to add).
TransportCaps CapsOf(Transport& transport);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_RUN_ALGORITHM_H_
