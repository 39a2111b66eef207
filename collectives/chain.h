// Chain broadcast and reduce (collectives/algorithms.h says the sizes and
// rules): segments pipelined along the ranks from (or toward) the root.
#ifndef BRAID_COLLECTIVES_CHAIN_H_
#define BRAID_COLLECTIVES_CHAIN_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/scratch.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

absl::Status ChainBroadcast(Transport& transport, const CollectiveArgs& args, absl::Span<std::byte> buffer);
absl::Status ChainReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                         absl::Span<std::byte> output, Scratch& scratch);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_CHAIN_H_
