// The collectives conformance suite: every collective x algorithm x transport
// x dtype x op over real processes, against a reference every rank computes
// locally (each rank's input is a known function of rank and element, so the
// check is exact). BRAID_TEST_MATRIX=full widens it (tools/test_matrix.sh);
// CI runs the default slice.
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"

namespace braid::testing {
namespace {

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

// Rank `rank`'s element `i` for an op: small integers for floats (sums and
// products stay exact in every float type), the full range for integers (so
// they wrap).
template <typename T>
T Value(int rank, size_t i, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(Mix(static_cast<uint64_t>(rank) * 1000003 + i));
  } else {
    float v;
    if (op == ReduceOp::kProd) {
      const float choices[] = {1.0f, 2.0f, 0.5f, -1.0f};
      v = choices[(static_cast<size_t>(rank) + i) % 4];
    } else {
      v = static_cast<float>(static_cast<int>((static_cast<size_t>(rank) * 7 + i * 3) % 17) - 8);
    }
    if constexpr (std::is_same_v<T, Half>) return FloatToHalf(v);
    else if constexpr (std::is_same_v<T, BFloat16>) return FloatToBFloat16(v);
    else return static_cast<T>(v);
  }
}

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) return HalfToFloat(v);
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16ToFloat(v);
  else return static_cast<double>(v);
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Half>) return FloatToHalf(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>) return FloatToBFloat16(static_cast<float>(v));
  else return static_cast<T>(v);
}

// The reduction of element i over ranks 0..n-1.
template <typename T>
T Reference(int n, size_t i, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    U acc = static_cast<U>(Value<T>(0, i, op));
    for (int r = 1; r < n; ++r) {
      const U v = static_cast<U>(Value<T>(r, i, op));
      switch (op) {
        case ReduceOp::kProd: acc = static_cast<U>(static_cast<uint64_t>(acc) * v); break;
        case ReduceOp::kMin: acc = static_cast<U>(std::min(static_cast<T>(acc), static_cast<T>(v))); break;
        case ReduceOp::kMax: acc = static_cast<U>(std::max(static_cast<T>(acc), static_cast<T>(v))); break;
        default: acc = static_cast<U>(acc + v); break;
      }
    }
    T result = static_cast<T>(acc);
    if (op == ReduceOp::kAvg) result = static_cast<T>(static_cast<int64_t>(result) / n);
    return result;
  } else {
    double acc = ToDouble(Value<T>(0, i, op));
    for (int r = 1; r < n; ++r) {
      const double v = ToDouble(Value<T>(r, i, op));
      switch (op) {
        case ReduceOp::kProd: acc *= v; break;
        case ReduceOp::kMin: acc = std::min(acc, v); break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        default: acc += v; break;
      }
    }
    if (op == ReduceOp::kAvg) {
      // The implementation divides in the element's precision (f32 for 16-bit floats).
      if constexpr (std::is_same_v<T, double>) return acc / n;
      else return FromDouble<T>(static_cast<float>(acc) / static_cast<float>(n));
    }
    return FromDouble<T>(acc);
  }
}

template <typename T>
void Fill(const Tensor& t, int rank, ReduceOp op, size_t offset = 0) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = Value<T>(rank, offset + static_cast<size_t>(i), op);
}

template <typename T>
absl::Status ExpectEqual(const T* got, const T& want, size_t i, const std::string& what) {
  if (std::memcmp(got, &want, sizeof(T)) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", ToDouble(*got), ", expected ", ToDouble(want)));
}

struct Suite {
  Communicator& comm;
  Deadline deadline;
  int n;
  int me;

  absl::Status Run(absl::StatusOr<WorkHandle> work) {
    BRAID_RETURN_IF_ERROR(work.status());
    return (*work)->Wait(deadline);
  }

  template <typename T>
  absl::Status AllReduce(size_t count, ReduceOp op, Algorithm algorithm, bool in_place) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("allreduce ", AlgorithmName(algorithm), " ", DTypeName(dtype), " ",
                                          ReduceOpName(op), " count ", count, in_place ? " in place" : "");
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count)}, dtype));
    Fill<T>(input, me, op);
    Tensor output = input;
    if (!in_place) {
      BRAID_ASSIGN_OR_RETURN(output, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    }
    CallOptions call;
    call.algorithm = algorithm;
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.AllReduce(input, output, op, call)), what));
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + i, Reference<T>(n, i, op), i, what));
    }
    if (!in_place) {  // the input is untouched
      for (size_t i = 0; i < count; ++i) {
        BRAID_RETURN_IF_ERROR(ExpectEqual(input.data<T>() + i, Value<T>(me, i, op), i, what + " (input)"));
      }
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status ReduceScatter(size_t count, ReduceOp op) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("reducescatter ", DTypeName(dtype), " ", ReduceOpName(op), " count ", count);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count * n)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    Fill<T>(input, me, op);
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.ReduceScatter(input, output, op)), what));
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + i, Reference<T>(n, me * count + i, op), i, what));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status AllGather(size_t count) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("allgather ", DTypeName(dtype), " count ", count);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count * n)}, dtype));
    Fill<T>(input, me, ReduceOp::kSum);
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.AllGather(input, output)), what));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + r * count + i, Value<T>(r, i, ReduceOp::kSum),
                                          r * count + i, what));
      }
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Broadcast(size_t count, int root) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("broadcast ", DTypeName(dtype), " count ", count, " root ", root);
    BRAID_ASSIGN_OR_RETURN(Tensor buffer, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    if (me == root) Fill<T>(buffer, root, ReduceOp::kSum);
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.Broadcast(buffer, root)), what));
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(buffer.data<T>() + i, Value<T>(root, i, ReduceOp::kSum), i, what));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Reduce(size_t count, ReduceOp op, int root) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("reduce ", DTypeName(dtype), " ", ReduceOpName(op), " count ", count,
                                          " root ", root);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    Fill<T>(input, me, op);
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.Reduce(input, output, op, root)), what));
    if (me != root) return absl::OkStatus();
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + i, Reference<T>(n, i, op), i, what));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status AllToAll(size_t count) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("alltoall ", DTypeName(dtype), " count ", count);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count * n)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count * n)}, dtype));
    Fill<T>(input, me, ReduceOp::kSum);
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.AllToAll(input, output)), what));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        // Rank r's block `me` arrives as our block r.
        BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + r * count + i,
                                          Value<T>(r, me * count + i, ReduceOp::kSum), r * count + i, what));
      }
    }
    return absl::OkStatus();
  }
};

std::vector<size_t> Sizes(int n) {
  std::vector<size_t> sizes = {0, 1, 7, static_cast<size_t>(n > 1 ? n - 1 : 2), static_cast<size_t>(n + 1), 1000};
  if (FullMatrix()) sizes.push_back((size_t{1} << 20) + 3);
  return sizes;
}

template <typename T>
absl::Status EveryCollective(Suite& suite, bool all_ops) {
  const int n = suite.n;
  const std::vector<ReduceOp> ops = all_ops ? std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps))
                                            : std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kAvg};
  for (size_t count : Sizes(n)) {
    for (ReduceOp op : ops) {
      for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd}) {
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

absl::Status Conformance(RankContext& context, const NamedTransport& transport_kind) {
  HarnessBootstrap bootstrap(context);
  BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
  CommunicatorOptions options;
  options.segment_bytes = 1024;  // small segments: many pipeline steps even at test sizes
  BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), options));
  Suite suite{*comm, context.deadline(), context.size(), context.rank()};
  const bool full = FullMatrix();
  BRAID_RETURN_IF_ERROR(EveryCollective<float>(suite, /*all_ops=*/true));
  BRAID_RETURN_IF_ERROR(EveryCollective<int32_t>(suite, /*all_ops=*/true));
  BRAID_RETURN_IF_ERROR(EveryCollective<Half>(suite, full));
  BRAID_RETURN_IF_ERROR(EveryCollective<BFloat16>(suite, full));
  BRAID_RETURN_IF_ERROR(EveryCollective<double>(suite, full));
  BRAID_RETURN_IF_ERROR(EveryCollective<int8_t>(suite, full));
  BRAID_RETURN_IF_ERROR(EveryCollective<uint8_t>(suite, full));
  BRAID_RETURN_IF_ERROR(EveryCollective<int64_t>(suite, full));
  BRAID_RETURN_IF_ERROR(suite.Run(comm->Barrier()));
  // Send/recv around the ring.
  if (suite.n > 1) {
    BRAID_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({33}, DType::kI64));
    BRAID_ASSIGN_OR_RETURN(Tensor in, Tensor::Zeros({33}, DType::kI64));
    Fill<int64_t>(out, suite.me, ReduceOp::kSum);
    BRAID_ASSIGN_OR_RETURN(WorkHandle sent, comm->Send(out, (suite.me + 1) % suite.n));
    BRAID_ASSIGN_OR_RETURN(WorkHandle got, comm->Recv(in, (suite.me + suite.n - 1) % suite.n));
    BRAID_RETURN_IF_ERROR(sent->Wait(suite.deadline));
    BRAID_RETURN_IF_ERROR(got->Wait(suite.deadline));
    const int from = (suite.me + suite.n - 1) % suite.n;
    for (size_t i = 0; i < 33; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(in.data<int64_t>() + i, Value<int64_t>(from, i, ReduceOp::kSum), i, "recv"));
    }
  }
  if (full) {
    // 64 MiB a rank, every algorithm (pipelining and scratch reuse at scale).
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd}) {
      BRAID_RETURN_IF_ERROR(suite.AllReduce<float>(size_t{16} << 20, ReduceOp::kSum, algorithm, false));
    }
  }
  return absl::OkStatus();
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
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r << ": " << statuses[r]);
        REQUIRE(statuses[r].ok());
      }
    }
  }
}

TEST_CASE("Collectives: large all-reduce results are bit-identical on every rank", "[collectives]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    for (int n : {2, 3}) {
      INFO(transport_kind.name << " with " << n << " ranks");
      auto statuses = RunRanks(n, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
        HarnessBootstrap bootstrap(context);
        BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
        BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport)));
        const size_t count = (size_t{16} << 20) / 4 + 3;
        BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({static_cast<int64_t>(count)}, DType::kF32));
        // Inexact floats: rounding depends on the order of additions, so only
        // a single owner per element keeps ranks identical.
        float* p = t.data<float>();
        for (size_t i = 0; i < count; ++i) {
          p[i] = static_cast<float>(Mix(i * 31 + static_cast<size_t>(context.rank())) % 100000) / 7.0f;
        }
        CallOptions call;
        call.algorithm = Algorithm::kRing;
        BRAID_ASSIGN_OR_RETURN(WorkHandle work, comm->AllReduce(t, ReduceOp::kSum, call));
        BRAID_RETURN_IF_ERROR(work->Wait(context.deadline()));
        uint64_t hash = 0;
        for (size_t i = 0; i < count; ++i) {
          uint32_t bits;
          std::memcpy(&bits, &p[i], 4);
          hash = Mix(hash ^ bits);
        }
        BRAID_ASSIGN_OR_RETURN(auto hashes, context.AllGather(std::to_string(hash)));
        for (const std::string& other : hashes) {
          if (other != hashes[0]) return absl::InternalError("ranks ended with different bits");
        }
        return absl::OkStatus();
      });
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r << ": " << statuses[r]);
        REQUIRE(statuses[r].ok());
      }
    }
  }
}

TEST_CASE("Collectives: ranks that disagree on the count all get a clear error", "[collectives]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    INFO(transport_kind.name);
    auto statuses = RunRanks(3, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      HarnessBootstrap bootstrap(context);
      BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
      BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport)));
      const int64_t count = context.rank() == 0 ? 100 : 200;
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({count}, DType::kF32));
      CallOptions call;
      call.timeout = absl::Seconds(20);
      call.algorithm = Algorithm::kRing;
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

TEST_CASE("Collectives: a rank killed mid-collective fails the others within seconds, naming it", "[collectives]") {
  for (const NamedTransport& transport_kind : AllTransports()) {
    INFO(transport_kind.name);
    auto statuses = RunRanks(4, RankMode::kProcesses, [&](RankContext& context) -> absl::Status {
      HarnessBootstrap bootstrap(context);
      BRAID_ASSIGN_OR_RETURN(auto transport, transport_kind.create(bootstrap, context.deadline()));
      BRAID_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport)));
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({int64_t{4} << 20}, DType::kF32));
      BRAID_ASSIGN_OR_RETURN(WorkHandle first, comm->AllReduce(t, ReduceOp::kSum));
      BRAID_RETURN_IF_ERROR(first->Wait(context.deadline()));
      if (context.rank() == 2) raise(SIGKILL);
      const absl::Time start = absl::Now();
      BRAID_ASSIGN_OR_RETURN(WorkHandle second, comm->AllReduce(t, ReduceOp::kSum));
      absl::Status status = second->Wait(context.deadline());
      if (absl::Now() - start > absl::Seconds(10)) return absl::InternalError("took too long: " + status.ToString());
      return status;
    });
    CHECK(absl::StrContains(statuses[2].message(), "SIGKILL"));
    for (int r : {0, 1, 3}) {
      INFO("rank " << r << ": " << statuses[r]);
      CHECK_FALSE(statuses[r].ok());
      // Neighbours of rank 2 see it die; the others hear it from them.
      CHECK((absl::StrContains(statuses[r].message(), "peer 2") || absl::StrContains(statuses[r].message(), "aborted")));
    }
  }
}

}  // namespace
}  // namespace braid::testing
