// The collectives conformance suite (tests/collectives/conformance.h) over
// every transport in forked processes: every collective x algorithm x dtype x
// op against a reference every rank computes locally, plus mismatches and a
// killed rank. BRAID_TEST_MATRIX=full widens it (tools/test_matrix.sh); CI
// runs the default slice.
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "collectives/transport/shm/peer_mappings.h"
#include "collectives/transport/shm/shm_transport.h"
#include "tensor/mappable_memory.h"
#include "tests/collectives/conformance.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"

namespace braid::testing {
namespace {

absl::Status Conformance(RankContext& context, const NamedTransport& transport_kind) {
  HarnessBootstrap bootstrap(context);
  BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
  CommunicatorOptions options = transport_kind.communicator;
  options.segment_bytes = 1024;  // small segments: many pipeline steps even at test sizes
  BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), options));
  return RunConformance(*comm, context.deadline());
}

TEST_CASE("Collectives: every collective, algorithm and dtype matches the reference", "[collectives]") {
  const std::vector<int> sizes = FullMatrix() ? std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8} : std::vector<int>{1, 2, 3, 4};
  for (const NamedTransport& transport_kind : AllTransports()) {
    for (int n : sizes) {
      INFO(transport_kind.name << " with " << n << " ranks");
      RunRanksOptions options;
      options.timeout = absl::Seconds(FullMatrix() ? 600 : 120);
      auto statuses = RunRanks(n, RankMode::kProcesses,
                               [&](RankContext& context) { return Conformance(context, transport_kind); }, options);
      REQUIRE_ALL_OK(statuses);
    }
  }
}

TEST_CASE("Collectives: large all-reduce results are bit-identical on every rank", "[collectives]") {
  // In place, except direct: out of place on ranks 1 and up, so their output
  // is written with streaming stores (16 MiB and up), and rank 0 in place:
  // the ranks must agree on one path through the windows or the peers'
  // buffers all the same. Checked against a local sum too.
  for (const NamedTransport& transport_kind : AllTransports()) {
    for (auto [n, algorithm] : {std::pair{2, Algorithm::kRing}, std::pair{3, Algorithm::kRing},
                                std::pair{3, Algorithm::kDirect}}) {
      INFO(transport_kind.name << " with " << n << " ranks, " << AlgorithmName(algorithm));
      auto statuses = RunRanks(n, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        HarnessBootstrap bootstrap(context);
        BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
        BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), transport_kind.communicator));
        const size_t count = (size_t{16} << 20) / 4 + 3;
        BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({static_cast<int64_t>(count)}, DType::kF32));
        // Inexact floats: rounding depends on the order of additions, so only
        // a single owner per element keeps ranks identical.
        auto value = [](size_t i, int rank) {
          return static_cast<float>(Mix(i * 31 + static_cast<size_t>(rank)) % 100000) / 7.0f;
        };
        for (size_t i = 0; i < count; ++i) t.data<float>()[i] = value(i, context.rank());
        const bool in_place = algorithm != Algorithm::kDirect || context.rank() == 0;
        BRAID_ASSIGN_OR_RETURN(Tensor result,
                               in_place ? absl::StatusOr<Tensor>(t)
                                        : Tensor::Empty({static_cast<int64_t>(count)}, DType::kF32));
        CallOptions call;
        call.algorithm = algorithm;
        BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm->AllReduce(t, result, ReduceOp::kSum, call));
        BRAID_RETURN_IF_ERROR(work->Wait(context.deadline()));
        const float* p = result.data<float>();
        for (size_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += value(i, r);
          if (std::abs(p[i] - sum) > 1e-3f * std::abs(sum) + 1e-3f) {
            return absl::InternalError(absl::StrCat("element ", i, " is ", p[i], ", expected about ", sum));
          }
        }
        const uint64_t hash = HashBits(p, count);
        BRAID_ASSIGN_OR_RETURN(auto hashes, context.AllGather(std::to_string(hash)));
        for (const std::string& other : hashes) {
          if (other != hashes[0]) return absl::InternalError("ranks ended with different bits");
        }
        return absl::OkStatus();
      });
      REQUIRE_ALL_OK(statuses);
    }
  }
}

TEST_CASE("Collectives: shm probes cross-memory attach, and the probe's verdict is the same on every rank",
          "[collectives]") {
  // Who asks for peer access: every rank, none, or all but rank 0 (whose
  // "no" must reach the others, with no rank left waiting in the probe).
  enum class Wanted { kAll, kNone, kAllButRank0 };
  for (Wanted wanted : {Wanted::kAll, Wanted::kNone, Wanted::kAllButRank0}) {
    auto statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      HarnessBootstrap bootstrap(context);
      ShmTransportOptions options;
      options.peer_access = wanted == Wanted::kAll || (wanted == Wanted::kAllButRank0 && context.rank() != 0);
      BRAID_ASSIGN_OR_RETURN(auto transport, ShmTransport::Create(bootstrap, context.deadline(), options));
      BRAID_ASSIGN_OR_RETURN(auto all, context.AllGather(transport->shared_windows()->CanAccessPeers() ? "yes" : "no"));
      for (const std::string& other : all) {
        if (other != all[0]) return absl::InternalError("ranks disagree on reaching peers' memory");
      }
      if (wanted != Wanted::kAll && transport->shared_windows()->CanAccessPeers()) {
        return absl::InternalError("a rank's peer_access=false was ignored");
      }
      return context.rank() == 0 && wanted == Wanted::kAll && !transport->shared_windows()->CanAccessPeers()
                 ? absl::UnavailableError("process_vm_readv/writev are not permitted here")
                 : absl::OkStatus();
    });
    if (wanted == Wanted::kAll && absl::IsUnavailable(statuses[0])) {
      WARN("process_vm_readv/writev are not permitted on this machine: the direct all-reduce's window path ran instead");
      statuses[0] = absl::OkStatus();
    }
    INFO("wanted " << static_cast<int>(wanted));
    REQUIRE_ALL_OK(statuses);
  }
}

TEST_CASE("Collectives: ranks that disagree on the count all get a clear error", "[collectives]") {
  // Ring everywhere; then direct on rank 0 only (what auto selection may do
  // when counts differ): over shm the direct one runs through the shared
  // windows while the others send frames, and each side must still see it.
  for (const NamedTransport& transport_kind : AllTransports()) {
    for (bool mixed : {false, true}) {
      INFO(transport_kind.name << (mixed ? ", rank 0 direct" : ""));
      auto statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        HarnessBootstrap bootstrap(context);
        BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
        BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), transport_kind.communicator));
        const int64_t count = context.rank() == 0 ? 100 : 200;
        BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({count}, DType::kF32));
        CallOptions call;
        call.timeout = absl::Seconds(20);
        call.algorithm = mixed && context.rank() == 0 ? Algorithm::kDirect : Algorithm::kRing;
        BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm->AllReduce(t, ReduceOp::kSum, call));
        const absl::Time start = absl::Now();
        absl::Status status = work->Wait();
        if (absl::Now() - start > absl::Seconds(10)) return absl::InternalError("took too long: " + status.ToString());
        // Later calls fail fast with the first cause.
        absl::StatusOr<WorkHandle> later = comm->Barrier();
        if (later.ok() || later.status().code() != absl::StatusCode::kFailedPrecondition) {
          return absl::InternalError("a call after the failure did not fail fast");
        }
        return status;
      });
      for (int r = 0; r < 3; ++r) {
        INFO("rank " << r << ": " << statuses[r]);
        CHECK_FALSE(statuses[r].ok());
        CHECK(absl::StrContains(statuses[r].message(), "mismatched collective"));
        CHECK(absl::StrContains(statuses[r].message(), "allreduce seq 1"));
      }
    }
  }
}

// A communicator over shm for this rank.
absl::StatusOr<std::unique_ptr<Communicator>> ShmCommunicator(RankContext& context) {
  HarnessBootstrap bootstrap(context);
  const NamedTransport shm = AllTransports()[1];
  BRAID_ASSIGN_OR_RETURN(auto transport, shm.create(bootstrap, context.deadline()));
  return Communicator::Create(std::move(transport), shm.communicator);
}

// Communicators reuse a finished Work once its caller let go of it: a
// handle still held must keep its own collective's seq and status.
TEST_CASE("Collectives: a held Work keeps its collective while later ones reuse released ones", "[collectives]") {
  auto statuses = RunRanks(2, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(auto comm, ShmCommunicator(context));
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({2}, DType::kF32));
    BRAID_ASSIGN_OR_RETURN(WorkHandle first, comm->AllReduce(t, ReduceOp::kSum));
    BRAID_ASSIGN_OR_RETURN(WorkHandle second, comm->AllReduce(t, ReduceOp::kSum));
    if (first == second || first->seq() != 1 || second->seq() != 2 || !first->Test() || !first->status().ok()) {
      return absl::InternalError(absl::StrCat("held handles: ", first->seq(), ", ", second->seq()));
    }
    const Work* released = first.get();
    first.reset();
    BRAID_ASSIGN_OR_RETURN(WorkHandle third, comm->AllReduce(t, ReduceOp::kSum));
    if (third->seq() != 3 || second->seq() != 2 || third.get() != released || !third->Wait().ok()) {
      return absl::InternalError(absl::StrCat("after release: ", second->seq(), ", ", third->seq(),
                                              third.get() == released ? " (reused)" : " (new)"));
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << statuses[r]);
    CHECK(statuses[r].ok());
  }
}

// CallOptions::caller_thread: a collective far above the inline size runs
// on the caller's thread when nothing is queued (done when the call
// returns); behind a queued one it waits its turn on the progress thread.
TEST_CASE("Collectives: caller_thread runs a large collective on the caller's thread when idle", "[collectives]") {
  auto statuses = RunRanks(2, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(auto comm, ShmCommunicator(context));
    const int64_t count = int64_t{1} << 20;  // 4 MiB: far above the inline size
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({count}, DType::kF32));
    for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = static_cast<float>(i % 1000 + context.rank());
    BRAID_ASSIGN_OR_RETURN(WorkHandle here, comm->AllReduce(t, ReduceOp::kSum, {.caller_thread = true}));
    if (!here->Test() || !here->status().ok()) return absl::InternalError("not finished when AllReduce returned");
    for (int64_t i = 0; i < count; ++i) {
      if (t.data<float>()[i] != static_cast<float>(2 * (i % 1000) + 1)) {
        return absl::InternalError(absl::StrCat("element ", i, " = ", t.data<float>()[i]));
      }
    }
    // Behind an asynchronous one: queued, and both still finish.
    BRAID_ASSIGN_OR_RETURN(WorkHandle first, comm->AllReduce(t, ReduceOp::kMax, {.async = true}));
    BRAID_ASSIGN_OR_RETURN(WorkHandle second, comm->AllReduce(t, ReduceOp::kMax, {.caller_thread = true}));
    BRAID_RETURN_IF_ERROR(first->Wait(context.deadline()));
    return second->Wait(context.deadline());
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << statuses[r]);
    CHECK(statuses[r].ok());
  }
}

// Peer access over buffers braid allocated: memfds the peers map and then
// read and write in place (tensor/mappable_memory.h). Each all-reduce is
// checked exactly (small integers in floats).
absl::Status PeerAccessAllReduce(Communicator& comm, Tensor in, Tensor out, int round,
                                 Algorithm algorithm = Algorithm::kPeerAccess) {
  const int n = comm.size();
  const int64_t count = in.numel();
  for (int64_t i = 0; i < count; ++i) in.data<float>()[i] = static_cast<float>(i % 1000 + comm.rank() + round);
  CallOptions call;
  call.algorithm = algorithm;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(in, out, ReduceOp::kSum, call));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(60))));
  for (int64_t i = 0; i < count; ++i) {
    const float expected = static_cast<float>(n * (i % 1000 + round) + n * (n - 1) / 2);
    if (out.data<float>()[i] != expected) {
      return absl::InternalError(absl::StrCat("round ", round, ": element ", i, " = ", out.data<float>()[i],
                                              ", expected ", expected));
    }
  }
  return absl::OkStatus();
}

TEST_CASE("Collectives: peer access works in the peers' mapped buffers, through frees and reuse", "[collectives]") {
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    auto statuses = RunRanks(n, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      BRAID_ASSIGN_OR_RETURN(auto comm, ShmCommunicator(context));
      auto empty = [](int64_t count) {
        return Tensor::Empty({count}, DType::kF32, Device::Cpu(), HostMemory::kMappable);
      };
      const int64_t mib = (int64_t{1} << 20) / 4;
      int round = 0;
      // In place, then out of place (streamed into every output).
      BRAID_ASSIGN_OR_RETURN(Tensor a, empty(mib + 5));
      BRAID_ASSIGN_OR_RETURN(Tensor b, empty(mib + 5));
      if (!FindMappable(a.data(), a.nbytes()).has_value()) return absl::InternalError("not mappable");
      BRAID_RETURN_IF_ERROR(PeerAccessAllReduce(*comm, a, a, round++));
      BRAID_RETURN_IF_ERROR(PeerAccessAllReduce(*comm, a, b, round++));
      // One rank's input is not mappable: copied across.
      std::vector<float> own(static_cast<size_t>(mib + 5));
      Tensor view = Tensor::View(own.data(), {mib + 5}, DType::kF32);
      BRAID_RETURN_IF_ERROR(PeerAccessAllReduce(*comm, context.rank() == 1 ? view : a, b, round++));
      // More live buffers than a peer keeps mapped, then freed and their
      // addresses reused by new ones.
      std::vector<Tensor> live;
      for (size_t i = 0; i < shm_internal::PeerMappings::kPerPeer + 8; ++i) {
        BRAID_ASSIGN_OR_RETURN(Tensor t, empty(mib));
        BRAID_RETURN_IF_ERROR(PeerAccessAllReduce(*comm, t, t, round++));
        live.push_back(t);
      }
      live.clear();
      // Reduce-scatter: each rank's block read where it lies in the peers' inputs.
      BRAID_ASSIGN_OR_RETURN(Tensor whole, empty(mib * n));
      BRAID_ASSIGN_OR_RETURN(Tensor block, empty(mib));
      for (int64_t i = 0; i < mib * n; ++i) whole.data<float>()[i] = static_cast<float>(i % 1000 + context.rank());
      CallOptions call;
      call.algorithm = Algorithm::kPeerAccess;
      BRAID_ASSIGN_OR_RETURN(WorkHandle scattered, comm->ReduceScatter(whole, block, ReduceOp::kSum, call));
      BRAID_RETURN_IF_ERROR(scattered->Wait(context.deadline()));
      for (int64_t i = 0; i < mib; ++i) {
        const int64_t at = context.rank() * mib + i;
        const float expected = static_cast<float>(n * (at % 1000) + n * (n - 1) / 2);
        if (block.data<float>()[i] != expected) {
          return absl::InternalError(absl::StrCat("reduce-scatter element ", i, " = ", block.data<float>()[i]));
        }
      }
      for (int i = 0; i < 8; ++i) {
        BRAID_ASSIGN_OR_RETURN(Tensor t, empty(mib + 1024 * i));
        BRAID_ASSIGN_OR_RETURN(Tensor u, empty(mib + 1024 * i));
        BRAID_RETURN_IF_ERROR(PeerAccessAllReduce(*comm, t, u, round++));
      }
      return absl::OkStatus();
    });
    REQUIRE_ALL_OK(statuses);
  }
}

// Each rank's buffers are of its own kind: memory the peers map, the
// caller's own pages, braid's allocation (huge pages from 1 MiB). Auto must
// make one choice on every rank (the peer plan's vote): at each size's
// threshold band, in place and out of place (streamed from 16 MiB).
TEST_CASE("Collectives: auto all-reduce agrees across ranks whose memory differs", "[collectives]") {
  enum Kind { kMapped, kCallers, kBraids };
  const std::vector<std::vector<Kind>> layouts = {{kMapped, kCallers, kBraids}, {kCallers, kMapped, kMapped},
                                                  {kBraids, kMapped, kCallers}};
  for (int n : {2, 3}) {
    for (const std::vector<Kind>& layout : layouts) {
      INFO(n << " ranks, layout starting " << layout[0]);
      auto statuses = RunRanks(n, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        BRAID_ASSIGN_OR_RETURN(auto comm, ShmCommunicator(context));
        std::vector<std::vector<float>> owned;
        auto buffer = [&](int64_t count) -> absl::StatusOr<Tensor> {
          switch (layout[static_cast<size_t>(context.rank())]) {
            case kMapped: return Tensor::Empty({count}, DType::kF32, Device::Cpu(), HostMemory::kMappable);
            case kBraids: return Tensor::Empty({count}, DType::kF32);
            case kCallers: break;
          }
          owned.emplace_back(static_cast<size_t>(count));
          return Tensor::View(owned.back().data(), {count}, DType::kF32);
        };
        int round = 0;
        // Slices of 256 B, 4 KiB, 64 KiB, 512 KiB; then a 17 MiB output.
        for (int64_t slice : {64, 1024, 16 * 1024, 128 * 1024}) {
          BRAID_ASSIGN_OR_RETURN(Tensor a, buffer(slice * n));
          BRAID_ASSIGN_OR_RETURN(Tensor b, buffer(slice * n));
          BRAID_RETURN_IF_ERROR(PeerAccessAllReduce(*comm, a, a, round++, Algorithm::kAuto));
          BRAID_RETURN_IF_ERROR(PeerAccessAllReduce(*comm, a, b, round++, Algorithm::kAuto));
        }
        const int64_t streamed = (int64_t{17} << 20) / 4;
        BRAID_ASSIGN_OR_RETURN(Tensor a, buffer(streamed));
        BRAID_ASSIGN_OR_RETURN(Tensor b, buffer(streamed));
        return PeerAccessAllReduce(*comm, a, b, round++, Algorithm::kAuto);
      });
      REQUIRE_ALL_OK(statuses);
    }
  }
}

TEST_CASE("Collectives: a rank killed mid-collective fails the others within seconds, naming it", "[collectives]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kDirect}) {
      // Direct for shm's windows. Over tcp it sends whole 16 MiB frames, and a
      // rank that aborts mid-frame may not finish it in the 100 ms an abort
      // allows (under TSan), so a peer can hear "closed", not the cause.
      if (algorithm == Algorithm::kDirect && !absl::StartsWith(transport_kind.name, "shm")) continue;
      INFO(transport_kind.name << ", " << AlgorithmName(algorithm));
      auto statuses = RunRanks(4, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        HarnessBootstrap bootstrap(context);
        BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
        BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), transport_kind.communicator));
        BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({int64_t{4} << 20}, DType::kF32));
        CallOptions call;
        call.algorithm = algorithm;
        BRAID_ASSIGN_OR_RETURN(WorkHandle first, comm->AllReduce(t, ReduceOp::kSum, call));
        BRAID_RETURN_IF_ERROR(first->Wait(context.deadline()));
        if (context.rank() == 2) raise(SIGKILL);
        const absl::Time start = absl::Now();
        BRAID_ASSIGN_OR_RETURN(WorkHandle second, comm->AllReduce(t, ReduceOp::kSum, call));
        absl::Status status = second->Wait(context.deadline());
        if (absl::Now() - start > absl::Seconds(10)) return absl::InternalError("took too long: " + status.ToString());
        return status;
      });
      CHECK(absl::StrContains(statuses[2].message(), "SIGKILL"));
      for (int r : {0, 1, 3}) {
        INFO("rank " << r << ": " << statuses[r]);
        CHECK_FALSE(statuses[r].ok());
        // Neighbours of rank 2 see it die; the others hear it from them.
        CHECK((absl::StrContains(statuses[r].message(), "peer 2") ||
               absl::StrContains(statuses[r].message(), "aborted")));
      }
    }
  }
}

}  // namespace
}  // namespace braid::testing
