// Tests of runtime/reducer over real forked processes joined by InitFromEnv
// (rank 0 hosts the store on MASTER_PORT): averages against an exact
// reference at 1-4 ranks, bucket layout and its rebuild, NoSync
// accumulation, unused parameters, static graphs, compression hooks, Join
// with uneven inputs, BroadcastParameters, statistics, every error, and
// examples/train_mlp --check as real worker processes. Ranks never assert:
// they return a Status and the main thread checks it.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "tensor/tensor.h"
#include "tests/harness/run_ranks.h"
#include "tests/harness/subprocess.h"
#include "tests/harness/statuses.h"

namespace braid {
namespace {

using ::braid::testing::RankContext;
using ::braid::testing::RankMode;
using ::braid::testing::RunRanks;
using ::braid::testing::RunRanksOptions;

// Runs fn as n worker processes, each with a ProcessGroup from InitFromEnv.
std::vector<absl::Status> RunGroup(int n, std::function<absl::Status(RankContext&, ProcessGroup&)> fn,
                                   absl::Duration group_timeout = absl::Seconds(30)) {
  const uint16_t port = UnusedPort();
  RunRanksOptions options;
  options.timeout = absl::Seconds(60);
  return RunRanks(
      n, RankMode::kProcesses,
      [&](RankContext& ctx) -> absl::Status {
        for (const char* name : {"BRAID_STORE_ADDR", "BRAID_STORE_PREFIX", "OMPI_COMM_WORLD_RANK"}) ::unsetenv(name);
        ::setenv("RANK", std::to_string(ctx.rank()).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
        ::setenv("LOCAL_RANK", std::to_string(ctx.rank()).c_str(), 1);
        ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        ProcessGroupOptions pg;
        pg.timeout = group_timeout;
        BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, InitFromEnv(pg));
        return fn(ctx, *group);
      },
      options);
}

absl::Status Fail(int rank, const std::string& what) {
  return absl::InternalError(absl::StrCat("rank ", rank, ": ", what));
}

// A trainer's gradients: owned here, handed to the reducer as views.
struct Grads {
  std::vector<Tensor> tensors;
  static absl::StatusOr<Grads> Make(const std::vector<std::pair<Shape, DType>>& specs) {
    Grads g;
    for (const auto& [shape, dtype] : specs) {
      BRAID_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(shape, dtype));
      g.tensors.push_back(t);
    }
    return g;
  }
};

// Element k of gradient i on `rank`, iteration `it`: small integers, so sums
// are exact and averages round at most once.
double Value(int rank, int i, int64_t k, int it) { return (rank + 1) * static_cast<double>((k + i + it) % 7) - 3; }
double Average(int n, int i, int64_t k, int it) {
  double sum = 0;
  for (int r = 0; r < n; ++r) sum += Value(r, i, k, it);
  return sum / n;
}

void Fill(const Tensor& t, const std::function<double(int64_t)>& f) {
  DispatchDType(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(t.data());
    for (int64_t k = 0; k < t.numel(); ++k) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        p[k] = FloatToBFloat16(static_cast<float>(f(k)));
      } else if constexpr (std::is_same_v<T, Half>) {
        p[k] = FloatToHalf(static_cast<float>(f(k)));
      } else {
        p[k] = static_cast<T>(f(k));
      }
    }
  });
}

double Get(const Tensor& t, int64_t k) {
  return DispatchDType(t.dtype(), [&](auto zero) -> double {
    using T = decltype(zero);
    const T v = static_cast<const T*>(t.data())[k];
    if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16ToFloat(v);
    } else if constexpr (std::is_same_v<T, Half>) {
      return HalfToFloat(v);
    } else {
      return static_cast<double>(v);
    }
  });
}

// Compares gradient i with `want` within `tolerance` plus float rounding.
absl::Status Expect(int rank, int i, const Tensor& t, const std::function<double(int64_t)>& want, double tolerance = 0) {
  for (int64_t k = 0; k < t.numel(); ++k) {
    const double got = Get(t, k);
    // Relative 1e-6 on top: a float average over 3 ranks rounds (x / 3).
    if (std::fabs(got - want(k)) > tolerance + 1e-6 * std::fabs(want(k))) {
      return Fail(rank, absl::StrCat("gradient ", i, " element ", k, " is ", got, ", want ", want(k)));
    }
  }
  return absl::OkStatus();
}

const std::vector<std::pair<Shape, DType>> kMixedSpecs = {
    {{40, 30}, DType::kF32}, {{30}, DType::kF32}, {{25}, DType::kF64}, {{30, 20}, DType::kF32},
    {{20}, DType::kF64},     {{333}, DType::kF32}, {{7}, DType::kI32}};

// ---------------------------------------------------------------------------

TEST_CASE("Reducer: averaged gradients equal the reference, 1-4 ranks, mixed dtypes, two marking threads",
          "[runtime][reducer]") {
  const int n = GENERATE(1, 2, 3, 4);
  const bool view = GENERATE(false, true);
  CAPTURE(n, view);
  REQUIRE_ALL_OK(RunGroup(n, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make(kMixedSpecs));
    ReducerOptions options;
    options.first_bucket_mb = 1000.0 / (1 << 20);  // ~1 KB: several buckets
    options.bucket_cap_mb = 3000.0 / (1 << 20);
    options.gradient_as_bucket_view = view;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    const int p = reducer->num_parameters();
    for (int it = 0; it < 3; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      for (int i = 0; i < p; ++i) Fill(reducer->gradient(i), [&](int64_t k) { return Value(rank, i, k, it); });
      // Two threads mark (odd and even indices), in an order that differs by rank.
      absl::Status statuses[2];
      std::thread threads[2];
      for (int t = 0; t < 2; ++t) {
        threads[t] = std::thread([&, t] {
          for (int j = 0; j < p; ++j) {
            const int i = (rank % 2 == 0) ? p - 1 - j : j;
            if (i % 2 == t) statuses[t].Update(reducer->MarkReady(i));
          }
        });
      }
      for (auto& th : threads) th.join();
      BRAID_RETURN_IF_ERROR(statuses[0]);
      BRAID_RETURN_IF_ERROR(statuses[1]);
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      for (int i = 0; i < p; ++i) {
        BRAID_RETURN_IF_ERROR(Expect(rank, i, reducer->gradient(i), [&](int64_t k) {
          const double avg = Average(n, i, k, it);
          return kMixedSpecs[static_cast<size_t>(i)].second == DType::kI32 ? std::trunc(avg) : avg;
        }));
      }
      const ReducerStats stats = reducer->last_stats();
      if (stats.iteration != it + 1 || stats.buckets < 3 || stats.bytes == 0) {
        return Fail(rank, absl::StrCat("stats: iteration ", stats.iteration, ", ", stats.buckets, " buckets, ",
                                       stats.bytes, " bytes"));
      }
    }
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: data-parallel over a subgroup: each shard's replicas average among themselves",
          "[runtime][reducer]") {
  // 4 ranks: 2 shards of a model, each replicated twice. Shard s lives on
  // ranks s and s + 2; the replicas of a shard reduce over their subgroup.
  REQUIRE_ALL_OK(RunGroup(4, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    const int shard = rank % 2;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> replicas,
                           group.Split(shard, rank, absl::StrCat("shard", shard)));
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make(kMixedSpecs));
    ReducerOptions options;
    options.comm = replicas.get();
    options.bucket_cap_mb = 3000.0 / (1 << 20);
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    const int p = reducer->num_parameters();
    for (int it = 0; it < 2; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      for (int i = 0; i < p; ++i) {
        Fill(reducer->gradient(i), [&](int64_t k) { return Value(rank, i, k, it); });
        BRAID_RETURN_IF_ERROR(reducer->MarkReady(i));
      }
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      for (int i = 0; i < p; ++i) {
        BRAID_RETURN_IF_ERROR(Expect(rank, i, reducer->gradient(i), [&](int64_t k) {
          const double avg = (Value(shard, i, k, it) + Value(shard + 2, i, k, it)) / 2;
          return kMixedSpecs[static_cast<size_t>(i)].second == DType::kI32 ? std::trunc(avg) : avg;
        }));
      }
    }
    absl::StatusOr<std::unique_ptr<Reducer>> recovered = reducer->Recover(group);
    if (recovered.status().code() != absl::StatusCode::kUnimplemented) {
      return Fail(rank, absl::StrCat("Recover on a subgroup: ", recovered.status().ToString()));
    }
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: buckets by dtype in reverse order with a small first bucket; rebuilt in rank 0's order",
          "[runtime][reducer]") {
  REQUIRE_ALL_OK(RunGroup(2, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    // 1 KiB first bucket, 4 KiB others. f32 sizes in bytes: p0 2000, p1 400, p2 4000, p3 800, p5 1600; p4 f64 800.
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{500}, DType::kF32},
                                                     {{100}, DType::kF32},
                                                     {{1000}, DType::kF32},
                                                     {{200}, DType::kF32},
                                                     {{100}, DType::kF64},
                                                     {{400}, DType::kF32}}));
    ReducerOptions options;
    options.first_bucket_mb = 1.0 / 1024;
    options.bucket_cap_mb = 4.0 / 1024;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    // Reverse order, f32: 5 (1600 B >= 1 KiB: closes the first bucket), then 3+2 (4800 >= 4 KiB), then 1+0.
    // f64: 4 alone (never reaches a cap). Launch order: by first member's position.
    const std::vector<std::vector<int>> initial = {{5}, {4}, {3, 2}, {1, 0}};
    if (reducer->BucketAssignment() != initial) return Fail(ctx.rank(), "unexpected initial buckets");
    // Iteration 1: rank 0 marks in forward order, rank 1 in another order.
    BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
    const std::vector<int> order = ctx.rank() == 0 ? std::vector<int>{0, 1, 2, 3, 4, 5} : std::vector<int>{5, 3, 1, 4, 2, 0};
    for (int i : order) BRAID_RETURN_IF_ERROR(reducer->MarkReady(i));
    BRAID_RETURN_IF_ERROR(reducer->Finalize());
    // Rebuilt from rank 0's order 0..5: f32 0 (2000 >= 1 KiB), 1+2 (4400 >= 4 KiB), 3+5 (open); f64 4.
    const std::vector<std::vector<int>> rebuilt = {{0}, {1, 2}, {3, 5}, {4}};
    if (reducer->BucketAssignment() != rebuilt) {
      std::string got;
      for (const auto& b : reducer->BucketAssignment()) absl::StrAppend(&got, "[", absl::StrJoin(b, ","), "]");
      return Fail(ctx.rank(), absl::StrCat("rebuilt buckets are ", got));
    }
    // And the rebuilt layout still averages correctly (and is not rebuilt again).
    for (int it = 1; it < 3; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      for (int i = 0; i < 6; ++i) Fill(grads.tensors[static_cast<size_t>(i)], [&](int64_t k) { return Value(ctx.rank(), i, k, it); });
      for (int i = 5; i >= 0; --i) BRAID_RETURN_IF_ERROR(reducer->MarkReady(i));
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      for (int i = 0; i < 6; ++i) {
        BRAID_RETURN_IF_ERROR(Expect(ctx.rank(), i, grads.tensors[static_cast<size_t>(i)],
                                     [&](int64_t k) { return Average(2, i, k, it); }));
      }
      if (reducer->BucketAssignment() != rebuilt) return Fail(ctx.rank(), "buckets rebuilt twice");
    }
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: NoSync accumulation equals one larger batch", "[runtime][reducer]") {
  const int n = GENERATE(2, 3);
  CAPTURE(n);
  REQUIRE_ALL_OK(RunGroup(n, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{64, 16}, DType::kF32}, {{16}, DType::kF32}, {{9}, DType::kF64}}));
    ReducerOptions options;
    options.find_unused_parameters = true;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    // Three micro-batches, the trainer accumulating into its gradients; the
    // f64 gradient gets its contribution only in the first (NoSync) one.
    for (const Tensor& t : grads.tensors) Fill(t, [](int64_t) { return 0.0; });
    for (int micro = 0; micro < 3; ++micro) {
      absl::optional<Reducer::NoSyncScope> scope;
      if (micro < 2) scope.emplace(reducer->NoSync());
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      for (int i = 1; i >= 0; --i) {
        const Tensor& t = grads.tensors[static_cast<size_t>(i)];
        for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] += static_cast<float>(Value(rank, i, k, micro));
        BRAID_RETURN_IF_ERROR(reducer->MarkReady(i));
      }
      if (micro == 0) {
        Fill(grads.tensors[2], [&](int64_t k) { return Value(rank, 2, k, 0); });
        BRAID_RETURN_IF_ERROR(reducer->MarkReady(2));
      }
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
    }
    for (int i = 0; i < 2; ++i) {
      BRAID_RETURN_IF_ERROR(Expect(rank, i, grads.tensors[static_cast<size_t>(i)], [&](int64_t k) {
        return Average(n, i, k, 0) + Average(n, i, k, 1) + Average(n, i, k, 2);
      }));
    }
    BRAID_RETURN_IF_ERROR(Expect(rank, 2, grads.tensors[2], [&](int64_t k) { return Average(n, 2, k, 0); }));
    if (!reducer->unused_parameters().empty()) return Fail(rank, "the NoSync-only gradient was counted unused");
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: unused parameters are agreed across ranks", "[runtime][reducer]") {
  const int n = GENERATE(2, 4);
  CAPTURE(n);
  REQUIRE_ALL_OK(RunGroup(n, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{50}, DType::kF32}, {{60}, DType::kF32}, {{70}, DType::kF32}}));
    ReducerOptions options;
    options.find_unused_parameters = true;
    options.first_bucket_mb = 1e-6;  // one bucket per gradient
    options.bucket_cap_mb = 1e-6;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    Fill(grads.tensors[2], [](int64_t) { return 42.0; });  // never used anywhere: must stay untouched
    for (int it = 0; it < 2; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      Fill(grads.tensors[0], [&](int64_t k) { return Value(rank, 0, k, it); });
      BRAID_RETURN_IF_ERROR(reducer->MarkReady(0));
      if (rank == 0) {  // parameter 1: used on rank 0 only
        Fill(grads.tensors[1], [&](int64_t k) { return Value(rank, 1, k, it); });
        BRAID_RETURN_IF_ERROR(reducer->MarkReady(1));
      }
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      BRAID_RETURN_IF_ERROR(Expect(rank, 0, grads.tensors[0], [&](int64_t k) { return Average(n, 0, k, it); }));
      BRAID_RETURN_IF_ERROR(Expect(rank, 1, grads.tensors[1], [&](int64_t k) { return Value(0, 1, k, it) / n; }));
      BRAID_RETURN_IF_ERROR(Expect(rank, 2, grads.tensors[2], [](int64_t) { return 42.0; }));
      if (reducer->unused_parameters() != std::vector<int>{2}) return Fail(rank, "unused_parameters() is not {2}");
    }
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: static_graph finds the unused set once, then needs no marks for it", "[runtime][reducer]") {
  REQUIRE_ALL_OK(RunGroup(2, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{50}, DType::kF32}, {{60}, DType::kF32}}));
    ReducerOptions options;
    options.static_graph = true;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    for (int it = 0; it < 3; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      Fill(grads.tensors[0], [&](int64_t k) { return Value(ctx.rank(), 0, k, it); });
      BRAID_RETURN_IF_ERROR(reducer->MarkReady(0));
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      BRAID_RETURN_IF_ERROR(Expect(ctx.rank(), 0, grads.tensors[0], [&](int64_t k) { return Average(2, 0, k, it); }));
      if (reducer->unused_parameters() != std::vector<int>{1}) return Fail(ctx.rank(), "unused set is not {1}");
    }
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: f16 and bf16 compression hooks average within tolerance, identical on every rank",
          "[runtime][reducer]") {
  const std::string hook = GENERATE(as<std::string>{}, "fp16", "bf16");
  const int n = GENERATE(2, 3);
  CAPTURE(hook, n);
  REQUIRE_ALL_OK(RunGroup(n, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{300, 20}, DType::kF32}, {{20}, DType::kF64}, {{9}, DType::kI32}}));
    ReducerOptions options;
    options.comm_hook = hook == "fp16" ? Fp16CompressHook() : Bf16CompressHook();
    options.first_bucket_mb = 1e-3;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    auto value = [&](int r, int i, int64_t k) { return std::sin(0.37 * static_cast<double>(k + 1) + i) * (r + 1); };
    for (int it = 0; it < 2; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      for (int i = 0; i < 3; ++i) {
        if (i == 2) {
          Fill(grads.tensors[2], [&](int64_t k) { return Value(rank, 2, k, it); });
        } else {
          Fill(grads.tensors[static_cast<size_t>(i)], [&](int64_t k) { return value(rank, i, k); });
        }
      }
      for (int i = 2; i >= 0; --i) BRAID_RETURN_IF_ERROR(reducer->MarkReady(i));
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      // |avg| <= (n+1)/2; f16 keeps 11 bits, bf16 8: relative 2^-11 / 2^-8 per rounding, a few roundings.
      const double tolerance = (hook == "fp16" ? 4e-3 : 3e-2);
      for (int i = 0; i < 2; ++i) {
        BRAID_RETURN_IF_ERROR(Expect(rank, i, grads.tensors[static_cast<size_t>(i)], [&](int64_t k) {
          double sum = 0;
          for (int r = 0; r < n; ++r) sum += value(r, i, k);
          return sum / n;
        }, tolerance));
      }
      BRAID_RETURN_IF_ERROR(Expect(rank, 2, grads.tensors[2], [&](int64_t k) { return std::trunc(Average(n, 2, k, it)); }));
    }
    // Bit-identical across ranks.
    std::string bytes(static_cast<const char*>(grads.tensors[0].data()), grads.tensors[0].nbytes());
    BRAID_ASSIGN_OR_RETURN(std::vector<std::string> all, ctx.AllGather(bytes));
    for (const std::string& other : all) {
      if (other != all[0]) return Fail(rank, "compressed averages differ between ranks");
    }
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: Join lets ranks with fewer batches shadow the others", "[runtime][reducer]") {
  const int n = GENERATE(2, 3);
  CAPTURE(n);
  REQUIRE_ALL_OK(RunGroup(n, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{100}, DType::kF32}, {{10}, DType::kF32}}));
    ReducerOptions options;
    options.uneven_inputs = true;
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    const int batches = 2 + rank;  // rank r has 2 + r batches
    for (int it = 0; it < batches; ++it) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      for (int i = 1; i >= 0; --i) {
        Fill(grads.tensors[static_cast<size_t>(i)], [&](int64_t k) { return Value(rank, i, k, it); });
        BRAID_RETURN_IF_ERROR(reducer->MarkReady(i));
      }
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      // Ranks still training this iteration: those with more than `it` batches.
      for (int i = 0; i < 2; ++i) {
        BRAID_RETURN_IF_ERROR(Expect(rank, i, grads.tensors[static_cast<size_t>(i)], [&](int64_t k) {
          double sum = 0;
          for (int r = 0; r < n; ++r) sum += (2 + r > it) ? Value(r, i, k, it) : 0;
          return sum / n;  // divided by the world size, as DDP does
        }));
      }
    }
    Fill(grads.tensors[0], [](int64_t) { return 5.0; });
    BRAID_RETURN_IF_ERROR(reducer->Join());
    BRAID_RETURN_IF_ERROR(Expect(rank, 0, grads.tensors[0], [](int64_t) { return 5.0; }));  // untouched by shadowing
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: BroadcastParameters gives every rank the root's values", "[runtime][reducer]") {
  REQUIRE_ALL_OK(RunGroup(3, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Grads params, Grads::Make({{{10, 10}, DType::kF32}, {{5}, DType::kF64}, {{3}, DType::kF32}}));
    for (int i = 0; i < 3; ++i) Fill(params.tensors[static_cast<size_t>(i)], [&](int64_t k) { return Value(ctx.rank(), i, k, 0); });
    BRAID_RETURN_IF_ERROR(Reducer::BroadcastParameters(group, params.tensors, 1));
    for (int i = 0; i < 3; ++i) {
      BRAID_RETURN_IF_ERROR(Expect(ctx.rank(), i, params.tensors[static_cast<size_t>(i)], [&](int64_t k) { return Value(1, i, k, 0); }));
    }
    return absl::OkStatus();
  }));
}

// ---------------------------------------------------------------------------
// Errors

absl::Status ExpectError(int rank, const absl::Status& status, absl::StatusCode code,
                         const std::vector<std::string>& fragments) {
  if (status.code() != code) {
    return Fail(rank, absl::StrCat("want ", absl::StatusCodeToString(code), ", got ", status.ToString()));
  }
  for (const std::string& f : fragments) {
    if (!absl::StrContains(status.message(), f)) return Fail(rank, absl::StrCat("'", f, "' not in: ", status.message()));
  }
  return absl::OkStatus();
}

TEST_CASE("Reducer: MarkReady twice, out of range, or outside an iteration", "[runtime][reducer]") {
  REQUIRE_ALL_OK(RunGroup(2, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{8}, DType::kF32}, {{4}, DType::kF32}}));
    ReducerOptions options;
    options.parameter_names = {"fc.weight", "fc.bias"};
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    BRAID_RETURN_IF_ERROR(ExpectError(rank, reducer->MarkReady(0), absl::StatusCode::kFailedPrecondition,
                                      {"PrepareForBackward"}));
    BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
    BRAID_RETURN_IF_ERROR(ExpectError(rank, reducer->MarkReady(2), absl::StatusCode::kOutOfRange, {"MarkReady(2)"}));
    BRAID_RETURN_IF_ERROR(ExpectError(rank, reducer->MarkReady(-1), absl::StatusCode::kOutOfRange, {"MarkReady(-1)"}));
    for (int i = 0; i < 2; ++i) Fill(grads.tensors[static_cast<size_t>(i)], [&](int64_t k) { return Value(rank, i, k, 0); });
    BRAID_RETURN_IF_ERROR(reducer->MarkReady(1));
    BRAID_RETURN_IF_ERROR(ExpectError(rank, reducer->MarkReady(1), absl::StatusCode::kFailedPrecondition,
                                      {"fc.bias", "twice"}));
    BRAID_RETURN_IF_ERROR(reducer->MarkReady(0));
    BRAID_RETURN_IF_ERROR(reducer->Finalize());  // the iteration went on
    for (int i = 0; i < 2; ++i) {
      BRAID_RETURN_IF_ERROR(Expect(rank, i, grads.tensors[static_cast<size_t>(i)], [&](int64_t k) { return Average(2, i, k, 0); }));
    }
    return absl::OkStatus();
  }));
}

TEST_CASE("Reducer: Finalize names gradients never marked and says what to do; every rank fails, none hangs",
          "[runtime][reducer]") {
  REQUIRE_ALL_OK(RunGroup(2, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{8}, DType::kF32}, {{4}, DType::kF32}, {{2}, DType::kF32}}));
    ReducerOptions options;
    options.parameter_names = {"a.weight", "b.weight", "c.weight"};
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
    BRAID_RETURN_IF_ERROR(reducer->MarkReady(2));
    BRAID_RETURN_IF_ERROR(reducer->MarkReady(0));
    if (rank == 0) BRAID_RETURN_IF_ERROR(reducer->MarkReady(1));
    const absl::Status status = reducer->Finalize();
    // Rank 0 marked everything, but its average has rank 1's zeros in it: it fails too, naming rank 1.
    if (rank == 0) {
      return ExpectError(rank, status, absl::StatusCode::kFailedPrecondition,
                         {"never marked ready on rank 1 (1)", "averaged gradients are wrong"});
    }
    return ExpectError(rank, status, absl::StatusCode::kFailedPrecondition,
                       {"parameter 1 (b.weight, float32[4])", "never marked ready", "find_unused_parameters"});
  }));
}

TEST_CASE("Reducer: with no timeout of its own it waits at most its group's", "[runtime][reducer]") {
  // The group's 3 s, not BRAID_TIMEOUT_SEC's 600 (the device streams' waits
  // and the bucket waits of a hook with longer call deadlines use it).
  REQUIRE_ALL_OK(RunGroup(
      2,
      [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
        BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{64}, DType::kF32}}));
        BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> inherits, Reducer::Create(group, grads.tensors, {}));
        if (inherits->timeout() != absl::Seconds(3)) {
          return Fail(ctx.rank(), absl::StrCat("the reducer's timeout is ", absl::FormatDuration(inherits->timeout()),
                                               ", not its group's 3s"));
        }
        ReducerOptions own;
        own.timeout = absl::Seconds(7);
        BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> chosen, Reducer::Create(group, grads.tensors, own));
        if (chosen->timeout() != absl::Seconds(7)) {
          return Fail(ctx.rank(), absl::StrCat("the reducer's timeout is ", absl::FormatDuration(chosen->timeout()),
                                               ", not its own 7s"));
        }
        return absl::OkStatus();
      },
      absl::Seconds(3)));
}

TEST_CASE("Reducer: a new iteration before Finalize is DDP's 'expected to have finished reduction', explained",
          "[runtime][reducer]") {
  REQUIRE_ALL_OK(RunGroup(2, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{8}, DType::kF32}, {{4}, DType::kF32}}));
    ReducerOptions options;
    options.parameter_names = {"used.weight", "unused.weight"};
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, Reducer::Create(group, grads.tensors, options));
    // A forward without backward may start over.
    BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
    BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
    BRAID_RETURN_IF_ERROR(reducer->MarkReady(0));  // parameter 1 never gets a gradient, Finalize forgotten
    const absl::Status status = reducer->PrepareForBackward();
    BRAID_RETURN_IF_ERROR(ExpectError(ctx.rank(), status, absl::StatusCode::kFailedPrecondition,
                                      {"never finished", "parameter 1 (unused.weight", "Finalize()",
                                       "find_unused_parameters"}));
    // Sticky: the reducer says so again rather than mixing iterations.
    return ExpectError(ctx.rank(), reducer->MarkReady(1), absl::StatusCode::kFailedPrecondition, {"never finished"});
  }));
}

TEST_CASE("Reducer: ranks registering different parameters fail at construction, naming the difference",
          "[runtime][reducer]") {
  REQUIRE_ALL_OK(RunGroup(2, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    const int rank = ctx.rank();
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{8}, DType::kF32}, {{rank == 0 ? 4 : 5}, DType::kF32}}));
    absl::StatusOr<std::unique_ptr<Reducer>> reducer = Reducer::Create(group, grads.tensors);
    if (reducer.ok()) return Fail(rank, "Create succeeded with different shapes");
    return ExpectError(rank, reducer.status(), absl::StatusCode::kInvalidArgument,
                       {"parameter 1", "float32[4]", "float32[5]", "rank 0", "rank 1"});
  }));
  REQUIRE_ALL_OK(RunGroup(2, [&](RankContext& ctx, ProcessGroup& group) -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(Grads grads, Grads::Make({{{8}, DType::kF32}}));
    ReducerOptions options;
    options.bucket_cap_mb = ctx.rank() == 0 ? 25 : 50;
    absl::StatusOr<std::unique_ptr<Reducer>> reducer = Reducer::Create(group, grads.tensors, options);
    if (reducer.ok()) return Fail(ctx.rank(), "Create succeeded with different options");
    return ExpectError(ctx.rank(), reducer.status(), absl::StatusCode::kInvalidArgument,
                       {"options differ", "bucket_cap_mb=25", "bucket_cap_mb=50"});
  }));
}

// ---------------------------------------------------------------------------
// examples/train_mlp as real worker processes

std::vector<ProcessExit> RunTrainer(int n, const std::vector<std::string>& args, const std::string& tag) {
  const uint16_t port = UnusedPort();
  std::vector<pid_t> pids;
  std::vector<std::string> tags;
  for (int rank = 0; rank < n; ++rank) {
    std::vector<std::string> argv = {Runfile("examples/train_mlp")};
    argv.insert(argv.end(), args.begin(), args.end());
    tags.push_back(absl::StrCat(tag, "_rank", rank));
    pids.push_back(Spawn(argv,
                         {{"RANK", std::to_string(rank)},
                          {"WORLD_SIZE", std::to_string(n)},
                          {"LOCAL_RANK", std::to_string(rank)},
                          {"LOCAL_WORLD_SIZE", std::to_string(n)},
                          {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", std::to_string(port)},
                          {"BRAID_TIMEOUT_SEC", "60"}},
                         tags.back(), {"BRAID_STORE_ADDR", "BRAID_STORE_PREFIX"}));
  }
  return WaitAll(pids, tags, DeadlineIn(absl::Seconds(120)));
}

TEST_CASE("train_mlp --check: bit-identical replicas that match one process, 2 and 3 ranks", "[runtime][reducer][example]") {
  const int n = GENERATE(2, 3);
  CAPTURE(n);
  const std::vector<ProcessExit> exits = RunTrainer(n, {"--check"}, absl::StrCat("check", n));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " exit " << exits[static_cast<size_t>(r)].code << "\nstdout:\n"
                 << exits[static_cast<size_t>(r)].out << "\nstderr:\n" << exits[static_cast<size_t>(r)].err);
    REQUIRE(exits[static_cast<size_t>(r)].code == 0);
  }
  CHECK(absl::StrContains(exits[0].out, "parameters bit-identical on every rank: yes"));
  CHECK(absl::StrContains(exits[0].out, "check: PASSED"));
}

TEST_CASE("train_mlp: --help lists its flags; a bad flag exits 2 with one line before starting", "[runtime][example]") {
  const ProcessExit help = RunProcess({Runfile("examples/train_mlp"), "--help"}, {}, "help", absl::Seconds(30));
  INFO(Dump(help));
  REQUIRE(help.code == 0);
  CHECK(absl::StrContains(help.out, "--check-steps"));
  CHECK(absl::StrContains(help.out, "--device cpu|cuda"));
  std::vector<std::string> bad = {"--epochs=x", "--hook=fp8", "--no-such-flag", "--device=tpu"};
#ifndef BRAID_WITH_CUDA
  bad.push_back("--device=cuda");  // this build has no CUDA
#endif
  for (const std::string& flag : bad) {
    const ProcessExit exit = RunProcess({Runfile("examples/train_mlp"), flag}, {}, "bad_flag", absl::Seconds(30));
    INFO(flag << "\n" << Dump(exit));
    CHECK(exit.code == 2);
    CHECK(exit.out.empty());
    CHECK(std::count(exit.err.begin(), exit.err.end(), '\n') == 1);
    CHECK(absl::StartsWith(exit.err, "train_mlp: "));
  }
}

TEST_CASE("train_mlp: checkpoints every epoch and resumes from the newest", "[runtime][reducer][example]") {
  const std::string dir = absl::StrCat(TestTempDir(), "/ckpt");
  const std::vector<std::string> common = {"--samples=512", "--batch-size=32", absl::StrCat("--checkpoint-dir=", dir)};
  std::vector<std::string> first = common;
  first.push_back("--epochs=1");
  std::vector<ProcessExit> exits = RunTrainer(2, first, "ckpt_first");
  INFO("first run:\n" << exits[0].out << exits[0].err << exits[1].err);
  REQUIRE(exits[0].code == 0);
  REQUIRE(exits[1].code == 0);
  CHECK(absl::StrContains(exits[0].out, "epoch 1/1: loss "));
  REQUIRE(!ReadFile(absl::StrCat(dir, "/ckpt-000001.bin")).empty());

  std::vector<std::string> second = common;
  second.push_back("--epochs=2");
  exits = RunTrainer(2, second, "ckpt_second");
  INFO("second run:\n" << exits[0].out << exits[0].err << exits[1].err);
  REQUIRE(exits[0].code == 0);
  REQUIRE(exits[1].code == 0);
  CHECK(absl::StrContains(exits[0].out, "resumed from " + dir + "/ckpt-000001.bin"));
  CHECK_FALSE(absl::StrContains(exits[0].out, "epoch 1/2"));
  CHECK(absl::StrContains(exits[0].out, "epoch 2/2: loss "));
  CHECK(!ReadFile(absl::StrCat(dir, "/ckpt-000002.bin")).empty());
}

}  // namespace
}  // namespace braid
