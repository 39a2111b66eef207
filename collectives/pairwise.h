// Collectives where every rank talks to every other rank directly
// (collectives/algorithms.h says the sizes and rules): the one-shot
// all-reduce, the pairwise all-to-all, the dissemination barrier, and
// point-to-point sends and receives.
#ifndef BRAID_COLLECTIVES_PAIRWISE_H_
#define BRAID_COLLECTIVES_PAIRWISE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/scratch.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

// One step: every rank sends its whole input to every other rank and
// reduces all n inputs itself, in rank order (so every rank rounds alike).
absl::Status OneShotAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                              absl::Span<std::byte> output, Scratch& scratch);
absl::Status PairwiseAllToAll(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                              absl::Span<std::byte> output);
absl::Status DisseminationBarrier(Transport& transport, const CollectiveArgs& args);
absl::Status SendTo(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<const std::byte> data);
absl::Status RecvFrom(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<std::byte> data);
// A receive from whichever peer's next frame is a point-to-point one (as
// MPI_ANY_SOURCE): polls every peer's stream (Transport::PeekFrame), backing
// off to sleeps, until one has sent or the deadline; returns that peer.
absl::StatusOr<int> RecvFromAny(Transport& transport, const CollectiveArgs& args, absl::Span<std::byte> data);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_PAIRWISE_H_
