// Pipelined binary-tree all-reduce (collectives/algorithms.h says the sizes
// and rules): latency grows with log2(n), not n.
#ifndef BRAID_COLLECTIVES_TREE_H_
#define BRAID_COLLECTIVES_TREE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/scratch.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

absl::Status TreeAllReduce(Transport& transport, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TREE_H_
