#include "examples/device_mlp.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "base/status.h"
#include "tensor/device.h"

#ifdef BRAID_WITH_CUDA
#include "examples/mlp_cuda_launch.h"
#endif

namespace braid::examples {
namespace {

// The longest a host wait on the compute stream may take (an upload, an
// epoch's loss): far beyond any step of this model.
constexpr absl::Duration kStreamTimeout = absl::Seconds(600);

// Each op a host function on the stream running mlp.h's CPU piece: the CPU
// trainer's arithmetic, queued and ordered as the device's.
class HostMlpKernels final : public MlpKernels {
 public:
  absl::Status GatherRows(Stream& s, const float* x, const int* y, const int* rows, int n, float* out_x,
                          int* out_y) override {
    return s.HostFunc([=] { examples::GatherRows(x, y, rows, n, out_x, out_y); });
  }
  absl::Status Gemm(Stream& s, bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b,
                    float beta, float* c) override {
    return s.HostFunc([=] { examples::Gemm(trans_a, trans_b, m, n, k, a, b, beta, c); });
  }
  absl::Status BiasRows(Stream& s, float* z, const float* b, int rows, int cols) override {
    return s.HostFunc([=] { examples::BiasRows(z, b, rows, cols); });
  }
  absl::Status Relu(Stream& s, float* z, size_t count) override {
    return s.HostFunc([=] { examples::Relu(z, count); });
  }
  absl::Status ReluBackward(Stream& s, float* da, const float* a, size_t count) override {
    return s.HostFunc([=] { examples::ReluBackward(da, a, count); });
  }
  absl::Status SoftmaxCrossEntropy(Stream& s, const float* logits, const int* labels, int rows, float* dz,
                                   float* row_losses) override {
    return s.HostFunc([=] { examples::SoftmaxCrossEntropy(logits, labels, rows, dz, row_losses); });
  }
  absl::Status ColumnSums(Stream& s, const float* dz, int rows, int cols, float* db) override {
    return s.HostFunc([=] { examples::ColumnSums(dz, rows, cols, db); });
  }
  absl::Status SgdUpdate(Stream& s, float lr, const float* x, float* y, size_t count) override {
    return s.HostFunc([=] { examples::SgdUpdate(lr, x, y, count); });
  }
};

#ifdef BRAID_WITH_CUDA
// Each op a kernel on the stream, launched with the runtime's GPU current.
class CudaMlpKernels final : public MlpKernels {
 public:
  explicit CudaMlpKernels(Device device) : device_(device) {}

  absl::Status GatherRows(Stream& s, const float* x, const int* y, const int* rows, int n, float* out_x,
                          int* out_y) override {
    return Launch("GatherRows", [&] { return mlp_cuda::GatherRows(x, y, rows, n, kInputs, out_x, out_y, s.native()); });
  }
  absl::Status Gemm(Stream& s, bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b,
                    float beta, float* c) override {
    return Launch("Gemm", [&] { return mlp_cuda::Gemm(trans_a, trans_b, m, n, k, a, b, beta, c, s.native()); });
  }
  absl::Status BiasRows(Stream& s, float* z, const float* b, int rows, int cols) override {
    return Launch("BiasRows", [&] { return mlp_cuda::BiasRows(z, b, rows, cols, s.native()); });
  }
  absl::Status Relu(Stream& s, float* z, size_t count) override {
    return Launch("Relu", [&] { return mlp_cuda::Relu(z, count, s.native()); });
  }
  absl::Status ReluBackward(Stream& s, float* da, const float* a, size_t count) override {
    return Launch("ReluBackward", [&] { return mlp_cuda::ReluBackward(da, a, count, s.native()); });
  }
  absl::Status SoftmaxCrossEntropy(Stream& s, const float* logits, const int* labels, int rows, float* dz,
                                   float* row_losses) override {
    return Launch("SoftmaxCrossEntropy", [&] {
      return mlp_cuda::SoftmaxCrossEntropy(logits, labels, rows, kClasses, dz, row_losses, s.native());
    });
  }
  absl::Status ColumnSums(Stream& s, const float* dz, int rows, int cols, float* db) override {
    return Launch("ColumnSums", [&] { return mlp_cuda::ColumnSums(dz, rows, cols, db, s.native()); });
  }
  absl::Status SgdUpdate(Stream& s, float lr, const float* x, float* y, size_t count) override {
    return Launch("SgdUpdate", [&] { return mlp_cuda::SgdUpdate(lr, x, y, count, s.native()); });
  }

 private:
  template <typename Fn>
  absl::Status Launch(const char* what, Fn fn) {
    BRAID_ASSIGN_OR_RETURN(CudaDeviceScope scope, CudaDeviceScope::Enter(device_));
    const int error = fn();
    if (error == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("train_mlp: the ", what, " kernel on ", ToString(device_),
                                            " failed to launch (cudaError ", error, ")"));
  }

  Device device_;
};
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<MlpKernels>> MlpKernels::For(DeviceRuntime& runtime) {
  if (runtime.device().is_cpu()) return std::make_unique<HostMlpKernels>();
#ifdef BRAID_WITH_CUDA
  return std::make_unique<CudaMlpKernels>(runtime.device());
#else
  return absl::FailedPreconditionError(
      absl::StrCat("MlpKernels for ", runtime.name(), ": train_mlp was built without --config=cuda"));
#endif
}

absl::StatusOr<std::unique_ptr<DeviceMlp>> DeviceMlp::Create(DeviceRuntime& runtime, Stream& stream, Mlp& start,
                                                             const Dataset& data, int max_batch) {
  std::unique_ptr<DeviceMlp> m(new DeviceMlp(runtime, stream, start.sizes()));
  BRAID_ASSIGN_OR_RETURN(m->kernels_, MlpKernels::For(runtime));
  m->max_batch_ = max_batch;
  const size_t rows = static_cast<size_t>(max_batch);
  int widest = 0;
  for (int w : m->sizes_) widest = std::max(widest, w);
  for (size_t i = 0; i < start.params().size(); ++i) {
    BRAID_ASSIGN_OR_RETURN(float* p, m->Floats(start.params()[i].size()));
    BRAID_RETURN_IF_ERROR(stream.Copy(p, start.params()[i].data(), sizeof(float) * start.params()[i].size()));
    m->params_.push_back(p);
    m->shapes_.push_back(start.ParamShape(i));
  }
  for (int w : m->sizes_) {
    BRAID_ASSIGN_OR_RETURN(float* a, m->Floats(rows * static_cast<size_t>(w)));
    m->acts_.push_back(a);
  }
  for (int i = 0; i < 2; ++i) {
    BRAID_ASSIGN_OR_RETURN(float* d, m->Floats(rows * static_cast<size_t>(widest)));
    m->dz_.push_back(d);
  }
  BRAID_ASSIGN_OR_RETURN(m->x_, m->Floats(data.x.size()));
  BRAID_RETURN_IF_ERROR(stream.Copy(m->x_, data.x.data(), sizeof(float) * data.x.size()));
  BRAID_ASSIGN_OR_RETURN(m->y_, m->Ints(data.y.size()));
  BRAID_RETURN_IF_ERROR(stream.Copy(m->y_, data.y.data(), sizeof(int) * data.y.size()));
  BRAID_ASSIGN_OR_RETURN(m->labels_, m->Ints(rows));
  // The sources above are the caller's: done with them before returning.
  BRAID_RETURN_IF_ERROR(m->Sync());
  return m;
}

DeviceMlp::~DeviceMlp() {
  (void)stream_.Synchronize(DeadlineIn(kStreamTimeout));
  for (void* p : owned_) runtime_.Free(p);
}

absl::StatusOr<float*> DeviceMlp::Floats(size_t count) {
  BRAID_ASSIGN_OR_RETURN(void* p, runtime_.Allocate(std::max<size_t>(1, count) * sizeof(float)));
  owned_.push_back(p);
  return static_cast<float*>(p);
}

absl::StatusOr<int*> DeviceMlp::Ints(size_t count) {
  BRAID_ASSIGN_OR_RETURN(void* p, runtime_.Allocate(std::max<size_t>(1, count) * sizeof(int)));
  owned_.push_back(p);
  return static_cast<int*>(p);
}

absl::Status DeviceMlp::Sync() {
  return Annotate(stream_.Synchronize(DeadlineIn(kStreamTimeout)),
                  absl::StrCat("train_mlp: the compute stream on ", runtime_.name()));
}

absl::Status DeviceMlp::BeginEpoch(const std::vector<std::vector<int>>& batches) {
  BRAID_RETURN_IF_ERROR(Sync());
  batches_ = batches.size();
  batch_ = batches.empty() ? 0 : static_cast<int>(batches.front().size());
  if (batch_ > max_batch_) return absl::InvalidArgumentError("DeviceMlp: a batch larger than max_batch");
  host_rows_.clear();
  for (const std::vector<int>& b : batches) {
    if (static_cast<int>(b.size()) != batch_) return absl::InvalidArgumentError("DeviceMlp: batches of unequal size");
    host_rows_.insert(host_rows_.end(), b.begin(), b.end());
  }
  if (host_rows_.size() > max_rows_) {
    // Grown once, when the first epoch comes (every epoch has as many rows).
    BRAID_ASSIGN_OR_RETURN(rows_, Ints(host_rows_.size()));
    BRAID_ASSIGN_OR_RETURN(losses_, Floats(host_rows_.size()));
    max_rows_ = host_rows_.size();
  }
  if (host_rows_.empty()) return absl::OkStatus();
  return stream_.Copy(rows_, host_rows_.data(), sizeof(int) * host_rows_.size());
}

absl::Status DeviceMlp::Forward(size_t b) {
  const int n = batch_;
  BRAID_RETURN_IF_ERROR(
      kernels_->GatherRows(stream_, x_, y_, rows_ + b * static_cast<size_t>(n), n, acts_[0], labels_));
  const size_t L = sizes_.size() - 1;
  for (size_t l = 0; l < L; ++l) {
    const int in = sizes_[l];
    const int out = sizes_[l + 1];
    BRAID_RETURN_IF_ERROR(kernels_->BiasRows(stream_, acts_[l + 1], params_[2 * l + 1], n, out));
    BRAID_RETURN_IF_ERROR(kernels_->Gemm(stream_, false, true, n, out, in, acts_[l], params_[2 * l], 1.0f, acts_[l + 1]));
    if (l + 1 < L) BRAID_RETURN_IF_ERROR(kernels_->Relu(stream_, acts_[l + 1], static_cast<size_t>(n) * out));
  }
  return absl::OkStatus();
}

absl::Status DeviceMlp::Sgd(const std::vector<float*>& grads, float lr) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t count = static_cast<size_t>(ShapeNumel(shapes_[i]));
    BRAID_RETURN_IF_ERROR(kernels_->SgdUpdate(stream_, lr, grads[i], params_[i], count));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceMlp::EpochLoss() {
  const size_t count = batches_ * static_cast<size_t>(batch_);
  if (count == 0) return 0.0;
  std::vector<float> host(count);
  BRAID_RETURN_IF_ERROR(stream_.Copy(host.data(), losses_, sizeof(float) * count));
  BRAID_RETURN_IF_ERROR(Sync());
  double sum = 0;
  for (float v : host) sum += v;
  return sum / static_cast<double>(count);
}

absl::Status DeviceMlp::Download(Mlp& model) {
  for (size_t i = 0; i < params_.size(); ++i) {
    BRAID_RETURN_IF_ERROR(stream_.Copy(model.params()[i].data(), params_[i], sizeof(float) * model.params()[i].size()));
  }
  return Sync();
}

std::vector<Tensor> DeviceMlp::ParamTensors() const {
  std::vector<Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back(Tensor::View(params_[i], shapes_[i], DType::kF32, runtime_.device()));
  }
  return out;
}

}  // namespace braid::examples
