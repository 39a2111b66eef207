#include "collectives/run_algorithm.h"

#include "absl/strings/str_cat.h"
#include "collectives/algorithms.h"
#include "collectives/transport/device_link.h"
#include "collectives/chain.h"
#include "collectives/pairwise.h"
#include "collectives/rhd.h"
#include "collectives/ring.h"
#include "collectives/shm/shm_collectives.h"
#include "collectives/tree.h"

namespace braid {

absl::Status RunAlgorithm(Transport& t, Algorithm algorithm, const CollectiveArgs& args,
                          absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                          const WindowPlan& plan) {
  switch (algorithm) {
    case Algorithm::kRing:
      if (args.kind == CollectiveKind::kReduceScatter) return RingReduceScatter(t, args, input, output, scratch);
      if (args.kind == CollectiveKind::kAllGather) return RingAllGather(t, args, input, output);
      return RingAllReduce(t, args, input, output, scratch);
    case Algorithm::kTree: return TreeAllReduce(t, args, input, output, scratch);
    case Algorithm::kRhd: return RhdAllReduce(t, args, input, output, scratch);
    case Algorithm::kOneShot: return OneShotAllReduce(t, args, input, output, scratch);
    case Algorithm::kWindow: return WindowAllReduce(t, *t.shared_windows(), args, input, output, plan);
    case Algorithm::kPeerAccess:
      switch (args.kind) {
        case CollectiveKind::kReduceScatter:
          return PeerReduceScatter(t, *t.shared_windows(), args, input, output, scratch);
        case CollectiveKind::kAllGather: return PeerAllGather(t, *t.shared_windows(), args, input, output);
        case CollectiveKind::kAllToAll: return PeerAllToAll(t, *t.shared_windows(), args, input, output);
        default: return PeerAllReduce(t, *t.shared_windows(), args, input, output, scratch, plan);
      }
    case Algorithm::kChain:
      if (args.kind == CollectiveKind::kBroadcast) return ChainBroadcast(t, args, output);
      return ChainReduce(t, args, input, output, scratch);
    case Algorithm::kPairwise: return PairwiseAllToAll(t, args, input, output);
    case Algorithm::kDissemination: return DisseminationBarrier(t, args);
    default: break;
  }
  return absl::InternalError(absl::StrCat("no ", AlgorithmName(algorithm), " ", CollectiveKindName(args.kind)));
}

TransportCaps CapsOf(Transport& transport) {
  TransportCaps caps;
  caps.name = transport.name();
  caps.size = transport.size();
  SharedWindows* windows = transport.shared_windows();
  caps.shared_windows = windows != nullptr;
  caps.peer_access = windows != nullptr && windows->CanAccessPeers();
  caps.native = transport.native_collectives() != nullptr;
  caps.device_memory_only = transport.device_memory_only();
  DeviceLink* link = transport.device_link();
  caps.device_link = link != nullptr;
  caps.device_native = link != nullptr && link->has_native();
  return caps;
}

}  // namespace braid
