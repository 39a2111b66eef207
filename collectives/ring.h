// Ring collectives (collectives/algorithms.h says the sizes and rules):
// each rank sends to its right neighbour and receives from its left, every
// chunk pipelined in segments of args.segment_bytes. Bandwidth-optimal: each
// rank sends 2(n-1)/n of the vector for an all-reduce, (n-1)/n for the others.
#ifndef BRAID_COLLECTIVES_RING_H_
#define BRAID_COLLECTIVES_RING_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/scratch.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

absl::Status RingAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch);
absl::Status RingReduceScatter(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output, Scratch& scratch);
absl::Status RingAllGather(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_RING_H_
