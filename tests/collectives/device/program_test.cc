// The programs (collectives/device/program.h) run by both executors against
// the tuned host algorithms, bit for bit: the host executor over a real tcp
// transport between thread ranks, the stream executor over LocalDeviceLinks
// on the host runtime (the same code a GPU runs, with host streams) and, on
// a machine with a GPU, on GPU 0 with braid's CUDA kernels, with
// segments small enough that plans have more lanes than the executor has
// streams. Floats are random, so any change in the order of the sums shows.
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/device/host_executor.h"
#include "collectives/device/program.h"
#include "collectives/device/stream_executor.h"
#include "collectives/run_algorithm.h"
#include "collectives/scratch.h"
#include "collectives/transport/local_device_link.h"
#include "tensor/device.h"
#include "tensor/stream.h"
#include "tests/collectives/device/local_device_transport.h"
#include "tests/collectives/test_bootstrap.h"
#include "tests/collectives/transport_factories.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/statuses.h"

namespace braid {
namespace {


struct Case {
  Algorithm algorithm;
  CollectiveKind kind;
  DType dtype;
  ReduceOp op;
  size_t count;
  int root;
  std::string Name() const {
    return absl::StrCat(AlgorithmName(algorithm), " ", CollectiveKindName(kind), " ", DTypeName(dtype), " ",
                        ReduceOpName(op), " count ", count, " root ", root);
  }
};

std::vector<Case> Cases(int n) {
  std::vector<Case> cases;
  const std::vector<std::pair<Algorithm, CollectiveKind>> shapes = {
      {Algorithm::kRing, CollectiveKind::kAllReduce},     {Algorithm::kTree, CollectiveKind::kAllReduce},
      {Algorithm::kRhd, CollectiveKind::kAllReduce},      {Algorithm::kRing, CollectiveKind::kReduceScatter},
      {Algorithm::kRing, CollectiveKind::kAllGather},     {Algorithm::kChain, CollectiveKind::kBroadcast},
      {Algorithm::kChain, CollectiveKind::kReduce},       {Algorithm::kPairwise, CollectiveKind::kAllToAll}};
  for (const auto& [algorithm, kind] : shapes) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{301}}) {
      cases.push_back({algorithm, kind, DType::kF32, ReduceOp::kSum, count, n - 1});
      cases.push_back({algorithm, kind, DType::kBF16, ReduceOp::kAvg, count, 0});
      cases.push_back({algorithm, kind, DType::kI32, ReduceOp::kMax, count, n / 2});
    }
  }
  return cases;
}

size_t InputElements(const Case& c, int n) {
  switch (c.kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return c.count * n;
    default: return c.count;
  }
}
size_t OutputElements(const Case& c, int n) {
  switch (c.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll: return c.count * n;
    default: return c.count;
  }
}

CollectiveArgs ArgsOf(const Case& c, uint64_t seq) {
  CollectiveArgs args;
  args.kind = c.kind;
  args.seq = seq;
  args.dtype = c.dtype;
  args.op = c.op;
  args.root = c.kind == CollectiveKind::kBroadcast || c.kind == CollectiveKind::kReduce ? c.root : -1;
  args.count = c.count;
  args.segment_bytes = 16;  // several segments a chunk: many lanes
  args.deadline = DeadlineIn(absl::Seconds(30));
  return args;
}

// Random bits that are finite values of the dtype (floats in [-4, 4)).
std::vector<std::byte> InputOf(const Case& c, int n, int rank, size_t index) {
  std::mt19937 gen(static_cast<uint32_t>(index * 131 + static_cast<size_t>(rank)));
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  const size_t elements = InputElements(c, n);
  std::vector<std::byte> bytes(elements * DTypeSize(c.dtype));
  for (size_t i = 0; i < elements; ++i) {
    const float v = value(gen);
    if (c.dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else if (c.dtype == DType::kBF16) {
      const BFloat16 b = FloatToBFloat16(v);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    } else {
      const int32_t x = static_cast<int32_t>(gen());
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    }
  }
  return bytes;
}

// A broadcast runs on one buffer: the root's input, the others' output.
void Prepare(const Case& c, int n, int rank, size_t index, std::vector<std::byte>& in, std::vector<std::byte>& out) {
  in = InputOf(c, n, rank, index);
  out.assign(OutputElements(c, n) * DTypeSize(c.dtype), std::byte{0});
  if (c.kind == CollectiveKind::kBroadcast && rank == c.root) out = in;
}

using Results = std::vector<std::vector<std::vector<std::byte>>>;  // [case][rank]

// Each case's outputs when every rank runs `run` over a tcp transport.
using OverTransport = std::function<absl::Status(Transport&, const Case&, const CollectiveArgs&,
                                                 absl::Span<const std::byte>, absl::Span<std::byte>, Scratch&)>;
Results RunOverTcp(int n, const std::vector<Case>& cases, const OverTransport& run) {
  Results results(cases.size(), std::vector<std::vector<std::byte>>(n));
  const testing::NamedTransport tcp = testing::AllTransports().front();
  REQUIRE(tcp.name == "tcp");
  const std::vector<absl::Status> statuses = testing::RunRanks(n, testing::RankMode::kThreads, [&](testing::RankContext& ctx) -> absl::Status {
    testing::HarnessBootstrap bootstrap(ctx);
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, tcp.create(bootstrap, DeadlineIn(absl::Seconds(30))));
    Scratch scratch;
    for (size_t i = 0; i < cases.size(); ++i) {
      std::vector<std::byte> in, out;
      Prepare(cases[i], n, ctx.rank(), i, in, out);
      const CollectiveArgs args = ArgsOf(cases[i], i + 1);
      const bool one_buffer = cases[i].kind == CollectiveKind::kBroadcast;
      absl::Status status = run(*transport, cases[i], args, one_buffer ? absl::Span<const std::byte>(out) : in,
                                absl::MakeSpan(out), scratch);
      if (!status.ok()) return Annotate(status, cases[i].Name());
      results[i][ctx.rank()] = std::move(out);
    }
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(statuses);
  return results;
}

// Each case's outputs from the stream executor on `rt`'s streams and memory
// (the host runtime here; GPU 0 where there is one).
Results RunOnStreams(DeviceRuntime& rt, int n, const std::vector<Case>& cases) {
  Results results(cases.size(), std::vector<std::vector<std::byte>>(n));
  LocalDeviceLinks links(rt, n);
  const std::vector<absl::Status> statuses = testing::OnThreads(n, [&](int r) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, rt.NewStream());
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<StreamExecutor> executor, StreamExecutor::Create(links.link(r)));
    for (size_t i = 0; i < cases.size(); ++i) {
      std::vector<std::byte> in, out;
      Prepare(cases[i], n, r, i, in, out);
      const CollectiveArgs args = ArgsOf(cases[i], i + 1);
      BRAID_ASSIGN_OR_RETURN(Plan plan, MakePlan({cases[i].algorithm, args, r, n}));
      // The runtime's memory, filled and read back on the stream.
      BRAID_ASSIGN_OR_RETURN(void* device_in, rt.Allocate(in.size()));
      BRAID_ASSIGN_OR_RETURN(void* device_out, rt.Allocate(out.size()));
      BRAID_RETURN_IF_ERROR(stream->Copy(device_in, in.data(), in.size()));
      BRAID_RETURN_IF_ERROR(stream->Copy(device_out, out.data(), out.size()));
      const void* input = cases[i].kind == CollectiveKind::kBroadcast ? device_out : device_in;
      absl::Status ran = Annotate(executor->Run(plan, args, input, device_out, *stream), cases[i].Name());
      if (ran.ok()) ran = stream->Copy(out.data(), device_out, out.size());
      // Drained before the memory goes, whether or not the run failed.
      const absl::Status drained = stream->Synchronize(DeadlineIn(absl::Seconds(30)));
      if (ran.ok()) ran = drained;
      rt.Free(device_in);
      rt.Free(device_out);
      BRAID_RETURN_IF_ERROR(ran);
      results[i][r] = std::move(out);
    }
    return absl::OkStatus();
  });
  REQUIRE_ALL_OK(statuses);
  return results;
}

void RequireSame(const std::vector<Case>& cases, int n, const Results& expected, const Results& got,
                 const char* what) {
  for (size_t i = 0; i < cases.size(); ++i) {
    for (int r = 0; r < n; ++r) {
      // A reduce's output is the root's only.
      if (cases[i].kind == CollectiveKind::kReduce && r != cases[i].root) continue;
      INFO(what << ": " << cases[i].Name() << ", rank " << r << " of " << n);
      REQUIRE(expected[i][r] == got[i][r]);
    }
  }
}

TEST_CASE("programs: both executors give the host algorithms' results bit for bit") {
  for (int n : {2, 3, 4, 5}) {
    const std::vector<Case> cases = Cases(n);
    const Results expected = RunOverTcp(n, cases, [](Transport& t, const Case& c, const CollectiveArgs& args,
                                                     absl::Span<const std::byte> in, absl::Span<std::byte> out,
                                                     Scratch& scratch) {
      return RunAlgorithm(t, c.algorithm, args, in, out, scratch, WindowPlan{});
    });
    const Results host = RunOverTcp(n, cases, [n](Transport& t, const Case& c, const CollectiveArgs& args,
                                                  absl::Span<const std::byte> in, absl::Span<std::byte> out,
                                                  Scratch& scratch) -> absl::Status {
      BRAID_ASSIGN_OR_RETURN(Plan plan, MakePlan({c.algorithm, args, t.rank(), n}));
      return RunPlanOnTransport(plan, t, args, in, out, scratch);
    });
    RequireSame(cases, n, expected, host, "host executor over tcp");
    for (DeviceRuntime* rt : testing::TestRuntimes()) {
      RequireSame(cases, n, expected, RunOnStreams(*rt, n, cases),
                  absl::StrCat("stream executor on ", rt->name()).c_str());
    }
  }
}

TEST_CASE("programs: lanes share one shape, and ask for more lanes than streams") {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.dtype = DType::kF32;
  args.count = 1000;
  args.segment_bytes = 64;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree}) {
    absl::StatusOr<Plan> plan = MakePlan({a, args, 1, 4});
    REQUIRE(plan.ok());
    INFO(DescribePlan(*plan));
    CHECK(plan->lanes.size() > static_cast<size_t>(StreamExecutor::kStreams));
    for (const auto& lane : plan->lanes) CHECK(lane.size() == plan->lanes.front().size());
  }
  CHECK(!MakePlan({Algorithm::kTree, [] {
                     CollectiveArgs a;
                     a.kind = CollectiveKind::kAllGather;
                     a.count = 4;
                     return a;
                   }(), 0, 2})
             .ok());
}

}  // namespace
}  // namespace braid
