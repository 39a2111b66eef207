#include "collectives/shm/rounds.h"

#include <cstring>

#include "collectives/algorithm_util.h"
#include "collectives/topology.h"
#include "tensor/reduce.h"

namespace braid {

void CopyRoundOut(const std::vector<std::byte*>& half, int n, int me, size_t es, absl::Span<std::byte> out,
                  bool stream_out) {
  const size_t count = out.size() / es;
  for (int k = 0; k < n; ++k) {
    const int rank = (me + k) % n;
    const Range slice = ChunkRange(count, n, rank);
    absl::Span<std::byte> to = Slice(out, slice, es);
    absl::Span<const std::byte> from(half[static_cast<size_t>(rank)] + slice.begin * es, to.size());
    if (stream_out) {
      HostStreamCopy(to, from);
    } else {
      std::memcpy(to.data(), from.data(), to.size());
    }
  }
}

}  // namespace braid
