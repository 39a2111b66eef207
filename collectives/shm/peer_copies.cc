#include "collectives/shm/shm_collectives.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/status.h"
#include "collectives/algorithm_util.h"
#include "collectives/shm/rounds.h"
#include "collectives/topology.h"
#include "tensor/reduce.h"

namespace braid {

namespace {

// The frame of the peer-access collectives below: the first Sync publishes every
// rank's buffers (and, as its header must match, that they hold as much as
// this rank's), `copy` moves this rank's part with cross-memory copies, and
// the second Sync keeps every buffer published until every rank is done.
template <typename Copy>
absl::Status PeerCopies(Transport& transport, SharedWindows& windows, const CollectiveArgs& args, PeerBuffers mine,
                        Copy copy) {
  BRAID_RETURN_IF_ERROR(windows.Sync(CollectiveHeader(args, StepTag(0, 0)), args.deadline, mine));
  std::vector<PeerBuffers> peers(static_cast<size_t>(transport.size()));
  for (int peer = 0; peer < transport.size(); ++peer) {
    if (peer != transport.rank()) peers[static_cast<size_t>(peer)] = windows.Published(peer);
  }
  BRAID_RETURN_IF_ERROR(copy(peers));
  return windows.Sync(CollectiveHeader(args, StepTag(1, 0)), args.deadline);
}

}  // namespace

absl::Status PeerAllGather(Transport& transport, SharedWindows& windows, const CollectiveArgs& args, absl::Span<const std::byte> input,
                             absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllGather, args, input, output));
  if (done) return absl::OkStatus();
  auto chunk = [&](int rank) { return output.subspan(static_cast<size_t>(rank) * input.size(), input.size()); };
  return PeerCopies(transport, windows, args, {input.data(), nullptr},
                      [&](const std::vector<PeerBuffers>& peers) -> absl::Status {
                        for (int k = 1; k < n; ++k) {
                          const int peer = (me + k) % n;
                          BRAID_RETURN_IF_ERROR(windows.ReadPeer(peer, peers[static_cast<size_t>(peer)].input, chunk(peer)));
                        }
                        return absl::OkStatus();
                      });
}

absl::Status PeerReduceScatter(Transport& transport, SharedWindows& windows, const CollectiveArgs& args, absl::Span<const std::byte> input,
                                 absl::Span<std::byte> output, Scratch& scratch) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kReduceScatter, args, input, output));
  if (done) return absl::OkStatus();
  const size_t es = DTypeSize(args.dtype);
  const size_t offset = static_cast<size_t>(me) * output.size();  // of this rank's chunk in every input
  BRAID_ASSIGN_OR_RETURN(absl::Span<std::byte> piece_buffer, scratch.Get(kPeerPieceBytes));
  return PeerCopies(
      transport, windows, args, {input.data(), nullptr},
      [&](const std::vector<PeerBuffers>& peers) -> absl::Status {
        const size_t piece_bytes = kPeerPieceBytes / es * es;
        for (size_t at = 0; at < output.size(); at += piece_bytes) {
          absl::Span<std::byte> sum = output.subspan(at, std::min(piece_bytes, output.size() - at));
          absl::Span<std::byte> theirs = piece_buffer.subspan(0, sum.size());
          for (int k = 1; k < n; ++k) {
            const int peer = (me + k) % n;
            BRAID_RETURN_IF_ERROR(windows.ReadPeer(peer, peers[static_cast<size_t>(peer)].input + offset + at, theirs));
            HostReduce(args.dtype, args.op, sum, k == 1 ? input.subspan(offset + at, sum.size()) : sum, theirs);
          }
          if (args.op == ReduceOp::kAvg) HostDivide(args.dtype, sum, n);
        }
        return absl::OkStatus();
      });
}

absl::Status PeerAllToAll(Transport& transport, SharedWindows& windows, const CollectiveArgs& args, absl::Span<const std::byte> input,
                            absl::Span<std::byte> output) {
  const int n = transport.size();
  const int me = transport.rank();
  BRAID_ASSIGN_OR_RETURN(const bool done, Prologue(transport, CollectiveKind::kAllToAll, args, input, output));
  if (done) return absl::OkStatus();
  const size_t block_bytes = args.count * DTypeSize(args.dtype);
  auto block = [&](auto span, int rank) { return span.subspan(static_cast<size_t>(rank) * block_bytes, block_bytes); };
  return PeerCopies(transport, windows, args, {input.data(), nullptr},
                      [&](const std::vector<PeerBuffers>& peers) -> absl::Status {
                        for (int k = 1; k < n; ++k) {
                          const int peer = (me + k) % n;
                          BRAID_RETURN_IF_ERROR(windows.ReadPeer(
                              peer, peers[static_cast<size_t>(peer)].input + static_cast<size_t>(me) * block_bytes,
                              block(output, peer)));
                        }
                        return absl::OkStatus();
                      });
}

}  // namespace braid
