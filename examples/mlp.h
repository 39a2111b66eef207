// The model, data and checkpoints of examples/train_mlp (see train_mlp.cc),
// shared by its two training loops: restart-from-checkpoint (train_mlp.cc)
// and in-place recovery (in_place.cc).
#ifndef BRAID_EXAMPLES_MLP_H_
#define BRAID_EXAMPLES_MLP_H_

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "tensor/tensor.h"

namespace braid::examples {

inline constexpr int kInputs = 1000;
inline constexpr int kClasses = 10;

struct Flags {
  int epochs = 3;
  int batch_size = 64;
  double lr = 0.05;
  std::string model = "small";
  int samples = 8192;
  uint64_t seed = 1;
  std::string checkpoint_dir;
  bool check = false;
  int check_steps = 5;
  std::string hook = "allreduce";
  int bench_steps = 0;
  bool no_sync = false;
  // "restart" (braidrun restarts everyone from the newest checkpoint) or
  // "in-place" (survivors regroup and go on: in_place.cc).
  std::string recovery = "restart";
  int min_ranks = 1;         // in-place: fewer survivors fall back to a restart
  std::string step_log;      // a directory: each process appends "step world unix_ns" per finished step
  int step_sleep_ms = 0;     // sleep after each step (a stand-in for a bigger model's compute)
  bool verify_steps = false; // in-place: every rank's parameters compared (hash) after every step
};

// The --step-log file of one process: DIR/<launch rank>.<pid>.steps.
class StepLog {
 public:
  StepLog() = default;
  StepLog(const std::string& dir, int rank);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;
  // Appends one line for global step `step`, just finished by `world` ranks.
  void Finished(int64_t step, int world);

 private:
  int fd_ = -1;
};

// splitmix64: a tiny deterministic generator, identical on every rank.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }  // [-1, 1)
};


// random linear teacher, so the loss really goes down.
struct Dataset {
  int size = 0;
  std::vector<float> x;  // size x kInputs
  std::vector<int> y;

  static Dataset Make(int size, uint64_t seed);
};

// One epoch's sample order, as torch.utils.data.DistributedSampler(shuffle=True,
// drop_last=False) makes it: a permutation (the same on every rank), padded to
// a multiple of `world` by repeating its start.
std::vector<int> EpochOrder(int size, int epoch, uint64_t seed, int world);
// Rank `rank`'s batches of one epoch: it takes positions rank, rank + world,
// ... of EpochOrder, in batches of `batch` (the last partial one dropped, as
// DataLoader(drop_last=True)). Step b of every rank covers positions
// [b * batch * world, (b + 1) * batch * world).
std::vector<std::vector<int>> RankBatches(int size, int epoch, uint64_t seed, int rank, int world, int batch);

std::vector<int> LayerSizes(const std::string& model);

// The MLP: parameters [W1, b1, W2, b2, ...], W_l of shape [out, in] (as
// torch.nn.Linear). Activations are kept per batch for backward.
class Mlp {
 public:
  explicit Mlp(std::vector<int> sizes, uint64_t seed) : sizes_(std::move(sizes)) {
    Rng rng{seed * 31 + 5};
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
      const int in = sizes_[l];
      const int out = sizes_[l + 1];
      const float bound = 1.0f / std::sqrt(static_cast<float>(in));  // torch's default Linear init range
      std::vector<float> w(static_cast<size_t>(out) * in), b(static_cast<size_t>(out));
      for (float& v : w) v = bound * rng.Uniform();
      for (float& v : b) v = bound * rng.Uniform();
      params_.push_back(std::move(w));
      params_.push_back(std::move(b));
    }
  }

  int layers() const { return static_cast<int>(sizes_.size()) - 1; }
  std::vector<std::vector<float>>& params() { return params_; }
  Shape ParamShape(size_t i) const {
    const size_t l = i / 2;
    if (i % 2 == 0) return {sizes_[l + 1], sizes_[l]};
    return {sizes_[l + 1]};
  }
  int64_t num_parameters() const {
    int64_t n = 0;
    for (const auto& p : params_) n += static_cast<int64_t>(p.size());
    return n;
  }

  // Forward and backward over `batch` rows of the data set; writes every
  // gradient into grads[i] (overwriting) and calls ready(i) as soon as
  // gradient i is final, last layer first. Returns the mean loss.
  template <typename Ready>
  float Step(const Dataset& data, const std::vector<int>& batch, const std::vector<float*>& grads, Ready&& ready) {
    const int n = static_cast<int>(batch.size());
    const int L = layers();
    acts_.resize(static_cast<size_t>(L) + 1);
    acts_[0].resize(static_cast<size_t>(n) * kInputs);
    for (int r = 0; r < n; ++r) {
      std::memcpy(&acts_[0][static_cast<size_t>(r) * kInputs], &data.x[static_cast<size_t>(batch[static_cast<size_t>(r)]) * kInputs],
                  sizeof(float) * kInputs);
    }
    for (int l = 0; l < L; ++l) {
      const int in = sizes_[static_cast<size_t>(l)];
      const int out = sizes_[static_cast<size_t>(l) + 1];
      std::vector<float>& z = acts_[static_cast<size_t>(l) + 1];
      z.resize(static_cast<size_t>(n) * out);
      const float* b = params_[2 * static_cast<size_t>(l) + 1].data();
      for (int r = 0; r < n; ++r) std::memcpy(&z[static_cast<size_t>(r) * out], b, sizeof(float) * out);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, acts_[static_cast<size_t>(l)].data(), in,
                  params_[2 * static_cast<size_t>(l)].data(), in, 1.0f, z.data(), out);
      if (l + 1 < L) {
        for (float& v : z) v = v > 0 ? v : 0;  // ReLU in place: backward uses (a > 0)
      }
    }
    // Softmax cross-entropy, mean over the batch.
    std::vector<float>& logits = acts_[static_cast<size_t>(L)];
    std::vector<float> dz(static_cast<size_t>(n) * kClasses);
    double loss = 0;
    for (int r = 0; r < n; ++r) {
      const float* row = &logits[static_cast<size_t>(r) * kClasses];
      const float top = *std::max_element(row, row + kClasses);
      double sum = 0;
      for (int c = 0; c < kClasses; ++c) sum += std::exp(static_cast<double>(row[c] - top));
      const int label = data.y[static_cast<size_t>(batch[static_cast<size_t>(r)])];
      loss += std::log(sum) - (row[label] - top);
      for (int c = 0; c < kClasses; ++c) {
        const double p = std::exp(static_cast<double>(row[c] - top)) / sum;
        dz[static_cast<size_t>(r) * kClasses + c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) / n);
      }
    }
    for (int l = L - 1; l >= 0; --l) {
      const int in = sizes_[static_cast<size_t>(l)];
      const int out = sizes_[static_cast<size_t>(l) + 1];
      float* db = grads[2 * static_cast<size_t>(l) + 1];
      for (int o = 0; o < out; ++o) db[o] = 0;
      for (int r = 0; r < n; ++r) {
        for (int o = 0; o < out; ++o) db[o] += dz[static_cast<size_t>(r) * out + o];
      }
      ready(2 * l + 1);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dz.data(), out,
                  acts_[static_cast<size_t>(l)].data(), in, 0.0f, grads[2 * static_cast<size_t>(l)], in);
      ready(2 * l);
      if (l == 0) break;
      std::vector<float> da(static_cast<size_t>(n) * in);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dz.data(), out,
                  params_[2 * static_cast<size_t>(l)].data(), in, 0.0f, da.data(), in);
      const std::vector<float>& a = acts_[static_cast<size_t>(l)];
      for (size_t k = 0; k < da.size(); ++k) da[k] = a[k] > 0 ? da[k] : 0;
      dz = std::move(da);
    }
    return static_cast<float>(loss / n);
  }

  void Sgd(const std::vector<float*>& grads, float lr) {
    for (size_t i = 0; i < params_.size(); ++i) {
      cblas_saxpy(static_cast<int>(params_[i].size()), -lr, grads[i], 1, params_[i].data(), 1);
    }
  }

 private:
  std::vector<int> sizes_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> acts_;
};

// FNV-1a over every parameter's bytes: equal models print the same.
uint64_t HashParams(Mlp& model);

// Checkpoints: "BRAIDMLP" | epoch i64 | count i64 | per tensor: numel i64, floats | FNV-1a u64 of all before.
std::string CheckpointPath(const std::string& dir, int epoch);
// Writes with write, fsync, rename, fsync DIR.
absl::Status SaveCheckpoint(const std::string& dir, int epoch, Mlp& model);
// The newest checkpoint in `dir` that reads back whole and fits the model;
// returns its epoch (0 = none). Damaged files are skipped with a warning.
absl::StatusOr<int> LoadNewestCheckpoint(const std::string& dir, Mlp& model);

// Views of the model's parameters.
std::vector<Tensor> ParamTensors(Mlp& model);

// The reducer both training loops use (collective): gradients as bucket
// views (no copy in or out), the hook --hook names, parameters named
// fc<l>.weight / fc<l>.bias. `initial` receives the zero gradients handed to
// it and must outlive it.
absl::StatusOr<std::unique_ptr<Reducer>> MakeReducer(ProcessGroup& group, const Flags& flags, Mlp& model,
                                                     std::vector<std::vector<float>>* initial);
// The reducer's gradients (its bucket views), in parameter order.
std::vector<float*> ReducerGrads(const Reducer& reducer);

// The in-place recovery loop (--recovery=in-place), in_place.cc.
absl::Status TrainInPlace(const Flags& flags);

}  // namespace braid::examples

#endif  // BRAID_EXAMPLES_MLP_H_
