// An engine's own collectives (Open MPI's, NCCL's): what Algorithm::kNative
// runs, as a baseline and an option. A Transport that has them returns them
// from Transport::native_collectives(), so the Transport interface itself
// stays point-to-point only.
//
// Each method is the braid collective of the same name (collectives/
// algorithms.h): same buffers, sizes and in-place rules, the same avg (sum,
// then one division by the group size); every rank calls it in the same
// order; it blocks until this rank's part is done or args.deadline passes
// (kDeadlineExceeded naming the collective). kUnimplemented for a dtype/op the
// engine cannot do. Called from one thread at a time, like the Transport.
#ifndef BRAID_COLLECTIVES_TRANSPORT_NATIVE_COLLECTIVES_H_
#define BRAID_COLLECTIVES_TRANSPORT_NATIVE_COLLECTIVES_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/transport/frame.h"

namespace braid {

class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // "MPI", "NCCL": how errors and benchmarks name the engine.
  virtual const char* native_name() const = 0;
  // Gathers every rank's `mine` into `all` (size() headers, rank order) with
  // the engine's own all-gather: how the communicator's agreement check
  // (collectives/agreement.h) runs before a native collective, whose
  // messages carry no frame headers.
  virtual absl::Status NativeGatherHeaders(const CollectiveArgs& args, const FrameHeader& mine,
                                           absl::Span<FrameHeader> all) = 0;
  virtual absl::Status NativeAllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                       absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeReduceScatter(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                           absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeAllGather(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                       absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeBroadcast(const CollectiveArgs& args, absl::Span<std::byte> buffer) = 0;
  virtual absl::Status NativeReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                    absl::Span<std::byte> output) = 0;
  virtual absl::Status NativeBarrier(const CollectiveArgs& args) = 0;
  virtual absl::Status NativeAllToAll(const CollectiveArgs& args, absl::Span<const std::byte> input,
                                      absl::Span<std::byte> output) = 0;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_TRANSPORT_NATIVE_COLLECTIVES_H_
