// mpi_worker: the rank side of tests/collectives/transport/mpi/mpi_test.cc, run under a real
// mpirun. One mode per run; each rank prints one line "rank R: <mode>:
// <status>" (OK, or the error) and exits 0 unless the mode's check fails,
// so the test reads every rank's verdict from mpirun's output.
//
//   conformance  the conformance suite over the mpi transport: ring, tree,
//                rhd and native all-reduce, every other collective both
//                braid's and native, against the shared references; then
//                ring, tree and native agree on inexact float data.
//   mismatch     rank 0 issues a count of 100, the others 200 (argv[2]:
//                ring or native): every rank must fail naming the mismatch.
//   deadline     rank 1 never issues the all-reduce (argv[2]: ring or
//                native); rank 0 must fail kDeadlineExceeded within ~2 s.
//   group        InitFromEnv under mpirun: the transport auto picked (or
//                BRAID_TRANSPORT's), an all-reduce and the store work.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/deadline.h"
#include "base/status.h"
#include "collectives/communicator.h"
#include "collectives/transport/mpi/mpi_runtime.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "runtime/process_group.h"
#include "tensor/tensor.h"
#include "tests/collectives/conformance.h"

namespace braid::testing {
namespace {

struct Rank {
  std::unique_ptr<MpiBootstrap> bootstrap;
  std::unique_ptr<Communicator> comm;
};

absl::StatusOr<Rank> Join(Deadline deadline, size_t segment_bytes) {
  Rank rank;
  BRAID_ASSIGN_OR_RETURN(rank.bootstrap, MpiBootstrap::Create(deadline));
  BRAID_ASSIGN_OR_RETURN(auto transport, MpiTransport::Create(*rank.bootstrap, deadline));
  CommunicatorOptions options;
  options.segment_bytes = segment_bytes;
  BRAID_ASSIGN_OR_RETURN(rank.comm, Communicator::Create(std::move(transport), options));
  return rank;
}

// Ring, tree and native over inexact float data: equal within float
// rounding (the order of additions differs), on every element.
absl::Status AlgorithmsAgree(Communicator& comm, Deadline deadline) {
  const int64_t count = (int64_t{1} << 18) + 5;
  std::vector<Tensor> results;
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTree, Algorithm::kNative}) {
    BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({count}, DType::kF32));
    float* p = t.data<float>();
    for (int64_t i = 0; i < count; ++i) {
      p[i] = static_cast<float>(Mix(static_cast<uint64_t>(i) * 31 + static_cast<uint64_t>(comm.rank())) % 100000) /
             7.0f;
    }
    CallOptions call;
    call.algorithm = algorithm;
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm.AllReduce(t, ReduceOp::kSum, call));
    BRAID_RETURN_IF_ERROR(work->Wait(deadline));
    results.push_back(t);
  }
  for (size_t a = 1; a < results.size(); ++a) {
    for (int64_t i = 0; i < count; ++i) {
      const float x = results[0].data<float>()[i];
      const float y = results[a].data<float>()[i];
      if (std::fabs(x - y) > 1e-5f * std::max(1.0f, std::fabs(x))) {
        return absl::InternalError(absl::StrCat("algorithms disagree at element ", i, ": ring ", x, ", ",
                                                a == 1 ? "tree " : "native ", y));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Conformance(Deadline deadline) {
  // Small segments: many pipeline steps at test sizes. The full matrix's
  // 64 MiB all-reduces take 16 KiB ones (1 KiB would be 65536 MPI messages a
  // ring step: minutes each on 2 oversubscribed cores).
  BRAID_ASSIGN_OR_RETURN(Rank rank, Join(deadline, FullMatrix() ? 16384 : 1024));
  ConformanceOptions options;
  options.allreduce_algorithms = {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd, Algorithm::kDirect, Algorithm::kNative};
  options.native_others = true;
  BRAID_RETURN_IF_ERROR(RunConformance(*rank.comm, deadline, options));
  return AlgorithmsAgree(*rank.comm, deadline);
}

Algorithm ParseOrRing(const char* name) {
  return name != nullptr && std::string(name) == "native" ? Algorithm::kNative : Algorithm::kRing;
}

// Returns the collective's own status (the test checks the message).
absl::Status Mismatch(Deadline deadline, Algorithm algorithm) {
  BRAID_ASSIGN_OR_RETURN(Rank rank, Join(deadline, size_t{256} << 10));
  const int64_t count = rank.comm->rank() == 0 ? 100 : 200;
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({count}, DType::kF32));
  CallOptions call;
  call.algorithm = algorithm;
  call.timeout = absl::Seconds(20);
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, rank.comm->AllReduce(t, ReduceOp::kSum, call));
  const absl::Time start = absl::Now();
  absl::Status status = work->Wait(deadline);
  if (absl::Now() - start > absl::Seconds(10)) return absl::InternalError("took too long: " + status.ToString());
  if (status.ok()) return absl::InternalError("the mismatched all-reduce succeeded");
  return status;
}

absl::Status MissingRank(Deadline deadline, Algorithm algorithm) {
  BRAID_ASSIGN_OR_RETURN(Rank rank, Join(deadline, size_t{256} << 10));
  if (rank.comm->rank() != 0) {
    // Never issues the all-reduce; stays up past rank 0's deadline.
    absl::SleepFor(absl::Seconds(4));
    return absl::OkStatus();
  }
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({1000}, DType::kF32));
  CallOptions call;
  call.algorithm = algorithm;
  call.timeout = absl::Seconds(2);
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, rank.comm->AllReduce(t, ReduceOp::kSum, call));
  const absl::Time start = absl::Now();
  absl::Status status = work->Wait(deadline);
  if (absl::Now() - start > absl::Seconds(6)) return absl::InternalError("took too long: " + status.ToString());
  if (status.ok()) return absl::InternalError("the all-reduce without rank 1 succeeded");
  return status;
}

absl::Status Group() {
  BRAID_ASSIGN_OR_RETURN(auto group, InitFromEnv());
  BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({1000}, DType::kI64));
  for (int64_t i = 0; i < 1000; ++i) t.data<int64_t>()[i] = i * (group->rank() + 1);
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, group->comm().AllReduce(t, ReduceOp::kSum));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(60))));
  const int64_t n = group->size();
  for (int64_t i = 0; i < 1000; ++i) {
    if (t.data<int64_t>()[i] != i * n * (n + 1) / 2) {
      return absl::InternalError(absl::StrCat("element ", i, " is ", t.data<int64_t>()[i]));
    }
  }
  // The store rank 0 hosts and announced over MPI.
  BRAID_RETURN_IF_ERROR(group->store().Set(absl::StrCat("mpi_worker/", group->rank()), "here"));
  for (int r = 0; r < group->size(); ++r) {
    BRAID_ASSIGN_OR_RETURN(std::string value,
                           group->store().Get(absl::StrCat("mpi_worker/", r), DeadlineIn(absl::Seconds(30))));
    if (value != "here") return absl::InternalError("store value " + value);
  }
  // Rank 0's store goes away with its group: everyone is done reading first.
  BRAID_ASSIGN_OR_RETURN(WorkHandle barrier, group->comm().Barrier());
  BRAID_RETURN_IF_ERROR(barrier->Wait(DeadlineIn(absl::Seconds(60))));
  std::printf("rank %d: group transport %s\n", group->rank(), group->comm().transport_name());
  return absl::OkStatus();
}

// Subgroups by MPI_Comm_split, and the hierarchical path with its levels
// split by MPI, over two "hosts" named by parity.
absl::Status SplitGroups(Deadline deadline) {
  ProcessGroupOptions options;
  const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  options.communicator.host_name = absl::StrCat("host", world_rank != nullptr ? std::atoi(world_rank) % 2 : 0);
  options.communicator.thresholds.hierarchical_min_bytes = 0;
  BRAID_ASSIGN_OR_RETURN(auto group, InitFromEnv(options));
  BRAID_ASSIGN_OR_RETURN(auto half, group->Split(group->rank() % 2, group->rank()));
  if (std::string(half->transport_name()) != "mpi" || half->rank() != group->rank() / 2) {
    return absl::InternalError(absl::StrCat("subgroup rank ", half->rank(), " over ", half->transport_name()));
  }
  ConformanceOptions native;
  native.native_others = true;
  BRAID_RETURN_IF_ERROR(Annotate(RunConformance(*half, deadline, native), "subgroup"));
  BRAID_RETURN_IF_ERROR(Annotate(RunConformance(group->comm(), deadline), "hierarchical"));
  BRAID_ASSIGN_OR_RETURN(WorkHandle barrier, group->comm().Barrier());
  return barrier->Wait(deadline);
}

int Main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  // The full matrix (tools/test_matrix.sh) runs 1 MiB sizes of every dtype
  // and op, beside the other suites on the same cores.
  const Deadline deadline = DeadlineIn(FullMatrix() ? absl::Minutes(30) : absl::Seconds(100));
  absl::Status status;
  if (mode == "conformance") {
    status = Conformance(deadline);
  } else if (mode == "mismatch") {
    status = Mismatch(deadline, ParseOrRing(argc > 2 ? argv[2] : nullptr));
  } else if (mode == "deadline") {
    status = MissingRank(deadline, ParseOrRing(argc > 2 ? argv[2] : nullptr));
  } else if (mode == "group") {
    status = Group();
  } else if (mode == "split") {
    status = SplitGroups(deadline);
  } else {
    std::fprintf(stderr, "usage: mpi_worker conformance|mismatch [ring|native]|deadline [ring|native]|group|split\n");
    return 2;
  }
  const int rank = UnderMpirun() ? std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")) : -1;
  // One write: mpirun interleaves ranks' output by line.
  const std::string line = absl::StrCat("rank ", rank, ": ", mode, ": ", status.ok() ? "OK" : status.ToString(), "\n");
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
  // Errors are the point of mismatch and deadline; the test reads them.
  return mode == "conformance" || mode == "group" || mode == "split" ? (status.ok() ? 0 : 1) : 0;
}

}  // namespace
}  // namespace braid::testing

int main(int argc, char** argv) { return braid::testing::Main(argc, argv); }
