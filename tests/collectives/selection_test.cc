// The selector alone: what runs for every kind, size, transport and request,
// with no transport or process (collectives/selection.h).
#include "collectives/selection.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

TransportCaps Caps(const char* name, int size, bool windows, bool peers, bool native = false) {
  TransportCaps caps;
  caps.name = name;
  caps.size = size;
  caps.shared_windows = windows;
  caps.peer_access = peers;
  caps.native = native;
  return caps;
}

// A transport and world size the tuned table has no rows for: the built-in rule.
constexpr const char* kUntuned = "untuned";

Algorithm Pick(const Selector& selector, CollectiveKind kind, size_t count, size_t element_size,
               Algorithm requested = Algorithm::kAuto) {
  absl::StatusOr<Algorithm> picked = selector.Select(kind, count, element_size, requested);
  REQUIRE(picked.ok());
  return *picked;
}

TEST_CASE("Selector: names round-trip, and direct is accepted", "[selection]") {
  for (const char* name : {"auto", "ring", "tree", "double-tree", "rhd", "one-shot", "window", "peer-access",
                           "direct", "native", "hierarchical"}) {
    absl::StatusOr<Algorithm> parsed = ParseAlgorithm(name);
    REQUIRE(parsed.ok());
    CHECK(std::string(AlgorithmName(*parsed)) == name);
  }
  CHECK(ParseAlgorithm("RING").ok());
  CHECK_FALSE(ParseAlgorithm("chain").ok());  // a name of what runs, not a request
  CHECK(absl::StrContains(ParseAlgorithm("fast").status().message(), "peer-access"));
}

TEST_CASE("Selector: all-reduce without windows is rhd while a ring chunk is under 128 KiB, ring above",
          "[selection]") {
  const Selector selector(Caps(kUntuned, 4, false, false));
  CHECK(Pick(selector, CollectiveKind::kAllReduce, 131072, 4) == Algorithm::kRhd);  // 512 KiB: 4 chunks of 128 KiB
  CHECK(Pick(selector, CollectiveKind::kAllReduce, 131073, 4) == Algorithm::kRing);
  // Many ranks: rhd far longer (a ring's 2 (n - 1) steps cost more than it saves).
  const Selector many(Caps(kUntuned, 1024, false, false));
  CHECK(Pick(many, CollectiveKind::kAllReduce, 16 << 20, 4) == Algorithm::kRhd);  // 64 MiB
  CHECK(Pick(many, CollectiveKind::kAllReduce, (32 << 20) + 1, 4) == Algorithm::kRing);
  // Small groups keep rhd up to 64 KiB at least.
  SelectionThresholds low;
  low.ring_min_chunk_bytes = 1;
  const Selector floor(Caps(kUntuned, 2, false, false), low);
  CHECK(Pick(floor, CollectiveKind::kAllReduce, 16384, 4) == Algorithm::kRhd);
  CHECK(Pick(floor, CollectiveKind::kAllReduce, 16385, 4) == Algorithm::kRing);
  CHECK(Pick(selector, CollectiveKind::kAllReduce, 1, 4, Algorithm::kTree) == Algorithm::kTree);
  // direct without windows is the one-shot exchange
  CHECK(Pick(selector, CollectiveKind::kAllReduce, 1 << 20, 4, Algorithm::kDirect) == Algorithm::kOneShot);
}

TEST_CASE("Selector: direct over shm is peer-access from a 32 KiB slice per rank, else window", "[selection]") {
  // Every rank runs the peer plan from a 1 KiB slice (memory the peers map);
  // in braid's own memory a rank votes for the window below 32 KiB.
  const Selector peers(Caps(kUntuned, 2, true, true));
  auto fast_window = [](const Selector& s, size_t count, Algorithm requested = Algorithm::kAuto) {
    return s.WantsWindow(count, 4, requested, PeerMemory::kFast);
  };
  CHECK(Pick(peers, CollectiveKind::kAllReduce, 511, 4) == Algorithm::kWindow);  // slice 255 x 4 B
  CHECK(Pick(peers, CollectiveKind::kAllReduce, 16383, 4) == Algorithm::kPeerAccess);
  CHECK(fast_window(peers, 16383));  // slice 8191 x 4 B
  CHECK_FALSE(fast_window(peers, 16384));
  CHECK(Pick(peers, CollectiveKind::kAllReduce, 16384, 4, Algorithm::kDirect) == Algorithm::kPeerAccess);
  CHECK_FALSE(fast_window(peers, 16384, Algorithm::kDirect));
  // the slice rounds down: 3 ranks, 24577 floats -> 8192 a slice
  const Selector three(Caps(kUntuned, 3, true, true));
  CHECK(fast_window(three, 24575));
  CHECK_FALSE(fast_window(three, 24576));
  // no peer access: the windows at every size
  const Selector windows(Caps(kUntuned, 2, true, false));
  CHECK(Pick(windows, CollectiveKind::kAllReduce, 1 << 24, 4) == Algorithm::kWindow);
  // thresholds are the selector's, not the transport's
  SelectionThresholds zero;
  zero.peer_access_min_slice_bytes = 0;
  const Selector eager(Caps(kUntuned, 2, true, true), zero);
  CHECK(Pick(eager, CollectiveKind::kAllReduce, 2, 4) == Algorithm::kPeerAccess);
  CHECK(eager.window_plan().whole_round_bytes == SelectionThresholds{}.window_whole_round_bytes);
}

TEST_CASE("Selector: one choice whatever a rank's memory; the caller's 4 KiB pages vote for the window",
          "[selection]") {
  const Selector peers(Caps(kUntuned, 2, true, true));
  const size_t big = size_t{16} << 20;  // float elements: 64 MiB
  auto pick = [&](Algorithm requested) {
    absl::StatusOr<Algorithm> picked = peers.Select(CollectiveKind::kAllReduce, big, 4, requested);
    REQUIRE(picked.ok());
    return *picked;
  };
  CHECK(pick(Algorithm::kAuto) == Algorithm::kPeerAccess);
  CHECK(pick(Algorithm::kDirect) == Algorithm::kPeerAccess);
  CHECK(peers.WantsWindow(big, 4, Algorithm::kAuto, PeerMemory::kSlow));
  CHECK(peers.WantsWindow(big, 4, Algorithm::kDirect, PeerMemory::kSlow));
  CHECK_FALSE(peers.WantsWindow(big, 4, Algorithm::kAuto, PeerMemory::kFast));
  CHECK_FALSE(peers.WantsWindow(big, 4, Algorithm::kAuto, PeerMemory::kMapped));
  // Asked for by name, peer access runs on any memory; other choices stand.
  CHECK(pick(Algorithm::kPeerAccess) == Algorithm::kPeerAccess);
  CHECK_FALSE(peers.WantsWindow(big, 4, Algorithm::kPeerAccess, PeerMemory::kSlow));
  CHECK(pick(Algorithm::kRing) == Algorithm::kRing);
  // The tuned shm rows (peer access at large sizes) take the vote too.
  const Selector shm(Caps("shm", 2, true, true));
  absl::StatusOr<Algorithm> tuned = shm.Select(CollectiveKind::kAllReduce, big, 4, Algorithm::kAuto);
  REQUIRE(tuned.ok());
  CHECK((*tuned != Algorithm::kPeerAccess || shm.WantsWindow(big, 4, Algorithm::kAuto, PeerMemory::kSlow)));
}

TEST_CASE("Selector: in memory the peers map, peer access starts at far smaller slices", "[selection]") {
  const Selector shm(Caps("shm", 2, true, true));
  const SelectionThresholds t;
  const size_t mapped_from = 2 * t.peer_access_mapped_min_slice_bytes;  // 2 ranks
  auto pick = [&](size_t bytes) {
    absl::StatusOr<Algorithm> picked = shm.Select(CollectiveKind::kAllReduce, bytes / 4, 4, Algorithm::kAuto);
    REQUIRE(picked.ok());
    return *picked;
  };
  auto window = [&](size_t bytes, PeerMemory memory) {
    return shm.WantsWindow(bytes / 4, 4, Algorithm::kAuto, memory);
  };
  // Below the mapped threshold every rank takes the window without a vote.
  CHECK(pick(mapped_from / 2) == Algorithm::kWindow);
  CHECK(pick(mapped_from) == Algorithm::kPeerAccess);
  CHECK_FALSE(window(mapped_from, PeerMemory::kMapped));
  CHECK(window(mapped_from, PeerMemory::kFast));
  CHECK(window(mapped_from, PeerMemory::kSlow));
  CHECK_FALSE(window(2 * t.peer_access_min_slice_bytes, PeerMemory::kFast));
}

TEST_CASE("Selector: what a transport lacks is a clear error, never a silent substitute", "[selection]") {
  const Selector tcp(Caps("tcp", 2, false, false));
  for (Algorithm a : {Algorithm::kWindow, Algorithm::kPeerAccess, Algorithm::kNative}) {
    absl::StatusOr<Algorithm> picked = tcp.Select(CollectiveKind::kAllReduce, 100, 4, a);
    REQUIRE_FALSE(picked.ok());
    CHECK(picked.status().code() == absl::StatusCode::kUnimplemented);
    CHECK(absl::StrContains(picked.status().message(), "runs over tcp"));
  }
  CHECK_FALSE(tcp.Select(CollectiveKind::kReduceScatter, 100, 4, Algorithm::kPeerAccess).ok());
  CHECK_FALSE(tcp.Select(CollectiveKind::kAllReduce, 100, 4, Algorithm::kChain).ok());
}

TEST_CASE("Selector: the other collectives", "[selection]") {
  const Selector peers(Caps(kUntuned, 4, true, true, /*native=*/false));
  // peer-access from a 32 KiB block per rank
  for (CollectiveKind kind : {CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
    CHECK(Pick(peers, kind, 8191, 4) == Algorithm::kRing);
    CHECK(Pick(peers, kind, 8192, 4) == Algorithm::kPeerAccess);
    CHECK(Pick(peers, kind, 1, 4, Algorithm::kPeerAccess) == Algorithm::kPeerAccess);
  }
  CHECK(Pick(peers, CollectiveKind::kAllToAll, 8191, 4) == Algorithm::kPairwise);
  CHECK(Pick(peers, CollectiveKind::kAllToAll, 8192, 4) == Algorithm::kPeerAccess);
  // broadcast, reduce, barrier have one braid path each, whatever else is asked
  CHECK(Pick(peers, CollectiveKind::kBroadcast, 1 << 20, 4, Algorithm::kPeerAccess) == Algorithm::kChain);
  CHECK(Pick(peers, CollectiveKind::kReduce, 1 << 20, 4, Algorithm::kRing) == Algorithm::kChain);
  CHECK(Pick(peers, CollectiveKind::kBarrier, 0, 1) == Algorithm::kDissemination);
  CHECK(Pick(peers, CollectiveKind::kSendRecv, 10, 4, Algorithm::kNative) == Algorithm::kP2p);
  // native where the engine is
  const Selector mpi(Caps(kUntuned, 4, false, false, /*native=*/true));
  CHECK(Pick(mpi, CollectiveKind::kBroadcast, 10, 4, Algorithm::kNative) == Algorithm::kNative);
  CHECK(Pick(mpi, CollectiveKind::kAllReduce, 10, 4, Algorithm::kNative) == Algorithm::kNative);
  CHECK_FALSE(peers.Select(CollectiveKind::kBarrier, 0, 1, Algorithm::kNative).ok());
}

TEST_CASE("Selector: a device-memory transport runs only its engine's collectives", "[selection]") {
  TransportCaps caps = Caps("nccl", 2, false, false, /*native=*/true);
  caps.device_memory_only = true;
  const Selector nccl(caps);
  CHECK(Pick(nccl, CollectiveKind::kAllReduce, 100, 4, Algorithm::kRing) == Algorithm::kNative);
  CHECK(Pick(nccl, CollectiveKind::kAllGather, 100, 4) == Algorithm::kNative);
}

TEST_CASE("Selector: the tuned table's rows for shm and tcp", "[selection]") {
  // The checked-in table (tuning/allreduce.txt) has shm n=2 "direct" for
  // every size and tcp n=2 one-shot up to 32 KiB, then ring.
  const Selector shm(Caps("shm", 2, true, true));
  CHECK(Pick(shm, CollectiveKind::kAllReduce, 16, 4) == Algorithm::kWindow);
  CHECK(Pick(shm, CollectiveKind::kAllReduce, 1 << 20, 4) == Algorithm::kPeerAccess);
  const Selector tcp(Caps("tcp", 2, false, false));
  CHECK(Pick(tcp, CollectiveKind::kAllReduce, 8192, 4) == Algorithm::kOneShot);
  CHECK(Pick(tcp, CollectiveKind::kAllReduce, 8193, 4) == Algorithm::kRing);
  // shm with its windows turned off (BRAID_SHM_WINDOW_KB=0): "direct" is the one-shot exchange
  const Selector no_windows(Caps("shm", 2, false, false));
  CHECK(Pick(no_windows, CollectiveKind::kAllReduce, 1 << 20, 4) == Algorithm::kOneShot);
}

TEST_CASE("Selector: hierarchical across hosts of several ranks, where the communicator makes subgroups",
          "[selection]") {
  auto hosts = [](int count, int least, int most, bool subgroups) {
    TransportCaps caps = Caps(kUntuned, count * most, false, false);
    caps.hosts = count;
    caps.min_per_host = least;
    caps.max_per_host = most;
    caps.subgroups = subgroups;
    return caps;
  };
  const Selector two_by_two(hosts(2, 2, 2, true));
  for (size_t count : {size_t{2}, size_t{1} << 20}) {
    CHECK(Pick(two_by_two, CollectiveKind::kAllReduce, count, 4) == Algorithm::kHierarchical);
    CHECK(Pick(two_by_two, CollectiveKind::kReduceScatter, count, 4) == Algorithm::kHierarchical);
    CHECK(Pick(two_by_two, CollectiveKind::kAllGather, count, 4) == Algorithm::kHierarchical);
    CHECK(Pick(two_by_two, CollectiveKind::kBroadcast, count, 4) == Algorithm::kHierarchical);
  }
  CHECK(Pick(two_by_two, CollectiveKind::kReduce, 100, 4) == Algorithm::kChain);
  CHECK(Pick(two_by_two, CollectiveKind::kAllToAll, 100, 4) == Algorithm::kPairwise);
  CHECK(Pick(two_by_two, CollectiveKind::kAllReduce, 100, 4, Algorithm::kRing) == Algorithm::kRing);
  // Uneven hosts: all-reduce and broadcast still, reduce-scatter and all-gather not.
  const Selector uneven(hosts(3, 1, 2, true));
  CHECK(Pick(uneven, CollectiveKind::kAllReduce, 100, 4) == Algorithm::kHierarchical);
  CHECK(Pick(uneven, CollectiveKind::kReduceScatter, 100, 4, Algorithm::kHierarchical) == Algorithm::kRing);
  // One host, or one rank a host: flat under auto, hierarchical when asked.
  for (const TransportCaps& caps : {hosts(1, 4, 4, true), hosts(4, 1, 1, true)}) {
    const Selector flat(caps);
    CHECK(Pick(flat, CollectiveKind::kAllReduce, 1 << 20, 4) != Algorithm::kHierarchical);
    CHECK(Pick(flat, CollectiveKind::kAllReduce, 1 << 20, 4, Algorithm::kHierarchical) == Algorithm::kHierarchical);
  }
  // No subgroups: never under auto, and a request says what is missing.
  const Selector lone(hosts(2, 2, 2, false));
  CHECK(Pick(lone, CollectiveKind::kAllReduce, 1 << 20, 4) != Algorithm::kHierarchical);
  absl::StatusOr<Algorithm> asked = lone.Select(CollectiveKind::kBroadcast, 10, 4, Algorithm::kHierarchical);
  REQUIRE_FALSE(asked.ok());
  CHECK(absl::StrContains(asked.status().message(), "make subgroups"));
  CHECK(Pick(lone, CollectiveKind::kBarrier, 0, 1, Algorithm::kHierarchical) == Algorithm::kDissemination);
}

}  // namespace
}  // namespace braid
