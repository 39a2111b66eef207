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
// Run without a launcher (no RANK), it trains as a single process.
#include <cblas.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
#include "base/logging.h"
#include "base/status.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "tensor/tensor.h"

namespace braid::examples {
namespace {

constexpr int kInputs = 1000;
constexpr int kClasses = 10;

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
};

// The flags (base/flags.h), writing into *f, which must outlive them.
std::vector<Flag> TrainFlags(Flags* f) {
  // A non-negative int; `positive` also refuses 0.
  auto integer = [](int* out, bool positive = false) {
    return [out, positive](absl::string_view v) -> absl::Status {
      int n = 0;
      if (!absl::SimpleAtoi(v, &n) || n < 0 || (positive && n == 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", v, "\" is not a ", positive ? "positive" : "non-negative", " integer"));
      }
      *out = n;
      return absl::OkStatus();
    };
  };
  auto one_of = [](std::string* out, std::vector<std::string> allowed) {
    return [out, allowed](absl::string_view v) -> absl::Status {
      for (const std::string& a : allowed) {
        if (v == a) {
          *out = a;
          return absl::OkStatus();
        }
      }
      return absl::InvalidArgumentError(absl::StrCat("\"", v, "\": want ", absl::StrJoin(allowed, ", ")));
    };
  };
  auto boolean = [](bool* out) {
    return [out](absl::string_view v) -> absl::Status {
      *out = v == "true";
      return absl::OkStatus();
    };
  };
  std::vector<Flag> flags;
  flags.push_back({0, "epochs", "N", "epochs to train (default 3)", integer(&f->epochs)});
  flags.push_back({0, "batch-size", "N", "samples per step, per rank (default 64)", integer(&f->batch_size, true)});
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
                   one_of(&f->model, {"small", "large"})});
  flags.push_back({0, "samples", "N", "synthetic data set size (default 8192)", integer(&f->samples)});
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
                   [f](absl::string_view v) -> absl::Status {
                     f->checkpoint_dir = std::string(v);
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "check", "",
                   "train --check-steps steps, then verify that every rank holds bit-identical parameters matching one "
                   "process trained on the combined batches; exit 1 otherwise",
                   boolean(&f->check)});
  flags.push_back({0, "check-steps", "N", "steps --check trains (default 5)", integer(&f->check_steps)});
  flags.push_back({0, "hook", "allreduce|fp16|bf16", "the reducer's communication hook (default allreduce)",
                   one_of(&f->hook, {"allreduce", "fp16", "bf16"})});
  flags.push_back({0, "bench-steps", "N",
                   "time N steps after 3 warm-up steps and print one JSON line (rank 0) instead of training epochs",
                   integer(&f->bench_steps)});
  flags.push_back({0, "no-sync", "", "every iteration in a NoSync scope (for the bench)", boolean(&f->no_sync)});
  return flags;
}

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

// A synthetic classification set: uniform inputs, labels from a fixed
// random linear teacher, so the loss really goes down.
struct Dataset {
  int size = 0;
  std::vector<float> x;  // size x kInputs
  std::vector<int> y;

  static Dataset Make(int size, uint64_t seed) {
    Dataset d;
    d.size = size;
    d.x.resize(static_cast<size_t>(size) * kInputs);
    d.y.resize(static_cast<size_t>(size));
    Rng teacher_rng{seed * 7919 + 17};
    std::vector<float> teacher(static_cast<size_t>(kClasses) * kInputs);
    for (float& t : teacher) t = teacher_rng.Uniform();
    Rng rng{seed};
    for (int i = 0; i < size; ++i) {
      float* row = &d.x[static_cast<size_t>(i) * kInputs];
      for (int k = 0; k < kInputs; ++k) row[k] = rng.Uniform();
      int best = 0;
      float best_score = -1e30f;
      for (int c = 0; c < kClasses; ++c) {
        float score = 0;
        for (int k = 0; k < kInputs; ++k) score += teacher[static_cast<size_t>(c) * kInputs + k] * row[k];
        if (score > best_score) best_score = score, best = c;
      }
      d.y[static_cast<size_t>(i)] = best;
    }
    return d;
  }
};

// torch.utils.data.DistributedSampler(shuffle=True, drop_last=False): one
// permutation per epoch (same on every rank), padded to a multiple of the
// world size, rank r takes positions r, r + W, ...; then batches of
// batch_size (the last partial batch dropped, as DataLoader(drop_last=True)).
std::vector<std::vector<int>> RankBatches(int size, int epoch, uint64_t seed, int rank, int world, int batch) {
  std::vector<int> perm(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) perm[static_cast<size_t>(i)] = i;
  Rng rng{seed * 1000003 + static_cast<uint64_t>(epoch)};
  for (int i = size - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[rng.Next() % static_cast<uint64_t>(i + 1)]);
  const int padded = (size + world - 1) / world * world;
  for (int i = size; i < padded; ++i) perm.push_back(perm[static_cast<size_t>(i - size)]);
  std::vector<int> mine;
  for (int i = rank; i < padded; i += world) mine.push_back(perm[static_cast<size_t>(i)]);
  std::vector<std::vector<int>> batches;
  for (size_t start = 0; start + static_cast<size_t>(batch) <= mine.size(); start += static_cast<size_t>(batch)) {
    batches.emplace_back(mine.begin() + static_cast<std::ptrdiff_t>(start),
                         mine.begin() + static_cast<std::ptrdiff_t>(start) + batch);
  }
  return batches;
}

std::vector<int> LayerSizes(const std::string& model) {
  if (model == "large") return {kInputs, 4096, 4096, 1024, kClasses};
  return {kInputs, 512, kClasses};
}

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

uint64_t HashParams(Mlp& model) {
  uint64_t hash = 1469598103934665603ull;
  for (const auto& p : model.params()) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(p.data());
    for (size_t k = 0; k < p.size() * sizeof(float); ++k) {
      hash ^= bytes[k];
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

// ---------------------------------------------------------------------------
// Checkpoints: "BRAIDMLP" | epoch i64 | count i64 | per tensor: numel i64, floats | FNV-1a u64 of all before.

std::string CheckpointPath(const std::string& dir, int epoch) {
  return absl::StrFormat("%s/ckpt-%06d.bin", dir, epoch);
}

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("write ", path));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SaveCheckpoint(const std::string& dir, int epoch, Mlp& model) {
  std::string blob = "BRAIDMLP";
  auto put = [&](const void* data, size_t size) { blob.append(static_cast<const char*>(data), size); };
  const int64_t e = epoch;
  const int64_t count = static_cast<int64_t>(model.params().size());
  put(&e, sizeof(e));
  put(&count, sizeof(count));
  for (const auto& p : model.params()) {
    const int64_t numel = static_cast<int64_t>(p.size());
    put(&numel, sizeof(numel));
    put(p.data(), p.size() * sizeof(float));
  }
  uint64_t hash = 1469598103934665603ull;
  for (char c : blob) hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  put(&hash, sizeof(hash));

  const std::string final_path = CheckpointPath(dir, epoch);
  const std::string tmp = absl::StrCat(final_path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
  absl::Status status = WriteAll(fd, blob.data(), blob.size(), tmp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus(errno, absl::StrCat("fsync ", tmp));
  ::close(fd);
  if (status.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("rename ", tmp, " -> ", final_path));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // make the rename durable
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

// The newest checkpoint in `dir` that reads back whole and fits the model;
// returns its epoch (0 = none). Damaged files are skipped with a warning.
absl::StatusOr<int> LoadNewestCheckpoint(const std::string& dir, Mlp& model) {
  std::vector<int> epochs;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      int epoch = 0;
      char tail = 0;
      if (std::sscanf(entry->d_name, "ckpt-%d.bi%c", &epoch, &tail) == 2 && tail == 'n' &&
          std::strlen(entry->d_name) == 15) {
        epochs.push_back(epoch);
      }
    }
    ::closedir(d);
  }
  std::sort(epochs.rbegin(), epochs.rend());
  for (int epoch : epochs) {
    const std::string path = CheckpointPath(dir, epoch);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) continue;
    std::string blob;
    char buffer[1 << 16];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) blob.append(buffer, n);
    std::fclose(f);
    size_t expected = 8 + 16 + 8;
    for (const auto& p : model.params()) expected += 8 + p.size() * sizeof(float);
    bool ok = blob.size() == expected && blob.compare(0, 8, "BRAIDMLP") == 0;
    if (ok) {
      uint64_t hash = 1469598103934665603ull, stored = 0;
      for (size_t k = 0; k + 8 < blob.size(); ++k) hash = (hash ^ static_cast<uint8_t>(blob[k])) * 1099511628211ull;
      std::memcpy(&stored, blob.data() + blob.size() - 8, 8);
      ok = hash == stored;
    }
    if (!ok) {
      BRAID_LOG(WARNING) << "train_mlp: skipping damaged or foreign checkpoint " << path;
      continue;
    }
    size_t at = 24;
    for (auto& p : model.params()) {
      at += 8;
      std::memcpy(p.data(), blob.data() + at, p.size() * sizeof(float));
      at += p.size() * sizeof(float);
    }
    return epoch;
  }
  return 0;
}

// ---------------------------------------------------------------------------

std::vector<Tensor> ParamTensors(Mlp& model) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < model.params().size(); ++i) {
    out.push_back(Tensor::View(model.params()[i].data(), model.ParamShape(i), DType::kF32));
  }
  return out;
}

struct Trainer {
  Flags flags;
  ProcessGroup* group;
  Dataset data;
  std::unique_ptr<Mlp> model;
  std::vector<std::vector<float>> initial_grads;  // the reducer copies these into its buckets
  std::unique_ptr<Reducer> reducer;

  std::vector<float*> Grads() {
    std::vector<float*> g;
    for (int i = 0; i < reducer->num_parameters(); ++i) g.push_back(reducer->gradient(i).data<float>());
    return g;
  }

  // One data-parallel step; returns the local mean loss.
  absl::StatusOr<float> Step(const std::vector<int>& batch) {
    absl::optional<Reducer::NoSyncScope> no_sync;
    if (flags.no_sync) no_sync.emplace(reducer->NoSync());
    BRAID_RETURN_IF_ERROR(reducer->PrepareForBackward());
    absl::Status marked;
    const float loss = model->Step(data, batch, Grads(), [&](int i) { marked.Update(reducer->MarkReady(i)); });
    BRAID_RETURN_IF_ERROR(marked);
    BRAID_RETURN_IF_ERROR(reducer->Finalize());
    model->Sgd(Grads(), static_cast<float>(flags.lr));  // Grads() again: the views move once, after the first step
    return loss;
  }
};

absl::Status Check(Trainer& t, const std::vector<std::vector<float>>& initial) {
  ProcessGroup& group = *t.group;
  const int world = group.size();
  const int steps = t.flags.check_steps;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<int>> batches =
        RankBatches(t.data.size, 0, t.flags.seed, group.rank(), world, t.flags.batch_size);
    if (s >= static_cast<int>(batches.size())) return absl::InvalidArgumentError("--check-steps exceeds an epoch");
    BRAID_RETURN_IF_ERROR(t.Step(batches[static_cast<size_t>(s)]).status());
  }
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
    double max_diff = 0;
    for (size_t i = 0; i < reference.params().size(); ++i) {
      for (size_t k = 0; k < reference.params()[i].size(); ++k) {
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(reference.params()[i][k] - t.model->params()[i][k])));
      }
    }
    verdict.data<double>()[0] = max_diff;
    verdict.data<double>()[1] = (identical && max_diff <= 1e-4) ? 1 : 0;
  }
  BRAID_ASSIGN_OR_RETURN(work, group.comm().Broadcast(verdict, 0));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(600))));
  const double max_diff = verdict.data<double>()[0];
  if (group.rank() == 0) {
    std::printf("check: %d ranks, %d steps of batch %d per rank (%s model, %lld parameters)\n", world, steps,
                t.flags.batch_size, t.flags.model.c_str(), static_cast<long long>(t.model->num_parameters()));
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
    BRAID_RETURN_IF_ERROR(t.Step(batches[static_cast<size_t>(s) % batches.size()]).status());
    if (s >= kWarmup && !t.flags.no_sync) {
      const ReducerStats stats = t.reducer->last_stats();
      hidden += stats.hidden;
      communication += stats.communication;
    }
  }
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

absl::Status Run(const Flags& flags) {
  if (std::getenv("RANK") == nullptr && std::getenv("OMPI_COMM_WORLD_RANK") == nullptr) {
    ::setenv("RANK", "0", 1);  // no launcher: one process
    ::setenv("WORLD_SIZE", "1", 1);
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, InitFromEnv());
  Trainer t;
  t.flags = flags;
  t.group = group.get();
  t.data = Dataset::Make(flags.samples, flags.seed);
  t.model = std::make_unique<Mlp>(LayerSizes(flags.model), flags.seed);

  // Resume: rank 0 reads the newest checkpoint; the epoch and the
  // parameters go to everyone (the broadcast also makes every replica
  // start equal, as DDP's constructor does).
  int start_epoch = 0;
  if (!flags.checkpoint_dir.empty() && group->rank() == 0) {
    if (::mkdir(flags.checkpoint_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("mkdir ", flags.checkpoint_dir));
    }
    BRAID_ASSIGN_OR_RETURN(start_epoch, LoadNewestCheckpoint(flags.checkpoint_dir, *t.model));
    if (start_epoch > 0) std::printf("resumed from %s\n", CheckpointPath(flags.checkpoint_dir, start_epoch).c_str());
  }
  BRAID_ASSIGN_OR_RETURN(Tensor epoch_tensor, Tensor::Empty({1}, DType::kI64));
  epoch_tensor.data<int64_t>()[0] = start_epoch;
  BRAID_ASSIGN_OR_RETURN(WorkHandle work, group->comm().Broadcast(epoch_tensor, 0));
  BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(600))));
  start_epoch = static_cast<int>(epoch_tensor.data<int64_t>()[0]);
  BRAID_RETURN_IF_ERROR(Reducer::BroadcastParameters(*group, ParamTensors(*t.model), 0));
  const std::vector<std::vector<float>> initial = t.model->params();

  ReducerOptions options;
  options.gradient_as_bucket_view = true;
  if (flags.hook == "fp16") options.comm_hook = Fp16CompressHook();
  if (flags.hook == "bf16") options.comm_hook = Bf16CompressHook();
  for (int l = 1; l <= t.model->layers(); ++l) {
    options.parameter_names.push_back(absl::StrCat("fc", l, ".weight"));
    options.parameter_names.push_back(absl::StrCat("fc", l, ".bias"));
  }
  std::vector<Tensor> grads;
  for (size_t i = 0; i < t.model->params().size(); ++i) {
    t.initial_grads.emplace_back(t.model->params()[i].size(), 0.0f);
    grads.push_back(Tensor::View(t.initial_grads.back().data(), t.model->ParamShape(i), DType::kF32));
  }
  BRAID_ASSIGN_OR_RETURN(t.reducer, Reducer::Create(*group, grads, options));

  if (flags.check) return Check(t, initial);
  if (flags.bench_steps > 0) return Bench(t);

  if (group->rank() == 0) {
    std::printf("train_mlp: %s model, %lld parameters, %d ranks, batch %d per rank, %d samples, lr %g\n",
                flags.model.c_str(), static_cast<long long>(t.model->num_parameters()), group->size(),
                flags.batch_size, flags.samples, flags.lr);
    std::fflush(stdout);
  }
  for (int epoch = start_epoch; epoch < flags.epochs; ++epoch) {
    const std::vector<std::vector<int>> batches =
        RankBatches(flags.samples, epoch, flags.seed, group->rank(), group->size(), flags.batch_size);
    const absl::Time start = absl::Now();
    double loss_sum = 0;
    for (const std::vector<int>& batch : batches) {
      BRAID_ASSIGN_OR_RETURN(float loss, t.Step(batch));
      loss_sum += loss;
    }
    // The epoch's mean loss over every rank.
    BRAID_ASSIGN_OR_RETURN(Tensor loss, Tensor::Empty({1}, DType::kF64));
    loss.data<double>()[0] = batches.empty() ? 0 : loss_sum / static_cast<double>(batches.size());
    BRAID_ASSIGN_OR_RETURN(work, group->comm().AllReduce(loss, ReduceOp::kAvg));
    BRAID_RETURN_IF_ERROR(work->Wait(DeadlineIn(absl::Seconds(600))));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (group->rank() == 0) {
      const double samples = static_cast<double>(batches.size()) * flags.batch_size * group->size();
      std::printf("epoch %d/%d: loss %.4f, %.0f samples/s, %.2f ms/step\n", epoch + 1, flags.epochs,
                  loss.data<double>()[0], samples / seconds, 1000.0 * seconds / std::max<size_t>(1, batches.size()));
      std::fflush(stdout);
      if (!flags.checkpoint_dir.empty()) BRAID_RETURN_IF_ERROR(SaveCheckpoint(flags.checkpoint_dir, epoch + 1, *t.model));
    }
  }
  // A fingerprint of the trained model: equal runs (an interrupted and resumed
  // one included) print the same.
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
