// Point-to-point sends and receives (collectives/algorithms.h says the
// rules): one message with one peer, or from whichever peer sends first.
#ifndef BRAID_COLLECTIVES_POINT_TO_POINT_H_
#define BRAID_COLLECTIVES_POINT_TO_POINT_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

absl::Status SendTo(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<const std::byte> data);
absl::Status RecvFrom(Transport& transport, const CollectiveArgs& args, int peer, absl::Span<std::byte> data);
// A receive from whichever peer's next frame is a point-to-point one (as
// MPI_ANY_SOURCE): polls every peer's stream (Transport::PeekFrame), backing
// off to sleeps, until one has sent or the deadline; returns that peer.
absl::StatusOr<int> RecvFromAny(Transport& transport, const CollectiveArgs& args, absl::Span<std::byte> data);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_POINT_TO_POINT_H_
