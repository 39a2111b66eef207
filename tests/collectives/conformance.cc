#include "tests/collectives/conformance.h"

#include <cstdlib>

namespace braid::testing {

bool FullMatrix() {
  const char* value = std::getenv("BRAID_TEST_MATRIX");
  return value != nullptr && std::string(value) == "full";
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

uint64_t HashBits(const float* data, size_t count) {
  uint64_t hash = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, 4);
    hash = Mix(hash ^ bits);
  }
  return hash;
}

namespace {

std::vector<size_t> Sizes(int n) {
  std::vector<size_t> sizes = {0, 1, 7, static_cast<size_t>(n > 1 ? n - 1 : 2), static_cast<size_t>(n + 1), 1000};
  if (FullMatrix()) sizes.push_back((size_t{1} << 20) + 3);
  return sizes;
}

template <typename T>
absl::Status EveryCollective(Suite& suite, bool all_ops, const ConformanceOptions& options) {
  const int n = suite.n;
  const std::vector<ReduceOp> ops = all_ops ? std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps))
                                            : std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kAvg};
  for (size_t count : Sizes(n)) {
    for (ReduceOp op : ops) {
      for (Algorithm algorithm : options.allreduce_algorithms) {
        BRAID_RETURN_IF_ERROR(suite.AllReduce<T>(count, op, algorithm, /*in_place=*/false));
        BRAID_RETURN_IF_ERROR(suite.AllReduce<T>(count, op, algorithm, /*in_place=*/true));
      }
      BRAID_RETURN_IF_ERROR(suite.ReduceScatter<T>(count, op));
      BRAID_RETURN_IF_ERROR(suite.Reduce<T>(count, op, static_cast<int>(count % n)));
    }
    BRAID_RETURN_IF_ERROR(suite.AllGather<T>(count));
    BRAID_RETURN_IF_ERROR(suite.Broadcast<T>(count, n - 1));
    BRAID_RETURN_IF_ERROR(suite.AllToAll<T>(count));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunConformance(Communicator& comm, Deadline deadline, const ConformanceOptions& asked) {
  Suite suite{comm, deadline, comm.size(), comm.rank()};
  suite.device = asked.device;
  const bool full = FullMatrix();
  // Only the paths this transport has (window and peer-access need shm).
  auto runs = [&](CollectiveKind kind, Algorithm algorithm) {
    CallOptions call;
    call.algorithm = algorithm;
    return comm.AlgorithmFor(kind, 1, DType::kF32, PeerMemory::kFast, call).ok();
  };
  ConformanceOptions options = asked;
  options.allreduce_algorithms.clear();
  for (Algorithm algorithm : asked.allreduce_algorithms) {
    if (runs(CollectiveKind::kAllReduce, algorithm)) options.allreduce_algorithms.push_back(algorithm);
  }
  std::vector<Algorithm> others = {Algorithm::kAuto};
  if (runs(CollectiveKind::kReduceScatter, Algorithm::kPeerAccess)) others.push_back(Algorithm::kPeerAccess);
  if (options.native_others) others.push_back(Algorithm::kNative);
  // Where the communicator makes subgroups: the hierarchical paths too.
  if (runs(CollectiveKind::kBroadcast, Algorithm::kHierarchical)) others.push_back(Algorithm::kHierarchical);
  for (Algorithm other : others) {
    suite.others = other;
    BRAID_RETURN_IF_ERROR(EveryCollective<float>(suite, /*all_ops=*/true, options));
    BRAID_RETURN_IF_ERROR(EveryCollective<int32_t>(suite, /*all_ops=*/true, options));
    BRAID_RETURN_IF_ERROR(EveryCollective<Half>(suite, full, options));
    BRAID_RETURN_IF_ERROR(EveryCollective<BFloat16>(suite, full, options));
    BRAID_RETURN_IF_ERROR(EveryCollective<double>(suite, full, options));
    BRAID_RETURN_IF_ERROR(EveryCollective<int8_t>(suite, full, options));
    BRAID_RETURN_IF_ERROR(EveryCollective<uint8_t>(suite, full, options));
    BRAID_RETURN_IF_ERROR(EveryCollective<int64_t>(suite, full, options));
    BRAID_RETURN_IF_ERROR(suite.Run(comm.Barrier(suite.Others())));
  }
  // Send/recv around the ring.
  if (suite.n > 1) {
    BRAID_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({33}, DType::kI64));
    BRAID_ASSIGN_OR_RETURN(Tensor in, Tensor::Zeros({33}, DType::kI64));
    Fill<int64_t>(out, suite.me, ReduceOp::kSum);
    BRAID_ASSIGN_OR_RETURN(const Tensor d_out, suite.OnDevice(out));
    BRAID_ASSIGN_OR_RETURN(const Tensor d_in, suite.OnDevice(in));
    BRAID_ASSIGN_OR_RETURN(WorkHandle sent, comm.Send(d_out, (suite.me + 1) % suite.n));
    BRAID_ASSIGN_OR_RETURN(WorkHandle got, comm.Recv(d_in, (suite.me + suite.n - 1) % suite.n));
    BRAID_RETURN_IF_ERROR(sent->Wait(suite.deadline));
    BRAID_RETURN_IF_ERROR(got->Wait(suite.deadline));
    BRAID_RETURN_IF_ERROR(suite.ToHost(in, d_in));
    const int from = (suite.me + suite.n - 1) % suite.n;
    for (size_t i = 0; i < 33; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(in.data<int64_t>() + i, Value<int64_t>(from, i, ReduceOp::kSum), i, "recv"));
    }
  }
  // Receives from any source: every other rank sends rank 0 its own rank;
  // rank 0 gets each sender once, named by the Work (shm, tcp, mpi; not nccl).
  const std::string transport = comm.transport_name();
  if (suite.n > 1 && suite.device.is_cpu() && (transport == "shm" || transport == "tcp" || transport == "mpi")) {
    BRAID_ASSIGN_OR_RETURN(Tensor message, Tensor::Empty({5}, DType::kI32));
    if (suite.me != 0) {
      Fill<int32_t>(message, suite.me, ReduceOp::kSum);
      BRAID_RETURN_IF_ERROR(suite.Run(comm.Send(message, 0)));
    } else {
      std::vector<int> seen(static_cast<size_t>(suite.n), 0);
      for (int i = 1; i < suite.n; ++i) {
        BRAID_ASSIGN_OR_RETURN(WorkHandle got, comm.Recv(message, Communicator::kAnySource));
        BRAID_RETURN_IF_ERROR(got->Wait(suite.deadline));
        const int from = got->source_rank();
        if (from <= 0 || from >= suite.n || seen[static_cast<size_t>(from)]++ != 0) {
          return absl::InternalError(absl::StrCat("receive from any source named rank ", from));
        }
        for (size_t e = 0; e < 5; ++e) {
          BRAID_RETURN_IF_ERROR(
              ExpectEqual(message.data<int32_t>() + e, Value<int32_t>(from, e, ReduceOp::kSum), e, "recv any"));
        }
      }
    }
    BRAID_RETURN_IF_ERROR(suite.Run(comm.Barrier()));
  }
  if (full) {
    // 64 MiB a rank, every algorithm (pipelining and scratch reuse at scale).
    for (Algorithm algorithm : options.allreduce_algorithms) {
      BRAID_RETURN_IF_ERROR(suite.AllReduce<float>(size_t{16} << 20, ReduceOp::kSum, algorithm, false));
    }
  }
  return absl::OkStatus();
}

}  // namespace braid::testing
