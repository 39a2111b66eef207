// The selector: what runs for a collective, given its kind and size, the
// group, what the transport can do, and what the caller asked for. Pure
// (no transport, no I/O): every rank computes the same answer from the same
// inputs, and tests can ask it anything (selection_test.cc).
//
// What can run, by name (the names BRAID_ALGO, braid_bench -a, the timeline,
// the flight recorder and the tuning table use):
//   all-reduce      ring, tree, rhd (any transport); one-shot (everyone sends
//                   everything to everyone over messages); window (shm's
//                   shared windows); peer-access (cross-memory copies
//                   between the ranks' own buffers, shm); native (the
//                   engine's: MPI, NCCL)
//   reduce-scatter, all-gather   ring, peer-access, native
//   all-to-all      pairwise, peer-access, native
//   broadcast, reduce   chain, native
//   barrier         dissemination, native
//   send / recv     p2p
//   split           ring (the colors' all-gather; then the subgroup's own set-up)
// hierarchical (all-reduce, reduce-scatter, all-gather, broadcast): an
// intra-host step over the ranks of each host and an inter-host step among
// the ranks of one local index (hierarchical.h). It needs a communicator that
// can make subgroups (TransportCaps::subgroups); reduce-scatter and
// all-gather need as many ranks on every host (braid's choice otherwise).
// "direct" is an alias the caller (and the table) may give for all-reduce:
// peer-access where the ranks can reach each other's memory and each rank's
// slice is large enough, else window where there are windows, else
// one-shot.
//
// On a device link (device memory, streams): every collective as its
// program (programs/program.h): ring, tree or rhd all-reduce, ring
// reduce-scatter and all-gather, chain broadcast and reduce, pairwise
// all-to-all, dissemination barrier; or native where the link has the
// engine's own, which auto prefers (NCCL tunes its own); without it, auto
// takes the untuned rule below.
//
// All-reduce without a table row (or windows): rhd up to
// small_allreduce_bytes, and on while each rank's ring chunk (bytes / size)
// is under ring_min_chunk_bytes; ring above. A ring pays 2 (size - 1)
// latencies to rhd's 2 log2(size): at 1,024 ranks a 1 MiB ring is 29x rhd
// in braid_sim, a 64 MiB one on par (bench/RESULTS.md, "braid_sim").
//
// Requests: a collective other than all-reduce takes native when asked, and
// peer-access where it has that path (an error when the transport lacks
// what was asked for); braid's choice for anything else.
#ifndef BRAID_COLLECTIVES_SELECTION_H_
#define BRAID_COLLECTIVES_SELECTION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/transport/frame.h"

namespace braid {

enum class Algorithm : uint8_t {
  kAuto = 0,
  kRing,
  kTree,
  kRhd,
  kOneShot,
  kWindow,
  kPeerAccess,
  kDirect,  // alias, resolved by the selector (see above)
  kNative,
  kChain,
  kPairwise,
  kDissemination,
  kP2p,
  kHierarchical,
  kDoubleTree,
};
const char* AlgorithmName(Algorithm algorithm);
// Accepts the names a caller may request: auto, ring, tree, double-tree, rhd,
// one-shot, window, peer-access, direct, native, hierarchical.
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);

// The sizes that shape a window all-reduce, from the selector.
struct WindowPlan {
  // A round of up to this many bytes is reduced whole by every rank (one
  // Sync); a larger one is split, each rank reducing one slice.
  size_t whole_round_bytes = 0;
  // Out-of-place outputs of this many bytes or more are written around the
  // cache; a peer-access all-reduce where any rank has one sends its results
  // through the windows instead of writing the peers' outputs.
  size_t stream_output_bytes = 0;
};

// How peer access reaches one rank's buffers: they are caller memory (each
// page pinned per copy: the window instead), braid's huge pages (kernel
// copies), or memory the peers map (plain loads and stores, worth it from
// far smaller slices). Ranks' buffers may differ (Selector::WantsWindow).
enum class PeerMemory { kSlow, kFast, kMapped };

// What a transport can do beyond point-to-point messages (Transport's
// capability accessors), and the group it connects.
struct TransportCaps {
  std::string name;  // "shm", "tcp", ...: picks the tuning table's rows
  int size = 1;
  bool shared_windows = false;
  bool peer_access = false;  // implies shared_windows
  bool native = false;       // the engine's own collectives
  bool device_memory_only = false;  // payloads are device memory
  // A device link (device_link.h): braid's programs run on streams; and
  // whether that link has the engine's own collectives (NCCL's).
  bool device_link = false;
  bool device_native = false;
  // Where the group's ranks run (the communicator's host layout).
  int hosts = 1;
  int min_per_host = 1;
  int max_per_host = 1;
  // The communicator can build subgroups' transports (hierarchical).
  bool subgroups = false;
};

// The sizes at which one path beats another (bench/RESULTS.md, "Where the
// thresholds come from"). Tests shrink them to force every path at small
// sizes.
struct SelectionThresholds {
  // Without a table row or windows: rhd up to this many bytes, and while a
  // rank's ring chunk is under ring_min_chunk_bytes; ring above.
  size_t small_allreduce_bytes = size_t{64} << 10;
  size_t ring_min_chunk_bytes = size_t{128} << 10;
  // Peer access pays for its system calls (two per peer and slice) from
  // this many bytes per rank's slice (all-reduce) or per block (the others).
  size_t peer_access_min_slice_bytes = size_t{32} << 10;
  // The same where the peers map every buffer (no system calls).
  size_t peer_access_mapped_min_slice_bytes = size_t{1} << 10;
  // WindowPlan's: whole rounds up to this size, streamed outputs from that.
  size_t window_whole_round_bytes = size_t{16} << 10;
  size_t stream_output_bytes = size_t{16} << 20;
  // Across hosts with several ranks each, hierarchical from this many bytes
  // (per rank's buffer) under auto: from the first byte, as it won or tied
  // at every size on the namespace bed (bench/RESULTS.md, "Across hosts").
  size_t hierarchical_min_bytes = 0;
};

class Selector {
 public:
  // Reads the tuned table's rows (tuning/allreduce.txt, from braid_bench
  // --tune) for caps.name and caps.size.
  Selector(TransportCaps caps, SelectionThresholds thresholds = {});

  // What a `kind` collective of `count` elements of `element_size` bytes
  // runs (count as CollectiveArgs has it: per rank's block for
  // reduce-scatter, all-gather and all-to-all) when `requested`.
  // The choice depends on nothing but the arguments and the group, so every
  // rank makes it alike whatever its buffers are: where peer access would
  // win in some rank's memory, an all-reduce left to auto runs the peer
  // plan, and WantsWindow says how this rank votes in it.
  // kUnimplemented when the request needs what the transport lacks.
  absl::StatusOr<Algorithm> Select(CollectiveKind kind, size_t count, size_t element_size,
                                   Algorithm requested) const;

  // Whether an all-reduce Select answered with peer access is one this
  // rank's `memory` would rather run through the windows: the peer plan's
  // first Sync takes the vote (program.h), and one such rank sends every
  // rank through the windows. In the caller's own memory peer access pins
  // every page it reads (bench/RESULTS.md, "Caller memory"); in braid's
  // huge pages it pays from 32 KiB slices, in memory the peers map from 1 KiB.
  // Never where peer access was asked for by name.
  bool WantsWindow(size_t count, size_t element_size, Algorithm requested, PeerMemory memory) const;

  WindowPlan window_plan() const {
    return {thresholds_.window_whole_round_bytes, thresholds_.stream_output_bytes};
  }
  const TransportCaps& caps() const { return caps_; }

 private:
  // What an all-reduce runs where every rank's buffers are `memory`.
  Algorithm SelectAllReduce(size_t count, size_t element_size, Algorithm requested, PeerMemory memory) const;
  absl::StatusOr<Algorithm> SelectDevice(CollectiveKind kind, size_t count, size_t element_size,
                                         Algorithm requested) const;
  // auto: the tuned table's row, else the built-in rule.
  Algorithm AutoAllReduce(size_t count, size_t element_size, PeerMemory memory) const;
  // The rule without a table row: rhd or ring by size and group size.
  Algorithm UntunedAllReduce(size_t bytes) const;
  // "direct" for this transport and size.
  Algorithm ResolveDirect(size_t count, size_t element_size, PeerMemory memory) const;
  // Whether a `kind` collective of `bytes` (a rank's whole buffer) runs
  // hierarchical when `requested` (kAuto or kHierarchical).
  bool Hierarchical(CollectiveKind kind, size_t bytes, Algorithm requested) const;

  TransportCaps caps_;
  SelectionThresholds thresholds_;
  // The tuned table's ranges for this transport and world size: up to
  // max_bytes (0: no bound) bytes, the algorithm. Empty: the built-in rule.
  std::vector<std::pair<uint64_t, Algorithm>> tuned_;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_SELECTION_H_
