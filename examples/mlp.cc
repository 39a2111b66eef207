#include "examples/mlp.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/logging.h"
#include "base/status.h"

namespace braid::examples {

StepLog::StepLog(const std::string& dir, int rank) {
  if (dir.empty()) return;
  ::mkdir(dir.c_str(), 0755);
  const std::string path = absl::StrCat(dir, "/", rank, ".", ::getpid(), ".steps");
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) BRAID_LOG(WARNING) << "train_mlp: cannot write " << path << ": " << std::strerror(errno);
}

StepLog::~StepLog() {
  if (fd_ >= 0) ::close(fd_);
}

void StepLog::Finished(int64_t step, int world) {
  if (fd_ < 0) return;
  const std::string line = absl::StrCat(step, " ", world, " ", absl::ToUnixNanos(absl::Now()), "\n");
  (void)!::write(fd_, line.data(), line.size());
}

Dataset Dataset::Make(int size, uint64_t seed) {
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

std::vector<int> EpochOrder(int size, int epoch, uint64_t seed, int world) {
  std::vector<int> perm(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) perm[static_cast<size_t>(i)] = i;
  Rng rng{seed * 1000003 + static_cast<uint64_t>(epoch)};
  for (int i = size - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[rng.Next() % static_cast<uint64_t>(i + 1)]);
  const int padded = (size + world - 1) / world * world;
  for (int i = size; i < padded; ++i) perm.push_back(perm[static_cast<size_t>(i - size)]);
  return perm;
}

std::vector<std::vector<int>> RankBatches(int size, int epoch, uint64_t seed, int rank, int world, int batch) {
  const std::vector<int> perm = EpochOrder(size, epoch, seed, world);
  std::vector<int> mine;
  for (size_t i = static_cast<size_t>(rank); i < perm.size(); i += static_cast<size_t>(world)) mine.push_back(perm[i]);
  std::vector<std::vector<int>> batches;
  for (size_t start = 0; start + static_cast<size_t>(batch) <= mine.size(); start += static_cast<size_t>(batch)) {
    batches.emplace_back(mine.begin() + static_cast<std::ptrdiff_t>(start),
                         mine.begin() + static_cast<std::ptrdiff_t>(start) + batch);
  }
  return batches;
}

void GatherRows(const float* x, const int* y, const int* rows, int n, float* out_x, int* out_y) {
  for (int r = 0; r < n; ++r) {
    const size_t row = static_cast<size_t>(rows[r]);
    std::memcpy(out_x + static_cast<size_t>(r) * kInputs, x + row * kInputs, sizeof(float) * kInputs);
    out_y[r] = y[row];
  }
}

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
              trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

void BiasRows(float* z, const float* b, int rows, int cols) {
  for (int r = 0; r < rows; ++r) std::memcpy(z + static_cast<size_t>(r) * cols, b, sizeof(float) * cols);
}

void Relu(float* z, size_t count) {
  for (size_t i = 0; i < count; ++i) z[i] = z[i] > 0 ? z[i] : 0;
}

void ReluBackward(float* da, const float* a, size_t count) {
  for (size_t i = 0; i < count; ++i) da[i] = a[i] > 0 ? da[i] : 0;
}

double SoftmaxCrossEntropy(const float* logits, const int* labels, int rows, float* dz, float* row_losses) {
  double loss = 0;
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<size_t>(r) * kClasses;
    const float top = *std::max_element(row, row + kClasses);
    double sum = 0;
    for (int c = 0; c < kClasses; ++c) sum += std::exp(static_cast<double>(row[c] - top));
    const int label = labels[r];
    const double row_loss = std::log(sum) - (row[label] - top);
    loss += row_loss;
    if (row_losses != nullptr) row_losses[r] = static_cast<float>(row_loss);
    for (int c = 0; c < kClasses; ++c) {
      const double p = std::exp(static_cast<double>(row[c] - top)) / sum;
      dz[static_cast<size_t>(r) * kClasses + c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) / rows);
    }
  }
  return loss;
}

void ColumnSums(const float* dz, int rows, int cols, float* db) {
  for (int c = 0; c < cols; ++c) db[c] = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) db[c] += dz[static_cast<size_t>(r) * cols + c];
  }
}

void SgdUpdate(float lr, const float* x, float* y, size_t count) {
  cblas_saxpy(static_cast<int>(count), -lr, x, 1, y, 1);
}

double MaxAbsDifference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t k = 0; k < a[i].size(); ++k) worst = std::max(worst, static_cast<double>(std::fabs(a[i][k] - b[i][k])));
  }
  return worst;
}

std::vector<int> LayerSizes(const std::string& model) {
  if (model == "large") return {kInputs, 4096, 4096, 1024, kClasses};
  return {kInputs, 512, kClasses};
}

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

std::string CheckpointPath(const std::string& dir, int epoch) {
  return absl::StrFormat("%s/ckpt-%06d.bin", dir, epoch);
}

namespace {

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

}  // namespace

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

std::vector<Tensor> ParamTensors(Mlp& model) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < model.params().size(); ++i) {
    out.push_back(Tensor::View(model.params()[i].data(), model.ParamShape(i), DType::kF32));
  }
  return out;
}

namespace {

// The options both reducers share: gradients as bucket views (no copy in or
// out), the hook --hook names, parameters named fc<l>.weight / fc<l>.bias.
ReducerOptions TrainerReducerOptions(const Flags& flags, const Mlp& model) {
  ReducerOptions options;
  options.gradient_as_bucket_view = true;
  if (flags.hook == "fp16") options.comm_hook = Fp16CompressHook();
  if (flags.hook == "bf16") options.comm_hook = Bf16CompressHook();
  for (int l = 1; l <= model.layers(); ++l) {
    options.parameter_names.push_back(absl::StrCat("fc", l, ".weight"));
    options.parameter_names.push_back(absl::StrCat("fc", l, ".bias"));
  }
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Reducer>> MakeReducer(ProcessGroup& group, const Flags& flags, Mlp& model,
                                                     std::vector<std::vector<float>>* initial) {
  ReducerOptions options = TrainerReducerOptions(flags, model);
  initial->clear();
  initial->reserve(model.params().size());  // the views below point into it
  std::vector<Tensor> grads;
  for (size_t i = 0; i < model.params().size(); ++i) {
    initial->emplace_back(model.params()[i].size(), 0.0f);
    grads.push_back(Tensor::View(initial->back().data(), model.ParamShape(i), DType::kF32));
  }
  return Reducer::Create(group, std::move(grads), std::move(options));
}

absl::StatusOr<std::unique_ptr<Reducer>> MakeDeviceReducer(ProcessGroup& group, const Flags& flags, Mlp& model,
                                                           DeviceRuntime& runtime, Stream& compute,
                                                           Communicator* device_comm, std::vector<Tensor>* initial) {
  ReducerOptions options = TrainerReducerOptions(flags, model);
  options.compute_stream = &compute;
  options.device_comm = device_comm;
  initial->clear();
  for (size_t i = 0; i < model.params().size(); ++i) {
    BRAID_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(model.ParamShape(i), DType::kF32, runtime.device()));
    initial->push_back(std::move(zeros));
  }
  return Reducer::Create(group, *initial, std::move(options));
}

std::vector<float*> ReducerGrads(const Reducer& reducer) {
  std::vector<float*> g;
  for (int i = 0; i < reducer.num_parameters(); ++i) g.push_back(reducer.gradient(i).data<float>());
  return g;
}

}  // namespace braid::examples
