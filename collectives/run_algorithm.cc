#include "collectives/run_algorithm.h"

#include "absl/strings/str_cat.h"
#include "tensor/mappable_memory.h"
#include "base/status.h"
#include "collectives/algorithm_util.h"
#include "collectives/programs/host_executor.h"
#include "collectives/programs/program.h"
#include "collectives/transport/device_link.h"

namespace braid {
namespace {

// A scheduled algorithm: its Plan for this rank (that of `shape`, which
// may differ from the kind the frames carry), run by the host executor.
absl::Status RunProgram(Transport& t, Algorithm algorithm, CollectiveKind shape, const CollectiveArgs& args,
                        absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                        const WindowPlan& window = {}, bool window_vote = false) {
  BRAID_RETURN_IF_ERROR(CheckShape(t, shape, args, input, output));
  PlanRequest request{algorithm, args, t.rank(), t.size()};
  request.args.kind = shape;
  if (algorithm == Algorithm::kWindow || algorithm == Algorithm::kPeerAccess) {
    SharedWindows* windows = t.shared_windows();
    if (windows == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(AlgorithmName(algorithm), " over ", t.name(), ", which has no shared windows"));
    }
    request.window_half_bytes = windows->half_bytes();
    request.window = window;
    // A large output of its own is not in the cache (the input was read, not
    // it): written around the cache rather than read a line at a time first.
    request.stream_out = output.data() != input.data() && output.size() >= window.stream_output_bytes;
    request.window_vote = window_vote;
    request.peers_map = algorithm == Algorithm::kPeerAccess && FindMappable(input.data(), input.size()).has_value() &&
                        FindMappable(output.data(), output.size()).has_value();
  }
  BRAID_ASSIGN_OR_RETURN(const Plan* plan, CachedPlan(request));
  return RunPlanOnTransport(*plan, t, args, input, output, scratch);
}

}  // namespace

absl::Status RunAlgorithm(Transport& t, Algorithm algorithm, const CollectiveArgs& args,
                          absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch,
                          const WindowPlan& plan, bool window_vote) {
  if (HasProgram(algorithm, args.kind)) {
    return RunProgram(t, algorithm, args.kind, args, input, output, scratch, plan, window_vote);
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
