#include "collectives/run_algorithm.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/algorithm_util.h"
#include "collectives/programs/host_executor.h"
#include "collectives/programs/program.h"
#include "collectives/shm/shm_collectives.h"
#include "collectives/transport/device_link.h"

namespace braid {
namespace {

// A scheduled algorithm: its Plan for this rank (that of `shape`, which
// may differ from the kind the frames carry), run by the host executor.
absl::Status RunProgram(Transport& t, Algorithm algorithm, CollectiveKind shape, const CollectiveArgs& args,
                        absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch) {
  BRAID_RETURN_IF_ERROR(CheckShape(t, shape, args, input, output));
  CollectiveArgs shaped = args;
  shaped.kind = shape;
  BRAID_ASSIGN_OR_RETURN(const Plan* plan, CachedPlan({algorithm, shaped, t.rank(), t.size()}));
  return RunPlanOnTransport(*plan, t, args, input, output, scratch);
}

}  // namespace

absl::Status RunAlgorithm(Transport& t, Algorithm algorithm, const CollectiveArgs& args,
                          absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                          const WindowPlan& plan) {
  if (HasProgram(algorithm, args.kind)) return RunProgram(t, algorithm, args.kind, args, input, output, scratch);
  switch (algorithm) {
    case Algorithm::kWindow: return WindowAllReduce(t, *t.shared_windows(), args, input, output, plan);
    case Algorithm::kPeerAccess:
      switch (args.kind) {
        case CollectiveKind::kReduceScatter:
          return PeerReduceScatter(t, *t.shared_windows(), args, input, output, scratch);
        case CollectiveKind::kAllGather: return PeerAllGather(t, *t.shared_windows(), args, input, output);
        case CollectiveKind::kAllToAll: return PeerAllToAll(t, *t.shared_windows(), args, input, output);
        default: return PeerAllReduce(t, *t.shared_windows(), args, input, output, scratch, plan);
      }
    default: break;
  }
  return absl::InternalError(absl::StrCat("no ", AlgorithmName(algorithm), " ", CollectiveKindName(args.kind)));
}

absl::Status GatherFromAll(Transport& t, const CollectiveArgs& args, absl::Span<const std::byte> input,
                           absl::Span<std::byte> output, Scratch& scratch) {
  return RunProgram(t, Algorithm::kRing, CollectiveKind::kAllGather, args, input, output, scratch);
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
