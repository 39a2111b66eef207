// The shared-memory collectives: over a transport whose ranks map each
// other's windows (SharedWindows, shm), with the same sizes and rules as
// collectives/algorithms.h. The selector (collectives/selection.h) says when
// each runs; the communicator hands in the transport's windows.
//
//  - window:      all-reduce through the shared windows, in rounds of one
//                 window half: every byte copied in once and out once.
//  - peer-access: where ranks can reach each other's private memory
//                 (SharedWindows::CanAccessPeers, cross-memory attach), each
//                 rank reads what it needs straight from the peers' buffers
//                 between two Syncs: all-reduce (writing the results into the
//                 peers' outputs), reduce-scatter, all-gather, all-to-all.
//                 Broadcast has none: its chain of streams copies cached data
//                 faster than the kernel's copy, which pins every page.
#ifndef BRAID_COLLECTIVES_SHM_SHM_COLLECTIVES_H_
#define BRAID_COLLECTIVES_SHM_SHM_COLLECTIVES_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/scratch.h"
#include "collectives/selection.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

absl::Status WindowAllReduce(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                             absl::Span<const std::byte> input, absl::Span<std::byte> output, const WindowPlan& plan);
absl::Status PeerAllReduce(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                           absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                           const WindowPlan& plan);
absl::Status PeerReduceScatter(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                               absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch);
absl::Status PeerAllGather(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                           absl::Span<const std::byte> input, absl::Span<std::byte> output);
absl::Status PeerAllToAll(Transport& transport, SharedWindows& windows, const CollectiveArgs& args,
                          absl::Span<const std::byte> input, absl::Span<std::byte> output);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_SHM_SHM_COLLECTIVES_H_
