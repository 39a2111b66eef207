// train_mlp's flags (mlp.h's Flags), shared by both training loops.
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
#include "examples/mlp.h"

namespace braid::examples {
namespace {

// A non-negative int; `positive` also refuses 0.
std::function<absl::Status(absl::string_view)> Integer(int* out, bool positive = false) {
  return [out, positive](absl::string_view v) -> absl::Status {
    int n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 0 || (positive && n == 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", v, "\" is not a ", positive ? "positive" : "non-negative", " integer"));
    }
    *out = n;
    return absl::OkStatus();
  };
}

std::function<absl::Status(absl::string_view)> OneOf(std::string* out, std::vector<std::string> allowed) {
  return [out, allowed](absl::string_view v) -> absl::Status {
    for (const std::string& a : allowed) {
      if (v == a) {
        *out = a;
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("\"", v, "\": want ", absl::StrJoin(allowed, ", ")));
  };
}

std::function<absl::Status(absl::string_view)> Boolean(bool* out) {
  return [out](absl::string_view v) -> absl::Status {
    *out = v == "true";
    return absl::OkStatus();
  };
}

std::function<absl::Status(absl::string_view)> Text(std::string* out) {
  return [out](absl::string_view v) -> absl::Status {
    *out = std::string(v);
    return absl::OkStatus();
  };
}

}  // namespace

std::vector<Flag> TrainFlags(Flags* f) {
  std::vector<Flag> flags;
  flags.push_back({0, "epochs", "N", "epochs to train (default 3)", Integer(&f->epochs)});
  flags.push_back({0, "batch-size", "N", "samples per step, per rank (default 64)", Integer(&f->batch_size, true)});
  flags.push_back({0, "lr", "X", "SGD learning rate (default 0.05)", [f](absl::string_view v) -> absl::Status {
                     double lr = 0;
                     if (!absl::SimpleAtod(v, &lr) || !(lr > 0)) {
                       return absl::InvalidArgumentError(absl::StrCat("\"", v, "\" is not a positive number"));
                     }
                     f->lr = lr;
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "model", "small|large",
                   "small: DDP's tutorial model, 1000 -> 512 -> 10 (default); large: 1000 -> 4096 -> 4096 -> 1024 -> 10",
                   OneOf(&f->model, {"small", "large"})});
  flags.push_back({0, "samples", "N", "synthetic data set size (default 8192)", Integer(&f->samples)});
  flags.push_back({0, "seed", "N", "data and initialisation seed (default 1)", [f](absl::string_view v) -> absl::Status {
                     int seed = 0;
                     if (!absl::SimpleAtoi(v, &seed) || seed < 0) {
                       return absl::InvalidArgumentError(absl::StrCat("\"", v, "\" is not a non-negative integer"));
                     }
                     f->seed = static_cast<uint64_t>(seed);
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "checkpoint-dir", "DIR",
                   "rank 0 writes DIR/ckpt-EEEEEE.bin after every epoch; every run resumes from the newest valid one",
                   Text(&f->checkpoint_dir)});
  flags.push_back({0, "check", "",
                   "train --check-steps steps, then verify that every rank holds bit-identical parameters matching one "
                   "process trained on the combined batches; exit 1 otherwise. With --recovery=in-place: train every "
                   "epoch, then replay every finished step (at the world size it ran at) in one process and compare (for runs of "
                   "a few hundred steps: beyond, rounding differences can flip a ReLU and grow past the tolerance)",
                   Boolean(&f->check)});
  flags.push_back({0, "check-steps", "N", "steps --check trains (default 5)", Integer(&f->check_steps)});
  flags.push_back({0, "hook", "allreduce|fp16|bf16", "the reducer's communication hook (default allreduce)",
                   OneOf(&f->hook, {"allreduce", "fp16", "bf16"})});
  flags.push_back({0, "bench-steps", "N",
                   "time N steps after 3 warm-up steps and print one JSON line (rank 0) instead of training epochs",
                   Integer(&f->bench_steps)});
  flags.push_back({0, "no-sync", "", "every iteration in a NoSync scope (for the bench)", Boolean(&f->no_sync)});
  flags.push_back({0, "recovery", "restart|in-place",
                   "after a rank dies: braidrun restarts everyone from the newest checkpoint (restart, the default), "
                   "or the survivors regroup in place and go on (in-place; run under braidrun "
                   "--restart-policy=replace so the dead rank is replaced)",
                   OneOf(&f->recovery, {"restart", "in-place"})});
  flags.push_back({0, "min-ranks", "N", "in-place: with fewer ranks left, fall back to a restart (default 1)",
                   Integer(&f->min_ranks, true)});
  flags.push_back({0, "step-log", "DIR", "append \"step world unix_ns\" per finished step to DIR/<rank>.<pid>.steps",
                   Text(&f->step_log)});
  flags.push_back({0, "step-sleep-ms", "N", "sleep N ms after each step (default 0)", Integer(&f->step_sleep_ms)});
  flags.push_back({0, "device", "cpu|cuda",
                   "cuda: the model, its data and gradients on GPU LOCAL_RANK % (GPUs on the host), every step queued "
                   "on a stream, the reducer on NCCL (host-staged where ranks share a GPU); needs a --config=cuda build",
                   [f](absl::string_view v) -> absl::Status {
                     if (v != "cpu" && v != "cuda") return absl::InvalidArgumentError(absl::StrCat("\"", v, "\": want cpu, cuda"));
#ifndef BRAID_WITH_CUDA
                     if (v == "cuda") {
                       return absl::InvalidArgumentError("\"cuda\": this train_mlp was built without --config=cuda");
                     }
#endif
                     f->device = std::string(v);
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "verify-steps", "", "in-place: compare every rank's parameters after every step",
                   Boolean(&f->verify_steps)});
  return flags;
}

}  // namespace braid::examples
