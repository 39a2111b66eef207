// The programs (collectives/programs/program.h) run by both executors: the
// host executor (what the communicator runs on host memory) over a real tcp
// transport between thread ranks, checked against sums computed here in
// double, and the stream executor over LocalDeviceLinks on the host runtime
// (the same code a GPU runs, with host streams) and, on a machine with a
// GPU, on GPU 0 with braid's CUDA kernels, which must give the host
// executor's results bit for bit. Segments are small enough that plans have
// more lanes than either executor runs at once. Floats are random, so any
// change in the order of the sums shows.
#include <algorithm>
#include <cmath>
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
#include "collectives/group_layout.h"
#include "collectives/programs/hierarchical_program.h"
#include "collectives/programs/program.h"
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
      {Algorithm::kChain, CollectiveKind::kReduce},       {Algorithm::kPairwise, CollectiveKind::kAllToAll},
      {Algorithm::kOneShot, CollectiveKind::kAllReduce}};
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

double ValueAt(const Case& c, const std::vector<std::byte>& bytes, size_t i) {
  if (c.dtype == DType::kF32) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  if (c.dtype == DType::kBF16) {
    BFloat16 b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    return BFloat16ToFloat(b);
  }
  int32_t x;
  std::memcpy(&x, bytes.data() + 4 * i, 4);
  return x;
}

// What rank `rank`'s output holds, from every rank's input, in double.
std::vector<double> Expected(const Case& c, int n, int rank, size_t index) {
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(InputOf(c, n, r, index));
  auto reduced = [&](size_t offset, size_t i) {
    double acc = ValueAt(c, inputs[0], offset + i);
    for (int r = 1; r < n; ++r) {
      const double v = ValueAt(c, inputs[static_cast<size_t>(r)], offset + i);
      acc = c.op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    return c.op == ReduceOp::kAvg ? acc / n : acc;
  };
  std::vector<double> out(OutputElements(c, n));
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t block = i / c.count, within = i % c.count;
    switch (c.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduce: out[i] = reduced(0, i); break;
      case CollectiveKind::kReduceScatter: out[i] = reduced(static_cast<size_t>(rank) * c.count, i); break;
      case CollectiveKind::kAllGather: out[i] = ValueAt(c, inputs[block], within); break;
      case CollectiveKind::kBroadcast: out[i] = ValueAt(c, inputs[static_cast<size_t>(c.root)], i); break;
      default: out[i] = ValueAt(c, inputs[block], static_cast<size_t>(rank) * c.count + within); break;  // all-to-all
    }
  }
  return out;
}

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

TEST_CASE("programs: the host executor's sums are right, the stream executor's the same bit for bit") {
  for (int n : {2, 3, 4, 5}) {
    const std::vector<Case> cases = Cases(n);
    const Results host = RunOverTcp(n, cases, [](Transport& t, const Case& c, const CollectiveArgs& args,
                                                 absl::Span<const std::byte> in, absl::Span<std::byte> out,
                                                 Scratch& scratch) {
      return RunAlgorithm(t, c.algorithm, args, in, out, scratch, WindowPlan{});
    });
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      // bf16 rounds every partial sum to 8 bits of mantissa.
      const double tolerance = c.dtype == DType::kBF16 ? 0.15 : c.dtype == DType::kF32 ? 1e-4 : 0;
      for (int r = 0; r < n; ++r) {
        if (c.kind == CollectiveKind::kReduce && r != c.root) continue;
        const std::vector<double> expected = Expected(c, n, r, i);
        for (size_t e = 0; e < expected.size(); ++e) {
          INFO(c.Name() << ", rank " << r << " of " << n << ", element " << e);
          REQUIRE(std::abs(ValueAt(c, host[i][static_cast<size_t>(r)], e) - expected[e]) <= tolerance);
        }
      }
    }
    for (DeviceRuntime* rt : testing::TestRuntimes()) {
      RequireSame(cases, n, host, RunOnStreams(*rt, n, cases),
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

TEST_CASE("programs: the shared-memory paths are plans of one lane over the windows") {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.dtype = DType::kF32;
  args.count = 2;
  PlanRequest request{Algorithm::kWindow, args, 1, 2};
  request.window_half_bytes = 4096;
  // 8 bytes ride with the Sync; every rank sums the payloads in rank order,
  // its own term from its input (ranks 0 and 1; a later one's input may be
  // the output, already overwritten in place).
  absl::StatusOr<Plan> tiny = MakePlan(request);
  REQUIRE(tiny.ok());
  CHECK(tiny->shared_windows);
  CHECK(DescribePlan(*tiny) == "lane 0: sync+in[0,2) out[0,2)=payload@0[0,2)opin[0,2)\n");
  PlanRequest third{Algorithm::kWindow, args, 2, 3};
  third.window_half_bytes = 4096;
  absl::StatusOr<Plan> tiny_third = MakePlan(third);
  REQUIRE(tiny_third.ok());
  CHECK(DescribePlan(*tiny_third) ==
        "lane 0: sync+in[0,2) out[0,2)=payload@0[0,2)oppayload@1[0,2) out[0,2)=out[0,2)oppayload@2[0,2)\n");
  // Three rounds of 1024 elements, each split: copy in, Sync, reduce this rank's slice, Sync, copy out.
  request.args.count = 3000;
  request.window.whole_round_bytes = 0;
  absl::StatusOr<Plan> rounds = MakePlan(request);
  REQUIRE(rounds.ok());
  INFO(DescribePlan(*rounds));
  REQUIRE(rounds->lanes.size() == 1);
  const auto count = [&](Op::Kind kind) {
    return std::count_if(rounds->lanes[0].begin(), rounds->lanes[0].end(), [&](const Op& op) { return op.kind == kind; });
  };
  CHECK(count(Op::Kind::kNextRound) == 3);
  CHECK(count(Op::Kind::kSync) == 6);
  // The peer all-reduce has all three of its paths; a vote at the first Sync
  // picks one. Its window path is the window plan's: the first copy in after
  // the vote, then a Sync the voters for the window wait at as well.
  request.algorithm = Algorithm::kPeerAccess;
  auto describe = [&] {
    absl::StatusOr<Plan> plan = MakePlan(request);
    REQUIRE(plan.ok());
    return DescribePlan(*plan);
  };
  const std::string described = describe();
  INFO(described);
  CHECK(described.rfind("lane 0: sync+publish+vote window: next_round window: window@1[0,", 0) == 0);
  CHECK(described.find("split: sync") != std::string::npos);
  CHECK(described.find("direct: peer_out@0[") != std::string::npos);
  CHECK(described.find("windows: next_round") != std::string::npos);
  // A rank voting for the window has nothing but the window plan: its first
  // copy in before the vote, and the Sync for the others' copies after it.
  request.window_vote = true;
  const std::string window_only = describe();
  INFO(window_only);
  CHECK(window_only.rfind("lane 0: next_round window@1[0,", 0) == 0);
  CHECK(window_only.find("sync+vote:window split: sync") != std::string::npos);
  CHECK(window_only.find("peer") == std::string::npos);
  CHECK(window_only.find("direct:") == std::string::npos);
  const std::string window_plan = DescribePlan(*rounds);
  CHECK(window_only.size() > window_plan.size());
  request.window_vote = false;
  // Where the peers map the buffers, the reduction of each piece writes the
  // peer's output in the same pass (rank 1 of 2: its slice [1500, 3000)),
  // and no separate write to the peer is left; avg divides first, so not there.
  request.peers_map = true;
  absl::StatusOr<Plan> mapped = MakePlan(request);
  REQUIRE(mapped.ok());
  const std::string fused = DescribePlan(*mapped);
  INFO(fused);
  CHECK(fused.find("direct: out[1500,3000)+peer_out@0[1500,3000)=in[1500,3000)oppeer_in@0[1500,3000)") !=
        std::string::npos);
  CHECK(fused.find("direct: peer_out@0[") == std::string::npos);
  request.args.op = ReduceOp::kAvg;
  absl::StatusOr<Plan> averaged = MakePlan(request);
  REQUIRE(averaged.ok());
  CHECK(DescribePlan(*averaged).find("direct: peer_out@0[1500,3000)=out[1500,3000)") != std::string::npos);
  request.args.op = ReduceOp::kSum;
  request.peers_map = false;
  // Without a window there is nothing to plan in.
  request.window_half_bytes = 0;
  CHECK(!MakePlan(request).ok());
}


TEST_CASE("programs: a hierarchical collective is a plan of steps on the levels") {
  const HostLayout even = MakeHostLayout(std::vector<std::string>{"a", "a", "b", "b"});
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.dtype = DType::kF32;
  args.count = 5;  // blocks of 3, padded with one zero
  absl::StatusOr<Plan> plan = MakeHierarchicalPlan(args, even, 1);
  REQUIRE(plan.ok());
  CHECK(plan->levels);
  CHECK(DescribePlan(*plan) ==
        "lane 0: scratch[3,8)=in[0,5) scratch[8,9)=0 scratch[0,3)=intra:reducescatter(scratch[3,9)) "
        "scratch[0,3)=inter:allreduce(scratch[0,3)) scratch[3,9)=intra:allgather(scratch[0,3)) "
        "out[0,5)=scratch[3,8)\n");
  // Hosts with 2 and 1 ranks: through each host's first rank.
  const HostLayout uneven = MakeHostLayout(std::vector<std::string>{"a", "a", "b"});
  plan = MakeHierarchicalPlan(args, uneven, 1);
  REQUIRE(plan.ok());
  CHECK(DescribePlan(*plan) ==
        "lane 0: out[0,5)=intra:reduce(in[0,5)) out[0,5)=intra:broadcast(out[0,5))\n");
  args.kind = CollectiveKind::kAllGather;
  CHECK(!MakeHierarchicalPlan(args, uneven, 1).ok());
}
}  // namespace
}  // namespace braid
