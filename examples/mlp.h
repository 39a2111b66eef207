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
#include "base/flags.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "tensor/stream.h"
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
  std::string device = "cpu";  // "cuda": the model on GPU LOCAL_RANK % (GPUs here), the reducer on NCCL
};

// train_mlp's flags (base/flags.h), writing into *f, which must outlive
// them; --device=cuda is refused (exit 2) by a build without --config=cuda.
std::vector<Flag> TrainFlags(Flags* f);

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

// The pieces of a training step, on host memory: Mlp::Step is made of them,
// and so is the device trainer's host form (device_mlp.cc), which is
// therefore the CPU trainer bit for bit.
//
// out_x[r] = x[rows[r]] (kInputs floats), out_y[r] = y[rows[r]], n rows.
void GatherRows(const float* x, const int* y, const int* rows, int n, float* out_x, int* out_y);
// c[m x n] = op(a) op(b) + beta c, row-major, op = transpose where asked
// (cblas_sgemm, alpha 1, one OpenBLAS thread).
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b, float beta, float* c);
// Every row of z[rows x cols] = b.
void BiasRows(float* z, const float* b, int rows, int cols);
void Relu(float* z, size_t count);
// da[i] = 0 where a[i] <= 0 (a: the ReLU's output).
void ReluBackward(float* da, const float* a, size_t count);
// Softmax cross-entropy of `rows` rows of kClasses logits:
// dz = (softmax - onehot(label)) / rows; returns the summed row losses, and
// writes each row's into row_losses unless it is null.
double SoftmaxCrossEntropy(const float* logits, const int* labels, int rows, float* dz, float* row_losses);
// db[c] = sum over rows of dz[r][c], rows in order.
void ColumnSums(const float* dz, int rows, int cols, float* db);
// y -= lr * x, `count` elements (SGD).
void SgdUpdate(float lr, const float* x, float* y, size_t count);

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
  // Every layer's width, inputs first (LayerSizes).
  const std::vector<int>& sizes() const { return sizes_; }
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
    std::vector<int> labels(static_cast<size_t>(n));
    GatherRows(data.x.data(), data.y.data(), batch.data(), n, acts_[0].data(), labels.data());
    for (int l = 0; l < L; ++l) {
      const int in = sizes_[static_cast<size_t>(l)];
      const int out = sizes_[static_cast<size_t>(l) + 1];
      std::vector<float>& z = acts_[static_cast<size_t>(l) + 1];
      z.resize(static_cast<size_t>(n) * out);
      BiasRows(z.data(), params_[2 * static_cast<size_t>(l) + 1].data(), n, out);
      Gemm(false, true, n, out, in, acts_[static_cast<size_t>(l)].data(), params_[2 * static_cast<size_t>(l)].data(),
           1.0f, z.data());
      if (l + 1 < L) Relu(z.data(), z.size());  // in place: backward uses (a > 0)
    }
    std::vector<float> dz(static_cast<size_t>(n) * kClasses);
    const double loss = SoftmaxCrossEntropy(acts_[static_cast<size_t>(L)].data(), labels.data(), n, dz.data(), nullptr);
    for (int l = L - 1; l >= 0; --l) {
      const int in = sizes_[static_cast<size_t>(l)];
      const int out = sizes_[static_cast<size_t>(l) + 1];
      ColumnSums(dz.data(), n, out, grads[2 * static_cast<size_t>(l) + 1]);
      ready(2 * l + 1);
      Gemm(true, false, out, in, n, dz.data(), acts_[static_cast<size_t>(l)].data(), 0.0f, grads[2 * static_cast<size_t>(l)]);
      ready(2 * l);
      if (l == 0) break;
      std::vector<float> da(static_cast<size_t>(n) * in);
      Gemm(false, false, n, in, out, dz.data(), params_[2 * static_cast<size_t>(l)].data(), 0.0f, da.data());
      ReluBackward(da.data(), acts_[static_cast<size_t>(l)].data(), da.size());
      dz = std::move(da);
    }
    return static_cast<float>(loss / n);
  }

  void Sgd(const std::vector<float*>& grads, float lr) {
    for (size_t i = 0; i < params_.size(); ++i) {
      SgdUpdate(lr, grads[i], params_[i].data(), params_[i].size());
    }
  }

 private:
  std::vector<int> sizes_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> acts_;
};

// The largest |a - b| over every element of two models' parameters (same shapes).
double MaxAbsDifference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b);

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
// As MakeReducer, for a model on `runtime`'s device: zero gradients there
// (kept in *initial, which must outlive the reducer), the buckets reduced on
// `device_comm` (null: the group's communicator for that device, NCCL for a
// GPU) ordered against `compute`, the stream backward runs on.
absl::StatusOr<std::unique_ptr<Reducer>> MakeDeviceReducer(ProcessGroup& group, const Flags& flags, Mlp& model,
                                                           DeviceRuntime& runtime, Stream& compute,
                                                           Communicator* device_comm, std::vector<Tensor>* initial);
// The reducer's gradients (its bucket views), in parameter order.
std::vector<float*> ReducerGrads(const Reducer& reducer);

// The in-place recovery loop (--recovery=in-place), in_place.cc.
absl::Status TrainInPlace(const Flags& flags);

}  // namespace braid::examples

#endif  // BRAID_EXAMPLES_MLP_H_
