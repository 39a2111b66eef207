// Hierarchical collectives: an intra-host step over the ranks that share a
// host (shared memory) and an inter-host step among the ranks of one local
// index, one per host (tcp or mpi), so that each host's link carries only
// what must leave the host and every rank of a host drives a share of it.
//
//   all-reduce       reduce-scatter within the host (a rank gets 1/L of the
//                    vector), all-reduce of that slice across hosts, all-gather
//                    within the host. Hosts with different numbers of ranks:
//                    reduce to each host's first rank, all-reduce among those,
//                    broadcast within the host.
//   reduce-scatter   within the host, then across hosts (every host alike)
//   all-gather       across hosts, then within the host (every host alike)
//   broadcast        across hosts among the root's local index, then within
//                    each host (through each host's first rank where some
//                    host has no rank of the root's index)
//
// Each step runs braid's algorithm for its level (the levels' own
// selectors). Frames on both levels carry the parent collective's sequence
// number. avg reduces as sum and the owner of each result divides once by
// the whole group's size.
#ifndef BRAID_COLLECTIVES_HIERARCHICAL_H_
#define BRAID_COLLECTIVES_HIERARCHICAL_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/group_layout.h"
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

class HostLevels {
 public:
  // Collective over every rank of `parent`: its intra-host and inter-host
  // transports, each over a SubsetBootstrap of `parent` framed with `seq`.
  static absl::StatusOr<std::unique_ptr<HostLevels>> Create(Transport& parent, const HostLayout& layout,
                                                            const SubgroupTransportFactory& factory, uint64_t seq,
                                                            Deadline deadline, const SelectionThresholds& thresholds);

  absl::Status AllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input, absl::Span<std::byte> output,
                         Scratch& scratch);
  absl::Status ReduceScatter(const CollectiveArgs& args, absl::Span<const std::byte> input,
                             absl::Span<std::byte> output, Scratch& scratch);
  absl::Status AllGather(const CollectiveArgs& args, absl::Span<const std::byte> input, absl::Span<std::byte> output,
                         Scratch& scratch);
  absl::Status Broadcast(const CollectiveArgs& args, absl::Span<std::byte> buffer, Scratch& scratch);

  // Aborts both levels (the parent's Abort does).
  void Abort(const absl::Status& cause);

 private:
  HostLevels(const HostLayout& layout, int rank, std::unique_ptr<Transport> local, std::unique_ptr<Transport> cross,
             const SelectionThresholds& thresholds);
  // One step on a level: its selector's algorithm for `args`.
  absl::Status Step(Transport& level, const Selector& selector, const CollectiveArgs& args,
                    absl::Span<const std::byte> input, absl::Span<std::byte> output, Scratch& scratch);
  // Reduce-scatter's and all-gather's staging: `whole` holds every rank's
  // block ordered by (local index, host), `mine` one block per host.
  struct HostBlocks {
    absl::Span<std::byte> whole;
    absl::Span<std::byte> mine;
  };
  absl::StatusOr<HostBlocks> Stage(size_t block_bytes);
  // Copies every rank's block between rank order and (local index, host) order.
  void Regroup(const std::byte* from, std::byte* to, size_t block_bytes, bool to_local_major) const;
  absl::Status LeaderAllReduce(const CollectiveArgs& args, absl::Span<const std::byte> input,
                               absl::Span<std::byte> output, Scratch& scratch);

  const HostLayout layout_;
  const int rank_;
  const int host_;
  const int local_rank_;
  std::unique_ptr<Transport> local_;
  std::unique_ptr<Transport> cross_;
  const Selector local_selector_;
  const Selector cross_selector_;
  Scratch staging_;  // the steps' own buffers (the algorithms use the caller's scratch)
};

}  // namespace braid

#endif  // BRAID_COLLECTIVES_HIERARCHICAL_H_
