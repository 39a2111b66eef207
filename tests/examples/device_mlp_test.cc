// The GPU trainer's code (examples/device_mlp.h with the reducer on a stream
// communicator, as train_mlp --device=cuda runs it) on thread ranks: every
// step queued on a compute stream, the buckets all-reduced over
// LocalDeviceLinks and ordered against that stream by events. On the host
// runtime (CI) the kernels are the CPU trainer's own, so the result must be
// the CPU arithmetic bit for bit: a data-parallel step computed here
// directly (each rank's gradients, averaged, SGD). On a GPU (gpu_check) the
// same test runs with the CUDA kernels, within a tolerance.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "catch2/catch.hpp"
#include "collectives/communicator.h"
#include "collectives/transport/local_device_link.h"
#include "examples/device_mlp.h"
#include "examples/mlp.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "tensor/stream.h"
#include "tests/collectives/device/local_device_transport.h"
#include "tests/harness/statuses.h"
#include "tests/harness/subprocess.h"
#include "tests/runtime/device_thread_rank.h"

namespace braid::examples {
namespace {

constexpr int kSamples = 256;
constexpr int kBatch = 8;
constexpr int kSteps = 6;
constexpr uint64_t kSeed = 3;
const std::vector<int> kSizes = {kInputs, 48, 24, kClasses};

struct RankResult {
  std::vector<std::vector<float>> params;
  double loss = 0;  // the epoch's mean row loss over this rank's steps
};

// One rank of the device trainer: the loop train_mlp --device=cuda runs.
absl::Status TrainRank(DeviceRuntime& rt, LocalDeviceLinks& links, int rank, int world, uint16_t port,
                       const Dataset& data, const std::string& hook, RankResult* result) {
  BRAID_ASSIGN_OR_RETURN(braid::testing::DeviceThreadRank ranked,
                         braid::testing::MakeDeviceThreadRank(links, rank, world, port, absl::Seconds(60)));
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Stream> compute, rt.NewStream());
  Mlp host(kSizes, kSeed);
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMlp> model, DeviceMlp::Create(rt, *compute, host, data, kBatch));
  Flags flags;
  flags.hook = hook;
  std::vector<Tensor> initial;
  {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer,
                           MakeDeviceReducer(*ranked.group, flags, host, rt, *compute, ranked.device_comm.get(), &initial));
    std::vector<std::vector<int>> batches = RankBatches(kSamples, 0, kSeed, rank, world, kBatch);
    batches.resize(kSteps);  // an "epoch" of kSteps steps
    BRAID_RETURN_IF_ERROR(model->BeginEpoch(batches));
    for (size_t s = 0; s < kSteps; ++s) {
      BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
      absl::Status marked;
      BRAID_RETURN_IF_ERROR(model->Step(s, ReducerGrads(*reducer), [&](int i) { marked.Update(reducer->MarkReady(i)); }));
      BRAID_RETURN_IF_ERROR(marked);
      BRAID_RETURN_IF_ERROR(reducer->Finalize());
      BRAID_RETURN_IF_ERROR(model->Sgd(ReducerGrads(*reducer), 0.05f));
    }
    BRAID_RETURN_IF_ERROR(model->Download(host));
  }
  result->params = host.params();
  BRAID_ASSIGN_OR_RETURN(result->loss, model->EpochLoss());
  return absl::OkStatus();
}

// The same training computed directly on the CPU: each step, every rank's
// gradients from the same parameters, averaged in rank order, then SGD;
// *losses gets each rank's mean loss over the steps.
std::vector<std::vector<float>> CpuDataParallel(const Dataset& data, int world, std::vector<double>* losses) {
  losses->assign(static_cast<size_t>(world), 0.0);
  Mlp model(kSizes, kSeed);
  std::vector<std::vector<std::vector<int>>> batches;
  for (int r = 0; r < world; ++r) batches.push_back(RankBatches(kSamples, 0, kSeed, r, world, kBatch));
  for (size_t s = 0; s < kSteps; ++s) {
    std::vector<std::vector<float>> sum;
    for (int r = 0; r < world; ++r) {
      std::vector<std::vector<float>> grads;
      std::vector<float*> ptrs;
      for (const auto& p : model.params()) grads.emplace_back(p.size());
      for (auto& g : grads) ptrs.push_back(g.data());
      (*losses)[static_cast<size_t>(r)] += model.Step(data, batches[static_cast<size_t>(r)][s], ptrs, [](int) {}) / kSteps;
      if (sum.empty()) {
        sum = std::move(grads);
      } else {
        for (size_t i = 0; i < sum.size(); ++i) {
          for (size_t k = 0; k < sum[i].size(); ++k) sum[i][k] += grads[i][k];
        }
      }
    }
    std::vector<float*> ptrs;
    for (auto& g : sum) {
      for (float& v : g) v /= static_cast<float>(world);
      ptrs.push_back(g.data());
    }
    model.Sgd(ptrs, 0.05f);
  }
  return model.params();
}

void Train(DeviceRuntime& rt, int world, const std::string& hook, double tolerance) {
  INFO(rt.name() << ", " << world << " ranks, hook " << hook);
  const Dataset data = Dataset::Make(kSamples, kSeed);
  LocalDeviceLinks links(rt, world);
  const uint16_t port = UnusedPort();
  std::vector<RankResult> results(static_cast<size_t>(world));
  const std::vector<absl::Status> statuses = braid::testing::OnThreads(world, [&](int r) {
    return TrainRank(rt, links, r, world, port, data, hook, &results[static_cast<size_t>(r)]);
  });
  REQUIRE_ALL_OK(statuses);
  for (int r = 1; r < world; ++r) REQUIRE(results[static_cast<size_t>(r)].params == results[0].params);
  std::vector<double> losses;
  const std::vector<std::vector<float>> expected = CpuDataParallel(data, world, &losses);
  REQUIRE(MaxAbsDifference(results[0].params, expected) <= tolerance);
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    REQUIRE(std::fabs(results[static_cast<size_t>(r)].loss - losses[static_cast<size_t>(r)]) <= 1e-5 * losses[static_cast<size_t>(r)] + tolerance);
  }
  // Training moved the parameters (the comparison is not of two starts).
  REQUIRE(MaxAbsDifference(results[0].params, Mlp(kSizes, kSeed).params()) > 1e-4);
}

TEST_CASE("device trainer: 2 ranks on streams compute the CPU trainer's step bit for bit") {
  for (DeviceRuntime* rt : braid::testing::TestRuntimes()) {
    // Two addends: the sum is the same in any order, so the host runtime is exact.
    Train(*rt, 2, "allreduce", rt->device().is_cpu() ? 0.0 : 1e-4);
  }
}

TEST_CASE("device trainer: 3 ranks, and the bf16 hook, on streams") {
  for (DeviceRuntime* rt : braid::testing::TestRuntimes()) {
    // Three addends: the all-reduce's order may differ from rank order by a rounding.
    Train(*rt, 3, "allreduce", 1e-6);
    Train(*rt, 2, "bf16", 1e-3);
  }
}

}  // namespace
}  // namespace braid::examples
