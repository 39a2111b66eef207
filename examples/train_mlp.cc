// train_mlp: a complete data-parallel C++ trainer on braid's Reducer, with
// no framework: an MLP with hand-written forward and backward (OpenBLAS,
// one thread), softmax cross-entropy, SGD, and a synthetic data set sharded
// per rank as torch's DistributedSampler does.
//
//   braidrun --standalone --nproc-per-node=2 bazel-bin/examples/train_mlp --epochs=3
//   braidrun --standalone --nproc-per-node=2 bazel-bin/examples/train_mlp --check
//
// Models: --model=small is DDP's tutorial model, Linear(1000,512) -> ReLU ->
// Linear(512,10); --model=large is 1000 -> 4096 -> 4096 -> 1024 -> 10
// (25.1M parameters). Backward calls MarkReady as each layer's gradients come
// out; the gradients live in the reducer's buckets (gradient_as_bucket_view),
// so there is no copy in or out.
//
// Flags: `train_mlp --help` lists them (--name=value or --name value, '-' or
// '_' in names). --checkpoint-dir writes each checkpoint with write, fsync,
// rename, fsync DIR; --check compares every rank's parameters bit for bit, and
// with one process trained on the combined batches within 1e-4.
//
// --device=cuda trains the same model on GPUs (device_mlp.h): every step
// queued on a compute stream, the gradients all-reduced on NCCL in buckets
// ordered against that stream by events, as DDP on GPUs.
//
// Run without a launcher (no RANK), it trains as a single process.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/flags.h"
#include "base/launch_env.h"
#include "base/logging.h"
#include "base/status.h"
#include "examples/device_mlp.h"
#include "examples/mlp.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "tensor/device.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace braid::examples {
namespace {

struct Trainer {
  Flags flags;
  ProcessGroup* group;
  Dataset data;
  std::unique_ptr<Mlp> model;  // --device=cuda: the host copy, brought up to date by SyncHostModel
  std::vector<std::vector<float>> initial_grads;  // the reducer copies these into its buckets
  // --device=cuda: the model on the GPU, queued on `compute`.
  std::unique_ptr<Stream> compute;
  std::unique_ptr<DeviceMlp> device_model;
  std::vector<Tensor> device_initial_grads;
  std::unique_ptr<Reducer> reducer;  // after the stream: destroyed before it, while the stream it drains exists
  std::string device_name;  // "cuda:0"
  std::vector<std::vector<int>> batches;  // the epoch's, this rank's
  double loss_sum = 0;

  std::vector<float*> Grads() { return ReducerGrads(*reducer); }

  absl::Status BeginEpoch(std::vector<std::vector<int>> epoch_batches) {
    batches = std::move(epoch_batches);
    loss_sum = 0;
    return device_model != nullptr ? device_model->BeginEpoch(batches) : absl::OkStatus();
  }

  // Step b of the epoch: one data-parallel step. On the GPU it is only
  // queued (the host does not wait for it).
  absl::Status Step(size_t b) {
    absl::optional<Reducer::NoSyncScope> no_sync;
    if (flags.no_sync) no_sync.emplace(reducer->NoSync());
    BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
    absl::Status marked;
    auto ready = [&](int i) { marked.Update(reducer->MarkReady(i)); };
    if (device_model != nullptr) {
      BRAID_RETURN_IF_ERROR(device_model->Step(b, Grads(), ready));
    } else {
      loss_sum += model->Step(data, batches[b], Grads(), ready);
    }
    BRAID_RETURN_IF_ERROR(marked);
    BRAID_RETURN_IF_ERROR(reducer->Finalize());
    // Grads() again: the views move once, after the first step.
    if (device_model != nullptr) return device_model->Sgd(Grads(), static_cast<float>(flags.lr));
    model->Sgd(Grads(), static_cast<float>(flags.lr));
    return absl::OkStatus();
  }

  // The epoch's mean local loss.
  absl::StatusOr<double> EpochLoss() {
    if (device_model != nullptr) return device_model->EpochLoss();
    return batches.empty() ? 0 : loss_sum / static_cast<double>(batches.size());
  }

  // `model` holds the trained parameters (waits for the GPU).
  absl::Status SyncHostModel() { return device_model != nullptr ? device_model->Download(*model) : absl::OkStatus(); }
};

absl::Status Check(Trainer& t, const std::vector<std::vector<float>>& initial) {
  ProcessGroup& group = *t.group;
  const int world = group.size();
  const int steps = t.flags.check_steps;
  std::vector<std::vector<int>> batches =
      RankBatches(t.data.size, 0, t.flags.seed, group.rank(), world, t.flags.batch_size);
  if (steps > static_cast<int>(batches.size())) return absl::InvalidArgumentError("--check-steps exceeds an epoch");
  BRAID_RETURN_IF_ERROR(t.BeginEpoch(std::move(batches)));
  for (int s = 0; s < steps; ++s) BRAID_RETURN_IF_ERROR(t.Step(static_cast<size_t>(s)));
  BRAID_RETURN_IF_ERROR(t.SyncHostModel());
  // (a) bit-identical on every rank.
  BRAID_ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({1}, DType::kI64));
  mine.data<int64_t>()[0] = static_cast<int64_t>(HashParams(*t.model));
  BRAID_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({world}, DType::kI64));
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, group.comm().AllGather(mine, all));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(120))));
  bool identical = true;
  for (int r = 0; r < world; ++r) identical = identical && all.data<int64_t>()[r] == all.data<int64_t>()[0];

  // (b) rank 0: one process, same start, each step over the union of every
  // rank's batch for that step, mean loss over the combined batch.
  BRAID_ASSIGN_OR_RETURN(Tensor verdict, Tensor::Zeros({2}, DType::kF64));  // [max diff, ok]
  if (group.rank() == 0) {
    Mlp reference(LayerSizes(t.flags.model), t.flags.seed);
    reference.params() = initial;
    std::vector<std::vector<float>> grads;
    std::vector<float*> grad_ptrs;
    for (const auto& p : reference.params()) grads.emplace_back(p.size());
    for (auto& g : grads) grad_ptrs.push_back(g.data());
    std::vector<std::vector<std::vector<int>>> per_rank;
    for (int r = 0; r < world; ++r) per_rank.push_back(RankBatches(t.data.size, 0, t.flags.seed, r, world, t.flags.batch_size));
    for (int s = 0; s < steps; ++s) {
      std::vector<int> combined;
      for (int r = 0; r < world; ++r) {
        const auto& b = per_rank[static_cast<size_t>(r)][static_cast<size_t>(s)];
        combined.insert(combined.end(), b.begin(), b.end());
      }
      reference.Step(t.data, combined, grad_ptrs, [](int) {});
      reference.Sgd(grad_ptrs, static_cast<float>(t.flags.lr));
    }
    const double max_diff = MaxAbsDifference(reference.params(), t.model->params());
    verdict.data<double>()[0] = max_diff;
    verdict.data<double>()[1] = (identical && max_diff <= 1e-4) ? 1 : 0;
  }
  BRAID_ASSIGN_OR_RETURN(work, group.comm().Broadcast(verdict, 0));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(600))));
  const double max_diff = verdict.data<double>()[0];
  if (group.rank() == 0) {
    std::printf("check: %d ranks, %d steps of batch %d per rank (%s model, %lld parameters, on %s)\n", world, steps,
                t.flags.batch_size, t.flags.model.c_str(), static_cast<long long>(t.model->num_parameters()),
                t.device_model != nullptr ? t.device_name.c_str() : "the CPU");
    std::printf("check: parameters bit-identical on every rank: %s\n", identical ? "yes" : "NO");
    std::printf("check: max |difference| from one process over the combined batch: %.3g (tolerance 1e-4): %s\n",
                max_diff, max_diff <= 1e-4 ? "ok" : "TOO LARGE");
    std::fflush(stdout);
  }
  if (!identical) return absl::InternalError("check failed: parameters differ between ranks");
  if (verdict.data<double>()[1] != 1) {
    return absl::InternalError(absl::StrCat("check failed: max difference from the reference ", max_diff));
  }
  if (group.rank() == 0) std::printf("check: PASSED\n");
  return absl::OkStatus();
}

absl::Status Bench(Trainer& t) {
  ProcessGroup& group = *t.group;
  std::vector<std::vector<int>> batches =
      RankBatches(t.data.size, 0, t.flags.seed, group.rank(), group.size(), t.flags.batch_size);
  if (batches.empty()) return absl::InvalidArgumentError("--samples too small for one batch");
  const size_t count = batches.size();
  BRAID_RETURN_IF_ERROR(t.BeginEpoch(std::move(batches)));
  constexpr int kWarmup = 3;
  auto barrier = [&]() -> absl::Status {
    BRAID_ASSIGN_OR_RETURN(WorkHandle work, group.comm().Barrier());
    return work->Wait(DeadlineIn(absl::Seconds(600)));
  };
  absl::Duration hidden, communication;
  absl::Time start;
  for (int s = 0; s < kWarmup + t.flags.bench_steps; ++s) {
    if (s == kWarmup) {
      BRAID_RETURN_IF_ERROR(barrier());
      start = absl::Now();
    }
    BRAID_RETURN_IF_ERROR(t.Step(static_cast<size_t>(s) % count));
    if (s >= kWarmup && !t.flags.no_sync) {
      const ReducerStats stats = t.reducer->last_stats();
      hidden += stats.hidden;
      communication += stats.communication;
    }
  }
  BRAID_RETURN_IF_ERROR(t.SyncHostModel());  // the GPU's queued steps count
  const absl::Duration elapsed = absl::Now() - start;
  BRAID_RETURN_IF_ERROR(barrier());  // unsynced ranks: everyone done before the group goes away
  if (group.rank() == 0) {
    const int n = t.flags.bench_steps;
    std::printf(
        "{\"model\": \"%s\", \"ranks\": %d, \"sync\": %s, \"batch\": %d, \"steps\": %d, \"step_ms\": %.3f, "
        "\"comm_ms\": %.3f, \"hidden_ms\": %.3f}\n",
        t.flags.model.c_str(), group.size(), t.flags.no_sync ? "false" : "true", t.flags.batch_size, n,
        absl::ToDoubleMilliseconds(elapsed) / n, absl::ToDoubleMilliseconds(communication) / n,
        absl::ToDoubleMilliseconds(hidden) / n);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// --device=cuda: the model and the data on GPU LOCAL_RANK % (GPUs here),
// broadcast from rank 0 there, and the reducer on that GPU's communicator,
// ordered on the compute stream.
absl::Status SetUpDevice(Trainer& t) {
  const int gpus = CudaDeviceCount();
  if (gpus <= 0) {
    return absl::FailedPreconditionError("--device=cuda: no usable GPU (cudaGetDeviceCount failed or found none)");
  }
  BRAID_ASSIGN_OR_RETURN(DeviceRuntime * runtime, DeviceRuntime::For(Device::Cuda(t.group->env().local_rank % gpus)));
  t.device_name = runtime->name();
  BRAID_ASSIGN_OR_RETURN(t.compute, runtime->NewStream());
  BRAID_ASSIGN_OR_RETURN(t.device_model, DeviceMlp::Create(*runtime, *t.compute, *t.model, t.data, t.flags.batch_size));
  BRAID_RETURN_IF_ERROR(Reducer::BroadcastParameters(*t.group, t.device_model->ParamTensors(), 0));
  BRAID_RETURN_IF_ERROR(t.SyncHostModel());
  BRAID_ASSIGN_OR_RETURN(t.reducer, MakeDeviceReducer(*t.group, t.flags, *t.model, *runtime, *t.compute, nullptr,
                                                      &t.device_initial_grads));
  return absl::OkStatus();
}

// Where training starts: rank 0 reads the newest checkpoint; the epoch and
// the parameters go to everyone (the broadcast also makes every replica
// start equal, as DDP's constructor does).
absl::StatusOr<int> StartEpoch(Trainer& t) {
  const Flags& flags = t.flags;
  int start_epoch = 0;
  if (!flags.checkpoint_dir.empty() && t.group->rank() == 0) {
    if (::mkdir(flags.checkpoint_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("mkdir ", flags.checkpoint_dir));
    }
    BRAID_ASSIGN_OR_RETURN(start_epoch, LoadNewestCheckpoint(flags.checkpoint_dir, *t.model));
    if (start_epoch > 0) std::printf("resumed from %s\n", CheckpointPath(flags.checkpoint_dir, start_epoch).c_str());
  }
  BRAID_ASSIGN_OR_RETURN(Tensor epoch_tensor, Tensor::Empty({1}, DType::kI64));
  epoch_tensor.data<int64_t>()[0] = start_epoch;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, t.group->comm().Broadcast(epoch_tensor, 0));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(600))));
  return static_cast<int>(epoch_tensor.data<int64_t>()[0]);
}

// One epoch: its steps, the mean loss over every rank, and rank 0's checkpoint.
absl::Status TrainEpoch(Trainer& t, int epoch, StepLog& step_log) {
  const Flags& flags = t.flags;
  ProcessGroup& group = *t.group;
  const std::vector<std::vector<int>> batches =
      RankBatches(flags.samples, epoch, flags.seed, group.rank(), group.size(), flags.batch_size);
  const absl::Time start = absl::Now();
  const size_t count = batches.size();
  BRAID_RETURN_IF_ERROR(t.BeginEpoch(batches));
  for (size_t b = 0; b < count; ++b) {
    BRAID_RETURN_IF_ERROR(t.Step(b));
    step_log.Finished(static_cast<int64_t>(epoch) * static_cast<int64_t>(batches.size()) + static_cast<int64_t>(b),
                      group.size());
    if (flags.step_sleep_ms > 0) absl::SleepFor(absl::Milliseconds(flags.step_sleep_ms));
  }
  // The epoch's mean loss over every rank.
  BRAID_ASSIGN_OR_RETURN(Tensor loss, Tensor::Empty({1}, DType::kF64));
  BRAID_ASSIGN_OR_RETURN(loss.data<double>()[0], t.EpochLoss());
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, group.comm().AllReduce(loss, ReduceOp::kAvg));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(600))));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (group.rank() == 0) {
    const double samples = static_cast<double>(batches.size()) * flags.batch_size * group.size();
    std::printf("epoch %d/%d: loss %.4f, %.0f samples/s, %.2f ms/step\n", epoch + 1, flags.epochs,
                loss.data<double>()[0], samples / seconds, 1000.0 * seconds / std::max<size_t>(1, batches.size()));
    std::fflush(stdout);
    if (!flags.checkpoint_dir.empty()) {
      BRAID_RETURN_IF_ERROR(t.SyncHostModel());
      BRAID_RETURN_IF_ERROR(SaveCheckpoint(flags.checkpoint_dir, epoch + 1, *t.model));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const Flags& flags) {
  if (std::getenv(launch_env::kRank) == nullptr && std::getenv(launch_env::kOmpiRank) == nullptr) {
    ::setenv(launch_env::kRank, "0", 1);  // no launcher: one process
    ::setenv(launch_env::kWorldSize, "1", 1);
  }
  if (flags.recovery == "in-place") {
    if (flags.bench_steps > 0 || flags.no_sync || flags.device != "cpu") {
      return absl::InvalidArgumentError(
          "--recovery=in-place trains only on CPUs (not with --bench-steps, --no-sync, --device=cuda)");
    }
    if (flags.check && !flags.checkpoint_dir.empty()) {
      return absl::InvalidArgumentError("--recovery=in-place --check replays from the start: no --checkpoint-dir");
    }
    return TrainInPlace(flags);
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, InitFromEnv());
  Trainer t;
  t.flags = flags;
  t.group = group.get();
  t.data = Dataset::Make(flags.samples, flags.seed);
  t.model = std::make_unique<Mlp>(LayerSizes(flags.model), flags.seed);

  BRAID_ASSIGN_OR_RETURN(const int start_epoch, StartEpoch(t));
  if (flags.device == "cuda") {
    BRAID_RETURN_IF_ERROR(SetUpDevice(t));
  } else {
    BRAID_RETURN_IF_ERROR(Reducer::BroadcastParameters(*group, ParamTensors(*t.model), 0));
    BRAID_ASSIGN_OR_RETURN(t.reducer, MakeReducer(*group, flags, *t.model, &t.initial_grads));
  }
  const std::vector<std::vector<float>> initial = t.model->params();

  if (flags.check) return Check(t, initial);
  if (flags.bench_steps > 0) return Bench(t);

  if (group->rank() == 0) {
    std::printf("train_mlp: %s model, %lld parameters, %d ranks, batch %d per rank, %d samples, lr %g, on %s\n",
                flags.model.c_str(), static_cast<long long>(t.model->num_parameters()), group->size(),
                flags.batch_size, flags.samples, flags.lr, flags.device == "cuda" ? "GPUs" : "CPUs");
    std::fflush(stdout);
  }
  StepLog step_log(flags.step_log, group->rank());
  for (int epoch = start_epoch; epoch < flags.epochs; ++epoch) BRAID_RETURN_IF_ERROR(TrainEpoch(t, epoch, step_log));
  // A fingerprint of the trained model: equal runs (an interrupted and resumed
  // one included) print the same.
  BRAID_RETURN_IF_ERROR(t.SyncHostModel());
  if (group->rank() == 0) {
    std::printf("final parameters: hash %016llx\n", static_cast<unsigned long long>(HashParams(*t.model)));
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace braid::examples

int main(int argc, char** argv) {
  braid::examples::Flags flags;
  const std::vector<braid::Flag> flag_list = braid::examples::TrainFlags(&flags);
  bool help = false;
  const absl::Status parsed = braid::ParseFlags(argc, argv, flag_list, &help);
  if (!parsed.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  if (help) {
    std::fputs(braid::Usage("train_mlp",
                            "A data-parallel MLP trainer on braid's Reducer; run it under braidrun (or alone, as one "
                            "process).",
                            flag_list)
                   .c_str(),
               stdout);
    return 0;
  }
  const absl::Status status = braid::examples::Run(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
