// The levels of a hierarchical collective: the intra-host group of the ranks
// that share this rank's host and the inter-host group of the ranks of its
// local index, each with its own transport and selector. A hierarchical
// collective is a Plan (collectives/programs/hierarchical_program.h) whose
// steps run here, each with its level's algorithm. Frames on both levels
// carry the parent collective's sequence number.
#ifndef BRAID_COLLECTIVES_HIERARCHICAL_H_
#define BRAID_COLLECTIVES_HIERARCHICAL_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/group_layout.h"
#include "collectives/programs/host_executor.h"
#include "collectives/programs/program.h"
#include "collectives/scratch.h"
#include "collectives/selection.h"
#include "collectives/transport/bootstrap.h"
#include "collectives/transport/frame.h"
#include "collectives/transport/transport.h"

namespace braid {

// Builds a subgroup's transport: collective over `bootstrap`'s ranks.
// `same_host`: they all run on this host (by the communicator's layout).
using SubgroupTransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(Bootstrap& bootstrap, Deadline deadline, bool same_host)>;

class HostLevels : public PlanLevels {
 public:
  // Collective over every rank of `parent`: its intra-host and inter-host
  // transports, each over a SubsetBootstrap of `parent` framed with `seq`.
  static absl::StatusOr<std::unique_ptr<HostLevels>> Create(Transport& parent, const HostLayout& layout,
                                                            const SubgroupTransportFactory& factory, uint64_t seq,
                                                            Deadline deadline, const SelectionThresholds& thresholds);

  // The hierarchical plan of `args` (all-reduce, reduce-scatter,
  // all-gather, broadcast with input == output), run over the levels.
  absl::Status Run(const CollectiveArgs& args, absl::Span<const std::byte> input, absl::Span<std::byte> output,
                   Scratch& scratch);

  // Aborts both levels (the parent's Abort does).
  void Abort(const absl::Status& cause);

  // PlanLevels: the step on its level, with that level's selector's algorithm.
  absl::Status RunStep(const LevelStep& step, const CollectiveArgs& args, absl::Span<const std::byte> input,
                       absl::Span<std::byte> output) override;

 private:
  HostLevels(Transport& parent, const HostLayout& layout, std::unique_ptr<Transport> local,
             std::unique_ptr<Transport> cross, const SelectionThresholds& thresholds);

  Transport& parent_;
  const HostLayout layout_;
  const int rank_;
  std::unique_ptr<Transport> local_;
  std::unique_ptr<Transport> cross_;
  const Selector local_selector_;
  const Selector cross_selector_;
  Scratch step_scratch_;  // the steps' (the plan's own regions are in the caller's scratch)
  // The last plan run: a layer's collectives repeat.
  CollectiveArgs plan_args_;
  Plan plan_;
  bool have_plan_ = false;
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_HIERARCHICAL_H_
