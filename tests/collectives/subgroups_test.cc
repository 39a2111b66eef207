// Subgroups (Communicator::Split, NewGroup) and the hierarchical
// collectives, in forked processes over real transports: the conformance
// suite on each subgroup and on the hierarchical path, with "hosts" named by
// CommunicatorOptions::host_name on this one machine (tests/netns runs them
// across network namespaces with their own host names).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "tests/collectives/conformance.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"

namespace braid::testing {
namespace {

NamedTransport Named(const std::string& name) {
  for (NamedTransport& t : AllTransports()) {
    if (t.name == name) return t;
  }
  return {};
}

// Subgroups over the parent's kind of transport.
CommunicatorOptions WithSubgroups(const NamedTransport& kind) {
  CommunicatorOptions options = kind.communicator;
  TransportFactory create = kind.create;
  options.subgroup_transport = [create](Bootstrap& bootstrap, Deadline deadline, bool) {
    return create(bootstrap, deadline);
  };
  return options;
}

absl::StatusOr<std::unique_ptr<Communicator>> Parent(RankContext& context, const NamedTransport& kind,
                                                     CommunicatorOptions options) {
  HarnessBootstrap bootstrap(context);
  BRAID_ASSIGN_OR_RETURN(auto transport, kind.create(bootstrap, context.deadline()));
  options.segment_bytes = 1024;
  return Communicator::Create(std::move(transport), options);
}

absl::Status SumOfRanksPlusOne(Communicator& comm, int64_t want, const std::string& what) {
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({5}, DType::kI64));
  for (int i = 0; i < 5; ++i) t.data<int64_t>()[i] = 0;
  t.data<int64_t>()[0] = comm.rank() + 1;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum));
  BRAID_RETURN_IF_ERROR(work->Wait());
  if (t.data<int64_t>()[0] != want) {
    return absl::InternalError(absl::StrCat(what, ": sum ", t.data<int64_t>()[0], ", expected ", want));
  }
  return absl::OkStatus();
}

TEST_CASE("Subgroups: a split runs every collective on each subgroup, and the parent goes on", "[subgroups]") {
  for (const NamedTransport& kind : AllTransports()) {
    for (int n : {3, 4}) {
      INFO(kind.name << " with " << n << " ranks");
      auto statuses = RunRanks(n, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        BRAID_ASSIGN_OR_RETURN(auto world, Parent(context, kind, WithSubgroups(kind)));
        const int me = context.rank();
        // Even and odd ranks, each in reverse rank order (key -rank).
        BRAID_ASSIGN_OR_RETURN(auto half, world->Split(me % 2, -me));
        std::vector<int> members;
        for (int r = n - 1; r >= 0; --r) {
          if (r % 2 == me % 2) members.push_back(r);
        }
        const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
        if (half->rank() != want_rank || half->size() != static_cast<int>(members.size()) ||
            half->name() != absl::StrCat("world.", me % 2)) {
          return absl::InternalError(absl::StrCat("split gave rank ", half->rank(), " of ", half->size(), " '",
                                                  half->name(), "', expected ", want_rank, " of ", members.size()));
        }
        BRAID_RETURN_IF_ERROR(Annotate(RunConformance(*half, context.deadline()), "subgroup"));
        // A subgroup of the subgroup, and the parent, still work.
        BRAID_ASSIGN_OR_RETURN(auto single, half->Split(half->rank(), 0));
        BRAID_RETURN_IF_ERROR(SumOfRanksPlusOne(*single, 1, "a group of one"));
        return SumOfRanksPlusOne(*world, int64_t{n} * (n + 1) / 2, "the parent after its split");
      });
      REQUIRE_ALL_OK(statuses);
    }
  }
}

TEST_CASE("Subgroups: NewGroup refuses outsiders by name, and ranks that pass different lists all fail",
          "[subgroups]") {
  const NamedTransport kind = Named("tcp");
  auto statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(auto world, Parent(context, kind, WithSubgroups(kind)));
    BRAID_ASSIGN_OR_RETURN(auto pair, world->NewGroup({2, 0}, "pair"));
    if (context.rank() == 1) {
      if (pair->member()) return absl::InternalError("rank 1 became a member of [2, 0]");
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({4}, DType::kF32));
      absl::StatusOr<WorkHandle> refused = pair->AllReduce(t, ReduceOp::kSum);
      if (refused.ok() || !absl::IsFailedPrecondition(refused.status()) ||
          !absl::StrContains(refused.status().message(), "'pair'") ||
          !absl::StrContains(refused.status().message(), "not a member")) {
        return absl::InternalError(absl::StrCat("an outsider's all-reduce: ", refused.status().ToString()));
      }
    } else {
      if (pair->rank() != (context.rank() == 2 ? 0 : 1)) return absl::InternalError("wrong order in [2, 0]");
      BRAID_RETURN_IF_ERROR(SumOfRanksPlusOne(*pair, 3, "pair"));
    }
    BRAID_RETURN_IF_ERROR(SumOfRanksPlusOne(*world, 6, "the parent"));
    std::vector<int> mine = context.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
    absl::StatusOr<std::unique_ptr<Communicator>> bad = world->NewGroup(mine);
    if (bad.ok()) return absl::InternalError("lists that differ made a group");
    return bad.status();
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << statuses[r]);
    CHECK(absl::StrContains(statuses[r].message(), "asked for different subgroups"));
  }
}

// Which "host" each rank runs on.
struct Hosts {
  const char* what;
  std::vector<std::string> of_rank;
};

TEST_CASE("Hierarchical: every collective on the hierarchical path, for any mix of hosts", "[hierarchical]") {
  const NamedTransport tcp = Named("tcp");
  const NamedTransport shm = Named("shm");
  const std::vector<Hosts> layouts = {
      {"2 hosts x 2, interleaved", {"a", "b", "a", "b"}},
      {"3 hosts, uneven (2, 1, 2)", {"a", "a", "b", "c", "c"}},
      {"one host", {"a", "a", "a"}},
      {"one rank a host", {"a", "b", "c"}},
  };
  for (const Hosts& hosts : layouts) {
    INFO(hosts.what);
    const int n = static_cast<int>(hosts.of_rank.size());
    auto statuses = RunRanks(n, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      // Across "hosts" over tcp, as a multi-host job; within one over shm.
      CommunicatorOptions options;
      options.host_name = hosts.of_rank[context.rank()];
      options.thresholds.hierarchical_min_bytes = 0;  // auto takes it at every size
      options.thresholds.peer_access_min_slice_bytes = 0;
      options.subgroup_transport = [&](Bootstrap& bootstrap, Deadline deadline, bool same_host) {
        return (same_host ? shm : tcp).create(bootstrap, deadline);
      };
      BRAID_ASSIGN_OR_RETURN(auto comm, Parent(context, tcp, options));
      BRAID_ASSIGN_OR_RETURN(Algorithm chosen, comm->AlgorithmFor(CollectiveKind::kAllReduce, 1 << 20, DType::kF32,
                                                                  PeerMemory::kFast));
      // Auto takes it across hosts where some host has several ranks; forced, it runs anywhere.
      const HostLayout& layout = comm->host_layout();
      const bool wanted = layout.hosts() > 1 && layout.max_per_host() > 1;
      if ((chosen == Algorithm::kHierarchical) != wanted) {
        return absl::InternalError(absl::StrCat("auto chose ", AlgorithmName(chosen), " for ", layout.hosts(),
                                                " hosts of at most ", layout.max_per_host(), " ranks"));
      }
      BRAID_RETURN_IF_ERROR(RunConformance(*comm, context.deadline()));
      // A large one: every rank ends with the same bits.
      const size_t count = (size_t{1} << 20) + 3;
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({static_cast<int64_t>(count)}, DType::kF32));
      for (size_t i = 0; i < count; ++i) {
        t.data<float>()[i] = static_cast<float>(Mix(i * 31 + static_cast<size_t>(context.rank())) % 1000) / 7.0f;
      }
      BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm->AllReduce(t, ReduceOp::kAvg));
      BRAID_RETURN_IF_ERROR(work->Wait(context.deadline()));
      const uint64_t hash = HashBits(t.data<float>(), count);
      BRAID_ASSIGN_OR_RETURN(auto hashes, context.AllGather(std::to_string(hash)));
      for (const std::string& other : hashes) {
        if (other != hashes[0]) return absl::InternalError("ranks ended with different bits");
      }
      return absl::OkStatus();
    });
    REQUIRE_ALL_OK(statuses);
  }
}

TEST_CASE("Hierarchical: a communicator without subgroups says what it lacks", "[hierarchical]") {
  const NamedTransport tcp = Named("tcp");
  auto statuses = RunRanks(2, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(auto comm, Parent(context, tcp, CommunicatorOptions{}));
    CallOptions call;
    call.algorithm = Algorithm::kHierarchical;
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({4}, DType::kF32));
    absl::StatusOr<WorkHandle> work = comm->AllReduce(t, ReduceOp::kSum, call);
    if (work.ok() || !absl::IsUnimplemented(work.status()) ||
        !absl::StrContains(work.status().message(), "make subgroups")) {
      return absl::InternalError(absl::StrCat("hierarchical without subgroups: ", work.status().ToString()));
    }
    absl::StatusOr<std::unique_ptr<Communicator>> split = comm->Split(0, 0);
    if (split.ok() || !absl::StrContains(split.status().message(), "subgroup transport factory")) {
      return absl::InternalError(absl::StrCat("split without a factory: ", split.status().ToString()));
    }
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(statuses);
}

}  // namespace
}  // namespace braid::testing
