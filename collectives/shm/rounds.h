// Internal to collectives/shm/: what the window and peer-access collectives share.
#ifndef BRAID_COLLECTIVES_SHM_ROUNDS_H_
#define BRAID_COLLECTIVES_SHM_ROUNDS_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"

namespace braid {

// A peer's slice is reduced in pieces of this size, each while cached (see
// bench/RESULTS.md, "Where the thresholds come from").
inline constexpr size_t kPeerPieceBytes = size_t{256} << 10;

// Copies every rank's reduced slice of a window round out of that rank's
// half into `out`, the round's part of the output; around the cache with
// `stream_out`.
void CopyRoundOut(const std::vector<std::byte*>& half, int n, int me, size_t es, absl::Span<std::byte> out,
                  bool stream_out);

}  // namespace braid

#endif  // BRAID_COLLECTIVES_SHM_ROUNDS_H_
